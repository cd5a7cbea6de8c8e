"""Every provider's components with its image references rewritten to the target,
computed from the bundle alone.

``configmaps`` calls the same functions as import without pushing, so the references it
emits are exactly those an import produces: the digests in the target equal the bundle's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airgap.bundle.format import ProviderRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core import phases
from airgap.core.errors import AirgapError, InputError, utf8_text
from airgap.rewrite.mapping import Mapping

if TYPE_CHECKING:
    from airgap.providers.components import Components
    from airgap.providers.imagesource import ProfileMetadata
    from airgap.verify.bundle import VerifiedBundle


@dataclass(frozen=True)
class RewrittenProfile:
    """One profile an image-based provider carries apart: its manifests rewritten as
    the components are, and its metadata.yaml as the image held it."""

    name: str
    manifests: str
    metadata: ProfileMetadata


@dataclass(frozen=True)
class RewrittenProvider:
    """A provider's components with every image pointed at the target, parsed once for
    the outputs built from it."""

    record: ProviderRecord
    components_name: str  # file name of the components file
    components: str  # rewritten text
    metadata: str
    parsed: Components  # the rewritten text, parsed once: images, containers, Namespace
    # each profile of an image-based provider, carried apart (none: a release provider,
    # or a bundle written before profiles were carried apart)
    profiles: tuple[RewrittenProfile, ...] = ()


def rewrite_providers(
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    *,
    pin: bool,
) -> list[RewrittenProvider]:
    """Each provider's components with every bundle image pointing at the target.

    The rewritten text is parsed once, here; everything built from the components later
    (the leftover check below, namespaces, ConfigMaps, CR image overrides) uses that."""
    with phases.timed("providers/rewrite"):
        return _rewrite_providers(bundle, manifest, mappings, pin=pin)


def _rewrite_providers(
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    *,
    pin: bool,
) -> list[RewrittenProvider]:
    # the YAML parser and the rewriter load here, not with the module: a re-import whose
    # outputs are there whole (importing.outputcache) loads the module but rewrites nothing
    from airgap.providers.components import parse_components
    from airgap.rewrite.references import rewrite_images

    digests = {image.reference: image.digest for image in manifest.images}
    by_source = {str(m.source): m for m in mappings}

    def lookup(source: str) -> str | None:
        mapping = by_source.get(source)
        if mapping is None:
            return None
        return mapping.pinned(digests[source]) if pin else str(mapping.target)

    targets = {str(m.target) for m in mappings} | {
        m.pinned(digests[str(m.source)]) for m in mappings
    }

    def rewritten_text(path: str) -> tuple[str, Components]:
        text = utf8_text(bundle.read(path), path, InputError)
        new_text, _ = rewrite_images(text, lookup)
        # verify parsed the bundle's text already: what fails here is the rewrite's
        parsed = parse_components(new_text, f"{path} (rewritten)")
        leftover = [i for i in parsed.images if i not in targets]
        if leftover:
            raise AirgapError(
                f"{path}: could not rewrite image {leftover[0]} "
                "(not in the bundle, or written in a YAML style airgap cannot edit in place)"
            )
        return new_text, parsed

    rewritten = []
    for record in manifest.providers:
        new_text, parsed = rewritten_text(record.components)
        profiles = _rewritten_profiles(bundle, record, rewritten_text)
        rewritten.append(
            RewrittenProvider(
                record,
                record.components.rsplit("/", 1)[1],
                new_text,
                utf8_text(bundle.read(record.metadata), record.metadata, InputError),
                parsed,
                profiles,
            )
        )
    return rewritten


def _rewritten_profiles(
    bundle: VerifiedBundle,
    record: ProviderRecord,
    rewritten_text: Callable[[str], tuple[str, Components]],
) -> tuple[RewrittenProfile, ...]:
    """The profiles an image-based provider carries apart (``profileFiles``: metadata
    then manifests, per profile), each rewritten; none for any other provider."""
    image = record.image
    if image is None or not image.profile_files:
        return ()
    from airgap.providers.imagesource import parse_profile_metadata

    files = image.profile_files
    profiles = []
    for name, metadata_path, manifests_path in zip(
        image.profiles, files[0::2], files[1::2], strict=True
    ):
        text = utf8_text(bundle.read(metadata_path), metadata_path, InputError)
        metadata = parse_profile_metadata(text, metadata_path)
        profiles.append(RewrittenProfile(name, rewritten_text(manifests_path)[0], metadata))
    return tuple(profiles)
