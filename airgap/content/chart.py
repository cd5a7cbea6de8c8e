"""Helm chart packages: what they are and which images they run, without Helm (pure).

A chart package (``NAME-VERSION.tgz``) travels byte for byte; what airgap needs from
it is ``Chart.yaml`` (name, version, appVersion) and the images its ``values.yaml``
names, so that they travel too and the chart can be pointed at the mirror with a
values file instead of an edited package. Images are read from ``values.yaml`` in the
shape most charts use, and the Cluster API operator's chart does:

    image:
      manager:
        registry: ""           # optional
        repository: registry.k8s.io/capi-operator/cluster-api-operator
        tag: v0.24.0           # default: the chart's appVersion
        digest: ""             # optional; some templates honour it

(a mapping with a ``repository`` under a key that says ``image``), or a plain
``image: REPOSITORY:TAG`` string. The package is unpacked in memory within Helm's own
bounds (100 MiB unpacked, 5 MiB per file); only the chart's own files are read, never a
subchart's.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from airgap.errors import InputError
from airgap.limits import MAX_CHART_FILE_BYTES, MAX_CHART_MEMBERS, MAX_CHART_UNPACKED_BYTES
from airgap.reference import Reference, parse_reference
from airgap.yamlload import load_single

CHART_FILE = "Chart.yaml"
VALUES_FILE = "values.yaml"
_TEMPLATE_SUFFIXES = (".yaml", ".yml", ".tpl")


@dataclass(frozen=True)
class ChartImage:
    """One image a chart's values name, and where."""

    path: tuple[str, ...]  # keys from the top of values.yaml to the image's mapping/value
    reference: str  # normalised
    style: str  # "mapping" (repository/tag/...) or "string" (image: repo:tag)
    has_registry: bool = False  # the mapping splits registry from repository


@dataclass(frozen=True)
class Chart:
    """What airgap reads from a chart package."""

    name: str
    version: str
    app_version: str | None
    images: tuple[ChartImage, ...]
    honours_digest: bool  # a template reads an image ``digest`` value
    warnings: tuple[str, ...] = field(default=())

    @property
    def image_references(self) -> list[str]:
        return list(dict.fromkeys(image.reference for image in self.images))


def read_chart(package: bytes, source: str) -> Chart:
    """Parse a chart package; InputError (naming ``source``) when it is not one."""
    files = _chart_files(_unpack(package, source), source)
    metadata = _yaml(files, CHART_FILE, source)
    if not isinstance(metadata, dict):
        raise InputError(f"{source}: {CHART_FILE} is not a mapping")
    name, version = metadata.get("name"), metadata.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, (str, int, float)):
        raise InputError(f"{source}: {CHART_FILE} has no name and version")
    app_version = metadata.get("appVersion")
    values = _yaml(files, VALUES_FILE, source) if VALUES_FILE in files else None
    warnings: list[str] = []
    images = tuple(_images(values, str(app_version) if app_version is not None else None, warnings))
    templates = [
        text
        for path, text in files.items()
        if path.startswith("templates/") and path.endswith(_TEMPLATE_SUFFIXES)
    ]
    return Chart(
        name=name,
        version=str(version),
        app_version=str(app_version) if app_version is not None else None,
        images=images,
        honours_digest=any(".digest" in text for text in templates),
        warnings=tuple(warnings),
    )


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


def _chart_files(data: bytes, source: str) -> dict[str, str]:
    """``path below the chart directory -> text`` for the chart's own YAML files."""
    files: dict[str, str] = {}
    top: str | None = None
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_CHART_MEMBERS:
                    raise InputError(f"{source}: more than {MAX_CHART_MEMBERS} files")
                head, _, rest = member.name.lstrip("./").partition("/")
                top = top or head
                if head != top or not member.isfile() or not _wanted(rest):
                    continue
                if member.size > MAX_CHART_FILE_BYTES:
                    raise InputError(
                        f"{source}: {member.name} is larger than "
                        f"{MAX_CHART_FILE_BYTES >> 20} MiB (Helm refuses such a file too)"
                    )
                reader = archive.extractfile(member)
                if reader is None:
                    continue
                try:
                    files[rest] = reader.read().decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{source}: {member.name} is not UTF-8 text") from None
    except tarfile.TarError as exc:
        raise InputError(f"{source}: not a chart package ({exc})") from None
    if CHART_FILE not in files:
        raise InputError(f"{source}: no {CHART_FILE} in the chart's directory")
    return files


def _wanted(path: str) -> bool:
    if path in (CHART_FILE, VALUES_FILE):
        return True
    return path.startswith("templates/") and path.endswith(_TEMPLATE_SUFFIXES)


def _yaml(files: dict[str, str], name: str, source: str) -> Any:
    return load_single(files[name], f"{source}: {name}")


def _images(values: Any, app_version: str | None, warnings: list[str]) -> Iterator[ChartImage]:
    for path, node in _walk(values, ()):
        imagey = any("image" in key.lower() for key in path)
        if isinstance(node, dict) and imagey and isinstance(node.get("repository"), str):
            found = _mapping_image(node, app_version)
            if found is None:
                warnings.append(f"values {'.'.join(path)}: not a resolvable image")
                continue
            yield ChartImage(path, found, "mapping", has_registry="registry" in node)
        elif isinstance(node, str) and path and path[-1].lower() == "image" and node.strip():
            try:
                yield ChartImage(path, str(parse_reference(node.strip())), "string")
            except InputError:
                warnings.append(f"values {'.'.join(path)}: {node[:80]!r} is not an image")


def values_images(values: Any) -> list[str]:
    """The images a values document names (a chart's values.yaml, or a values file
    airgap wrote), read the way chart discovery reads them; a mapping without a tag
    and no appVersion to default to names no image."""
    return list(dict.fromkeys(image.reference for image in _images(values, None, [])))


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every mapping and scalar below ``node`` with its key path; the YAML loader's
    depth bound keeps this finite. Lists are not looked into: image values in lists
    have no common shape."""
    yield path, node
    if isinstance(node, dict):
        for key, child in node.items():
            if isinstance(key, str):
                yield from _walk(child, (*path, key))


def _mapping_image(node: dict[str, Any], app_version: str | None) -> str | None:
    repository = str(node["repository"]).strip()
    registry = node.get("registry")
    if isinstance(registry, str) and registry.strip():
        repository = f"{registry.strip().rstrip('/')}/{repository}"
    tag = node.get("tag")
    tag_text = str(tag).strip() if tag is not None and not isinstance(tag, bool) else ""
    tag_text = tag_text or (app_version or "")
    digest = node.get("digest")
    text = repository
    if tag_text:
        text += f":{tag_text}"
    if isinstance(digest, str) and digest.strip():
        text += f"@{digest.strip()}"
    if not repository:
        return None
    try:
        return str(parse_reference(text))
    except InputError:
        return None


# --- pointing a chart at the mirror ------------------------------------------------------


def values_overrides(
    chart: Chart, target: Callable[[str], tuple[Reference, str | None] | None]
) -> dict[str, Any]:
    """A values file that points every image of ``chart`` at the mirror.

    ``target(reference)`` gives the target reference of a bundle image and the digest
    to pin it by (None: do not pin). A mapping gets ``repository`` and ``tag`` (and
    ``registry`` when the chart splits it out, ``digest`` when a template honours
    one); a string value gets the whole reference."""
    overrides: dict[str, Any] = {}
    for image in chart.images:
        found = target(image.reference)
        if found is None:
            continue
        reference, digest = found
        if image.style == "string":
            pinned = reference.with_digest(digest) if digest else reference
            _set(overrides, image.path, str(pinned))
            continue
        value: dict[str, Any] = {}
        if image.has_registry:
            value["registry"] = reference.registry
            value["repository"] = reference.repository
        else:
            value["repository"] = reference.name
        if reference.tag:
            value["tag"] = reference.tag
        if digest and chart.honours_digest:
            value["digest"] = digest
        _set(overrides, image.path, value)
    return overrides


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if isinstance(value, dict):
        node.setdefault(path[-1], {}).update(value)
    else:
        node[path[-1]] = value


def override_reference(value: dict[str, Any] | str) -> str:
    """The image a values override composes to, as the common templates compose it
    (``registry/repository@digest`` or ``registry/repository:tag``)."""
    if isinstance(value, str):
        return value
    text = str(value["repository"])
    if value.get("registry"):
        text = f"{value['registry']}/{text}"
    if value.get("digest"):
        return f"{text}@{value['digest']}"
    return f"{text}:{value['tag']}" if value.get("tag") else text
