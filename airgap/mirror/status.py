"""The state of a mirror against a bundle, as ClusterOperator-style conditions.

``airgap status`` answers "can this registry serve everything this bundle carries?"
with the three conditions OpenShift's ClusterOperators report, each ``{type, status
("True"/"False"/"Unknown"), reason (CamelCase), message, lastTransitionTime}``:

- **Available**: every image of the bundle is in the target by digest: its top manifest
  under the tag import pushes (or its digest), every child manifest and every blob;
- **Progressing**: some images are missing while others, or some of their blobs, are
  there: an import was interrupted and running it again resumes it (it pushes only
  what is missing);
- **Degraded**: something that was there is not any more, or not what it was: a blob
  or child manifest gone (a registry garbage-collected it), or a tag that names
  another digest than the bundle's. The message names each image and what it lacks.

The registry is only asked, never changed. A registry that cannot be asked makes all
three ``Unknown``. ``import`` puts the same conditions in ``import-report.json``, from
what it pushed and from the closure check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from airgap.bundle.format import BundleManifest
from airgap.errors import AirgapError
from airgap.mirror.mapping import Mapping
from airgap.mirror.push import ImageTree
from airgap.parallel import run_parallel
from airgap.registry.client import Registry
from airgap.textfmt import table

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
COMPLETE, ABSENT, PARTIAL, DAMAGED, MOVED = "complete", "absent", "partial", "damaged", "moved"
MAX_NAMED = 5  # missing blobs named per image in a message


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str

    def to_json(self) -> dict[str, str]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
        }


@dataclass(frozen=True)
class ImageState:
    """One image of the bundle as the target holds it."""

    source: str
    target: str
    state: str  # complete, absent, partial, damaged, moved
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "source": self.source,
            "target": self.target,
            "state": self.state,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Status:
    """Conditions, versions and per-image states of one mirror against one bundle."""

    conditions: list[Condition]
    versions: list[dict[str, str]]
    images: list[ImageState] = field(default_factory=list)

    def condition(self, kind: str) -> Condition:
        return next(c for c in self.conditions if c.type == kind)

    @property
    def healthy(self) -> bool:
        """Available and not Degraded: ``airgap status`` exits 0."""
        return self.condition("Available").status == TRUE and (
            self.condition("Degraded").status == FALSE
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "conditions": [c.to_json() for c in self.conditions],
            "versions": self.versions,
            "images": [i.to_json() for i in self.images if i.state != COMPLETE],
        }


def now() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def versions(manifest: BundleManifest) -> list[dict[str, str]]:
    """ClusterOperator ``versions``: the bundle (its creation time), the tool that made
    it, each provider (by clusterctl label) and each content set."""
    result = [
        {"name": "bundle", "version": manifest.created},
        {"name": "airgap", "version": manifest.tool_version},
    ]
    result += [{"name": p.label, "version": p.version} for p in manifest.providers]
    result += [{"name": f"{c.kind}/{c.name}", "version": c.version} for c in manifest.contents]
    return result


# --- probing the registry ---------------------------------------------------------------


def probe(
    registry: Registry, trees: Sequence[ImageTree], *, concurrency: int = 8
) -> list[ImageState]:
    """The state of every image tree in the target (HEAD requests only)."""
    jobs = [partial(_probe_one, registry, tree) for tree in trees]
    return run_parallel(jobs, concurrency)


def _probe_one(registry: Registry, tree: ImageTree) -> ImageState:
    mapping: Mapping = tree.mapping
    target = mapping.target
    repository, top = target.repository, tree.top
    source, shown = str(mapping.source), str(target)
    what = f"status of {shown}"
    served = registry.manifest_digest(repository, tree.reference, what=what)
    if served is not None and served != top.digest:
        return ImageState(
            source,
            shown,
            MOVED,
            f"tag {tree.reference} names {served}, the bundle holds {top.digest}",
        )
    missing = _missing(registry, tree, what)
    if served is None:
        if tree.reference != top.digest and registry.manifest_digest(
            repository, top.digest, what=what
        ):
            return ImageState(source, shown, DAMAGED, f"tag {tree.reference} is missing")
        present = len(tree.blobs) + len(tree.manifests) - 1 - len(missing)
        return ImageState(
            source,
            shown,
            PARTIAL if present else ABSENT,
            f"{present} of {len(tree.blobs) + len(tree.manifests) - 1} parts there",
        )
    if missing:
        named = ", ".join(missing[:MAX_NAMED])
        more = f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
        return ImageState(source, shown, DAMAGED, f"missing {named}{more}")
    return ImageState(source, shown, COMPLETE)


def _missing(registry: Registry, tree: ImageTree, what: str) -> list[str]:
    """Child manifests and blobs of an image the target does not hold."""
    repository = tree.mapping.target.repository
    missing = [
        f"manifest {m.digest}"
        for m in tree.manifests[:-1]
        if registry.manifest_digest(repository, m.digest, what=what) is None
    ]
    missing += [
        f"blob {blob.digest}"
        for blob in tree.blobs
        if registry.blob_size(repository, blob.digest, what=what) is None
    ]
    return missing


# --- conditions ------------------------------------------------------------------------------


def conditions_from(states: Sequence[ImageState], when: str) -> list[Condition]:
    """Available, Progressing and Degraded from the images' states."""
    total = len(states)
    by_state: dict[str, list[ImageState]] = {}
    for state in states:
        by_state.setdefault(state.state, []).append(state)
    complete = len(by_state.get(COMPLETE, []))
    missing = by_state.get(ABSENT, []) + by_state.get(PARTIAL, [])
    damaged = by_state.get(DAMAGED, []) + by_state.get(MOVED, [])
    something_there = complete or by_state.get(PARTIAL) or damaged
    if complete == total:
        available = Condition(
            "Available", TRUE, "AllImagesPresent", f"All {total} images present by digest", when
        )
    elif not something_there:
        available = Condition(
            "Available",
            FALSE,
            "NotImported",
            f"None of the {total} images is in the registry",
            when,
        )
    else:
        available = Condition(
            "Available",
            FALSE,
            "ImagesDamaged" if damaged else "ImagesMissing",
            f"{total - complete} of {total} images not usable",
            when,
        )
    if missing and something_there:
        progressing = Condition(
            "Progressing",
            TRUE,
            "ImportInterrupted",
            f"Import interrupted, {len(missing)} images to go: run it again",
            when,
        )
    else:
        progressing = Condition("Progressing", FALSE, "AsExpected", "No import to resume", when)
    if damaged:
        reason = "TagsMoved" if all(s.state == MOVED for s in damaged) else "ImagesDamaged"
        detail = "; ".join(f"{s.target} ({s.source}): {s.detail}" for s in damaged)
        degraded = Condition(
            "Degraded",
            TRUE,
            reason,
            f"{len(damaged)} of {total} images damaged in the registry: {detail}",
            when,
        )
    else:
        degraded = Condition("Degraded", FALSE, "AsExpected", "", when)
    return [available, progressing, degraded]


def unknown(error: AirgapError, when: str) -> list[Condition]:
    """All three Unknown: the registry could not be asked."""
    message = f"Cannot check the registry: {error}"
    return [
        Condition(kind, UNKNOWN, "RegistryUnreachable", message, when)
        for kind in ("Available", "Progressing", "Degraded")
    ]


def import_conditions(images: int, dangling: Sequence[str], when: str) -> list[Condition]:
    """The conditions an import that pushed everything reports: Available unless the
    closure check found references that do not resolve (then Degraded names them)."""
    if not dangling:
        return [
            Condition(
                "Available",
                TRUE,
                "AllImagesPresent",
                f"All {images} images present by digest",
                when,
            ),
            Condition("Progressing", FALSE, "AsExpected", "Import complete", when),
            Condition("Degraded", FALSE, "AsExpected", "", when),
        ]
    return [
        Condition(
            "Available",
            FALSE,
            "DanglingReferences",
            f"{len(dangling)} references in the output do not resolve",
            when,
        ),
        Condition("Progressing", FALSE, "AsExpected", "Import complete", when),
        Condition(
            "Degraded",
            TRUE,
            "DanglingReferences",
            "References that do not resolve by digest in the target: " + "; ".join(dangling),
            when,
        ),
    ]


def status_text(status: Status, bundle: str, target: str) -> str:
    """The human report: the conditions, then every image that is not complete."""
    parts = [f"{bundle} against {target}: {len(status.images)} images"]
    parts.append(
        table(
            ["CONDITION", "STATUS", "REASON", "MESSAGE"],
            [[c.type, c.status, c.reason, c.message] for c in status.conditions],
        )
    )
    incomplete = [image for image in status.images if image.state != COMPLETE]
    if incomplete:
        parts.append(
            table(
                ["IMAGE", "STATE", "DETAIL"],
                [[image.target, image.state, image.detail] for image in incomplete],
            )
        )
    shown = ", ".join(f"{v['name']} {v['version']}" for v in status.versions)
    parts.append(f"Versions: {shown}")
    return "\n\n".join(parts)
