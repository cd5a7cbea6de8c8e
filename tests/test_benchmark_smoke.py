"""Smoke test of the benchmark harness: ``benchmarks/run.py --quick`` runs end to end and
reports every metric. A test of the harness, never a timing assertion (~15-30 s): on a
loaded machine any figure may be tiny, so only presence, type and sign are checked, and
the rounding is tested to keep a tiny positive figure positive."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.measure import Sample
from benchmarks.report import MIB, _scale_note, derive, keep, summarise, table
from tests.harness.registry import REGISTRY_BINARY

ROOT = Path(__file__).resolve().parent.parent

needs_tools = pytest.mark.skipif(
    not (shutil.which("skopeo") and shutil.which("curl") and shutil.which("openssl"))
    or not Path(REGISTRY_BINARY).exists(),
    reason="needs skopeo, curl, openssl and docker-registry",
)

MEASUREMENTS = [
    "collect/airgap",
    "collect/skopeo",
    "import/airgap",
    "import/skopeo",
    "reimport/airgap",
    "reimport/skopeo",
    "verify/airgap",
    "verify/openssl",
    "configmaps/airgap",
    "serve/airgap",
    "serve/registry",
    "raw/curl-x8",
    "rawget/curl-x8",
    "pagecache/dd",
    "big-collect/airgap",
    "big-verify/airgap",
    "big-import/airgap",
    "small4-collect/airgap",
    "small40-collect/airgap",
    "small4-import/airgap",
    "small40-import/airgap",
]
METRICS = [
    "collect_mib_s",
    "collect_skopeo_mib_s",
    "collect_vs_skopeo",
    "download_limit_mib_s",
    "collect_vs_download_limit",
    "import_mib_s",
    "import_skopeo_mib_s",
    "import_vs_skopeo",
    "raw_limit_mib_s",
    "import_vs_limit",
    "reimport_seconds",
    "reimport_vs_import",
    "reimport_skopeo_seconds",
    "reimport_vs_skopeo",
    "verify_mib_s",
    "openssl_mib_s",
    "serve_mib_s",
    "serve_registry_mib_s",
    "serve_vs_registry",
    "verify_vs_openssl",
    "peak_rss_max_mib",
    "big_layer_rss_increase_mib",
    "linearity_collect_ratio",
    "linearity_import_ratio",
    "providers_collect_seconds",
    "providers_import_seconds",
    "providers_configmaps_seconds",
]
SCALE_MEASUREMENTS = [
    f"{label}-{command}/{tool}"
    for label in ("shape", "scale")
    for command, tool in (
        ("collect", "curl"),
        ("collect", "airgap"),
        ("verify", "airgap"),
        ("verify", "openssl"),
        ("import", "airgap"),
    )
]
# provider handling of the realistic providers: a phase time, not a process (no RSS)
PROVIDER_LINES = ["providers/collect", "providers/import", "providers/configmaps"]


@pytest.mark.unit
def test_tiny_figures_are_never_rounded_to_zero() -> None:
    """A 4 KiB workload that took 2.5 s on a loaded machine moves 0.0016 MiB/s: the
    figure stays positive (two significant figures), the table does not print 0.0."""
    entry = summarise([Sample(seconds=2.5, rss_kib=40_000, cpu_seconds=0.004)], 4096)
    assert entry["mib_per_s"] == 0.0016
    assert entry["median_cpu_seconds"] == 0.004
    assert entry["median_seconds"] == 2.5
    assert summarise([Sample(seconds=4.16, rss_kib=1)], 2150 * MIB)["mib_per_s"] == 516.8
    assert (keep(0.0, 1), keep(-0.04, 1), keep(0.0004, 3), keep(12.345, 1)) == (
        0.0,
        -0.04,
        0.0004,
        12.3,
    )
    results = {
        "rows": [{"key": "small4-import/airgap", "phase": "4 tiny", "tool": "airgap"}],
        "measurements": {"small4-import/airgap": entry},
        "metrics": {"small_counts": [4]},
    }
    row = table(results).splitlines()[-1]
    assert row.startswith("| 4 tiny | airgap | 2.50 | 0.0016 |"), row


@pytest.mark.unit
def test_the_scale_run_says_whose_time_grew() -> None:
    """The scale run's time, user CPU and kernel CPU per byte over the same-shape run's,
    airgap and its registry together, each from the samples' own figures."""
    shape = summarise(
        [Sample(1.0, 1, 0.9, 0.7, system_seconds=0.3, server_system_seconds=0.4)], 400 * MIB
    )
    # 50 times the bytes: the same user CPU per byte, twice the kernel's, 1.2x the time
    scale = summarise(
        [Sample(60.0, 1, 55.0, 60.0, system_seconds=30.0, server_system_seconds=40.0)],
        20_000 * MIB,
    )
    assert (scale["median_system_cpu_seconds"], scale["median_registry_system_cpu_seconds"]) == (
        30.0,
        40.0,
    )
    # curl's download of the same bytes: 1.5x the time per byte at the larger size
    curl_shape = summarise([Sample(0.5, 1, 0.2)], 400 * MIB)
    curl_scale = summarise([Sample(37.5, 1, 10.0)], 20_000 * MIB)
    measurements = {
        "shape-collect/airgap": shape,
        "scale-collect/airgap": scale,
        "shape-collect/curl": curl_shape,
        "scale-collect/curl": curl_scale,
    }
    metrics = derive(measurements, [])
    assert metrics["scale_per_byte_vs_shape"] == {
        "collect": {"time": 1.2, "user_cpu": 1.0, "system_cpu": 2.0}
    }
    assert metrics["scale_per_byte_vs_reference"] == {
        "collect": {"reference": 1.5, "airgap_over_reference": 0.8}
    }
    results = {"metrics": metrics}
    assert _scale_note(results)[-1].endswith(
        "collect time 1.20x, user CPU 1.00x, kernel CPU 2.00x. The machine's own tools on "
        "the same bytes grew: curl 1.50x for collect (airgap's growth over it 0.80x)."
    )
    del measurements["scale-collect/curl"]  # a reference at one size only: nothing said
    assert derive(measurements, [])["scale_per_byte_vs_reference"] == {}
    assert derive({}, [])["scale_per_byte_vs_shape"] == {}  # no scale run, nothing said
    assert _scale_note({"metrics": derive({}, [])}) == []


@pytest.mark.e2e
@pytest.mark.slow
@needs_tools
def test_quick_benchmark_reports_every_metric(tmp_path: Path) -> None:
    out = tmp_path / "bench-out"
    result = subprocess.run(
        [
            *(sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--out", str(out)),
            *("--scale", "--scale-images", "8", "--scale-gib", "0.02"),  # the scale run, tiny
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())

    for key in MEASUREMENTS:
        entry = data["measurements"][key]
        assert len(entry["seconds"]) == 1, key  # --quick: one repetition
        # presence, type and sign only: how fast a loaded machine is is not the question
        for field in ("median_seconds", "mib_per_s", "bytes"):
            assert isinstance(entry[field], int | float) and entry[field] > 0, (key, field)
        if key.endswith("/airgap"):  # peak RSS and CPU of every airgap command, from wait4
            assert entry["peak_rss_mib"] > 0, key
            assert entry["median_cpu_seconds"] > 0, key
    for key in PROVIDER_LINES:
        entry = data["measurements"][key]
        assert len(entry["seconds"]) == 1 and entry["median_seconds"] > 0, key
        assert entry["bytes"] > 3_000_000, key  # five releases, ~3.4 MB of components
    phases = data["provider_phases"]
    assert {"providers/fetch", "providers/parse"} <= set(phases["collect"][0])
    assert {"providers/rewrite", "providers/outputs"} <= set(phases["import"][0])
    assert data["workload"]["providers"]["providers"] == 5
    for metric in METRICS:
        assert isinstance(data["metrics"][metric], int | float), metric
    assert set(data["metrics"]["peak_rss_mib"]) >= {"collect", "import", "reimport", "verify"}

    for key in SCALE_MEASUREMENTS:  # three same-shape repetitions, one scale run
        entry = data["measurements"][key]
        assert len(entry["seconds"]) == (3 if key.startswith("shape-") else 1), key
        assert entry["median_seconds"] > 0 and entry["bytes"] > 0, key
    for metric in ("scale_rss_vs_main", "scale_time_per_byte_vs_shape"):
        assert isinstance(data["metrics"][metric], int | float), metric
    assert set(data["metrics"]["scale_per_byte_vs_shape"]) == {"collect", "verify", "import"}
    references = data["metrics"]["scale_per_byte_vs_reference"]
    assert set(references) == {"collect", "verify"}
    assert all(r["reference"] > 0 and r["airgap_over_reference"] > 0 for r in references.values())

    targets = {target["metric"]: target for target in data["targets"]}
    assert len(targets) == 14  # the two scale targets too
    assert all(isinstance(target["met"], bool) for target in targets.values())
    assert data["workload"]["main"]["indexes"] >= 1  # multi-arch images are in the mix
    assert data["machine"]["nproc"] >= 1 and data["machine"]["date"]
    assert data["machine"]["python"].startswith("Python 3.")  # the interpreter airgap ran on
    for key in MEASUREMENTS:  # the kernel's share of each command's CPU, and the registry's
        entry = data["measurements"][key]
        assert 0 <= entry["median_system_cpu_seconds"] <= entry["median_cpu_seconds"], key
        assert entry["median_registry_system_cpu_seconds"] >= 0, key

    assert "| collect | airgap |" in result.stdout  # the printed table
    assert "updated the Benchmark section" not in result.stdout  # --quick leaves README alone
