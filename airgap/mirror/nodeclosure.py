"""What the nodes of a workload cluster will pull, per carried Kubernetes version (pure).

Import's closure proof covers the files it writes; a workload cluster's nodes pull more:
kubeadm's images of the cluster's version and the images of its templates rendered for
that version (node image, static Pods in bootstrap files, workload containers). Nodes
pull them by their original references, through the node-mirror Component's
``hosts.toml`` (``mirror.workload``), which reaches exactly the bundle's images in the
target. So each such reference must be an image of the bundle (then its target
reference, pinned by the bundle's digest, is asked of the target like every other) or
already name the target; anything else is dangling: a node would ask a registry the
disconnected network cannot reach.
"""

from __future__ import annotations

from collections.abc import Iterable

from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import ContentKind, is_template_file
from airgap.content.templateimages import template_images
from airgap.core.errors import InputError
from airgap.oci.reference import parse_reference
from airgap.rewrite.mapping import Mapping


def node_references(
    manifest: BundleManifest, templates: Iterable[tuple[str, str]]
) -> dict[str, str]:
    """Original reference -> where it comes from, for every carried version: kubeadm's
    images, then each template's (``templates``: file name and rewritten text)."""
    found: dict[str, str] = {}
    texts = list(templates)
    for record in manifest.contents:
        if record.kind != ContentKind.KUBERNETES.value:
            continue
        where = f"workload clusters of Kubernetes {record.version}"
        for image in record.images:
            found.setdefault(image, f"{where} (kubeadm)")
        for name, text in texts:
            if not is_template_file(name):
                continue
            try:
                images, _unresolved = template_images(text, name, (record.version,))
            except InputError:
                continue  # verify read it already; a template airgap cannot read is reported there
            for image in images:
                found.setdefault(image, f"{where} ({name})")
    return found


def node_targets(
    references: dict[str, str], mappings: list[Mapping], digests: dict[str, str], target_host: str
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``(target reference -> where, [(reference, where)] with no way to the target)``:
    a bundle image through its mapping, pinned by the bundle's digest; a reference that
    names the target already as it is."""
    by_source = {str(m.source): m for m in mappings}
    found: dict[str, str] = {}
    unreachable: list[tuple[str, str]] = []
    for reference, where in references.items():
        mapping = by_source.get(str(parse_reference(reference)))
        if mapping is not None and str(mapping.source) in digests:
            found.setdefault(mapping.pinned(digests[str(mapping.source)]), where)
        elif parse_reference(reference).registry == target_host:
            found.setdefault(reference, where)
        else:
            unreachable.append((reference, where))
    return found, unreachable
