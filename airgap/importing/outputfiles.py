"""Everything import writes into ``--output-dir`` besides the operator's objects: the
rewritten components, node mirror configurations and the image mapping, and the writer
that puts a tree of outputs down all or nothing."""

from __future__ import annotations

import json
from collections.abc import Collection
from collections.abc import Mapping as MappingType
from pathlib import Path
from typing import Any

from airgap.content.kinds import ContentKind
from airgap.core import fsutil, phases
from airgap.core.space import Need, check_space
from airgap.importing import outputlisting
from airgap.importing.outputlisting import IMPORT, OPERATOR
from airgap.rewrite.contents import RewrittenContent
from airgap.rewrite.mapping import Mapping, Target
from airgap.rewrite.providers import RewrittenProvider

BLOCK = 4096  # a filesystem block: what the smallest file takes


def import_files(
    providers: list[RewrittenProvider],
    mappings: list[Mapping],
    target: Target,
    *,
    keep_registry: bool,
    ca_pem: bytes | None = None,
    plain_http: bool = False,
    contents: Collection[RewrittenContent] = (),
) -> dict[str, bytes]:
    """Relative path -> content of these files (the operator's objects and the report
    are built elsewhere)."""
    from airgap.mirror import nodeconfig, workload  # only when building

    files: dict[str, bytes] = {}
    for provider in providers:
        record = provider.record
        base = f"components/{record.label}/{record.version}"
        files[f"{base}/{provider.components_name}"] = provider.components.encode()
    by_source = {str(m.source): m for m in mappings}
    files["clusterctl-images.yaml"] = nodeconfig.clusterctl_images(
        {p.record.label: p.record.images for p in providers}, by_source
    ).encode()
    node = nodeconfig.node_files(
        mappings, target, keep_registry, ca_pem=ca_pem, plain_http=plain_http
    )
    files |= node
    files |= workload.component_files(node, _cluster_classes(contents))
    kubeadm = [
        image
        for content in contents
        if content.kind is ContentKind.KUBERNETES
        for image in content.record.images
    ]
    targets = {m.source.name: m.target.name for m in mappings}
    repository = workload.image_repository(kubeadm, targets) if kubeadm else None
    if repository is not None:
        files |= workload.image_repository_files(repository)
    files["mirror/openshift/mirror-sets.yaml"] = nodeconfig.mirror_sets(
        mappings, target, keep_registry
    ).encode()
    files["mapping.txt"] = nodeconfig.mapping_txt(mappings).encode()
    return files


def _cluster_classes(contents: Collection[RewrittenContent]) -> list[dict[str, Any]]:
    """The ClusterClasses of the carried templates (``clusterclass*.yaml``)."""
    from airgap.formats.yamlload import iter_documents

    classes: list[dict[str, Any]] = []
    for content in contents:
        if content.kind is not ContentKind.TEMPLATES:
            continue
        for name, data in content.files.items():
            if not name.startswith("clusterclass"):
                continue
            for document in iter_documents(data.decode(), name, kinds=frozenset({"ClusterClass"})):
                if isinstance(document, dict) and isinstance(document.get("metadata"), dict):
                    classes.append(document)
    return classes


def json_bytes(document: object) -> bytes:
    return json.dumps(document, indent=2, sort_keys=False).encode() + b"\n"


def write_outputs(
    output_dir: Path,
    files: MappingType[str, bytes],
    *,
    operator: Collection[str],
    replaced: Collection[str],
) -> None:
    """``write_tree``, listing every file with its part (those in ``operator`` the
    operator's, the rest import's), then removing what an earlier write of the parts
    ``replaced`` left that this one does not write (``outputlisting``)."""
    # the tree is written beside the old one, then renamed into place: refused whole
    # when its filesystem cannot hold it, rather than half-written
    check_space([Need(nearest_directory(output_dir), tree_size(files), "the outputs")])
    written = {name: OPERATOR if name in operator else IMPORT for name in files}
    listing, stale = outputlisting.plan(outputlisting.read(output_dir), written, replaced)
    listed = outputlisting.listing_bytes({**listing, **stale})
    write_tree(output_dir, {**files, outputlisting.LISTING: listed})
    outputlisting.prune(output_dir, listing, stale)


def tree_size(files: MappingType[str, bytes]) -> int:
    """What ``files`` take on disk: each rounded up to a 4 KiB block."""
    return sum(-(-len(data) // BLOCK) * BLOCK for data in files.values()) + BLOCK


def nearest_directory(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists: where it will be created."""
    path = path.absolute()
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def write_tree(output_dir: Path, files: MappingType[str, bytes]) -> None:
    """Write every file below ``output_dir``, all or nothing, never through a symbolic
    link and never outside it (``fsutil.write_tree``); ``SecretBytes`` contents
    (Secrets with filled variables or registry credentials) mode 0600, whatever the
    umask."""
    with phases.timed("providers/write"):  # nearly every byte written is provider output
        fsutil.write_tree(output_dir.absolute(), files)
