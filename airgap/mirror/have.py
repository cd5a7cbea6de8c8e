"""``airgap status … --export-have FILE``: what the target holds of a bundle's images.

Every manifest and blob of every image is asked of the target repository the image
maps to (HEAD only: a blob the registry lost, a manifest garbage-collected, is not
listed), and the digests found are written per source repository (``airgap.oci.havelist``).
Carried back across the gap, the list lets ``collect --have`` leave out exactly what is
there, whatever happened on this side since the last import.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from airgap.core.parallel import run_parallel
from airgap.mirror.push import ImageTree
from airgap.oci.havelist import HaveList
from airgap.registry.client import Registry


def have_list(
    registry: Registry,
    trees: Sequence[ImageTree],
    *,
    created: str,
    bundle: str | None,
    concurrency: int = 8,
) -> HaveList:
    """The digests of ``trees`` the target holds, keyed by source repository."""
    asked: dict[tuple[str, str], bool] = {}  # (target repository, digest) -> is a manifest
    owners: dict[tuple[str, str], set[str]] = {}  # -> source repositories
    for tree in trees:
        repository = tree.mapping.target.repository
        pieces = [(m.digest, True) for m in tree.manifests]
        pieces += [(blob.digest, False) for blob in tree.blobs]
        for digest, is_manifest in pieces:
            asked.setdefault((repository, digest), is_manifest)
            owners.setdefault((repository, digest), set()).add(tree.mapping.source.name)
    keys = sorted(asked)
    jobs = [partial(_holds, registry, repo, digest, asked[(repo, digest)]) for repo, digest in keys]
    held: dict[str, set[str]] = {}
    for key, present in zip(keys, run_parallel(jobs, concurrency), strict=True):
        for source in owners[key] if present else ():
            held.setdefault(source, set()).add(key[1])
    return HaveList({name: frozenset(digests) for name, digests in held.items()}, created, bundle)


def _holds(registry: Registry, repository: str, digest: str, is_manifest: bool) -> bool:
    what = f"have-list: {repository}@{digest}"
    if is_manifest:
        return registry.manifest_digest(repository, digest, what=what) == digest
    return registry.blob_size(repository, digest, what=what) is not None
