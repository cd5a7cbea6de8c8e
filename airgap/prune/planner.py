"""``airgap prune --keep BUNDLE… -o PLAN.json``: what under the prefix no kept bundle needs.

What the kept bundles need is what ``airgap status`` expects of them: every image's
manifests and blobs, what upstream attached, and the charts, manifests images and
provider artifacts import builds (``importer.expected_artifacts``), each in the
repository import pushes it to with the same options. The registry is then walked below
the prefix only (the catalog, each repository's tags, a HEAD per tag): a tag whose
manifest no kept bundle needs in that repository is planned for deletion, with the
manifests below it (an index's children) and the bytes that only those hold. Nothing
is changed here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import IMAGES_DIR
from airgap.collect.members import digest_of
from airgap.core.errors import AirgapError, InputError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_HAVE_LIST_BYTES
from airgap.core.parallel import run_parallel
from airgap.importing.model import ImportOptions, verified_mappings
from airgap.importing.status import from_tree
from airgap.importing.statuscommand import expected_artifacts
from airgap.importing.targetwork import image_trees
from airgap.oci.havelist import HaveList
from airgap.oci.manifest import Manifest
from airgap.oci.reference import parse_reference
from airgap.prune.planfile import Drop, PrunePlan, under
from airgap.registry.client import Registry
from airgap.rewrite.mapping import target_repository

BLOBS = f"{IMAGES_DIR}/blobs/"  # a bundle member under it is a blob, named by digest


@dataclass
class Kept:
    """What the kept bundles need: digests per repository, digests needed in whatever
    repository (a delta's children, which only the target knows the place of), and
    every blob and manifest they reference (what deleting anything else cannot free)."""

    by_repository: dict[str, set[str]] = field(default_factory=dict)
    anywhere: set[str] = field(default_factory=set)
    referenced: set[str] = field(default_factory=set)
    bundles: list[str] = field(default_factory=list)

    def needs(self, repository: str, digest: str) -> bool:
        return digest in self.anywhere or digest in self.by_repository.get(repository, ())

    def add(self, repository: str, digests: Iterable[str]) -> None:
        found = set(digests)
        self.by_repository.setdefault(repository, set()).update(found)
        self.referenced |= found


def kept_by(
    bundles: list[Path],
    haves: list[Path],
    keys: list[Ed25519PublicKey],
    options: ImportOptions,
) -> Kept:
    """What ``bundles`` (each verified with ``keys``: a plan is refused for a bundle whose
    signature does not verify) and ``haves`` need in the target."""
    kept = Kept()
    for path in bundles:
        bundle, mappings = verified_mappings(path, keys, options)
        manifest = bundle.require_verified()
        kept.bundles.append("sha256:" + hashlib.sha256(bundle.manifest_bytes).hexdigest())
        if manifest.delta is None:
            trees = image_trees(bundle, manifest, mappings)
            items = [from_tree(tree) for tree in trees]
        else:  # a delta's children are not all in it: its digests are kept anywhere
            items = []
            kept.anywhere |= {need.digest for need in manifest.delta.needs}
            kept.anywhere |= {digest_of(f.path) for f in manifest.files if f.path.startswith(BLOBS)}
            digests = {image.reference: image.digest for image in manifest.images}
            for mapping in mappings:
                kept.add(mapping.target.repository, [digests[str(mapping.source)]])
        items += expected_artifacts(bundle, manifest, mappings, options)
        for item in items:
            kept.add(item.repository, [m.digest for m in item.manifests])
            kept.referenced |= {blob.digest for blob in item.blobs}
        kept.referenced |= kept.anywhere
    for path in haves:
        listed = HaveList.from_bytes(
            read_small(path, MAX_HAVE_LIST_BYTES, "--keep-have"), str(path)
        )
        for name, held in listed.repositories.items():
            source = parse_reference(f"{name}:have")
            repository = target_repository(source, options.target, options.keep_registry)
            kept.add(repository, held)
    return kept


@dataclass(frozen=True)
class _Tagged:
    """A manifest some tags of a repository name, and what it and its children hold."""

    repository: str
    digest: str
    tags: tuple[str, ...]
    manifests: tuple[Manifest, ...]  # the top first, then its children


def make_plan(registry: Registry, options: ImportOptions, kept: Kept) -> PrunePlan:
    """Walk the prefix and plan what no kept bundle needs (nothing is changed)."""
    prefix = options.target.prefix
    what = f"registry {options.target}"
    catalog = registry.list_repositories(what=what)
    names = [name for name in catalog if under(name, prefix)]
    found = run_parallel(
        [partial(_unneeded, registry, name, kept) for name in sorted(names)],
        options.concurrency,
    )
    # what repositories beside the prefix reference is not freed either: read (never
    # changed) so that the sizes are what garbage collection frees
    outside = [name for name in catalog if not under(name, prefix)]
    referenced = run_parallel(
        [partial(_referenced, registry, name) for name in sorted(outside)], options.concurrency
    )
    unread = sorted(
        name for name, digests in zip(sorted(outside), referenced, strict=True) if digests is None
    )
    for digests in referenced:
        kept.referenced |= digests or set()
    freed: set[str] = set()  # blobs already counted for an earlier drop
    drops = []
    for tagged in (item for items in found for item in items):
        drops.append(_drop(tagged, kept, freed))
    created = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    by_repository = {
        name: frozenset(digests)
        for name, digests in kept.by_repository.items()
        if under(name, prefix)
    }
    return PrunePlan(
        str(options.target),
        created,
        tuple(kept.bundles),
        by_repository,
        tuple(drops),
        tuple(unread),
    )


def _referenced(registry: Registry, repository: str) -> set[str] | None:
    """Every manifest and blob the tags of a repository outside the prefix reference, or
    None when it cannot be read (credentials for the prefix only, say)."""
    what = f"repository {repository}"
    found: set[str] = set()
    try:
        for tag in registry.list_tags(repository, what=what):
            pending = [tag]
            while pending:
                manifest = registry.find_manifest(repository, pending.pop(), what=what)
                if manifest is None or manifest.digest in found:
                    continue
                found.add(manifest.digest)
                found |= {blob.digest for blob in manifest.blobs()}
                pending += [child.digest for child in manifest.children()]
    except AirgapError:
        return None
    return found


def _unneeded(registry: Registry, repository: str, kept: Kept) -> list[_Tagged]:
    """The manifests of ``repository`` that its tags name and no kept bundle needs."""
    what = f"repository {repository}"
    tags: dict[str, list[str]] = {}
    for tag in sorted(registry.list_tags(repository, what=what)):
        subject = attached_subject(tag)
        if subject is not None and kept.needs(repository, subject):
            continue  # a signature, attestation or referrers tag of a kept manifest
        digest = registry.manifest_digest(repository, tag, what=f"{what}:{tag}")
        if digest is not None and not kept.needs(repository, digest):
            tags.setdefault(digest, []).append(tag)
    found = []
    for digest, names in tags.items():
        top = registry.find_manifest(repository, digest, what=f"{what}@{digest}")
        if top is None:
            continue
        manifests = [top]
        for child in top.children():
            if kept.needs(repository, child.digest):
                continue
            fetched = registry.find_manifest(
                repository, child.digest, what=f"{what}@{child.digest}"
            )
            if fetched is not None:
                manifests.append(fetched)
        found.append(_Tagged(repository, digest, tuple(names), tuple(manifests)))
    return found


_ATTACHED_TAG = re.compile(r"(sha256|sha512)-([0-9a-f]{64}|[0-9a-f]{128})(\.[a-z]+)?")


def attached_subject(tag: str) -> str | None:
    """The digest a cosign tag (``sha256-HEX.sig``, ``.att``, ``.sbom``) or a referrers
    tag (``sha256-HEX``) attaches to, or None for any other tag."""
    matched = _ATTACHED_TAG.fullmatch(tag)
    return f"{matched.group(1)}:{matched.group(2)}" if matched else None


def _drop(tagged: _Tagged, kept: Kept, freed: set[str]) -> Drop:
    """A drop and the bytes it frees: its manifests, and the blobs no kept manifest
    references and no earlier drop counted."""
    size = 0
    for manifest in tagged.manifests:  # a manifest is a blob of the store too
        pieces = [(manifest.digest, len(manifest.data))]
        pieces += [(blob.digest, blob.size) for blob in manifest.blobs()]
        for digest, length in pieces:
            if digest not in kept.referenced and digest not in freed:
                freed.add(digest)
                size += length
    return Drop(
        tagged.repository,
        tagged.digest,
        tagged.tags,
        tuple(m.digest for m in tagged.manifests),
        size,
    )


def check_prefix(options: ImportOptions) -> None:
    """Prune only ever works below a prefix: a whole registry is not airgap's."""
    if not options.target.prefix:
        raise InputError(
            f"--registry {options.target}: prune needs HOST/PREFIX, the prefix imports "
            "pushed to (it never considers anything outside it)"
        )
