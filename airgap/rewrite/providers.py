"""Every provider's components with its image references rewritten to the target,
computed from the bundle alone.

``configmaps`` calls the same functions as import without pushing, so the references it
emits are exactly those an import produces: the digests in the target equal the bundle's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from airgap import phases
from airgap.bundle.format import BundleManifest, ProviderRecord
from airgap.errors import AirgapError, InputError, utf8_text
from airgap.rewrite.mapping import Mapping

if TYPE_CHECKING:
    from airgap.providers.components import Components
    from airgap.verify.bundle import VerifiedBundle


@dataclass(frozen=True)
class RewrittenProvider:
    """A provider's components with every image pointed at the target, parsed once for
    the outputs built from it."""

    record: ProviderRecord
    components_name: str  # file name of the components file
    components: str  # rewritten text
    metadata: str
    parsed: Components  # the rewritten text, parsed once: images, containers, Namespace


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
    rewritten = []
    for record in manifest.providers:
        text = utf8_text(bundle.read(record.components), record.components, InputError)
        new_text, _ = rewrite_images(text, lookup)
        # verify parsed the bundle's text already: what fails here is the rewrite's
        parsed = parse_components(new_text, f"{record.components} (rewritten)")
        leftover = [i for i in parsed.images if i not in targets]
        if leftover:
            raise AirgapError(
                f"{record.components}: could not rewrite image {leftover[0]} "
                "(not in the bundle, or written in a YAML style airgap cannot edit in place)"
            )
        rewritten.append(
            RewrittenProvider(
                record,
                record.components.rsplit("/", 1)[1],
                new_text,
                utf8_text(bundle.read(record.metadata), record.metadata, InputError),
                parsed,
            )
        )
    return rewritten
