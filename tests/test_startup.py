"""Start-up cost: every airgap command pays for what its modules import, and a re-import
of an unchanged bundle is mostly start-up (benchmarks/README.md, Findings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def loaded_after(statement: str) -> set[str]:
    """Top-level packages loaded by ``statement`` in a fresh interpreter."""
    probe = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return {name.split(".")[0] for name in result.stdout.split()}


def test_the_import_path_loads_neither_rich_nor_httpx_cli_dependencies() -> None:
    """httpx loads its CLI (rich, pygments) when they are installed unless airgap stops
    it; rich is only for progress bars, which quiet commands never draw."""
    loaded = loaded_after("import airgap.cli, airgap.importing.importer")
    assert "httpx" in loaded
    assert not loaded & {"rich", "pygments"}


def test_httpx_still_works_without_its_cli() -> None:
    loaded = loaded_after("import airgap, httpx; assert callable(httpx.main), httpx.Client")
    assert "httpx" in loaded


def test_a_plain_verify_loads_no_policy_or_supply_chain_code() -> None:
    """Policy rules (cosign, x509), SBOMs and chart provenance load only when a verify
    asks for them: start-up is the whole time of verifying a small bundle."""
    probe = (
        "import sys, airgap.cli, airgap.verify.bundle, airgap.verify.report; "
        "print(' '.join(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    unwanted = {
        "airgap.verify.policy",
        "airgap.verify.sbom",
        "airgap.supplychain.cosign",
        "airgap.content.openpgp",
        "cryptography.x509",
    }
    assert not loaded & unwanted
    assert "airgap.verify.scan" in loaded


def test_httpcore_loads_only_for_a_transport_of_httpx_own() -> None:
    """The registry's transport (airgap.net.fasthttp) needs no httpcore (with h11 and anyio,
    ~15 ms of start-up, most of a no-op re-import being start-up); a client on httpx's
    own transport loads it and has every connection paced (airgap.net.pacedcore)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}

    def loaded(statement: str) -> set[str]:
        probe = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
        result = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
        )
        return {name.split(".")[0] for name in result.stdout.split()}

    fast = "import airgap.cli, airgap.importing.importer, airgap.net.httpclient as h; h.build_client(fast=True)"
    assert not loaded(fast) & {"httpcore", "h11", "anyio"}
    assert "httpcore" in loaded("import airgap.net.httpclient as h; h.build_client()")


def test_the_import_path_loads_neither_subprocess_nor_fractions() -> None:
    """Credential helpers (subprocess) and ``--part-size`` (fractions) load when used."""
    loaded = loaded_after("import airgap.cli, airgap.importing.importer")
    assert not loaded & {"subprocess", "fractions"}


def test_a_plain_http_connection_loads_no_idna_codec() -> None:
    """The registry transport connects with the URL's encoded host (bytes): a str
    would make getaddrinfo load the idna codec, a millisecond of a no-op re-import."""
    # a bare socket server: http.server's own bind looks its name up (the codec again)
    probe = (
        "import socket, sys, threading, airgap.net.httpclient as h\n"
        "listener = socket.socket(); listener.bind(('127.0.0.1', 0)); listener.listen()\n"
        "def serve():\n"
        "    peer = listener.accept()[0]\n"
        "    while not peer.recv(65536).endswith(b'\\r\\n\\r\\n'): pass\n"
        "    peer.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok')\n"
        "threading.Thread(target=serve, daemon=True).start()\n"
        "with h.build_client(fast=True) as client:\n"
        "    r = client.get(f'http://127.0.0.1:{listener.getsockname()[1]}/v2/')\n"
        "print(r.status_code, r.content.decode(), 'encodings.idna' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    assert result.stdout.split() == ["200", "ok", "False"]


def test_a_collect_without_a_policy_loads_no_policy_code() -> None:
    """``collect --policy`` loads the policy rules (cosign's X.509 chains among them);
    every other collect starts without them (~25 ms)."""
    probe = "import sys, airgap.cli, airgap.collect.collector; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    assert "airgap.collect.collector" in loaded
    assert not loaded & {"airgap.verify.policy", "airgap.supplychain.cosign", "cryptography.x509"}


def test_the_import_path_builds_no_collect_spec_types() -> None:
    """Collect's provider specs live in ``providers.specs``, not in ``providers.types``
    that verify and import load: their dataclasses are start-up a re-import never uses."""
    probe = (
        "import sys, airgap.cli, airgap.importing.importer; print(' '.join(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    assert "airgap.providers.types" in loaded
    assert "airgap.providers.specs" not in loaded


def _leaving(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``body`` then ``airgap.cli.leave(3)`` in a fresh interpreter."""
    script = (
        "import atexit, pathlib, sys, threading, time\n"
        "from airgap.cli import leave\n"
        f"out = pathlib.Path({str(tmp_path)!r})\n"
        f"{body}\n"
        "leave(3)\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def test_leaving_runs_the_exit_handlers_and_flushes_what_was_written(tmp_path: Path) -> None:
    """The fast exit skips the interpreter's teardown, never what an exit must do: the
    exit handlers (the benchmark's phase times are one) and buffered output."""
    result = _leaving(
        "atexit.register(lambda: (out / 'handler').write_text('ran'))\n"
        "sys.stdout.write('unflushed out')\n"
        "sys.stderr.write('unflushed err')",
        tmp_path,
    )
    assert result.returncode == 3
    assert result.stdout == "unflushed out"
    assert result.stderr == "unflushed err"
    assert (tmp_path / "handler").read_text() == "ran"


def test_leaving_waits_for_a_thread_a_normal_exit_would_wait_for(tmp_path: Path) -> None:
    """A non-daemon thread still at work is joined, as a normal exit joins it, rather
    than killed with the process."""
    result = _leaving(
        "def work():\n"
        "    time.sleep(0.3)\n"
        "    (out / 'thread').write_text('done')\n"
        "threading.Thread(target=work).start()",
        tmp_path,
    )
    assert result.returncode == 3
    assert (tmp_path / "thread").read_text() == "done"


def test_a_command_ends_with_its_exit_code_and_phase_times(tmp_path: Path) -> None:
    """Through ``main``: a failing command's one line and exit code, and the phase times
    the benchmark reads, written by their exit handler."""
    phases = tmp_path / "phases.json"
    env = {**os.environ, "AIRGAP_PHASE_TIMES": str(phases)}
    probe = "import airgap.core.phases; from airgap.cli import main; main()"
    missing = tmp_path / "missing.tar"
    result = subprocess.run(
        [sys.executable, "-c", probe, "inspect", str(missing)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode != 0
    assert result.stderr.startswith("airgap: error:")
    assert str(missing) in result.stderr
    assert phases.is_file()


def test_helms_engine_loads_only_for_a_chart() -> None:
    """The Helm library (75 MB, 0.2 s to load) is loaded by the first chart rendered,
    never by airgap's start-up nor by the modules that only may render one."""
    loaded = loaded_after(
        "import airgap.cli, airgap.collect.spec, airgap.content.fetch, "
        "airgap.verify.records, airgap.rewrite.contents, airgap.importing.importer"
    )
    assert "helm_python" not in loaded
