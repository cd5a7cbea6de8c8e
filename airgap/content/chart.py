"""Helm chart packages: what they are and which images they run, without Helm (pure).

A chart package (``NAME-VERSION.tgz``) travels byte for byte; what airgap needs from
it is ``Chart.yaml`` (name, version, appVersion, dependencies) and the images the
chart renders with its default values, so that they travel too and the chart can be
pointed at the mirror with a values file instead of an edited package. The images
come from ``values.yaml`` (``chartvalues``) and the templates (``charttemplates``);
vendored subcharts are read with the values the chart gives them. The package is
unpacked in memory within Helm's own bounds (100 MiB unpacked, 5 MiB per file).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airgap.bundle.tarread import TarFormatError, TarReader, TarTruncated
from airgap.content.charttemplates import MAX_CALL_DEPTH, ValuesHints, template_images
from airgap.content.chartvalues import (
    ChartImage,
    chart_global_registry,
    coalesced,
    images_in_values,
    lookup,
    values_images,
    values_overrides,
)
from airgap.content.constraints import satisfies
from airgap.errors import InputError
from airgap.limits import MAX_CHART_FILE_BYTES, MAX_CHART_MEMBERS, MAX_CHART_UNPACKED_BYTES
from airgap.reference import parse_reference
from airgap.yamlload import load_first, load_single

__all__ = [
    "MAX_CALL_DEPTH",
    "Chart",
    "ChartImage",
    "Dependency",
    "read_chart",
    "read_chart_family",
    "values_images",
    "values_overrides",
]

CHART_FILE = "Chart.yaml"
ARTIFACTHUB_IMAGES = "artifacthub.io/images"
MAX_SUBCHART_DEPTH = 3
VALUES_FILE = "values.yaml"
_TEMPLATE_SUFFIXES = (".yaml", ".yml", ".tpl")


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
    images: tuple[ChartImage, ...]
    honours_digest: bool  # a template reads an image ``digest`` value
    warnings: tuple[str, ...] = field(default=())
    dependencies: tuple[Dependency, ...] = field(default=())
    # images named literally in templates or in the artifacthub.io/images annotation,
    # carried but not overridable by values; and those of vendored subcharts' own
    # templates and annotations
    literal_images: tuple[str, ...] = field(default=())
    global_registry: bool = False  # values.yaml sets global.imageRegistry
    # Chart.yaml as parsed: what Helm's OCI config is made from
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def image_references(self) -> list[str]:
        found = [image.reference for image in self.images] + list(self.literal_images)
        return list(dict.fromkeys(found))


def read_chart(package: bytes, source: str) -> Chart:
    """Parse a chart package; InputError (naming ``source``) when it is not one.

    Vendored subcharts (``charts/NAME/`` directories and ``charts/*.tgz`` packages, at
    most ``MAX_SUBCHART_DEPTH`` deep) are read too, with the values Helm gives them (the
    parent's under their name, and its ``global``, over their own): their images are
    found under their name in the parent's values, as Helm passes them down."""
    return _parse(_Unpacked.of(package, source), 0)


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


# a chart's dependency as Chart.yaml declares it -> the package it resolves to, if any
Resolve = Callable[[str, str], "_Unpacked | None"]


def read_chart_family(packages: Sequence[tuple[bytes, str]]) -> list[Chart]:
    """The charts of one entry (its chart first, then the dependencies fetched beside
    it, as collect carries them), each ``(package, source)``, read as Helm renders
    them: a dependency not vendored under ``charts/`` is read with the values its
    parent gives it, like a vendored one, and its images are the parent's (under its
    key). A dependency read so comes back with no image of its own: read alone, its
    defaults would name images the parent replaces (Argo CD sets redis-ha's haproxy
    repository and leaves the tag to redis-ha), or that a disabled dependency never
    runs."""
    units = [_Unpacked.of(data, source) for data, source in packages]
    alone = [_parse(unit, 0) for unit in units]

    def resolve(name: str, constraint: str) -> _Unpacked | None:
        for unit, chart in zip(units, alone, strict=True):
            if chart.name == name and _meets(chart.version, constraint):
                return unit
        return None

    # what each chart's dependencies not vendored resolve to, beside it
    found = [
        [resolve(d.name, d.version) for d in chart.dependencies if not d.vendored]
        for chart in alone
    ]
    # the entry's own chart is read as the top even where another names it
    read_within = {id(unit) for resolved in found for unit in resolved if unit is not None}
    if units:
        read_within.discard(id(units[0]))
    charts: list[Chart] = []
    for unit, chart, resolved in zip(units, alone, found, strict=True):
        if id(unit) in read_within:
            charts.append(replace(chart, images=(), literal_images=(), warnings=()))
        elif any(resolved):
            charts.append(_parse(unit, 0, resolve=resolve))
        else:  # nothing beside it is its dependency: as read alone
            charts.append(chart)
    return charts


def _meets(version: str, constraint: str) -> bool:
    try:
        return not constraint.strip() or satisfies(version, constraint)
    except InputError:  # a constraint Helm would refuse matches nothing
        return False


def _parse(
    chart: _Unpacked, depth: int, given: Any = None, resolve: Resolve | None = None
) -> Chart:
    files, source = chart.files, chart.source
    metadata = _metadata(files, source)
    name, version = metadata["name"], metadata["version"]
    app_version = metadata.get("appVersion")
    values = _yaml(files, VALUES_FILE, source) if VALUES_FILE in files else None
    values = coalesced(values, given)
    warnings: list[str] = []
    app = str(app_version) if app_version is not None else None
    global_registry = chart_global_registry(values)
    templates = {
        path: text
        for path, text in files.items()
        if path.startswith("templates/") and path.endswith(_TEMPLATE_SUFFIXES)
    }
    hints = ValuesHints.read(templates)
    enabled = _dependency_keys(metadata, values)
    aliases = _aliases(metadata)
    subcharts = [_subchart(sub, depth, values, aliases, resolve) for sub in _vendored(chart, depth)]
    dependencies = tuple(_dependencies(metadata, {sub.name for sub in subcharts}, source))
    subcharts += _resolved(dependencies, depth, values, aliases, resolve)
    # what Helm gives a subchart is read with it, not here (its own defaults and
    # appVersion apply there): its key is read here as a dependency switched off
    read_here = enabled | {aliases.get(sub.name, sub.name): False for sub in subcharts}
    if isinstance(given, dict) and "global" in given:
        # the parent's global reaches this chart's templates, but the images in it are
        # the parent's (Argo CD's global.image is its own server, not redis-ha's)
        read_here["global"] = False
    images = list(images_in_values(values, app, warnings, global_registry, hints, read_here))
    found = template_images(templates, values, images, warnings)
    images = [image for image in images + found.direct if image.path not in found.test_only]
    literal = found.literal
    literal += _annotation_images(metadata, source, warnings)
    for sub in subcharts:
        key = aliases.get(sub.name, sub.name)
        if enabled.get(key) is False:  # its condition is off: Helm renders none of it
            continue
        images += [replace(image, path=(key, *image.path)) for image in sub.images]
        literal += list(sub.literal_images)
        warnings += [f"subchart {sub.name}: {warning}" for warning in sub.warnings]
    return Chart(
        name=name,
        version=str(version),
        app_version=app,
        images=tuple(images),
        honours_digest=any(".digest" in text for text in templates.values())
        or any(sub.honours_digest for sub in subcharts),
        warnings=tuple(warnings),
        dependencies=dependencies,
        literal_images=tuple(dict.fromkeys(literal)),
        global_registry=global_registry is not None,
        metadata={str(key): value for key, value in metadata.items()},
    )


def _annotation_images(metadata: dict[Any, Any], source: str, warnings: list[str]) -> list[str]:
    """``artifacthub.io/images``: a YAML list of ``{name, image}`` in Chart.yaml's
    annotations, which many charts keep to list what they run."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return []
    text = annotations.get(ARTIFACTHUB_IMAGES)
    if not isinstance(text, str):
        return []
    try:
        entries = load_single(text, f"{source}: {CHART_FILE} {ARTIFACTHUB_IMAGES}")
    except InputError as exc:
        warnings.append(str(exc))
        return []
    found: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        image = entry.get("image") if isinstance(entry, dict) else None
        if not isinstance(image, str):
            continue
        try:
            found.append(str(parse_reference(image.strip())))
        except InputError:
            warnings.append(f"{ARTIFACTHUB_IMAGES}: {image[:80]!r} is not an image")
    return found


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


def _dependency_keys(metadata: dict[Any, Any], values: Any) -> dict[str, bool]:
    """Each dependency's values key (its alias, else its name) and whether the default
    values enable it, as Helm decides: its ``tags`` (any true enables, all false
    disable), then its ``condition``, whose first path holding a boolean wins."""
    entries = metadata.get("dependencies")
    keys: dict[str, bool] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        alias = entry.get("alias")
        key = alias if isinstance(alias, str) and alias else entry["name"]
        keys[key] = _enabled(entry, values)
    return keys


def _enabled(entry: dict[Any, Any], values: Any) -> bool:
    enabled = True
    tags = entry.get("tags")
    given = lookup(values, ("tags",))
    if isinstance(tags, list) and isinstance(given, dict):
        states = [given.get(tag) for tag in tags if isinstance(tag, str)]
        if any(state is True for state in states):
            enabled = True
        elif any(state is False for state in states):
            enabled = False
    condition = entry.get("condition")
    for text in condition.split(",") if isinstance(condition, str) else []:
        state = lookup(values, tuple(text.strip().split("."))) if text.strip() else None
        if isinstance(state, bool):
            return state
    return enabled


def _aliases(metadata: dict[Any, Any]) -> dict[str, str]:
    entries = metadata.get("dependencies")
    aliases: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("alias"), str):
            aliases[str(entry.get("name"))] = entry["alias"]
    return aliases


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


def _resolved(
    dependencies: tuple[Dependency, ...],
    depth: int,
    values: Any,
    aliases: dict[str, str],
    resolve: Resolve | None,
) -> list[Chart]:
    """The dependencies not vendored whose packages ``resolve`` finds, each read as a
    subchart (``MAX_SUBCHART_DEPTH`` deep at most, which also ends a cycle)."""
    if resolve is None or depth + 1 >= MAX_SUBCHART_DEPTH:
        return []
    found: list[Chart] = []
    for dependency in dependencies:
        unit = None if dependency.vendored else resolve(dependency.name, dependency.version)
        if unit is None:
            continue
        try:
            found.append(_subchart(unit, depth, values, aliases, resolve))
        except InputError:  # too deep from here (it was read alone): left to the parent
            continue
    return found


def _subchart(
    sub: _Unpacked,
    depth: int,
    values: Any,
    aliases: dict[str, str],
    resolve: Resolve | None = None,
) -> Chart:
    """A subchart with what Helm gives it: the parent's values under its key (its
    alias, else its name) and the parent's ``global``, over its own defaults."""
    name = _metadata(sub.files, sub.source)["name"]
    parent = values if isinstance(values, dict) else {}
    given = parent.get(aliases.get(name, name))
    given = dict(given) if isinstance(given, dict) else {}
    if isinstance(parent.get("global"), dict):
        given["global"] = coalesced(given.get("global"), parent["global"])
    return _parse(sub, depth + 1, given, resolve)


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
    """``text`` for a file read as YAML, ``package`` for a vendored chart package."""
    parts = path.split("/")
    while len(parts) > 2 and parts[0] == "charts":  # a vendored subchart directory
        parts = parts[2:]
    if len(parts) == 2 and parts[0] == "charts" and parts[1].endswith(".tgz"):
        return "package"
    if parts in ([CHART_FILE], [VALUES_FILE]):
        return "text"
    if parts[0] == "templates" and parts[-1].endswith(_TEMPLATE_SUFFIXES):
        return "text"
    return None


def _yaml(files: dict[str, str], name: str, source: str) -> Any:
    return load_first(files[name], f"{source}: {name}")  # as Helm reads them
