"""Run the real ``airgap`` entry point in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AIRGAP = [sys.executable, "-c", "from airgap.cli import main; main()"]


def run_airgap(
    *args: str | Path,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 300,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``airgap ARGS``; never raises on a non-zero exit, the test inspects it."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [*AIRGAP, *map(str, args)],
        env=merged,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """A user error: the expected exit code, one line on stderr, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert result.stderr == lines[0] + "\n", repr(result.stderr)  # no blank line either
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def collect_args(spec: Path, sign_key: Path, output: Path) -> list[str | Path]:
    """``collect SPEC --sign-key KEY -o OUTPUT``: the start of every collect a test runs
    (the rest is what the test varies)."""
    return ["collect", spec, "--sign-key", sign_key, "-o", output]


def collect_ok(
    spec: Path, sign_key: Path, output: Path, *extra: str | Path, env: dict[str, str] | None = None
) -> Path:
    """``collect SPEC --sign-key KEY -o OUTPUT EXTRA...`` that must succeed: OUTPUT."""
    result = run_airgap(*collect_args(spec, sign_key, output), *extra, env=env)
    assert result.returncode == 0, result.stderr
    return output
