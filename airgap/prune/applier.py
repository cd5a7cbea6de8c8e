"""``airgap prune --apply PLAN.json``: delete exactly the plan's manifests, re-checked.

Each repository's tags are asked again first. A drop whose tag moved since the plan (it
names another manifest now: a re-push) is skipped and reported, and so is a manifest
that a kept bundle needs or that a tag outside the plan names now (or an index such a
tag names holds). The rest are deleted by digest, an index before its children; then
each planned tag still naming the planned manifest is deleted by name where the
registry deletes tags (distribution drops a manifest's tags with it). Blobs are never
deleted: the registry's garbage collection frees what no manifest references.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airgap.core.errors import HTTPStatusError
from airgap.prune.planfile import Drop, PrunePlan
from airgap.registry.client import Registry


@dataclass
class Applied:
    deleted: list[str] = field(default_factory=list)  # REPOSITORY@DIGEST
    tags_deleted: list[str] = field(default_factory=list)  # REPOSITORY:TAG
    skipped: list[str] = field(default_factory=list)  # one line each: what and why
    gone: list[str] = field(default_factory=list)  # already not there
    freed: int = 0  # the plan's bytes of the drops applied


def apply_plan(registry: Registry, plan: PrunePlan) -> Applied:
    applied = Applied()
    by_repository: dict[str, list[Drop]] = {}
    for drop in plan.drops:
        by_repository.setdefault(drop.repository, []).append(drop)
    for repository, drops in sorted(by_repository.items()):
        _apply_repository(registry, plan, repository, drops, applied)
    return applied


def _apply_repository(
    registry: Registry, plan: PrunePlan, repository: str, drops: list[Drop], applied: Applied
) -> None:
    what = f"repository {repository}"
    now = {
        tag: registry.manifest_digest(repository, tag, what=f"{what}:{tag}")
        for tag in registry.list_tags(repository, what=what)
    }
    planned = {(tag, drop.digest) for drop in drops for tag in drop.tags}
    protected = set(plan.kept.get(repository, frozenset()))
    for tag, digest in now.items():
        if digest is not None and (tag, digest) not in planned:
            protected.add(digest)  # named by a tag outside the plan (moved, or new)
            top = registry.find_manifest(repository, digest, what=f"{what}:{tag}")
            protected |= {child.digest for child in top.children()} if top else set()
    for drop in drops:
        moved = [
            f"{tag} now names {now[tag]}"
            for tag in drop.tags
            if now.get(tag) not in (None, drop.digest)
        ]
        if moved:
            applied.skipped.append(
                f"{repository}@{drop.digest}: skipped, its tag moved since the plan "
                f"({'; '.join(moved)})"
            )
            continue
        if drop.digest in protected:
            applied.skipped.append(
                f"{repository}@{drop.digest}: skipped, a kept bundle or a tag outside the "
                "plan names it now"
            )
            continue
        _delete(registry, repository, drop, protected, applied)
        _delete_tags(registry, repository, drop, applied)
        applied.freed += drop.size


def _delete(
    registry: Registry, repository: str, drop: Drop, protected: set[str], applied: Applied
) -> None:
    for digest in drop.manifests:
        name = f"{repository}@{digest}"
        if digest in protected:
            applied.skipped.append(f"{name}: kept, something kept or tagged now holds it")
            continue
        try:
            deleted = registry.delete_manifest(repository, digest, what=f"prune {name}")
        except HTTPStatusError as exc:  # refused (an immutable tag, a policy): go on
            applied.skipped.append(f"{name}: the registry refused to delete it ({exc})")
            continue
        (applied.deleted if deleted else applied.gone).append(name)


def _delete_tags(registry: Registry, repository: str, drop: Drop, applied: Applied) -> None:
    """The planned tags a digest's deletion left (distribution takes them with it)."""
    for tag in drop.tags:
        name = f"{repository}:{tag}"
        if registry.manifest_digest(repository, tag, what=name) != drop.digest:
            continue
        try:
            if registry.delete_manifest(repository, tag, what=f"prune {name}"):
                applied.tags_deleted.append(name)
        except HTTPStatusError as exc:
            applied.skipped.append(f"{name}: left, the registry does not delete tags ({exc})")
