"""A server's stop: inside ``interrupt.stop_requests`` a signal asks, it does not raise.

Run in a subprocess with real signals sent to itself: the handler is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SCRIPT = """
import os, signal
from airgap.core import interrupt
interrupt.install()
asked = []
with interrupt.stop_requests(lambda: asked.append(1)):
    os.kill(os.getpid(), signal.SIG{name})
    print("asked", len(asked), interrupt.signal_name(), flush=True)
    os.kill(os.getpid(), signal.SIG{name})  # a second signal: no more waiting
    print("not reached", flush=True)
"""


def _run(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(name=name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_signal_asks_a_server_to_stop_and_a_second_ends_the_process() -> None:
    for name, code in (("TERM", 143), ("INT", 130)):
        result = _run(name)
        assert result.stdout == f"asked 1 SIG{name}\n", result
        assert result.returncode == code
        assert result.stderr == f"airgap: error: interrupted (SIG{name})\n"


def test_a_signal_before_the_block_is_raised_at_its_start() -> None:
    script = (
        "import os, signal\n"
        "from airgap.core import interrupt\n"
        "interrupt.install()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "except interrupt.Interrupted:\n"
        "    pass\n"
        "try:\n"
        "    with interrupt.stop_requests(lambda: None):\n"
        "        print('not reached')\n"
        "except interrupt.Interrupted:\n"
        "    print('raised')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout == "raised\n", result
