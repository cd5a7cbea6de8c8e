"""Fetch content (cert-manager, the operator, cluster templates) and find its images.

One path for every kind: resolve the version at the release source (any source a
provider may come from), pick the files the kind takes (required, optional when the
release has them, or matched by name in the release's file list), download them
beside each other in the bundle's layout, and discover the images each one runs.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from airgap.content.chart import read_chart
from airgap.content.chartrender import RenderSettings, chart_images
from airgap.content.helm import ChartSource, PoolFactory, chart_source, fetch_chart
from airgap.content.kinds import (
    ADDONS_DIR,
    KUBERNETES_NAME,
    ContentKind,
    ContentSpec,
    is_chart,
    is_manifest,
)
from airgap.content.kubesource import KubeadmSource, fetch_kubeadm_images
from airgap.content.templateimages import template_images
from airgap.core.errors import AirgapError, InputError, NotFoundError, utf8_text
from airgap.core.limits import MAX_RELEASE_FILE_BYTES
from airgap.providers.components import parse_components
from airgap.sources.forurl import source_for
from airgap.sources.releases import ReleaseSource
from airgap.sources.urlfile import URLFileSource


@dataclass(frozen=True)
class ContentRequest:
    """What to fetch: a kind, its name, a version (or ``latest``) and the source."""

    kind: ContentKind
    name: str
    version: str
    source: ReleaseSource
    # templates: the Kubernetes versions their clusters are rendered for
    kubernetes_versions: tuple[str, ...] = ()


@dataclass(frozen=True)
class FetchedContent:
    """Downloaded content; paths absolute, images normalised in first-seen order."""

    kind: ContentKind
    name: str
    version: str
    source: str
    files: list[Path]
    images: list[str]
    # images left to variables nobody defaults (templates), one line each
    unresolved: list[str] = field(default_factory=list)
    # charts: what was checked of each .prov carried (airgap.content.provenance)
    provenance: list[str] = field(default_factory=list)
    # charts: the render settings as the bundle records them (chartrender.RenderSettings)
    render: str | None = None


def request_for(
    spec: ContentSpec, client: httpx.Client, pools: PoolFactory | None = None
) -> ContentRequest:
    """The request a spec entry makes (cert-manager, the operator, addon manifests,
    charts; ``pools`` opens registry access for OCI charts)."""
    if spec.kind is ContentKind.CHARTS:
        assert spec.name is not None and spec.chart is not None, "the spec reader checked"
        return ContentRequest(
            spec.kind, spec.name, spec.version, chart_source(spec.chart, client, pools)
        )
    if spec.kind is ContentKind.MANIFESTS:
        assert spec.name is not None and spec.url is not None, "the spec reader checked"
        return ContentRequest(spec.kind, spec.name, spec.version, URLFileSource(spec.url, client))
    if spec.kind is ContentKind.KUBERNETES:
        kubeadm = KubeadmSource(spec.source_url, client, offline=spec.offline)
        return ContentRequest(spec.kind, KUBERNETES_NAME, spec.version, kubeadm)
    source = source_for(spec.source_url, client)
    name = spec.kind.fixed_name
    assert name is not None
    version = spec.version
    pinned = source.pinned_version
    if pinned is not None and pinned != version:
        if version not in ("latest", pinned) and pinned != "latest":
            raise InputError(
                f"{spec.kind.title}: version {version} conflicts with version {pinned} "
                f"in url {source.url}"
            )
        version = pinned if version == "latest" else version
    return ContentRequest(spec.kind, name, version, source)


def fetch_content(request: ContentRequest, dest_root: Path) -> FetchedContent | None:
    """Download ``request``'s files into ``dest_root/DIRECTORY/``; None when the kind
    takes nothing from this release (a provider release without templates)."""
    kind, source = request.kind, request.source
    if kind is ContentKind.MANIFESTS:
        return _fetch_addon(request, dest_root)
    if kind is ContentKind.CHARTS:
        return _fetch_chart(request, dest_root)
    if kind is ContentKind.KUBERNETES:
        assert isinstance(source, KubeadmSource)
        paths, found, origin = fetch_kubeadm_images(source, request.version, dest_root)
        return FetchedContent(kind, request.name, request.version, origin, paths, found)
    version = source.resolve_version(request.version)
    who = f"{kind.title} {version} from {source.url}"
    names = _select(kind, version, source, who)
    if not names:
        return None
    directory = (dest_root / kind.directory(request.name, version)).absolute()
    files: list[Path] = []
    for name, required in names:
        path = directory / name
        try:
            source.fetch(version, name, path)
        except NotFoundError:
            if required:
                raise
            continue
        files.append(path)
    if not files:
        return None
    images, unresolved = discover(kind, files, who, request.kubernetes_versions)
    return FetchedContent(kind, request.name, version, source.url, files, images, unresolved)


def _fetch_addon(request: ContentRequest, dest_root: Path) -> FetchedContent:
    """One addon manifest: downloaded first, then filed under the version its bytes
    decide (``sha256-`` and 16 hex digits), as ``NAME.yaml``."""
    name, source = request.name, request.source
    staging = (dest_root / ADDONS_DIR / f".{name}.download").absolute()
    partial = staging / f"{name}.yaml"
    try:
        source.fetch(request.version, partial.name, partial)
        digest = hashlib.sha256()
        with partial.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        version = f"sha256-{digest.hexdigest()[:16]}"
        path = (dest_root / request.kind.directory(name, version) / partial.name).absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.replace(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    who = f"manifest {name} from {source.url}"
    images, unresolved = discover(request.kind, [path], who)
    return FetchedContent(request.kind, name, version, source.url, [path], images, unresolved)


def _fetch_chart(request: ContentRequest, dest_root: Path) -> FetchedContent:
    """A chart and the dependencies it does not vendor, named and versioned as its
    Chart.yaml says; images as Helm renders the chart with the entry's values, then the
    entry's explicit ones."""
    source = request.source
    assert isinstance(source, ChartSource)
    name, version, fetched = fetch_chart(source, request.name, request.version, dest_root)
    who = f"chart {name} {version} from {source.url}"
    settings = source.location.render
    packages = [(_read_bytes(path), who) for path in fetched.files if is_chart(path.name)]
    images = chart_images(packages, settings, name)
    images += [image for image in source.location.images if image not in images]
    return FetchedContent(
        request.kind, name, version, source.url, fetched.files, images, [],
        fetched.provenance, settings.to_json(),
    )  # fmt: skip


def _select(
    kind: ContentKind, version: str, source: ReleaseSource, who: str
) -> list[tuple[str, bool]]:
    """``(file, required)`` pairs to fetch, in a stable order. A source that cannot
    list its files (a plain HTTP directory without an index page) gets every optional
    file tried, and no templates: their names cannot be guessed."""
    required = kind.required_files(version)
    optional = kind.optional_files(version)
    listing = source.list_files(version) if optional or not required else None
    if listing is not None:
        missing = [name for name in required if name not in listing]
        if missing:
            raise NotFoundError(
                f"{who}: the release has no {', '.join(missing)} "
                f"(files: {', '.join(listing) or 'none'})",
                404,
            )
        optional = [name for name in optional if name in listing]
    wanted = [(name, True) for name in required] + [(name, False) for name in optional]
    wanted += [(name, False) for name in kind.listed_files(listing or [])]
    return list(dict.fromkeys(wanted))


def discover(
    kind: ContentKind, files: Iterable[Path], who: str, kubernetes: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Images every file runs: manifests like components (templates leniently, for
    each carried Kubernetes version, node images and static Pods included: an image
    only a variable names is reported, not carried); a release's chart (the
    operator's) as Helm renders it with its defaults, the other charts beside it."""
    images: dict[str, None] = {}
    unresolved: list[str] = []
    charts = [(_read_bytes(path), f"{path.name} of {who}") for path in files if is_chart(path.name)]
    if charts:
        first, *_ = [read_chart(*chart, check_values=True) for chart in charts]
        name = first.name
        images.update(dict.fromkeys(chart_images(charts, RenderSettings(), name)))
    for path in files:
        origin = f"{path.name} of {who}"
        if is_manifest(path.name):
            text = utf8_text(_read_bytes(path), str(path))
            if kind is ContentKind.TEMPLATES:
                found, problems = template_images(text, origin, kubernetes)
                unresolved.extend(problems)
            else:
                found = parse_components(text, origin, unique=True).images
            images.update(dict.fromkeys(found))
    return list(images), unresolved


def _read_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        data = handle.read(MAX_RELEASE_FILE_BYTES + 1)
    if len(data) > MAX_RELEASE_FILE_BYTES:
        raise AirgapError(f"{path}: larger than {MAX_RELEASE_FILE_BYTES >> 20} MiB")
    return data
