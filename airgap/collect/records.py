"""The bundle manifest's records of what collect fetched: providers, contents, images
and, for a delta, what the target already holds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from airgap.bundle.format import (
    ContentRecord,
    DeltaRecord,
    ImageRecord,
    NeedRecord,
    ProviderImageRecord,
    ProviderRecord,
)
from airgap.collect.base import Holdings
from airgap.collect.images import ResolvedImage
from airgap.collect.members import relative
from airgap.content.fetch import FetchedContent
from airgap.oci.reference import parse_reference
from airgap.providers.fetch import (
    FetchedProvider,
)

if TYPE_CHECKING:
    pass


def provider_record(provider: FetchedProvider, staging: Path) -> ProviderRecord:
    return ProviderRecord(
        name=provider.name,
        type=provider.type.kind,
        version=provider.version,
        contract=provider.contract,
        label=provider.label,
        source=provider.source,
        metadata=relative(provider.metadata_path, staging),
        components=relative(provider.components_path, staging),
        images=[str(parse_reference(image)) for image in provider.images],
        image=_provider_image_record(provider, staging),
    )


def _provider_image_record(provider: FetchedProvider, staging: Path) -> ProviderImageRecord | None:
    info = provider.image_source
    if info is None:
        return None
    return ProviderImageRecord(
        reference=info.reference,
        profiles=list(info.profiles),
        clusterctl_profile=info.clusterctl_profile,
        profile_files=[relative(path, staging) for path in provider.profile_files],
        name=info.name,
        install_order=info.install_order,
        attribute_type=info.attribute_type,
        attribute_version=info.attribute_version,
        ocp_platform=info.ocp_platform,
        self_image_ref=info.self_image_ref,
    )


MAX_CONTENT_WARNINGS = 200  # verify refuses more (verify.names)


def _one_line(text: str) -> str:
    """A warning as verify accepts it: printable, at most 1000 characters."""
    return "".join(c if c.isprintable() else "?" for c in text[:1000])


def content_record(content: FetchedContent, staging: Path) -> ContentRecord:
    return ContentRecord(
        kind=content.kind.value,
        name=content.name,
        version=content.version,
        source=content.source,
        files=[relative(path, staging) for path in content.files],
        images=[str(parse_reference(image)) for image in content.images],
        warnings=[_one_line(w) for w in content.unresolved[:MAX_CONTENT_WARNINGS]],
        provenance=list(content.provenance),
        render=content.render,
    )


def image_records(images: list[ResolvedImage], relied: set[str]) -> list[ImageRecord]:
    """One record per image; a platform is one string for all records that name it."""
    shared: dict[str, str] = {}
    return [_image_record(image, relied, shared) for image in images]


def _image_record(image: ResolvedImage, relied: set[str], shared: dict[str, str]) -> ImageRecord:
    return ImageRecord(
        reference=str(image.reference),
        digest=image.top.digest,
        media_type=image.top.media_type,
        platforms=[shared.setdefault(p, p) for p in image.platforms],
        size=image.size,
        source_digest=image.source_digest,
        kept_whole=image.kept_whole,
        needs=sorted(digest for digest in _pieces(image) if digest in relied),
    )


def _pieces(image: ResolvedImage) -> dict[str, tuple[int, str]]:
    """Every manifest and blob of an image: digest -> (size, media type)."""
    found = {blob.digest: (blob.size, blob.media_type) for blob in image.blobs()}
    found.update({m.digest: (m.size, m.media_type) for m in image.manifests})
    return found


def relied_digests(images: list[ResolvedImage], holdings: Holdings | None) -> set[str]:
    """What a delta leaves out: the manifests and blobs the far side holds under the
    source repository of an image that uses them (``collect.base``), where import will
    look for them. Nothing without ``--base``/``--have``."""
    if holdings is None:
        return set()
    relied: set[str] = set()
    for image in images:
        relied |= _pieces(image).keys() & holdings.held_for(image.reference.name)
    return relied


def delta_record(
    images: list[ResolvedImage], relied: set[str], holdings: Holdings | None
) -> DeltaRecord | None:
    """The base and have-list a delta was made against and every digest it relies on."""
    if holdings is None:
        return None
    pieces: dict[str, tuple[int, str]] = {}
    for image in images:
        pieces.update(_pieces(image))
    needs = [NeedRecord(d, *pieces[d]) for d in sorted(relied)]
    return DeltaRecord(needs, base=holdings.base, have_list=holdings.have_list)
