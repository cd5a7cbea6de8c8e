"""Helm's own template engine, in process: the one module that knows the binding.

airgap renders a chart the way ``helm template`` does, with Helm's engine, not an
approximation of it: PyPI's ``helm-python-sdk`` (``import helm_python``: Helm v4's Go
SDK built as a C library, no ``helm`` binary). Everything about that binding stays here,
behind ``render_chart``, so that a ``helm`` CLI or another binding could take its place.

What the binding does that callers need not know:

- It is loaded on first use, once per process (0.2 s): airgap's start-up never pays for
  it, and a machine without its wheel (aarch64) fails a chart command in one line.
- A loaded chart drops the subcharts a render disabled, so every render loads afresh.
- Capabilities (``kube_version``, ``api_versions``) are render options the binding's
  Python wrapper does not expose: they go to the library's render call directly.
- A dependency the package does not vendor (fetched beside it, as collect carries it)
  is placed under its parent's ``charts/`` before loading, as ``helm dependency build``
  places it: the packages are unpacked by Helm's own ``expand`` (its bounds, its path
  checks) into a temporary directory, deleted after the render.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from airgap.content.constraints import satisfies
from airgap.core.errors import AirgapError, InputError

MAX_DEPENDENCY_DEPTH = 5  # as many levels as collect fetches
BINDING = "helm-python-sdk"


@dataclass(frozen=True)
class Capabilities:
    """What ``.Release`` and ``.Capabilities`` render as."""

    release_name: str
    namespace: str
    kube_version: str  # v1.34.0
    api_versions: tuple[str, ...] = field(default=())


@functools.cache
def _helm() -> ModuleType:
    """The binding, imported once per process; AirgapError (one line) without it."""
    try:
        import helm_python
    except (ImportError, OSError) as exc:
        raise AirgapError(
            f"Helm's engine is not available here ({BINDING}: {str(exc).splitlines()[0][:200]}); "
            "chart entries need its wheel (manylinux x86_64)"
        ) from None
    helm_python.disable_logging()
    return helm_python


def engine_version() -> str:
    """The Helm SDK version that renders (for messages and the inventory)."""
    return str(_helm().helm_sdk_version())


def render_chart(
    packages: Sequence[tuple[bytes, str]], values: dict[str, Any], capabilities: Capabilities
) -> dict[str, str]:
    """``template path -> rendered text`` of the first package, its dependencies as Helm
    resolves them: vendored under ``charts/``, or among the other packages (fetched
    beside it). InputError naming the chart and Helm's message when Helm refuses the
    chart, its values (``required``, a schema) or a template."""
    helm = _helm()
    data, source = packages[0]
    try:
        chart = helm.Chart.load_archive(data)
        try:
            missing = _missing_dependencies(chart.metadata, chart.dependencies)
            if missing:
                chart.close()
                with tempfile.TemporaryDirectory(prefix="airgap-chart-") as scratch:
                    top = _assemble(helm, packages, 0, Path(scratch), Path(scratch) / "top", 0)
                    chart = helm.Chart.load(top)
                    return _render(helm, chart, values, capabilities)
            return _render(helm, chart, values, capabilities)
        finally:
            chart.close()
    except helm.HelmError as exc:
        raise InputError(f"{source}: Helm cannot render it: {_one_line(str(exc))}") from None


def install_values(packages: Sequence[tuple[bytes, str]], values: dict[str, Any]) -> dict[str, Any]:
    """The values an install of the first package computes from ``values``: its
    defaults and its subcharts' (under their keys) coalesced with them, as Helm does."""
    helm = _helm()
    data, source = packages[0]
    try:
        with helm.Chart.load_archive(data) as chart:
            merged: dict[str, Any] = chart.merge_values(values)
    except helm.HelmError as exc:
        raise InputError(f"{source}: Helm cannot read its values: {_one_line(str(exc))}") from None
    return merged


def _render(
    helm: ModuleType, chart: Any, values: dict[str, Any], capabilities: Capabilities
) -> dict[str, str]:
    options = {
        "name": capabilities.release_name,
        "namespace": capabilities.namespace,
        "is_install": True,
        "kube_version": capabilities.kube_version,
        "api_versions": list(capabilities.api_versions),
    }
    from helm_python import _native  # the render call with capabilities

    rendered = _native.call_string(
        "helm_render", chart._raw(), json.dumps(values), json.dumps(options)
    )
    manifests = json.loads(rendered)
    if not isinstance(manifests, dict):
        raise helm.HelmError("the engine returned no manifests")
    return {str(path): str(text) for path, text in manifests.items()}


def _missing_dependencies(metadata: dict[str, Any], loaded: list[dict[str, Any]]) -> list[Any]:
    """Dependencies ``Chart.yaml`` declares that ``charts/`` does not hold."""
    present = {entry.get("name") for entry in loaded if isinstance(entry, dict)}
    declared = metadata.get("dependencies") or []
    return [d for d in declared if isinstance(d, dict) and d.get("name") not in present]


def _assemble(
    helm: ModuleType,
    packages: Sequence[tuple[bytes, str]],
    index: int,
    scratch: Path,
    parent: Path,
    depth: int,
) -> Path:
    """Unpack package ``index`` into ``parent/NAME`` (Helm's expand) with each
    dependency it does not vendor, found among ``packages``, under its ``charts/``."""
    unpacked = scratch / f"unpack-{depth}-{index}"
    unpacked.mkdir()
    archive = scratch / f"package-{depth}-{index}.tgz"
    archive.write_bytes(packages[index][0])
    helm.expand(unpacked, archive)
    archive.unlink()
    (chart_dir,) = list(unpacked.iterdir())
    parent.mkdir(parents=True, exist_ok=True)
    directory = parent / chart_dir.name
    chart_dir.rename(directory)
    if depth >= MAX_DEPENDENCY_DEPTH:
        return directory
    with helm.Chart.load(directory) as chart:
        missing = _missing_dependencies(chart.metadata, chart.dependencies)
    for dependency in missing:
        found = _beside(helm, packages, dependency)
        if found is not None:
            _assemble(helm, packages, found, scratch, directory / "charts", depth + 1)
    return directory


def _beside(
    helm: ModuleType, packages: Sequence[tuple[bytes, str]], dependency: dict[str, Any]
) -> int | None:
    """The index of the package a declared dependency resolves to (its name, the
    highest version within its constraint), None when collect carries none."""
    name, constraint = dependency.get("name"), str(dependency.get("version") or "")
    for index, (data, _source) in enumerate(packages[1:], start=1):
        metadata = _metadata(helm, data)
        if metadata.get("name") == name and _meets(str(metadata.get("version")), constraint):
            return index
    return None


def _metadata(helm: ModuleType, data: bytes) -> dict[str, Any]:
    with helm.Chart.load_archive(data) as chart:
        metadata: dict[str, Any] = chart.metadata
    return metadata


def _meets(version: str, constraint: str) -> bool:
    try:
        return not constraint.strip() or satisfies(version, constraint)
    except InputError:  # a constraint Helm would refuse matches nothing
        return False


def _one_line(text: str) -> str:
    """Helm's message on one line (a schema failure lists one problem a line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines)[:1000]
