"""The ``requireSignatures`` policy rule: every image it covers carries a valid cosign
signature, checked offline from the bundle's own bytes.

The same function runs in ``collect`` (over what it is about to write, before it signs
the bundle) and in ``verify``/``import`` (over the verified members). An image passes
with one signature that verifies over its own digest (a cosign signature layer,
``airgap.supplychain.cosign``, or a cosign 3 Sigstore bundle, ``airgap.supplychain.sigstore``),
or over the source index a platform filter rewrote when the bundle carries that index
and the stored index keeps only entries of it (digest, size and media type alike): a
signed index vouches for every manifest it names. Trust material comes from the policy,
or else from the bundle (``trust/``, carried by collect from its policy): the bundle's
own signature, checked first, vouches for it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from cryptography.hazmat.primitives.asymmetric import ec

from airgap.bundle.format import ArtifactRecord, ImageRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError
from airgap.core.limits import MAX_MANIFEST_BYTES, MAX_SIGNATURE_PAYLOAD_BYTES, MAX_TRUST_FILE_BYTES
from airgap.oci.manifest import Manifest
from airgap.oci.reference import parse_reference
from airgap.supplychain.cosign import (
    Identity,
    NamedKey,
    Rejected,
    Trust,
    load_certificates,
    load_public_keys,
    verify_layer,
)
from airgap.supplychain.formats import (
    SIGNATURE_ANNOTATION,
    SIGSTORE_BUNDLE_PREFIX,
    SIMPLE_SIGNING,
    Kind,
)
from airgap.supplychain.sigstore import verify_bundle

ReadMember = Callable[[str], bytes]
Check = Callable[[str, Trust], str]  # (subject, trust) -> who signed, or Rejected
_UNREADABLE = (AirgapError, KeyError, ValueError, OSError)


@dataclass(frozen=True)
class SignaturePolicy:
    """``requireSignatures`` as the policy file gives it (files already read)."""

    images: tuple[str, ...] = ()  # globs on host, host/path or the whole reference
    keys: tuple[NamedKey, ...] = ()
    identities: tuple[Identity, ...] = ()
    fulcio_roots: bytes | None = None  # PEM, as given (collect carries it)
    rekor_keys: bytes | None = None

    def covers(self, reference: str) -> bool:
        if not self.images:
            return True
        try:
            ref = parse_reference(reference)
            names: tuple[str, ...] = (ref.registry, ref.name, reference)
        except AirgapError:
            names = (reference,)
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.images for name in names)


@dataclass
class SignatureResults:
    """Images without a valid signature (``IMAGE: reason``) and who signed the others."""

    offending: list[str] = field(default_factory=list)
    signed: list[str] = field(default_factory=list)


def check_signatures(
    rule: SignaturePolicy, manifest: BundleManifest, read: ReadMember
) -> SignatureResults:
    results = SignatureResults()
    try:
        trust = _trust(rule, manifest, read)
    except Rejected as exc:
        results.offending = [
            f"{i.reference}: {exc}" for i in manifest.images if rule.covers(i.reference)
        ]
        return results
    for image in manifest.images:
        if not rule.covers(image.reference):
            continue
        try:
            results.signed.append(f"{image.reference}: {_verdict(image, manifest, read, trust)}")
        except Rejected as exc:
            results.offending.append(f"{image.reference}: {exc}")
    return results


def _trust(rule: SignaturePolicy, manifest: BundleManifest, read: ReadMember) -> Trust:
    """The policy's keys and identities with the trust material keyless needs."""
    roots = rule.fulcio_roots or _carried(manifest, read, "fulcioRoots")
    rekor = rule.rekor_keys or _carried(manifest, read, "rekorKeys")
    try:
        certificates = tuple(load_certificates(roots, "Fulcio roots")) if roots else ()
        logs = tuple(load_public_keys(rekor, "Rekor keys")) if rekor else ()
    except ValueError as exc:
        raise Rejected(f"unusable trust material: {exc}") from None
    rekor_keys = tuple(key for key in logs if isinstance(key, ec.EllipticCurvePublicKey))
    return Trust(rule.keys, rule.identities, certificates, rekor_keys)


def _carried(manifest: BundleManifest, read: ReadMember, kind: str) -> bytes | None:
    for record in manifest.trust:
        if record.kind == kind:
            try:
                data = read(record.path)
            except _UNREADABLE as exc:
                raise Rejected(f"the bundle's {kind} cannot be read: {exc}") from None
            if len(data) > MAX_TRUST_FILE_BYTES:
                raise Rejected(f"the bundle's {kind} is implausibly large")
            return data
    return None


def _verdict(image: ImageRecord, manifest: BundleManifest, read: ReadMember, trust: Trust) -> str:
    needs = set(image.needs)
    subjects = {image.digest: "image"}
    if image.source_digest and _source_covers(image, read, needs):
        subjects[image.source_digest] = "source index"
    signatures = [
        a
        for a in manifest.artifacts
        if a.image == image.reference and a.kind == Kind.SIGNATURE.value and a.subject in subjects
    ]
    if not signatures:
        where = " or ".join(f"{what} {digest}" for digest, what in subjects.items())
        raise Rejected(f"no signature on {where}")
    reasons: list[str] = []
    relied: list[str] = []
    for artifact in signatures:
        checks, in_base = _checks(artifact, read, needs)
        if in_base:
            relied.append(artifact.digest)
        for check in checks:
            try:
                who = check(artifact.subject, trust)
            except Rejected as exc:
                reasons.append(str(exc))
                continue
            on = subjects[artifact.subject]
            return who if on == "image" else f"{who}, on the {on} {artifact.subject}"
    if relied:
        return _in_base(manifest, relied)
    if not reasons:
        raise Rejected("its signature manifests hold no cosign signature layer or Sigstore bundle")
    unique = list(dict.fromkeys(reasons))
    more = f" (and {len(unique) - 1} more)" if len(unique) > 1 else ""
    raise Rejected(f"no valid signature: {unique[0]}{more}")


def _in_base(manifest: BundleManifest, relied: list[str]) -> str:
    """A delta relies on its base for signatures the base carried: the signed manifest
    names them by digest (``delta.needs``), and the base's own verify checked their
    bytes. Made from a have-list alone, no bundle airgap verified holds them: refused."""
    base = manifest.delta.base if manifest.delta is not None else None
    shown = ", ".join(relied[:3]) + (f" and {len(relied) - 3} more" if len(relied) > 3 else "")
    if base is None:
        raise Rejected(
            f"its signature {shown} is not in this delta (the have-list says the target holds "
            "it), so it cannot be checked offline: collect with --base, or without --have"
        )
    return (
        f"signature {shown} in the base bundle {base} (relied on by digest; checked when "
        "the base was verified)"
    )


def _checks(
    artifact: ArtifactRecord, read: ReadMember, needs: set[str]
) -> tuple[list[Check], bool]:
    """One check per signature a signature manifest holds: a cosign signature layer
    (payload and annotations) or a Sigstore bundle layer (cosign 3); and whether some of
    it is not here but relied on (a delta's need, in its base)."""
    manifest = _manifest(artifact.digest, artifact.media_type, read)
    if manifest is None:
        return [], artifact.digest in needs
    if manifest.is_index:
        return [], False
    found: list[Check] = []
    relied = False
    for layer in manifest.blobs():
        simple = layer.media_type == SIMPLE_SIGNING and SIGNATURE_ANNOTATION in layer.annotations
        bundle = layer.media_type.lower().startswith(SIGSTORE_BUNDLE_PREFIX)
        if not (simple or bundle):
            continue
        if layer.size > MAX_SIGNATURE_PAYLOAD_BYTES:
            raise Rejected(f"signature payload {layer.digest} is implausibly large")
        try:
            data = read(blob_member(layer.digest))
        except _UNREADABLE as exc:
            if layer.digest in needs:
                relied = True
                continue
            raise Rejected(f"signature payload {layer.digest} cannot be read: {exc}") from None
        found.append(
            partial(verify_layer, data, layer.annotations)
            if simple
            else partial(verify_bundle, data)
        )
    return found, relied


def _manifest(digest: str, media_type: str | None, read: ReadMember) -> Manifest | None:
    try:
        data = read(blob_member(digest))
        if len(data) > MAX_MANIFEST_BYTES:
            return None
        manifest = Manifest.from_bytes(data, media_type)
        manifest.children()
        manifest.blobs()
    except _UNREADABLE:
        return None
    return manifest


def _source_covers(image: ImageRecord, read: ReadMember, needs: set[str]) -> bool:
    """The stored index only drops entries of the source index it was filtered from (a
    delta relying on both found so when its base was verified)."""
    assert image.source_digest is not None
    source = _manifest(image.source_digest, None, read)
    stored = _manifest(image.digest, image.media_type, read)
    if source is None and stored is None:
        return {image.source_digest, image.digest} <= needs
    if source is None or stored is None or not (source.is_index and stored.is_index):
        return False
    have = {(c.digest, c.size, c.media_type) for c in source.children()}
    return all((c.digest, c.size, c.media_type) in have for c in stored.children())
