"""Checks over what the bundle carries attached to its images: signatures,
attestations, SBOMs (``ArtifactRecord``) and the trust material (``TrustRecord``).

Every record is in collect's one form (kind, way, digests, the cosign tag its subject
gives), belongs to an image of the bundle, and is attached to one of that image's
manifests (or to the source index a platform filter rewrote, which is then carried
too); its manifest parses, names its subject as its way says, and every blob it needs
is present with the size its descriptor gives. Import pushes nothing it has not seen
pass here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from airgap.bundle.format import TRUST_DIR, ArtifactRecord, ImageRecord, TrustRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError
from airgap.core.limits import MAX_MANIFEST_BYTES, MAX_TRUST_FILE_BYTES
from airgap.core.names import digest_problem, shown
from airgap.oci.manifest import MANIFEST_TYPES, Manifest, attestation_subject
from airgap.supplychain.formats import TAG_KINDS, Kind, Via, cosign_tag
from airgap.verify.findings import Failure

ReadMember = Callable[[str], bytes]
MAX_TEXT = 1024
TRUST_FILES = {
    "fulcioRoots": f"{TRUST_DIR}/fulcio-roots.pem",
    "rekorKeys": f"{TRUST_DIR}/rekor-keys.pem",
}
_SUFFIXES = {kind: suffix for suffix, kind in TAG_KINDS.items()}
_MALFORMED = (AirgapError, ValueError, KeyError, TypeError, AttributeError)


def describe(record: ArtifactRecord) -> str:
    """``IMAGE signature sha256:0123456789ab`` for failures."""
    return f"{record.image} {record.kind} {record.digest[:19]}"


@dataclass
class _Bundle:
    """The verified members, and manifests parsed once (digest -> manifest or why not)."""

    read: ReadMember
    present: Mapping[str, int]
    parsed: dict[str, Manifest | str] = field(default_factory=dict)

    def manifest(self, digest: str, media_type: str | None = None) -> Manifest | str:
        known = self.parsed.get(digest)
        if known is not None:
            return known
        member = blob_member(digest)
        size = self.present.get(member)
        outcome: Manifest | str
        if size is None:
            outcome = f"manifest {digest} is not in the bundle"
        elif size > MAX_MANIFEST_BYTES:
            outcome = f"manifest {digest} is implausibly large ({size} bytes)"
        else:
            try:
                outcome = Manifest.from_bytes(self.read(member), media_type)
                outcome.children()
                outcome.blobs()
            except _MALFORMED as exc:
                outcome = f"manifest {digest} does not parse: {exc}"
        self.parsed[digest] = outcome
        return outcome

    def tree(self, digest: str) -> list[Manifest]:
        """A manifest and every manifest below it (what parses; verify.layoutcheck
        reports the rest)."""
        found: dict[str, Manifest] = {}
        pending = [digest]
        while pending:
            current = pending.pop()
            if current in found:
                continue
            manifest = self.manifest(current)
            if isinstance(manifest, Manifest):
                found[current] = manifest
                pending.extend(child.digest for child in manifest.children())
        return list(found.values())


def check_artifacts(
    manifest: BundleManifest, read: ReadMember, present: Mapping[str, int]
) -> list[Failure]:
    bundle = _Bundle(read, present)
    images = {image.reference: image for image in manifest.images}
    failures: list[Failure] = []
    seen: set[tuple[str, str, str]] = set()
    for number, record in enumerate(manifest.artifacts):
        problem = _form_problem(record)
        if problem:
            failures.append(Failure("artifact", f"artifacts[{number}]", problem))
            continue
        identity = (record.image, record.subject, record.digest)
        if identity in seen:
            failures.append(Failure("artifact", describe(record), "listed twice"))
            continue
        seen.add(identity)
        image = images.get(record.image)
        if image is None:
            failures.append(
                Failure("artifact", describe(record), "belongs to an image the bundle lacks")
            )
            continue
        problem = _subject_problem(record, image, bundle) or _content_problem(
            record, bundle, set(image.needs)
        )
        if problem:
            failures.append(Failure("artifact", describe(record), problem))
    failures.extend(check_trust(manifest.trust, present))
    return failures


def _form_problem(record: ArtifactRecord) -> str | None:
    """Why a record is not in the one form collect writes."""
    for name, digest in (("subject", record.subject), ("digest", record.digest)):
        problem = digest_problem(digest)
        if problem or not digest.startswith("sha256:"):
            return f"{name}: {problem or 'bundles hold sha256 blobs only'}"
    if record.kind not in {k.value for k in Kind}:
        return f"unknown kind {shown(record.kind)}"
    if record.via not in {v.value for v in Via}:
        return f"unknown way {shown(record.via)}"
    if record.media_type not in MANIFEST_TYPES:
        return f"media type {shown(record.media_type)} is not a manifest's"
    if record.artifact_type is not None and not _printable(record.artifact_type):
        return f"artifact type {shown(record.artifact_type)} is not one printable line"
    if record.via == Via.TAG.value:
        suffix = _SUFFIXES.get(Kind(record.kind))
        expected = cosign_tag(record.subject, suffix) if suffix else None
        if record.tag != expected:
            return f"tag {shown(record.tag or '')} is not cosign's tag for its subject"
    elif record.tag is not None:
        return f"tag {shown(record.tag)} on an artifact not found by tag"
    return None


def _subject_problem(record: ArtifactRecord, image: ImageRecord, bundle: _Bundle) -> str | None:
    """The subject is one of the image's manifests, or its source index (carried). In a
    delta, manifests the image relies on (its needs) are in the target, not here."""
    tree = bundle.tree(image.digest)
    digests = {m.digest for m in tree} | set(image.needs)
    if record.subject == image.source_digest and record.subject not in digests:
        source = bundle.manifest(record.subject)
        if isinstance(source, str):
            return f"attached to the source index, but {source}"
        return None if source.is_index else f"source {record.subject} is not an index"
    if record.subject not in digests:
        return f"attached to {record.subject}, which is not one of the image's manifests"
    if record.via != Via.INDEX.value or image.digest in image.needs:
        return None  # (a relied-on index cannot be read here: import checks the target)
    for manifest in tree:
        for entry in manifest.json.get("manifests", []) if manifest.is_index else []:
            linked = attestation_subject(entry) == record.subject
            if entry.get("digest") == record.digest and linked:
                return None
    return "is not an attestation manifest of its subject in the image's index"


def _content_problem(record: ArtifactRecord, bundle: _Bundle, needs: set[str]) -> str | None:
    """The artifact's manifests parse, name the subject, and every blob is present (or,
    in a delta, one of the image's needs: the target holds it)."""
    if record.digest in needs:
        return None
    top = bundle.manifest(record.digest, record.media_type)
    if isinstance(top, str):
        return top
    if top.size != record.size or top.media_type != record.media_type:
        return f"manifest is a {top.size}-byte {top.media_type}, the record says otherwise"
    if record.via == Via.REFERRERS.value:
        subject = top.json.get("subject")
        named = subject.get("digest") if isinstance(subject, dict) else None
        if named != record.subject:
            return f"its manifest's subject is {shown(str(named))}, not {record.subject}"
    for manifest in bundle.tree(record.digest):
        for child in manifest.children():
            if isinstance(bundle.manifest(child.digest, child.media_type), str):
                return f"child manifest {child.digest} is missing or malformed"
        for blob in manifest.blobs():
            size = bundle.present.get(blob_member(blob.digest))
            if size is None and blob.digest in needs:
                continue
            if size is None:
                return f"blob {blob.digest} is missing"
            if size != blob.size:
                return f"blob {blob.digest} is {size} bytes, its descriptor says {blob.size}"
    return None


def check_trust(trust: list[TrustRecord], present: Mapping[str, int]) -> list[Failure]:
    """Each kind of trust material at most once, at its one path, present and small."""
    failures: list[Failure] = []
    seen: set[str] = set()
    for number, record in enumerate(trust):
        expected = TRUST_FILES.get(record.kind)
        subject = f"trust[{number}]"
        if expected is None:
            failures.append(Failure("trust", subject, f"unknown kind {shown(record.kind)}"))
        elif record.kind in seen:
            failures.append(Failure("trust", subject, f"{record.kind} listed twice"))
        elif record.path != expected:
            failures.append(Failure("trust", subject, f"{shown(record.path)} is not {expected}"))
        elif record.path not in present:
            failures.append(Failure("trust", subject, f"{record.path} is missing or damaged"))
        elif present[record.path] > MAX_TRUST_FILE_BYTES:
            failures.append(Failure("trust", subject, f"{record.path} is implausibly large"))
        seen.add(record.kind)
    return failures


def _printable(text: str) -> bool:
    return len(text) <= MAX_TEXT and text.isprintable()
