"""Turn measured samples into results: medians, throughput, ratios, targets, a table.

``results.json`` holds every sample; ``metrics`` the derived figures; ``targets`` each
goal of the benchmark issue with its measured value and whether it is met.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.measure import Sample

MIB = 1 << 20
README_START = "<!-- benchmark:start -->"
README_END = "<!-- benchmark:end -->"


@dataclass(frozen=True)
class Row:
    """How one measurement appears in the table."""

    key: str  # "collect/airgap"
    phase: str
    tool: str
    bytes: int


def keep(value: float, places: int) -> float:
    """``value`` to ``places`` decimals, but never a measured positive figure rounded to
    zero: below that precision keep two significant figures. A slow run of a tiny
    workload moves 0.04 MiB/s, not 0.0, and a figure that reads 0 looks like a failure."""
    rounded = round(value, places)
    if rounded == 0 and value != 0:
        return float(f"{value:.2g}")
    return rounded


def summarise(samples: list[Sample], size: int) -> dict[str, Any]:
    seconds = [keep(s.seconds, 3) for s in samples]
    median = statistics.median(s.seconds for s in samples)
    rss = [s.rss_kib for s in samples]
    cpu = statistics.median(s.cpu_seconds for s in samples)
    server = statistics.median(s.server_cpu_seconds for s in samples)
    system = statistics.median(s.system_seconds for s in samples)
    server_system = statistics.median(s.server_system_seconds for s in samples)
    return {
        "seconds": seconds,
        "median_seconds": keep(median, 3),
        "bytes": size,
        "mib_per_s": keep(size / MIB / median, 1) if median > 0 else None,
        "peak_rss_mib": keep(max(rss) / 1024, 1) if any(rss) else None,
        "cpu_seconds": [keep(s.cpu_seconds, 2) for s in samples],
        "median_cpu_seconds": keep(cpu, 2),
        "median_registry_cpu_seconds": keep(server, 2),
        "median_system_cpu_seconds": keep(system, 2),
        "median_registry_system_cpu_seconds": keep(server_system, 2),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return keep(a / b, 3)


def derive(
    measurements: dict[str, dict[str, Any]],
    raw_keys: list[str],
    get_keys: list[str] | None = None,
) -> dict[str, Any]:
    """The figures the targets are about (``raw_keys``: the ingest limit's runs,
    ``get_keys``: the download limit's)."""

    def rate(key: str) -> float | None:
        entry = measurements.get(key)
        return entry["mib_per_s"] if entry else None

    def seconds(key: str) -> float | None:
        entry = measurements.get(key)
        return entry["median_seconds"] if entry else None

    best_raw = max(raw_keys, key=lambda k: rate(k) or 0.0) if raw_keys else None
    best_get = max(get_keys, key=lambda k: rate(k) or 0.0) if get_keys else None
    rss = {
        key.removesuffix("/airgap"): entry["peak_rss_mib"]
        for key, entry in measurements.items()
        if key.endswith("/airgap") and entry.get("peak_rss_mib") is not None
    }
    metrics: dict[str, Any] = {
        "collect_mib_s": rate("collect/airgap"),
        "collect_skopeo_mib_s": rate("collect/skopeo"),
        "collect_vs_skopeo": _ratio(rate("collect/airgap"), rate("collect/skopeo")),
        "download_limit_mib_s": rate(best_get) if best_get else None,
        "download_limit_parallel": best_get.rsplit("x", 1)[-1] if best_get else None,
        "collect_vs_download_limit": _ratio(
            rate("collect/airgap"), rate(best_get) if best_get else None
        ),
        "import_mib_s": rate("import/airgap"),
        "import_skopeo_mib_s": rate("import/skopeo"),
        "import_vs_skopeo": _ratio(rate("import/airgap"), rate("import/skopeo")),
        "raw_limit_mib_s": rate(best_raw) if best_raw else None,
        "raw_limit_parallel": best_raw.rsplit("x", 1)[-1] if best_raw else None,
        "import_vs_limit": _ratio(rate("import/airgap"), rate(best_raw) if best_raw else None),
        "reimport_seconds": seconds("reimport/airgap"),
        "reimport_vs_import": _ratio(seconds("reimport/airgap"), seconds("import/airgap")),
        "reimport_skopeo_seconds": seconds("reimport/skopeo"),
        "reimport_vs_skopeo": _ratio(seconds("reimport/airgap"), seconds("reimport/skopeo")),
        "verify_mib_s": rate("verify/airgap"),
        "openssl_mib_s": rate("verify/openssl"),
        "verify_vs_openssl": _ratio(rate("verify/airgap"), rate("verify/openssl")),
        "serve_mib_s": rate("serve/airgap"),
        "serve_registry_mib_s": rate("serve/registry"),
        "serve_vs_registry": _ratio(rate("serve/airgap"), rate("serve/registry")),
        "peak_rss_mib": rss,
        "peak_rss_max_mib": max(rss.values()) if rss else None,
        "big_layer_rss_increase_mib": _big_increase(measurements),
        "linearity_collect_ratio": _linear(measurements, "collect"),
        "linearity_import_ratio": _linear(measurements, "import"),
        "linearity_verify_ratio": _linear(measurements, "verify"),
        # provider handling of the five realistic providers (airgap's phase times)
        "providers_collect_seconds": seconds("providers/collect"),
        "providers_import_seconds": seconds("providers/import"),
        "providers_configmaps_seconds": seconds("providers/configmaps"),
        "configmaps_seconds": seconds("configmaps/airgap"),
        # the scale run (--scale): against the same commands on the 40-image run
        "scale_rss_vs_main": _scale(measurements, "peak_rss_mib", inverse=False),
        "scale_time_per_byte_vs_main": _scale(measurements, "mib_per_s", inverse=True),
        "scale_time_per_byte_vs_shape": _scale(
            measurements, "mib_per_s", inverse=True, baseline="shape-"
        ),
        "scale_per_byte_vs_shape": _scale_breakdown(measurements),
        "scale_per_byte_vs_reference": _scale_vs_reference(measurements),
    }
    return metrics


# the machine's own handling of the scale run's bytes, per command: curl's download of the
# same blobs (collect), openssl's sha256 of the same bundle (verify)
SCALE_REFERENCES = {"collect": "curl", "verify": "openssl"}


def _scale_vs_reference(measurements: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per command whose reference tool ran at both sizes: how the reference's own time
    per byte grew from the same-shape 40-image run to the scale run (``reference``), and
    airgap's growth over that (``airgap_over_reference``; 1.0: airgap's time per byte grows
    exactly as the machine's does). Separates what airgap does with more images from what
    the machine does with more bytes than its memory holds. Empty without a scale run."""
    out: dict[str, dict[str, float]] = {}
    for command, big, small in _scale_pairs(measurements, "shape-"):
        tool = SCALE_REFERENCES.get(command)
        reference_big = measurements.get(f"scale-{command}/{tool}")
        reference_small = measurements.get(f"shape-{command}/{tool}")
        if not (reference_big and reference_small):
            continue
        reference = _per_byte(reference_big) / _per_byte(reference_small)
        growth = _per_byte(big) / _per_byte(small)
        out[command] = {
            "reference": keep(reference, 2),
            "airgap_over_reference": keep(growth / reference, 2),
        }
    return out


def _scale_breakdown(measurements: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per command, the scale run's time, user CPU and kernel (system) CPU per byte over
    the same-shape 40-image run's, airgap and the registry it talked to together: says
    whether a growth in time per byte is the programs' own work or the kernel's (memory
    management, I/O). Empty without a scale run."""
    breakdown: dict[str, dict[str, float]] = {}
    for command, big, small in _scale_pairs(measurements, "shape-"):
        if "median_system_cpu_seconds" not in big:
            continue
        ratios = {}
        for name, figure in (("time", _seconds), ("user_cpu", _user), ("system_cpu", _system)):
            a, b = _per_byte(big, figure), _per_byte(small, figure)
            if b > 0:
                ratios[name] = keep(a / b, 2)
        breakdown[command] = ratios
    return breakdown


def _seconds(entry: dict[str, Any]) -> float:
    return float(entry["median_seconds"])


def _system(entry: dict[str, Any]) -> float:
    return float(entry["median_system_cpu_seconds"] + entry["median_registry_system_cpu_seconds"])


def _user(entry: dict[str, Any]) -> float:
    total = entry["median_cpu_seconds"] + entry["median_registry_cpu_seconds"]
    return float(total) - _system(entry)


def _per_byte(entry: dict[str, Any], figure: Callable[[dict[str, Any]], float] = _seconds) -> float:
    """``figure`` of the entry (default: its median seconds) per byte it moved."""
    return figure(entry) / float(entry["bytes"])


def _scale(
    measurements: dict[str, dict[str, Any]], field: str, *, inverse: bool, baseline: str = ""
) -> float | None:
    """The largest ratio, over collect, verify and import, of the scale run's ``field``
    to the 40-image run's (``inverse``: the 40-image run's to the scale run's, for a
    rate: time per byte). ``baseline``: the 40-image run is ``BASELINE-COMMAND`` (the
    40 images of the scale run's shape, ``shape-``) rather than the main run."""
    ratios = []
    for _, big, main in _scale_pairs(measurements, baseline):
        if big.get(field) and main.get(field):
            a, b = (main[field], big[field]) if inverse else (big[field], main[field])
            ratios.append(a / b)
    return keep(max(ratios), 3) if ratios else None


def _scale_pairs(
    measurements: dict[str, dict[str, Any]], baseline: str
) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(command, scale run's entry, 40-image run's entry)`` for collect, verify and
    import where both were measured; the 40-image run is ``BASELINE-COMMAND``."""
    pairs = []
    for command in ("collect", "verify", "import"):
        big = measurements.get(f"scale-{command}/airgap")
        small = measurements.get(f"{baseline}{command}/airgap")
        if big and small:
            pairs.append((command, big, small))
    return pairs


def _big_increase(measurements: dict[str, dict[str, Any]]) -> float | None:
    """Largest RSS growth of a command on the 1 GiB-layer image over the same command on
    the small-image set: what the layer size alone adds."""
    growth = []
    for command in ("collect", "verify", "import"):
        big = measurements.get(f"big-{command}/airgap")
        small = [
            entry
            for key, entry in measurements.items()
            if key.startswith("small") and key.endswith(f"-{command}/airgap")
        ]
        if big and small and big["peak_rss_mib"] is not None:
            baseline = min(entry["peak_rss_mib"] for entry in small)
            growth.append(big["peak_rss_mib"] - baseline)
    return round(max(growth), 1) if growth else None


def _linear(measurements: dict[str, dict[str, Any]], command: str) -> float | None:
    runs = sorted(
        (int(key.split("-", 1)[0].removeprefix("small")), entry["median_seconds"])
        for key, entry in measurements.items()
        if key.startswith("small") and key.endswith(f"-{command}/airgap")
    )
    if len(runs) < 2:
        return None
    return keep(runs[-1][1] / runs[0][1], 2)


TARGETS: list[tuple[str, str, str, float, str]] = [
    # (name, metric, operator, threshold, description)
    # issue 12's raised targets (benchmarks/README.md: not yet measured on an idle machine)
    ("collect >= 2.0x skopeo", "collect_vs_skopeo", ">=", 2.0, "collect throughput / skopeo's"),
    ("import >= 2.0x skopeo", "import_vs_skopeo", ">=", 2.0, "import throughput / skopeo's"),
    ("import >= 90% of raw ingest", "import_vs_limit", ">=", 0.90, "import / best curl ingest"),
    (
        "collect >= 85% of raw download",
        "collect_vs_download_limit",
        ">=",
        0.85,
        "collect / best curl --parallel download",
    ),
    ("verify >= 1.6x openssl", "verify_vs_openssl", ">=", 1.6, "verify / openssl dgst -sha256"),
    (
        "re-import <= 1/5 of skopeo's re-sync",
        "reimport_vs_skopeo",
        "<=",
        0.2,
        "re-import time / skopeo's re-sync of the same images, in the same run",
    ),
    (
        "serve >= 80% of docker-registry",
        "serve_vs_registry",
        ">=",
        0.8,
        "airgap serve / docker-registry, the same blobs pulled by curl --parallel x8",
    ),
    ("peak RSS < 100 MiB", "peak_rss_max_mib", "<", 100.0, "largest peak RSS of any command"),
    (
        "1 GiB layer adds < 16 MiB RSS",
        "big_layer_rss_increase_mib",
        "<",
        16.0,
        "RSS on the 1 GiB-layer image minus RSS on tiny images",
    ),
    ("400 images <= 11x 40", "linearity_collect_ratio", "<=", 11.0, "collect time ratio"),
    (
        "scale run: peak RSS within 10% of the 40-image run",
        "scale_rss_vs_main",
        "<=",
        1.10,
        "largest scale/40-image peak RSS ratio of collect, verify, import (--scale only)",
    ),
    (
        "scale run: time linear in bytes",
        "scale_time_per_byte_vs_shape",
        "<=",
        1.10,
        "largest time-per-byte ratio of collect, verify, import: 2,000 images to 40 of the "
        "same shape (--scale only)",
    ),
    (
        "provider handling <= 0.5 s in collect",
        "providers_collect_seconds",
        "<=",
        0.5,
        "fetch, parse, discovery of the five realistic providers",
    ),
    (
        "provider handling <= 0.5 s in import",
        "providers_import_seconds",
        "<=",
        0.5,
        "rewrite, parse, ConfigMaps, CRs, clusterctl repository, manifests images",
    ),
]


def evaluate(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, metric, op, threshold, description in TARGETS:
        value = metrics.get(metric)
        if value is None and metric.startswith("scale_"):
            continue  # the scale run is not part of every run
        met = None
        if value is not None:
            met = {"<": value < threshold, "<=": value <= threshold, ">=": value >= threshold}[op]
        out.append(
            {
                "name": name,
                "metric": metric,
                "op": op,
                "threshold": threshold,
                "value": value,
                "met": met,
                "description": description,
            }
        )
    return out


# -- rendering -------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if value != 0 and round(value, digits) == 0:  # too small for the column's precision
        return f"{value:.2g}{suffix}"
    return f"{value:.{digits}f}{suffix}"


def _note(key: str, metrics: dict[str, Any]) -> str:
    notes = {
        "collect/airgap": (
            f"{_fmt(metrics['collect_vs_skopeo'], 2)}x skopeo, "
            f"{_fmt(_pct(metrics.get('collect_vs_download_limit')), 0)}% of raw download"
        ),
        "import/airgap": (
            f"{_fmt(metrics['import_vs_skopeo'], 2)}x skopeo, "
            f"{_fmt(_pct(metrics['import_vs_limit']), 0)}% of raw limit"
        ),
        "reimport/airgap": (
            f"{_fmt(_pct(metrics.get('reimport_vs_skopeo')), 0)}% of skopeo's re-sync, "
            f"{_fmt(_pct(metrics['reimport_vs_import']), 1)}% of import time"
        ),
        "verify/airgap": f"{_fmt(_pct(metrics['verify_vs_openssl']), 0)}% of openssl",
        "serve/airgap": f"{_fmt(_pct(metrics.get('serve_vs_registry')), 0)}% of docker-registry",
        "providers/collect": "fetch, parse, image discovery",
        "providers/import": "rewrite, parse, ConfigMaps, CRs, write, manifests images",
        "providers/configmaps": "rewrite, parse, ConfigMaps, CRs, write",
    }
    best = metrics.get("raw_limit_parallel")
    if key.startswith("raw/") and best and key.endswith(f"x{best}"):
        return "the limit (best)"
    best_get = metrics.get("download_limit_parallel")
    if key.startswith("rawget/") and best_get and key.endswith(f"x{best_get}"):
        return "the limit (best)"
    return notes.get(key, "")


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


def table(results: dict[str, Any]) -> str:
    """The results as a markdown table (also readable as plain text)."""
    metrics = results["metrics"]
    lines = [
        "| phase | tool | median s | MiB/s | compared | peak RSS MiB | CPU s: tool + registry |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in results["rows"]:
        entry = results["measurements"].get(row["key"])
        if not entry:
            continue
        note = _row_note(row["key"], metrics)
        lines.append(
            f"| {row['phase']} | {row['tool']} | {_fmt(entry['median_seconds'], 2)} "
            f"| {_fmt(entry['mib_per_s'])} | {note} | {_fmt(entry['peak_rss_mib'])} "
            f"| {_cpu(entry)} |"
        )
    return "\n".join(lines)


def _cpu(entry: dict[str, Any]) -> str:
    tool = entry.get("median_cpu_seconds") or 0.0
    server = entry.get("median_registry_cpu_seconds") or 0.0
    return f"{tool:.1f} + {server:.1f}" if server else f"{tool:.1f}"


def _row_note(key: str, metrics: dict[str, Any]) -> str:
    if key.startswith("small"):
        count = int(key.split("-", 1)[0].removeprefix("small"))
        largest = max(metrics.get("small_counts") or [count])
        if count == largest:
            command = key.split("-", 1)[1].split("/", 1)[0]
            ratio = metrics.get(f"linearity_{command}_ratio")
            return f"{_fmt(ratio, 2)}x the {min(metrics['small_counts'])}-image time"
        return ""
    return _note(key, metrics)


def targets_table(results: dict[str, Any]) -> str:
    lines = ["| target | measured | met |", "| --- | ---: | :---: |"]
    for target in results["targets"]:
        value = target["value"]
        shown = "n/a" if value is None else f"{value:g}"
        met = {True: "yes", False: "**no**", None: "n/a"}[target["met"]]
        lines.append(f"| {target['name']} ({target['description']}) | {shown} | {met} |")
    return "\n".join(lines)


def readme_section(results: dict[str, Any], method: str = "benchmarks/README.md") -> str:
    """The Benchmark section's text, its link to the method being ``method`` (relative
    to the file the section goes in)."""
    machine = results["machine"]
    workload = results["workload"]["main"]
    big = results["workload"]["big"]
    params = results["params"]
    return "\n".join(
        [
            README_START,
            f"Latest run: **{machine['date']}** on {machine['nproc']} cores, "
            f"{machine['memory_gib']} GiB RAM ({machine['cpu']}), loopback registries "
            f"(`{machine['registry']}`), {machine['skopeo']}, {machine['openssl']}"
            f"{_python(machine)}.",
            "",
            f"Command: `{results['command']}` (airgap at commit "
            f"{results['airgap']['commit']}{'+changes' if results['airgap']['dirty'] else ''}). "
            f"Workload: {workload['images']} images "
            f"({workload['indexes']} multi-arch), {workload['distinct_blobs']} distinct blobs, "
            f"{workload['mib']:.0f} MiB, blobs of {_human(workload['smallest_blob'])} to "
            f"{_human(workload['largest_blob'])}, collected with {_providers(results)}; plus "
            f"one image with a single {_human(big['largest_blob'])} layer and "
            f"{max(params['small_counts'])} tiny images. "
            f"Medians of {params['repeats']} alternating runs; MiB/s are of the bytes moved. "
            f"How it is measured: [benchmarks/README.md]({method}).",
            "",
            table(results),
            "",
            targets_table(results),
            *_scale_note(results),
            *_missed_note(results),
            README_END,
        ]
    )


def _providers(results: dict[str, Any]) -> str:
    """``five realistic provider releases (3.3 MiB)``, or the old runs' wording."""
    providers = results["workload"].get("providers")
    if not providers:
        return "no providers"
    return (
        f"{providers['providers']} realistic provider releases ({providers['mib']:.1f} MiB "
        "of CRD-heavy components, imported with all outputs)"
    )


def _python(machine: dict[str, Any]) -> str:
    python = machine.get("python")
    return f", airgap on {python}" if python else ""


def _scale_note(results: dict[str, Any]) -> list[str]:
    """Where the scale run's time per byte went, per command (see _scale_breakdown)."""
    breakdown = results["metrics"].get("scale_per_byte_vs_shape") or {}
    parts = [
        f"{command} time {_fmt(r.get('time'), 2)}x, user CPU {_fmt(r.get('user_cpu'), 2)}x, "
        f"kernel CPU {_fmt(r.get('system_cpu'), 2)}x"
        for command, r in breakdown.items()
    ]
    if not parts:
        return []
    references = results["metrics"].get("scale_per_byte_vs_reference") or {}
    machine = [
        f"{SCALE_REFERENCES[command]} {_fmt(r.get('reference'), 2)}x for {command} "
        f"(airgap's growth over it {_fmt(r.get('airgap_over_reference'), 2)}x)"
        for command, r in references.items()
    ]
    said = (
        f" The machine's own tools on the same bytes grew: {'; '.join(machine)}." if machine else ""
    )
    return [
        "",
        "Scale run per byte, over 40 images of the same shape (airgap and the registry it "
        f"talked to together): {'; '.join(parts)}.{said}",
    ]


def _missed_note(results: dict[str, Any]) -> list[str]:
    missed = [target["name"] for target in results["targets"] if target["met"] is False]
    if not missed:
        return []
    return [
        "",
        f"Not met: {', '.join(missed)}. `benchmarks/run.py --profile` shows where the time goes.",
    ]


def _human(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}".replace(".0 ", " ")
    return f"{size} B"


def update_readme(
    path: Path, results: dict[str, Any], method: str = "benchmarks/README.md"
) -> None:
    """Replace the text between the benchmark markers, or append a Benchmark section."""
    text = path.read_text()
    section = readme_section(results, method)
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        _, tail = rest.split(README_END, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n## Benchmark\n\n" + section + "\n"
    path.write_text(text)
