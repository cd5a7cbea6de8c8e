"""Helm chart packages: what they are and what they depend on, without Helm (pure).

A chart package (``NAME-VERSION.tgz``) travels byte for byte; what airgap reads of it
itself is ``Chart.yaml`` (name, version, appVersion, dependencies) and which
dependencies it vendors under ``charts/``, to fetch the others and to name, check and
push the package. Its images are what Helm renders (``chartrender``). The package is
unpacked in memory within Helm's own bounds (100 MiB unpacked, 5 MiB per file).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from airgap.bundle.tarread import TarReader, TarTruncated
from airgap.core.errors import InputError
from airgap.core.limits import MAX_CHART_FILE_BYTES, MAX_CHART_MEMBERS, MAX_CHART_UNPACKED_BYTES
from airgap.formats.tarheader import TarFormatError
from airgap.formats.yamlload import load_first

__all__ = ["Chart", "Dependency", "read_chart"]

CHART_FILE = "Chart.yaml"
VALUES_FILE = "values.yaml"
MAX_SUBCHART_DEPTH = 3


@dataclass(frozen=True)
class Dependency:
    """A dependency ``Chart.yaml`` declares; ``vendored`` when the package carries it
    under ``charts/`` (as ``helm dependency update`` leaves it), so nothing is fetched."""

    name: str
    version: str  # a Helm version constraint
    repository: str  # https://..., oci://..., or empty/file://... (vendored only)
    vendored: bool


@dataclass(frozen=True)
class Chart:
    """What airgap reads from a chart package."""

    name: str
    version: str
    app_version: str | None
    dependencies: tuple[Dependency, ...] = field(default=())
    # Chart.yaml as parsed: what Helm's OCI config is made from
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def read_chart(package: bytes, source: str, *, check_values: bool = False) -> Chart:
    """Parse a chart package; InputError (naming ``source``) when it is not one.

    Vendored subcharts (``charts/NAME/`` directories and ``charts/*.tgz`` packages, at
    most ``MAX_SUBCHART_DEPTH`` deep) are read for their names: a dependency they
    satisfy is not fetched. ``check_values`` (collect, where a chart first arrives)
    also reads every ``values.yaml`` through the bounded YAML path: Helm's Go YAML
    passes a language tag (``!!python/object/...``) through as a plain value, which
    that path refuses at its line. Verify and import read the signed chart again on
    every run and skip that parse."""
    return _parse(_Unpacked.of(package, source), 0, check_values)


@dataclass(frozen=True)
class _Unpacked:
    """A chart's files as read from its package: text files and the packages under
    ``charts/``, by path in the chart, and where it came from (for messages)."""

    files: dict[str, str]
    packages: dict[str, bytes]
    source: str

    @classmethod
    def of(cls, package: bytes, source: str) -> _Unpacked:
        return cls(*_chart_files(_unpack(package, source), source), source)

    def within(self, prefix: str) -> _Unpacked:
        """The chart vendored as the directory ``prefix`` (``charts/NAME/``)."""
        cut = len(prefix)
        files = {path[cut:]: text for path, text in self.files.items() if path.startswith(prefix)}
        packages = {
            path[cut:]: data for path, data in self.packages.items() if path.startswith(prefix)
        }
        return _Unpacked(files, packages, f"{self.source}: {prefix}")


def _metadata(files: dict[str, str], source: str) -> dict[Any, Any]:
    metadata = _yaml(files, CHART_FILE, source)
    if not isinstance(metadata, dict):
        raise InputError(f"{source}: {CHART_FILE} is not a mapping")
    name, version = metadata.get("name"), metadata.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, (str, int, float)):
        raise InputError(f"{source}: {CHART_FILE} has no name and version")
    return metadata


def _parse(chart: _Unpacked, depth: int, check_values: bool) -> Chart:
    metadata = _metadata(chart.files, chart.source)
    if check_values and VALUES_FILE in chart.files:
        _yaml(chart.files, VALUES_FILE, chart.source)  # refused at its line, or nothing
    app_version = metadata.get("appVersion")
    subcharts = (_parse(s, depth + 1, check_values) for s in _vendored(chart, depth))
    vendored = {sub.name for sub in subcharts}
    return Chart(
        name=metadata["name"],
        version=str(metadata["version"]),
        app_version=str(app_version) if app_version is not None else None,
        dependencies=tuple(_dependencies(metadata, vendored, chart.source)),
        metadata={str(key): value for key, value in metadata.items()},
    )


def _dependencies(
    metadata: dict[Any, Any], vendored: set[str], source: str
) -> Iterator[Dependency]:
    entries = metadata.get("dependencies")
    if entries is None:
        return
    if not isinstance(entries, list):
        raise InputError(f"{source}: {CHART_FILE} dependencies is not a list")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError(f"{source}: {CHART_FILE} has a dependency without a name")
        version = entry.get("version")
        repository = entry.get("repository")
        yield Dependency(
            name=entry["name"],
            version=str(version) if version is not None else "",
            repository=repository if isinstance(repository, str) else "",
            vendored=entry["name"] in vendored,
        )


def _vendored(chart: _Unpacked, depth: int) -> list[_Unpacked]:
    """The charts vendored under ``charts/``: directories and packages."""
    files, packages = chart.files, chart.packages
    if depth >= MAX_SUBCHART_DEPTH:
        if packages or any(path.startswith("charts/") for path in files):
            raise InputError(
                f"{chart.source}: subcharts nested more than {MAX_SUBCHART_DEPTH} deep"
            )
        return []
    directories = sorted(
        {
            path.split("/")[1]
            for path in files
            if path.startswith("charts/") and path.count("/") >= 2
        }
    )
    found = [chart.within(f"charts/{directory}/") for directory in directories]
    found = [sub for sub in found if CHART_FILE in sub.files]
    for path in sorted(packages):
        if path.count("/") == 1:  # charts/NAME-VERSION.tgz
            found.append(_Unpacked.of(packages[path], f"{chart.source}: {path}"))
    return found


def _unpack(package: bytes, source: str) -> bytes:
    """The tar inside the gzip, refusing more than Helm would unpack."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(package, MAX_CHART_UNPACKED_BYTES + 1)
    except zlib.error as exc:
        raise InputError(f"{source}: not a gzip-compressed chart package ({exc})") from None
    if len(data) > MAX_CHART_UNPACKED_BYTES or decompressor.unconsumed_tail:
        raise InputError(
            f"{source}: unpacks to more than {MAX_CHART_UNPACKED_BYTES >> 20} MiB "
            "(Helm refuses such a chart too)"
        )
    return data


class _Memory:
    """Bytes readable by offset, for ``TarReader``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def pread(self, length: int, offset: int) -> bytes:
        return self._data[offset : offset + length]


def _chart_files(data: bytes, source: str) -> tuple[dict[str, str], dict[str, bytes]]:
    """``path below the chart directory -> text`` for the YAML files airgap reads (the
    chart's own and its vendored subcharts'), and ``path -> bytes`` of the subchart
    packages under ``charts/``. Headers are walked by airgap's bounded tar reader (as
    bundles are: never CPython's tarfile), in memory: nothing is written to disk, so no
    member name ever becomes a path."""
    files: dict[str, str] = {}
    packages: dict[str, bytes] = {}
    top: str | None = None
    reader = TarReader(_Memory(data))
    empty = not data.strip(b"\0")  # an archive of no members: end blocks only
    try:
        for count in range(0 if empty else MAX_CHART_MEMBERS + 1):
            entry = reader.next()
            if entry is None:
                break
            if count >= MAX_CHART_MEMBERS:
                raise InputError(f"{source}: more than {MAX_CHART_MEMBERS} files")
            head, _, rest = entry.name.lstrip("./").partition("/")
            top = top or head
            if head != top or not entry.isreg() or ".." in rest.split("/"):
                continue
            wanted = _wanted(rest)
            if not wanted:
                continue
            if entry.size > MAX_CHART_FILE_BYTES:
                raise InputError(
                    f"{source}: {entry.name[:200]} is larger than "
                    f"{MAX_CHART_FILE_BYTES >> 20} MiB (Helm refuses such a file too)"
                )
            content = reader.pread(entry.size, entry.offset_data)
            if wanted == "package":
                packages[rest] = content
                continue
            try:
                files[rest] = content.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{source}: {entry.name[:200]} is not UTF-8 text") from None
    except (TarFormatError, TarTruncated) as exc:
        raise InputError(f"{source}: not a chart package ({exc})") from None
    if CHART_FILE not in files:
        raise InputError(f"{source}: no {CHART_FILE} in the chart's directory")
    return files, packages


def _wanted(path: str) -> str | None:
    """``text`` for a Chart.yaml or values.yaml (the chart's or a vendored subchart's),
    ``package`` for a vendored chart package."""
    parts = path.split("/")
    while len(parts) > 2 and parts[0] == "charts":  # a vendored subchart directory
        parts = parts[2:]
    if len(parts) == 2 and parts[0] == "charts" and parts[1].endswith(".tgz"):
        return "package"
    if parts in ([CHART_FILE], [VALUES_FILE]):
        return "text"
    return None


def _yaml(files: dict[str, str], name: str, source: str) -> Any:
    return load_first(files[name], f"{source}: {name}")  # as Helm reads them
