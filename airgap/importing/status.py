"""The state of a mirror against a bundle, as ClusterOperator-style conditions.

``airgap status`` answers "can this registry serve everything this bundle carries?"
with the three conditions OpenShift's ClusterOperators report, each ``{type, status
("True"/"False"/"Unknown"), reason (CamelCase), message, lastTransitionTime}``. What it
asks about is everything import pushes (``Expected``): every image, what upstream
attached to them (signatures, attestations, SBOMs), every Helm chart, every provider's
manifests image and, with ``--provider-source oci``, every provider's OCI artifact;
those import builds are rebuilt from the bundle (the builders are reproducible), so
status needs nothing but the bundle and the registry.

- **Available**: every image and artifact is in the target by digest: its top manifest
  under the tag import pushes (or its digest), every child manifest and every blob;
- **Progressing**: some are missing while others, or some of their blobs, are there:
  an import was interrupted and running it again resumes it (it pushes only what is
  missing);
- **Degraded**: something that was there is not any more, or not what it was: a blob
  or child manifest gone (a registry garbage-collected it), a tag the registry lists
  but whose manifest it no longer serves, or a tag that names another digest than the
  bundle's. The message names each image or artifact and what it lacks.

The registry is only asked, never changed. A registry that cannot be asked makes all
three ``Unknown``. ``import`` puts the same conditions in ``import-report.json``, from
what it pushed and from the closure check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError, InputError
from airgap.core.parallel import run_parallel
from airgap.core.textfmt import plural, table
from airgap.formats import jsonsafe
from airgap.mirror.push import ImageTree
from airgap.oci.manifest import Descriptor, Manifest
from airgap.registry.client import Registry
from airgap.supplychain.formats import referrers_tag

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
COMPLETE, ABSENT, PARTIAL, DAMAGED, MOVED = "complete", "absent", "partial", "damaged", "moved"
MAX_NAMED = 5  # missing blobs named per image in a message
IMAGE = "image"
MAX_REPORT_BYTES = 16 << 20  # an earlier report (--previous): conditions, versions, counts
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@dataclass(frozen=True)
class Condition:
    """A ClusterOperator-style condition; its transition time stays unless its status
    changes, so watchers see real transitions."""

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
class Expected:
    """Something import puts in the target, as the bundle determines it: its manifests
    (children before their index) and blobs, the repository and the reference (a tag,
    else the top manifest's digest) it is pushed under. Images and what upstream
    attached to them come from the bundle as they are; charts, manifests images and OCI
    provider artifacts are rebuilt from it, byte for byte as import builds them."""

    kind: str  # image, chart, manifests image, provider artifact, signature, ...
    name: str  # how messages name it: the source image, or NAME:VERSION
    target: str  # HOST/REPOSITORY:TAG, or HOST/REPOSITORY@DIGEST
    repository: str
    reference: str
    manifests: tuple[Manifest, ...]
    blobs: tuple[Descriptor, ...]
    # a referrer (a manifest with ``subject``): the subject whose referrers list it
    subject: str | None = None

    @property
    def top(self) -> Manifest:
        return self.manifests[-1]


def from_tree(
    tree: ImageTree, kind: str = IMAGE, name: str | None = None, subject: str | None = None
) -> Expected:
    """An image (or an artifact attached to one) as its push tree has it."""
    target = tree.mapping.target
    shown = str(target) if target.tag or target.digest else f"{target}@{tree.top.digest}"
    return Expected(
        kind,
        name or str(tree.mapping.source),
        shown,
        target.repository,
        tree.reference,
        tuple(tree.manifests),
        tuple(tree.blobs),
        subject,
    )


def from_manifest(
    kind: str, name: str, host: str, repository: str, tag: str, manifest: Manifest
) -> Expected:
    """An artifact of one manifest (a chart, a manifests image, a provider artifact)."""
    shown = f"{host}/{repository}:{tag}"
    return Expected(kind, name, shown, repository, tag, (manifest,), tuple(manifest.blobs()))


@dataclass(frozen=True)
class ImageState:
    """One image or artifact of the bundle as the target holds it."""

    source: str  # an image's source reference; an artifact's name
    target: str
    state: str  # complete, absent, partial, damaged, moved
    detail: str = ""
    kind: str = IMAGE

    def to_json(self) -> dict[str, str]:
        found = {
            "source": self.source,
            "target": self.target,
            "state": self.state,
            "detail": self.detail,
        }
        return found if self.kind == IMAGE else {"kind": self.kind, **found}

    def describe(self) -> str:
        """How a message names it and what it lacks."""
        if self.kind == IMAGE:
            return f"{self.target} ({self.source}): {self.detail}"
        return f"{self.kind} {self.source} at {self.target}: {self.detail}"


@dataclass(frozen=True)
class Status:
    """Conditions, versions and per-image and per-artifact states of one mirror against
    one bundle."""

    conditions: list[Condition]
    versions: list[dict[str, str]]
    states: list[ImageState] = field(default_factory=list)

    def condition(self, kind: str) -> Condition:
        return next(c for c in self.conditions if c.type == kind)

    @property
    def healthy(self) -> bool:
        """Available and not Degraded: ``airgap status`` exits 0."""
        return self.condition("Available").status == TRUE and (
            self.condition("Degraded").status == FALSE
        )

    def to_json(self) -> dict[str, Any]:
        incomplete = [s for s in self.states if s.state != COMPLETE]
        return {
            "conditions": [c.to_json() for c in self.conditions],
            "versions": self.versions,
            "images": [s.to_json() for s in incomplete if s.kind == IMAGE],
            "artifacts": [s.to_json() for s in incomplete if s.kind != IMAGE],
        }


def now() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def previous_transitions(data: bytes, where: str) -> dict[str, tuple[str, str]]:
    """Condition type -> (status, lastTransitionTime) from an earlier report: an
    ``import-report.json`` or the output of ``status --format json``. Entries of another
    shape are skipped; a document without ``conditions`` is an error naming ``where``."""
    try:
        document = jsonsafe.loads(data, where, max_bytes=MAX_REPORT_BYTES, unique_keys=False)
    except jsonsafe.JSONShapeError as exc:  # the user's file: an input error, as a have-list's
        raise InputError(str(exc)) from None
    conditions = document.get("conditions") if isinstance(document, dict) else None
    if not isinstance(conditions, list):
        raise InputError(
            f"{where}: no conditions list (an import-report.json or status --format json)"
        )
    found: dict[str, tuple[str, str]] = {}
    for entry in conditions:
        if not isinstance(entry, dict):
            continue
        kind, status = entry.get("type"), entry.get("status")
        when = entry.get("lastTransitionTime")
        if (
            isinstance(kind, str)
            and isinstance(status, str)
            and isinstance(when, str)
            and _TIMESTAMP.fullmatch(when)
        ):
            found[kind] = (status, when)
    return found


def keep_transitions(
    conditions: Sequence[Condition], previous: Mapping[str, tuple[str, str]]
) -> list[Condition]:
    """The ClusterOperator convention: ``lastTransitionTime`` is when the status last
    changed, so a condition whose status is what the earlier report said keeps that
    report's time; the others (changed, or not reported before) get the check's."""
    return [
        replace(c, last_transition_time=previous[c.type][1])
        if c.type in previous and previous[c.type][0] == c.status
        else c
        for c in conditions
    ]


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
    registry: Registry, expected: Sequence[Expected], *, concurrency: int = 8
) -> list[ImageState]:
    """The state of every image and artifact in the target (HEAD requests only, and a
    tag listing for a tag whose manifest is not served)."""
    jobs = [partial(_probe_one, registry, item) for item in expected]
    return run_parallel(jobs, concurrency)


def _probe_one(registry: Registry, item: Expected) -> ImageState:
    repository, top, reference = item.repository, item.top, item.reference
    state = partial(ImageState, item.name, item.target, kind=item.kind)
    what = f"status of {item.target}"
    served = registry.manifest_digest(repository, reference, what=what)
    if served is not None and served != top.digest:
        return state(MOVED, f"tag {reference} names {served}, the bundle holds {top.digest}")
    missing = _missing(registry, item, what)
    if served is None:
        if reference != top.digest:
            if registry.manifest_digest(repository, top.digest, what=what):
                return state(DAMAGED, f"tag {reference} is missing")
            if registry.has_tag(repository, reference, what=what):
                # a push writes the manifest before its tag: a listed tag whose
                # manifest is not served is a loss, not an import still to come
                return state(
                    DAMAGED,
                    f"tag {reference} is listed but its manifest {top.digest} is not "
                    "served: manifest unknown",
                )
        parts = len(item.blobs) + len(item.manifests) - 1
        present = parts - len(missing)
        return state(PARTIAL if present else ABSENT, f"{present} of {parts} parts there")
    if missing:
        named = ", ".join(missing[:MAX_NAMED])
        more = f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
        return state(DAMAGED, f"missing {named}{more}")
    if item.subject is not None and not _listed(registry, item, item.subject, what):
        return state(
            DAMAGED,
            f"not listed among the referrers of {item.subject} (the referrers API, else "
            f"the referrers tag {referrers_tag(item.subject)}), where clients look for it",
        )
    return state(COMPLETE)


def _listed(registry: Registry, item: Expected, subject: str, what: str) -> bool:
    """Whether a referrer is listed for its subject: by the referrers API where the
    target has it, else in the referrers tag's index (what import keeps up there)."""
    listed = registry.get_referrers(item.repository, subject, what=what)
    if listed is None:
        index = registry.find_manifest(item.repository, referrers_tag(subject), what=what)
        listed = index.children() if index is not None and index.is_index else []
    return any(entry.digest == item.top.digest for entry in listed)


def _missing(registry: Registry, item: Expected, what: str) -> list[str]:
    """Child manifests and blobs of an image or artifact the target does not hold."""
    repository = item.repository
    missing = [
        f"manifest {m.digest}"
        for m in item.manifests[:-1]
        if registry.manifest_digest(repository, m.digest, what=what) is None
    ]
    missing += [
        f"blob {blob.digest}"
        for blob in item.blobs
        if registry.blob_size(repository, blob.digest, what=what) is None
    ]
    return missing


# --- conditions ------------------------------------------------------------------------------


def counted(images: int, artifacts: int) -> str:
    """``12 images and 7 artifacts``; the artifacts left out when there are none."""
    if not artifacts:
        return plural(images, "image")
    if not images:
        return plural(artifacts, "artifact")
    return f"{plural(images, 'image')} and {plural(artifacts, 'artifact')}"


def _counted(states: Sequence[ImageState]) -> str:
    images = sum(1 for s in states if s.kind == IMAGE)
    return counted(images, len(states) - images)


def _what(states: Sequence[ImageState]) -> str:
    """``Images`` when an image is among ``states``, else ``Artifacts`` (for reasons)."""
    return "Images" if any(s.kind == IMAGE for s in states) else "Artifacts"


def conditions_from(states: Sequence[ImageState], when: str) -> list[Condition]:
    """Available, Progressing and Degraded from the states of the images and artifacts."""
    total = len(states)
    by_state: dict[str, list[ImageState]] = {}
    for state in states:
        by_state.setdefault(state.state, []).append(state)
    complete = len(by_state.get(COMPLETE, []))
    missing = by_state.get(ABSENT, []) + by_state.get(PARTIAL, [])
    damaged = by_state.get(DAMAGED, []) + by_state.get(MOVED, [])
    something_there = complete or by_state.get(PARTIAL) or damaged
    everything = _counted(states)
    if complete == total:
        available = Condition(
            "Available", TRUE, "AllPresent", f"All {everything} present by digest", when
        )
    elif not something_there:
        available = Condition(
            "Available", FALSE, "NotImported", f"None of the {everything} is in the registry", when
        )
    else:
        available = Condition(
            "Available",
            FALSE,
            _what(damaged) + "Damaged" if damaged else _what(missing) + "Missing",
            f"{total - complete} of {total} not usable ({everything})",
            when,
        )
    if missing and something_there:
        progressing = Condition(
            "Progressing",
            TRUE,
            "ImportInterrupted",
            f"Import interrupted, {len(missing)} to go: run it again",
            when,
        )
    else:
        progressing = Condition("Progressing", FALSE, "AsExpected", "No import to resume", when)
    if damaged:
        moved = all(s.state == MOVED for s in damaged)
        degraded = Condition(
            "Degraded",
            TRUE,
            "TagsMoved" if moved else _what(damaged) + "Damaged",
            f"{_counted(damaged)} damaged in the registry (of {everything}): "
            + "; ".join(s.describe() for s in damaged),
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


def import_conditions(
    images: int, artifacts: int, dangling: Sequence[str], when: str
) -> list[Condition]:
    """The conditions an import that pushed everything reports: Available unless the
    closure check (every image and artifact pushed, and every reference of the written
    files, asked of the target by digest) found some that do not resolve (then Degraded
    names them)."""
    if not dangling:
        return [
            Condition(
                "Available",
                TRUE,
                "AllPresent",
                f"All {counted(images, artifacts)} present by digest",
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
    """The human report: the conditions, then every image or artifact not complete."""
    asked = status.states or status.condition("Available").status != UNKNOWN
    parts = [f"{bundle} against {target}: {_counted(status.states) if asked else 'not asked'}"]
    parts.append(
        table(
            ["CONDITION", "STATUS", "REASON", "MESSAGE"],
            [[c.type, c.status, c.reason, c.message] for c in status.conditions],
        )
    )
    incomplete = [item for item in status.states if item.state != COMPLETE]
    if incomplete:
        parts.append(
            table(
                ["KIND", "TARGET", "STATE", "DETAIL"],
                [[item.kind, item.target, item.state, item.detail] for item in incomplete],
            )
        )
    shown = ", ".join(f"{v['name']} {v['version']}" for v in status.versions)
    parts.append(f"Versions: {shown}")
    return "\n\n".join(parts)
