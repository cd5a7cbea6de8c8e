"""``AIRGAP_PHASE_TIMES``: the opt-in per-phase timing the benchmark reads (never timed here)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import run_airgap

pytestmark = pytest.mark.e2e


def test_phase_times_are_written_only_when_asked(
    tmp_path: Path, capi_bundle: CollectedBundle
) -> None:
    args: list[str | Path] = ["configmaps", capi_bundle.path, "--key", capi_bundle.key.public]
    args += ["--registry", "127.0.0.1:9/mirror", "--output-dir"]
    phases = tmp_path / "phases.json"
    result = run_airgap(*args, tmp_path / "a", env={"AIRGAP_PHASE_TIMES": str(phases)})
    assert result.returncode == 0, result.stderr
    times = json.loads(phases.read_text())
    assert {"providers/rewrite", "providers/outputs", "providers/write"} <= set(times)
    for value in times.values():
        assert set(value) == {"seconds", "cpu_seconds"}
        assert all(isinstance(v, float) and v >= 0 for v in value.values())

    phases.unlink()
    result = run_airgap(*args, tmp_path / "b", env={"AIRGAP_PHASE_TIMES": ""})
    assert result.returncode == 0, result.stderr
    assert not phases.exists() and list(tmp_path.glob("*.json")) == []


def test_phase_times_never_replace_a_fifo_or_device(
    tmp_path: Path, capi_bundle: CollectedBundle
) -> None:
    """The file is written by rename: pointed at /dev/null (as root), it once replaced
    /dev/null with a JSON file. Refused with a note on stderr; the command succeeds."""
    fifo = tmp_path / "times"
    os.mkfifo(fifo)
    result = run_airgap(
        "configmaps",
        capi_bundle.path,
        "--key",
        capi_bundle.key.public,
        "--registry",
        "127.0.0.1:9/mirror",
        "--output-dir",
        tmp_path / "out",
        env={"AIRGAP_PHASE_TIMES": str(fifo)},
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert result.stderr.splitlines()[-1] == (
        f"airgap: AIRGAP_PHASE_TIMES: phase times not written: {fifo} is not a regular "
        "file; refusing to replace it with a file"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "times"]  # no temp left
