"""``airgap diff OLD NEW``: what changed between two bundles, from their manifests alone.

Everything a diff needs is in the signed manifests: providers with their versions and
contracts, content sets, images with their digests, and every blob of the layout (the
members it carries, and for a delta, the needs it relies on), each with its size. So a
diff reads two heads however large the bundles are, split or whole, delta or not, and
never hashes a blob. Pure: manifests in, a ``BundleDiff`` out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airgap.bundle.format import IMAGES_DIR
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import InputError
from airgap.core.textfmt import TABLE_WIDTH, human_size, plural, printable, short_digest, table
from airgap.oci.reference import parse_reference
from airgap.sources.semver import try_parse

ADDED, REMOVED, UPGRADED, DOWNGRADED, CHANGED = (
    "added",
    "removed",
    "upgraded",
    "downgraded",
    "changed",
)
_BLOB_PREFIX = f"{IMAGES_DIR}/blobs/"


@dataclass(frozen=True)
class Side:
    """One of the two bundles: where it is, its manifest digest and who signed it."""

    name: str
    digest: str  # sha256 of the signed manifest bytes
    manifest: BundleManifest
    signer: str | None = None

    def to_json(self) -> dict[str, Any]:
        manifest = self.manifest
        return {
            "bundle": self.name,
            "manifest": self.digest,
            "created": manifest.created,
            "signer": self.signer,
            "providers": len(manifest.providers),
            "images": len(manifest.images),
            "size": manifest.total_size,
            "delta": manifest.delta is not None,
        }


@dataclass(frozen=True)
class VersionChange:
    """A provider or content set added, removed, or at another version."""

    kind: str  # the provider type (CoreProvider, ...) or content kind (certManager, ...)
    name: str
    change: str  # added, removed, upgraded, downgraded, changed
    old_version: str | None = None
    new_version: str | None = None
    old_contract: str | None = None  # providers only
    new_contract: str | None = None

    @property
    def contract_changed(self) -> bool:
        return (
            self.old_contract is not None
            and self.new_contract is not None
            and self.old_contract != self.new_contract
        )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"change": self.change, "kind": self.kind, "name": self.name}
        document["old"] = _version(self.old_version, self.old_contract)
        document["new"] = _version(self.new_version, self.new_contract)
        if self.old_contract is not None or self.new_contract is not None:
            document["contractChanged"] = self.contract_changed
        return document


def _version(version: str | None, contract: str | None) -> dict[str, str] | None:
    if version is None:
        return None
    return {"version": version, **({"contract": contract} if contract else {})}


@dataclass(frozen=True)
class ImageChange:
    """One image that differs between two bundles, by its reference; a removed image of
    the same repository is listed in ``replaces`` so that an upgrade reads as one
    change, not two."""

    reference: str
    change: str  # added, removed, changed (digest)
    old_digest: str | None = None
    new_digest: str | None = None
    replaces: list[str] = field(default_factory=list)  # removed images of the same repository

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "change": self.change,
            "reference": self.reference,
            "oldDigest": self.old_digest,
            "newDigest": self.new_digest,
        }
        if self.replaces:
            document["replaces"] = self.replaces
        return document


@dataclass(frozen=True)
class BlobChange:
    """Blobs (manifests, configs, layers) of NEW that OLD lacks, and the reverse."""

    new: int
    new_bytes: int
    new_carried: int  # of the new ones, those NEW carries
    new_carried_bytes: int
    removed: int
    removed_bytes: int
    common: int

    @property
    def new_relied(self) -> int:
        """New to OLD, yet NEW (a delta) does not carry them: its target must hold them."""
        return self.new - self.new_carried

    @property
    def new_relied_bytes(self) -> int:
        return self.new_bytes - self.new_carried_bytes

    def to_json(self) -> dict[str, int]:
        return {
            "new": self.new,
            "newBytes": self.new_bytes,
            "newCarried": self.new_carried,
            "newCarriedBytes": self.new_carried_bytes,
            "newRelied": self.new_relied,
            "newReliedBytes": self.new_relied_bytes,
            "removed": self.removed,
            "removedBytes": self.removed_bytes,
            "common": self.common,
        }


@dataclass(frozen=True)
class BundleDiff:
    """What ``airgap diff`` found between two bundles: what a reviewer approves before a
    trip, and the bytes the trip costs."""

    old: Side
    new: Side
    providers: list[VersionChange]
    contents: list[VersionChange]
    images: list[ImageChange]
    unchanged_images: int
    blobs: BlobChange

    @property
    def relation(self) -> str | None:
        """How the two are related as delta and base, if they are."""
        new_delta, old_delta = self.new.manifest.delta, self.old.manifest.delta
        if new_delta is not None and new_delta.base == self.old.digest:
            return "new is a delta of old"
        if old_delta is not None and old_delta.base == self.new.digest:
            return "old is a delta of new"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old.to_json(),
            "new": self.new.to_json(),
            "relation": self.relation,
            "providers": [change.to_json() for change in self.providers],
            "contents": [change.to_json() for change in self.contents],
            "images": [change.to_json() for change in self.images],
            "unchangedImages": self.unchanged_images,
            "blobs": self.blobs.to_json(),
            "bytesByKind": {
                "old": bytes_by_kind(self.old.manifest),
                "new": bytes_by_kind(self.new.manifest),
            },
        }


def diff(old: Side, new: Side) -> BundleDiff:
    return BundleDiff(
        old,
        new,
        _providers(old.manifest, new.manifest),
        _contents(old.manifest, new.manifest),
        *_images(old.manifest, new.manifest),
        _blobs(old.manifest, new.manifest),
    )


def _providers(old: BundleManifest, new: BundleManifest) -> list[VersionChange]:
    """By (type, name): added, removed, or at another version (contracts alongside)."""
    return _versions(
        _by_key((p.type, p.name, p.version, p.contract) for p in old.providers),
        _by_key((p.type, p.name, p.version, p.contract) for p in new.providers),
    )


def _contents(old: BundleManifest, new: BundleManifest) -> list[VersionChange]:
    """Content sets by (kind, name): cert-manager, the operator, templates."""
    return _versions(
        _by_key((c.kind, c.name, c.version, None) for c in old.contents),
        _by_key((c.kind, c.name, c.version, None) for c in new.contents),
    )


_Versions = dict[tuple[str, str], dict[str, str | None]]  # (kind, name) -> version -> contract


def _by_key(entries: Iterable[tuple[str, str, str, str | None]]) -> _Versions:
    found: _Versions = {}
    for kind, name, version, contract in entries:
        found.setdefault((kind, name), {})[version] = contract
    return found


def _versions(before: _Versions, after: _Versions) -> list[VersionChange]:
    """One version on each side: the same (unless its contract changed), upgraded or
    downgraded. Several (a spec may carry one provider at several versions): each
    version only one side has is added or removed."""
    changes: list[VersionChange] = []
    for kind, name in sorted(before.keys() | after.keys()):
        was, now = before.get((kind, name), {}), after.get((kind, name), {})
        if len(was) == 1 and len(now) == 1:
            [(old_version, old_contract)] = was.items()
            [(new_version, new_contract)] = now.items()
            if (old_version, old_contract) != (new_version, new_contract):
                change = _change(old_version, new_version)
                changes.append(
                    VersionChange(
                        kind, name, change, old_version, new_version, old_contract, new_contract
                    )
                )
            continue
        for version in sorted(now.keys() - was.keys()):
            changes.append(VersionChange(kind, name, ADDED, None, version, None, now[version]))
        for version in sorted(was.keys() - now.keys()):
            changes.append(VersionChange(kind, name, REMOVED, version, None, was[version], None))
        for version in sorted(was.keys() & now.keys()):
            if was[version] != now[version]:
                changes.append(
                    VersionChange(kind, name, CHANGED, version, version, was[version], now[version])
                )
    return changes


def _change(old: str | None, new: str | None) -> str:
    if old is None:
        return ADDED
    if new is None:
        return REMOVED
    was, now = try_parse(old), try_parse(new)
    if was is None or now is None or was == now:
        return CHANGED
    return UPGRADED if was < now else DOWNGRADED


def _images(old: BundleManifest, new: BundleManifest) -> tuple[list[ImageChange], int]:
    """By reference: added, removed, or holding another digest; an added image names
    the removed ones of its repository (a new tag replacing an old one)."""
    before = {i.reference: i.digest for i in old.images}
    after = {i.reference: i.digest for i in new.images}
    removed = sorted(before.keys() - after.keys())
    by_repository: dict[str, list[str]] = {}
    for reference in removed:
        by_repository.setdefault(_repository(reference), []).append(reference)
    changes = [
        ImageChange(ref, ADDED, None, after[ref], by_repository.get(_repository(ref), []))
        for ref in sorted(after.keys() - before.keys())
    ]
    changes += [ImageChange(ref, REMOVED, before[ref]) for ref in removed]
    common = sorted(before.keys() & after.keys())
    changes += [
        ImageChange(ref, CHANGED, before[ref], after[ref])
        for ref in common
        if before[ref] != after[ref]
    ]
    unchanged = sum(1 for ref in common if before[ref] == after[ref])
    return changes, unchanged


def _repository(reference: str) -> str:
    try:
        return parse_reference(reference).name
    except InputError:
        return reference


def blob_sizes(manifest: BundleManifest) -> tuple[dict[str, int], set[str]]:
    """Every blob of a bundle's layout, digest -> size (carried members and, for a
    delta, its needs), and which of them it carries."""
    carried = {
        f"{f.path.rsplit('/', 2)[-2]}:{f.path.rsplit('/', 1)[-1]}": f.size
        for f in manifest.files
        if f.path.startswith(_BLOB_PREFIX)
    }
    sizes = {need.digest: need.size for need in manifest.needs}
    sizes.update(carried)
    return sizes, set(carried)


def bytes_by_kind(manifest: BundleManifest) -> dict[str, int]:
    """The bytes a bundle carries, by what they are: ``images`` (the layout), ``providers``
    (metadata and components), each content kind (``certManager``, ``templates``,
    ``charts``, ...) and ``other`` (the bundle's own records): what a trip costs, per kind."""
    kind_of = {path: "providers" for p in manifest.providers for path in (p.metadata, p.components)}
    kind_of |= {path: c.kind for c in manifest.contents for path in c.files}
    totals: dict[str, int] = {}
    for record in manifest.files:
        path = record.path
        kind = "images" if path.startswith(f"{IMAGES_DIR}/") else kind_of.get(path, "other")
        totals[kind] = totals.get(kind, 0) + record.size
    return totals


def _blobs(old: BundleManifest, new: BundleManifest) -> BlobChange:
    before, _ = blob_sizes(old)
    after, carried = blob_sizes(new)
    added = after.keys() - before.keys()
    gone = before.keys() - after.keys()
    added_carried = added & carried
    return BlobChange(
        new=len(added),
        new_bytes=sum(after[d] for d in added),
        new_carried=len(added_carried),
        new_carried_bytes=sum(after[d] for d in added_carried),
        removed=len(gone),
        removed_bytes=sum(before[d] for d in gone),
        common=len(after.keys() & before.keys()),
    )


# --- the human report ----------------------------------------------------------------------

_SIGNS = {ADDED: "+", REMOVED: "-", UPGRADED: "^", DOWNGRADED: "v", CHANGED: "~"}


def diff_text(result: BundleDiff, *, wide: bool = False) -> str:
    """Both bundles, then what changed: providers, content sets, images, blobs."""
    width = None if wide else TABLE_WIDTH
    parts = [_side_line("old", result.old), _side_line("new", result.new)]
    if result.relation:
        parts[-1] += f" ({result.relation})"
    sections = ["\n".join(parts)]
    if result.providers:
        sections.append(
            table(
                ["", "PROVIDER", "TYPE", "OLD", "NEW", "CONTRACT"],
                [_provider_row(change) for change in result.providers],
                max_width=width,
                shrink=((1, 16),),
            )
        )
    else:
        sections.append("Providers: unchanged")
    if result.contents:
        sections.append(
            table(
                ["", "CONTENT", "NAME", "OLD", "NEW"],
                [
                    [_SIGNS[c.change], c.kind, c.name, c.old_version or "-", c.new_version or "-"]
                    for c in result.contents
                ],
                max_width=width,
            )
        )
    images = result.images
    counts = ", ".join(
        f"{sum(1 for i in images if i.change == kind)} {label}"
        for kind, label in ((ADDED, "added"), (REMOVED, "removed"), (CHANGED, "changed digest"))
    )
    summary = f"Images: {counts}, {result.unchanged_images} unchanged"
    if images:
        rows = [_image_row(change, wide) for change in images]
        listing = table(
            ["", "IMAGE", "OLD DIGEST", "NEW DIGEST"], rows, max_width=width, shrink=((1, 40),)
        )
        summary = f"{summary}\n{listing}"
    sections.append(summary)
    sections.append(_blob_line(result.blobs))
    return "\n\n".join(sections)


def _side_line(label: str, side: Side) -> str:
    manifest = side.manifest
    signed = f"signed by {side.signer}" if side.signer else "signature not checked"
    delta = ", a delta" if manifest.delta is not None else ""
    return (
        f"{label}: {side.name}: created {printable(manifest.created)}, "
        f"{plural(len(manifest.providers), 'provider')}, {plural(len(manifest.images), 'image')}, "
        f"{human_size(manifest.total_size)}"
        f"{delta}; {signed}"
    )


def _provider_row(change: VersionChange) -> list[str]:
    if change.contract_changed:
        contract = f"{change.old_contract} -> {change.new_contract} (changed)"
    else:
        contract = change.new_contract or change.old_contract or "-"
    return [
        _SIGNS[change.change],
        change.name,
        change.kind,
        change.old_version or "-",
        change.new_version or "-",
        contract,
    ]


def _image_row(change: ImageChange, wide: bool) -> list[str]:
    def shown(digest: str | None) -> str:
        if digest is None:
            return "-"
        return digest if wide else short_digest(digest)

    reference = change.reference
    if change.replaces:
        reference += f" (replaces {', '.join(r.rsplit(':', 1)[-1] for r in change.replaces)})"
    return [_SIGNS[change.change], reference, shown(change.old_digest), shown(change.new_digest)]


def _blob_line(blobs: BlobChange) -> str:
    line = (
        f"Blobs: {blobs.new} new ({human_size(blobs.new_bytes)}), {blobs.removed} only in "
        f"old ({human_size(blobs.removed_bytes)}), {blobs.common} in both"
    )
    if blobs.new_relied:
        line += (
            f"; new carries {blobs.new_carried} of the new ones "
            f"({human_size(blobs.new_carried_bytes)}) and relies on its target for "
            f"{blobs.new_relied} ({human_size(blobs.new_relied_bytes)})"
        )
    return line
