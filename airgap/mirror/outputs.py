"""Everything import writes besides registry content, computed from the bundle alone.

``configmaps`` calls the same functions without pushing, so the references it emits are
exactly those an import produces: the digests in the target equal the bundle's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping as MappingType
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from airgap import fsutil, phases
from airgap.bundle.format import BundleManifest, ProviderRecord
from airgap.errors import AirgapError, InputError, utf8_text
from airgap.mirror.mapping import Mapping, Target

if TYPE_CHECKING:
    from airgap.providers.components import Components
    from airgap.verify.bundle import VerifiedBundle


@dataclass(frozen=True)
class RewrittenProvider:
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
    # outputs are there whole (mirror.outputcache) only writes its report through it
    from airgap.mirror.rewrite import rewrite_images
    from airgap.providers.components import parse_components

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
        parsed = parse_components(new_text, record.components)
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


def import_files(
    providers: list[RewrittenProvider],
    mappings: list[Mapping],
    target: Target,
    *,
    keep_registry: bool,
    ca_pem: bytes | None = None,
    plain_http: bool = False,
) -> dict[str, bytes]:
    """Relative path -> content of everything import writes (but the report)."""
    from airgap.mirror import nodeconfig  # only when building (see _rewrite_providers)

    files: dict[str, bytes] = {}
    for provider in providers:
        record = provider.record
        base = f"components/{record.label}/{record.version}"
        files[f"{base}/{provider.components_name}"] = provider.components.encode()
    by_source = {str(m.source): m for m in mappings}
    files["clusterctl-images.yaml"] = nodeconfig.clusterctl_images(
        {p.record.label: p.record.images for p in providers}, by_source
    ).encode()
    files |= nodeconfig.node_files(
        mappings, target, keep_registry, ca_pem=ca_pem, plain_http=plain_http
    )
    files["mirror/openshift/mirror-sets.yaml"] = nodeconfig.mirror_sets(
        mappings, target, keep_registry
    ).encode()
    files["mapping.txt"] = nodeconfig.mapping_txt(mappings).encode()
    return files


def json_bytes(document: object) -> bytes:
    return json.dumps(document, indent=2, sort_keys=False).encode() + b"\n"


def write_tree(output_dir: Path, files: MappingType[str, bytes]) -> None:
    """Write every file below ``output_dir``, all or nothing, never through a symbolic
    link and never outside it (``fsutil.write_tree``); ``SecretBytes`` contents
    (Secrets with filled variables or registry credentials) mode 0600, whatever the
    umask."""
    with phases.timed("providers/write"):  # nearly every byte written is provider output
        fsutil.write_tree(output_dir.absolute(), files)
