"""Fetch one provider release: resolve source and version, download, check, list images.

This is where a spec entry becomes files on disk laid out the way clusterctl's local
repository expects (``providers/LABEL/VERSION/FILE``), so a bundle can be handed to
clusterctl on the far side without renaming anything. The contract check happens here,
before any image is copied, because a release without a contract for its own version is
one clusterctl will refuse to install.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from airgap.core import phases
from airgap.core.errors import AirgapError, InputError, utf8_text
from airgap.providers.components import parse_components
from airgap.providers.metadata import METADATA_FILE, parse_metadata
from airgap.providers.specs import ProviderImageInfo, ProviderSpec
from airgap.providers.types import ProviderType
from airgap.providers.wellknown import lookup, unknown_provider_message
from airgap.sources.forurl import source_for
from airgap.sources.releases import LATEST, ReleaseSource

PROVIDERS_DIR = "providers"


@dataclass(frozen=True)
class FetchedProvider:
    """A downloaded provider release; paths are absolute, images normalised."""

    name: str
    type: ProviderType
    version: str
    contract: str
    label: str
    source: str
    metadata_path: Path
    components_path: Path
    images: list[str]
    # where the release came from, to read more of its files (its cluster templates)
    release: ReleaseSource | None = field(default=None, compare=False, repr=False)
    # set for a provider read from its image's /capi-operator-manifests (imagesource)
    image_source: ProviderImageInfo | None = None
    # and each profile carried apart: profiles/NAME/metadata.yaml, manifests.yaml
    profile_files: tuple[Path, ...] = ()


def fetch_provider(spec: ProviderSpec, dest_root: Path, client: httpx.Client) -> FetchedProvider:
    """Download ``spec``'s release into ``dest_root/providers/LABEL/VERSION/``."""
    return read_release(download_release(spec, dest_root, client))


@dataclass(frozen=True)
class DownloadedRelease:
    """A release's files on disk, not read yet."""

    spec: ProviderSpec
    source: ReleaseSource
    version: str
    label: str
    components_file: str
    metadata_path: Path
    components_path: Path

    @property
    def who(self) -> str:
        return _who(self.spec)


def download_release(
    spec: ProviderSpec, dest_root: Path, client: httpx.Client
) -> DownloadedRelease:
    """Resolve ``spec``'s source and version and download its metadata and components:
    network only, so that several releases can download side by side."""
    who = _who(spec)
    known = lookup(spec.name, spec.type)
    url = spec.url or (known.url if known else None)
    if url is None:  # the spec reader refuses this first, with the line to fix
        raise InputError(unknown_provider_message(spec.name, spec.type))
    source = source_for(url, client)
    version = source.resolve_version(_requested_version(spec, source, who))
    # A built-in provider keeps its file name even from a user's mirror URL: the docker
    # provider's components are infrastructure-components-development.yaml everywhere.
    components_file = (
        spec.components_file
        or source.pinned_file
        or (known.components_file if known else spec.type.components_file)
    )
    label = spec.type.label(spec.name)
    directory = (dest_root / PROVIDERS_DIR / label / version).absolute()
    metadata_path = directory / METADATA_FILE
    components_path = directory / components_file
    # timed by the caller's "providers/fetch": releases download on worker threads
    source.fetch(version, METADATA_FILE, metadata_path)
    source.fetch(version, components_file, components_path)
    return DownloadedRelease(
        spec, source, version, label, components_file, metadata_path, components_path
    )


def read_release(release: DownloadedRelease) -> FetchedProvider:
    """Check a downloaded release's contract and list its components' images."""
    spec, source, version, who = release.spec, release.source, release.version, release.who
    with phases.timed("providers/parse"):
        metadata_origin = f"{METADATA_FILE} of {who} {version} from {source.url}"
        metadata = parse_metadata(_read(release.metadata_path), metadata_origin)
        try:
            contract = metadata.contract_for(version)
        except InputError as exc:
            raise InputError(f"{who}: version {version} from {source.url}: {exc}") from None
        if contract is None:
            raise AirgapError(
                f"{who} {version}: {METADATA_FILE} from {source.url} declares no contract "
                f"for release series {_series(version)} (it lists "
                f"{metadata.describe_series()})"
            )
        components = parse_components(
            _read(release.components_path),
            f"{release.components_file} of {who} {version} from {source.url}",
            unique=True,
        )
    return FetchedProvider(
        name=spec.name,
        type=spec.type,
        version=version,
        contract=contract,
        label=release.label,
        source=source.url,
        metadata_path=release.metadata_path,
        components_path=release.components_path,
        images=components.images,
        release=source,
    )


def _who(spec: ProviderSpec) -> str:
    """How messages name a spec entry."""
    return f"provider {spec.name} ({spec.type.kind})"


def _requested_version(spec: ProviderSpec, source: ReleaseSource, who: str) -> str:
    """The spec's version, reconciled with a version the URL itself names."""
    pinned = source.pinned_version
    if pinned is None or pinned == spec.version:
        return spec.version
    if spec.version == LATEST:
        return pinned
    if pinned == LATEST:
        return spec.version
    raise InputError(
        f"{who}: version {spec.version} conflicts with version {pinned} in url {source.url}"
    )


def _series(version: str) -> str:
    core = version.lstrip("v").split("-", 1)[0].split("+", 1)[0]
    return ".".join(core.split(".")[:2])


def _read(path: Path) -> str:
    return utf8_text(path.read_bytes(), str(path))
