"""A delta bundle's needs, found in the target before anything is pushed.

A delta (``collect --base/--have``) leaves out the manifests and blobs the far side
already held; each is listed in the signed manifest with its size and media type, and
under every image whose tree holds it. Before import pushes a byte it asks the target
for each one (HEAD only): in the target repository of an image that relies on it, else
in another such repository (a blob then mounts across, a manifest is copied), else where
an earlier import left it (the blob index). If any is nowhere, the import fails naming
every image that lacks something, and nothing has been pushed.

Once all are found, the manifests the bundle does not carry are read from the target
(by digest: the bytes are checked against the signed digest), so every image's tree is
whole again and the push, its confirmation and the closure check run as for a whole
bundle; what the bundle does not carry is never uploaded, only found or mounted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from airgap.bundle.format import NeedRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core.parallel import run_parallel
from airgap.core.textfmt import short_digest
from airgap.mirror.blobindex import BlobIndex
from airgap.oci.manifest import MANIFEST_TYPES, Manifest
from airgap.registry.client import Registry
from airgap.rewrite.mapping import Mapping as ImageMapping

MAX_NAMED_IMAGES = 20  # images named in the one-line error before "and N more"


@dataclass(frozen=True)
class Supply:
    """Where the target holds each digest a delta relies on, and what it lacks."""

    holders: dict[str, str] = field(default_factory=dict)  # digest -> target repository
    missing: dict[str, list[str]] = field(default_factory=dict)  # image -> digests lacked
    manifests: dict[str, Manifest] = field(default_factory=dict)  # read from the target

    @property
    def complete(self) -> bool:
        return not self.missing


def is_manifest(need: NeedRecord) -> bool:
    return need.media_type in MANIFEST_TYPES


def locate(
    registry: Registry,
    manifest: BundleManifest,
    mappings: list[ImageMapping],
    index: BlobIndex | None,
    *,
    concurrency: int = 8,
) -> Supply:
    """Ask the target for every digest ``manifest`` relies on (HEAD requests only)."""
    needs = {need.digest: need for need in manifest.needs}
    repository = {str(m.source): m.target.repository for m in mappings}
    candidates: dict[str, list[str]] = {}
    for image in manifest.images:
        for digest in image.needs:
            repos = candidates.setdefault(digest, [])
            if repository[image.reference] not in repos:
                repos.append(repository[image.reference])
    order = sorted(candidates)
    jobs = [partial(_find, registry, needs[d], candidates[d], index) for d in order]
    found = dict(zip(order, run_parallel(jobs, concurrency), strict=True))
    holders = {digest: holder for digest, holder in found.items() if holder}
    missing: dict[str, list[str]] = {}
    for image in manifest.images:
        lacked = [digest for digest in image.needs if digest not in holders]
        if lacked:
            missing[image.reference] = lacked
    return Supply(holders, missing)


def _find(
    registry: Registry, need: NeedRecord, repositories: list[str], index: BlobIndex | None
) -> str | None:
    """The first repository holding ``need``: those of the images relying on it, then
    (blobs) the ones an earlier import left it in."""
    what = f"{'manifest' if is_manifest(need) else 'blob'} {need.digest} (relied on)"
    asked = list(repositories)
    if index is not None and not is_manifest(need):
        asked += [r for r in index.holders(need.digest) if r not in asked]
    for repository in asked:
        if is_manifest(need):
            if registry.manifest_digest(repository, need.digest, what=what) == need.digest:
                return repository
        elif registry.blob_size(repository, need.digest, what=what) is not None:
            return repository
    return None


def read_manifests(
    registry: Registry, manifest: BundleManifest, supply: Supply, *, concurrency: int = 8
) -> Supply:
    """``supply`` with the relied-on manifests read from where the target holds them
    (each checked against its digest by the client)."""
    wanted = sorted(
        need.digest
        for need in manifest.needs
        if is_manifest(need) and need.digest in supply.holders
    )
    jobs = [
        partial(
            registry.get_manifest,
            supply.holders[digest],
            digest,
            what=f"manifest {digest} (relied on)",
        )
        for digest in wanted
    ]
    fetched = dict(zip(wanted, run_parallel(jobs, concurrency), strict=True))
    return Supply(supply.holders, supply.missing, fetched)


def describe_missing(supply: Supply, manifest: BundleManifest, bundle: str, target: str) -> str:
    """One line: the bundle is a delta, the target lacks what these images rely on."""
    delta = manifest.delta
    against = []
    if delta is not None and delta.base:
        against.append(f"base {short_digest(delta.base)}")
    if delta is not None and delta.have_list:
        against.append("a have-list")
    images = [
        f"{reference} ({len(lacked)} of {_count(manifest, reference)} missing, e.g. "
        f"{short_digest(lacked[0])})"
        for reference, lacked in supply.missing.items()
    ]
    more = len(images) - MAX_NAMED_IMAGES
    shown = "; ".join(images[:MAX_NAMED_IMAGES]) + (f"; and {more} more" if more > 0 else "")
    return (
        f"{bundle} is a delta bundle (made against {' and '.join(against) or 'nothing'}) and "
        f"{target} lacks what {len(images)} of its images rely on: {shown}; import the base "
        "bundle first, or collect a whole bundle (nothing was pushed)"
    )


def _count(manifest: BundleManifest, reference: str) -> int:
    return next(len(i.needs) for i in manifest.images if i.reference == reference)
