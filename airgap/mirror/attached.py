"""Put what upstream attached to images next to their subjects in the target, where
cosign and OCI 1.1 clients look for it.

- cosign's tag schema (``via: tag``): the signature, attestation or SBOM manifest is
  pushed under the very tag it was found under (``sha256-HEX.sig|.att|.sbom``) in the
  subject's target repository; the digests do not change on import, so ``cosign
  verify`` against the mirror finds it where it looks.
- a manifest with ``subject`` (``via: referrers``) is pushed by digest. A target with
  the referrers API (``GET /v2/NAME/referrers/DIGEST`` answers an index) lists it by
  itself; for one without (Debian's docker-registry 2.8, for one), the referrers tag
  ``sha256-HEX`` gets an index with its descriptor (``artifactType`` and annotations
  from the manifest), merged with what the tag already lists, as the distribution spec
  asks of clients.
- buildx attestation manifests (``via: index``) are children of their image's index and
  are pushed with it.

Something attached to the source index a platform filter rewrote has no subject in
the target (the filtered index is a new manifest, and a registry refuses the source
index without all its children) and is not pushed: ``cosign verify MIRROR/IMAGE:TAG``
cannot succeed for such an image, and the report lists it
(``attached.indexSignatureNotInMirror``); its kept children verify by digest where
upstream signed them too (registry.k8s.io does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airgap.bundle.format import ArtifactRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError
from airgap.mirror.push import ImageTree, PushStats, load_tree
from airgap.oci.manifest import OCI_INDEX, Manifest
from airgap.oci.reference import Reference
from airgap.registry.client import Registry
from airgap.rewrite.mapping import Mapping
from airgap.supplychain.formats import Kind, Via, referrer_descriptor, referrers_tag
from airgap.verify.bundle import VerifiedBundle


@dataclass
class AttachedPlan:
    """The artifacts to push as trees, and which of them a referrers listing names."""

    trees: list[ImageTree] = field(default_factory=list)
    referrers: list[tuple[ImageTree, ArtifactRecord]] = field(default_factory=list)
    skipped: int = 0  # attached to a source index the target does not get
    unverifiable: list[str] = field(default_factory=list)  # images signed on that index
    api: bool | None = None  # whether the target has the referrers API (None: not asked)

    def report(self) -> dict[str, Any]:
        api = None if self.api is None else ("api" if self.api else "tag schema")
        report: dict[str, Any] = {
            "artifacts": len(self.trees),
            "skipped": self.skipped,
            "referrers": api,
        }
        if self.unverifiable:
            report["indexSignatureNotInMirror"] = self.unverifiable
        return report


def attached_trees(
    bundle: VerifiedBundle, manifest: BundleManifest, mappings: list[Mapping]
) -> AttachedPlan:
    """Every artifact of the bundle as pushed: its target repository and reference."""
    by_reference = {str(m.source): m for m in mappings}
    images = {image.reference: image for image in manifest.images}
    plan = AttachedPlan()
    seen: set[tuple[str, str]] = set()
    for artifact in manifest.artifacts:
        if artifact.via == Via.INDEX.value:
            continue  # a child of the image's index: pushed with it
        image = images[artifact.image]
        if artifact.subject == image.source_digest:
            plan.skipped += 1
            if artifact.kind == Kind.SIGNATURE.value and image.reference not in plan.unverifiable:
                plan.unverifiable.append(image.reference)
            continue
        mapping = by_reference[artifact.image]
        target = Reference(mapping.target.registry, mapping.target.repository, tag=artifact.tag)
        key = (target.repository, artifact.tag or artifact.digest)
        if key in seen:
            continue
        seen.add(key)
        tree = load_tree(
            bundle, Mapping(mapping.source, target), artifact.digest, artifact.media_type
        )
        plan.trees.append(tree)
        if artifact.via == Via.REFERRERS.value:
            plan.referrers.append((tree, artifact))
    return plan


def publish_referrers(registry: Registry, plan: AttachedPlan, stats: PushStats) -> None:
    """List the pushed referrers: nothing to do where the target has the referrers API,
    else the referrers tag of each subject gets their descriptors."""
    if not plan.referrers:
        return
    first, record = plan.referrers[0]
    what = f"image {first.mapping.target}"
    plan.api = registry.supports_referrers(
        first.mapping.target.repository, record.subject, what=what
    )
    if plan.api:
        return
    groups: dict[tuple[str, str], list[ImageTree]] = {}
    for tree, artifact in plan.referrers:
        groups.setdefault((tree.mapping.target.repository, artifact.subject), []).append(tree)
    for (repository, subject), trees in groups.items():
        if _update_tag(registry, repository, subject, trees):
            stats.add(manifests_pushed=1)


def _update_tag(registry: Registry, repository: str, subject: str, trees: list[ImageTree]) -> bool:
    """Add the trees' descriptors to the referrers tag of ``subject``; whether it changed."""
    tag = referrers_tag(subject)
    what = f"referrers of {registry.display_name}/{repository}@{subject}"
    current = registry.find_manifest(repository, tag, what=what)
    if current is not None and current.media_type != OCI_INDEX:
        raise AirgapError(
            f"{what}: the referrers tag {tag} holds a {current.media_type}, not an image index; "
            "leaving it alone"
        )
    entries: list[Any] = list(current.json.get("manifests", [])) if current is not None else []
    listed = {entry.get("digest") for entry in entries if isinstance(entry, dict)}
    added = [referrer_descriptor(tree.top) for tree in trees if tree.top.digest not in listed]
    if not added:
        return False
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries + added}
    data = json.dumps(index, separators=(",", ":")).encode()
    registry.put_manifest(repository, tag, Manifest.from_bytes(data, OCI_INDEX), what=what)
    return True
