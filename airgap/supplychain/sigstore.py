"""Verify a Sigstore bundle attached to an image offline, as ``cosign verify`` (v3)
does, with ``cryptography`` alone (pure: bytes in, a verdict out).

cosign 3 signs an image by pushing a referrer whose artifact type and one layer are
``application/vnd.dev.sigstore.bundle.v0.3+json``: the protobuf-specs ``Bundle`` as
JSON (sigstore/protobuf-specs ``sigstore_bundle.proto``). Checked as sigstore-go
``pkg/verify`` checks it, with the trust material cosign 2 signatures use
(``airgap.supplychain.cosign``):

- content: a DSSE envelope (what ``cosign sign`` writes) with exactly one signature
  over the DSSE pre-authentication encoding of an in-toto statement
  (``application/vnd.in-toto+json``) whose subjects include the image's sha256 digest
  (cosign's ``IntotoSubjectClaimVerifier``) and whose predicate type is cosign's
  signature predicate ``https://sigstore.dev/cosign/sign/v1`` (an SBOM or provenance
  attestation is not a signature of the image); or a message signature whose digest
  is the image's (``verifyMessageSignatureWithArtifactDigest``: signed prehashed);
- verification material: a public key hint (the signature must verify with a key of the
  policy; the hint itself is not trusted), or a certificate (v0.3: ``certificate``; v0.1
  and v0.2: the first of ``x509CertificateChain``) checked as a keyless cosign 2
  signature's is: a chain to a Fulcio root, an identity of the policy, and every
  certificate valid at the log's integrated time;
- transparency log: each entry's inclusion promise (the signed entry timestamp over
  ``{body, integratedTime, logIndex, logID}``, ``logID`` the hex of ``logId.keyId``,
  ``body`` the base64 canonicalized body) verifies with a trusted Rekor key (entries of
  other logs, or whose promise fails, are passed over as sigstore-go does, and one must
  remain); the body's kind is the entry's ``kindVersion.kind`` and the one the content
  needs (``dsse`` for an envelope, ``hashedrekord`` for a message signature), and it
  logs this signature, this key or certificate, and this payload (``VerifyTlogEntry``).
  Keyless needs such an entry (nothing else dates the signature offline); a keyed
  bundle's entries are checked when Rekor keys are trusted. Inclusion proofs and RFC
  3161 timestamps are not checked (they need the log's checkpoint key and a TSA chain,
  which the policy does not carry); an entry with only a proof (Rekor v2) cannot date
  a keyless signature here.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from airgap.core.limits import MAX_SIGNATURE_PAYLOAD_BYTES
from airgap.core.names import shown
from airgap.formats import jsonsafe
from airgap.supplychain.cosign import (
    PublicKey,
    Rejected,
    Trust,
    b64decode,
    certificate_key,
    key_der,
    keyless_signer,
    parse_entry,
    verifies,
    verify_set,
)
from airgap.supplychain.formats import COSIGN_SIGN_PREDICATE

BUNDLE_MEDIA_TYPES = frozenset(
    {
        "application/vnd.dev.sigstore.bundle.v0.3+json",
        "application/vnd.dev.sigstore.bundle+json;version=0.3",
        "application/vnd.dev.sigstore.bundle+json;version=0.2",
        "application/vnd.dev.sigstore.bundle+json;version=0.1",
    }
)
IN_TOTO = "application/vnd.in-toto+json"
STATEMENT_TYPES = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
MAX_TLOG_ENTRIES = 32  # sigstore-go's limits.MaxAllowedTlogEntries
MAX_SUBJECTS = 1024
_INT64_RE = re.compile(r"^[0-9]{1,19}$")


@dataclass(frozen=True)
class _Signed:
    """The bundle's one signature, what it is over, and how the log must record it."""

    signature: bytes
    data: bytes  # DSSE: the pre-authentication encoding; a message: its sha256 digest
    prehashed: bool
    kind: str  # the Rekor entry kind that logs it
    logged_hash: str  # hex sha256: the DSSE payload's, or the message's digest


@dataclass(frozen=True)
class _Entry:
    """One transparency log entry of the bundle, decoded."""

    kind: str
    body: bytes
    integrated: int
    index: int
    log_id: str  # hex
    promise: bytes | None  # the signed entry timestamp


def verify_bundle(data: bytes, subject: str, trust: Trust) -> str:
    """Who signed ``subject`` in the Sigstore bundle ``data`` (``key NAME`` or ``keyless
    SAN (ISSUER)``), or Rejected saying why not."""
    try:
        document = jsonsafe.Fields(
            jsonsafe.loads(data, "bundle", max_bytes=MAX_SIGNATURE_PAYLOAD_BYTES), "bundle"
        )
        media_type = document.text("mediaType")
        if media_type not in BUNDLE_MEDIA_TYPES:
            raise Rejected(f"the Sigstore bundle's media type {media_type[:80]!r} is unknown")
        signed = _content(document, subject)
        material = document.obj("verificationMaterial")
        certificates = _certificates(material)
        entries = _entries(material)
    except jsonsafe.JSONShapeError as exc:
        raise Rejected(f"the Sigstore bundle is malformed ({exc})") from None
    if not certificates:
        return _keyed(signed, entries, trust)
    try:
        return _keyless(signed, certificates[0], certificates[1:], entries, trust)
    except ValueError as exc:  # an extension cryptography parses only when asked
        raise Rejected(f"the Sigstore bundle's certificate is malformed ({exc})") from None


# -- content ------------------------------------------------------------------------


def _content(document: jsonsafe.Fields, subject: str) -> _Signed:
    hexdigest = subject.removeprefix("sha256:")
    envelope = document.optional_obj("dsseEnvelope")
    if envelope is not None:
        return _envelope(envelope, subject, hexdigest)
    message = document.optional_obj("messageSignature")
    if message is None:
        raise Rejected("the Sigstore bundle holds neither a DSSE envelope nor a message signature")
    digest = message.obj("messageDigest")
    if digest.text("algorithm") != "SHA2_256":
        raise Rejected("the Sigstore bundle's message digest is not SHA2_256")
    signed = b64decode(digest.text("digest"), "the message digest")
    if signed.hex() != hexdigest:
        raise Rejected(
            f"the Sigstore bundle signs digest sha256:{signed.hex()[:64]}, not {subject}"
        )
    signature = b64decode(message.text("signature"), "the message signature")
    return _Signed(signature, signed, True, "hashedrekord", signed.hex())


def _envelope(envelope: jsonsafe.Fields, subject: str, hexdigest: str) -> _Signed:
    payload_type = envelope.text("payloadType")
    payload = b64decode(envelope.text("payload"), "the DSSE payload")
    signatures = envelope.objects("signatures")
    if len(signatures) != 1:
        raise Rejected(f"the DSSE envelope has {len(signatures)} signatures, not one")
    signature = b64decode(signatures[0].text("sig"), "the DSSE signature")
    if payload_type != IN_TOTO:
        raise Rejected(f"the DSSE payload is a {payload_type[:80]!r}, not an in-toto statement")
    _check_statement(payload, subject, hexdigest)
    return _Signed(signature, pae(payload_type, payload), False, "dsse", _sha256(payload))


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the envelope's signature is over."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _check_statement(payload: bytes, subject: str, hexdigest: str) -> None:
    """An in-toto statement naming ``subject`` with cosign's signature predicate."""
    try:
        statement = jsonsafe.Fields(
            jsonsafe.loads(payload, "statement", max_bytes=MAX_SIGNATURE_PAYLOAD_BYTES),
            "statement",
        )
        if statement.text("_type") not in STATEMENT_TYPES:
            raise Rejected("the DSSE payload is not an in-toto statement")
        subjects = statement.objects("subject")
        if len(subjects) > MAX_SUBJECTS:
            raise Rejected(f"the statement has more than {MAX_SUBJECTS} subjects")
        named = [item.text_map("digest").get("sha256") for item in subjects]
        predicate = statement.text("predicateType")
    except jsonsafe.JSONShapeError as exc:
        raise Rejected(f"the in-toto statement is malformed ({exc})") from None
    if hexdigest not in named:
        shown = next((f"sha256:{n}" for n in named if n), "no sha256 digest")
        raise Rejected(f"the statement signs digest {shown[:80]}, not {subject}")
    if predicate != COSIGN_SIGN_PREDICATE:
        raise Rejected(f"the statement is a {predicate[:80]!r} attestation, not a cosign signature")


# -- verification material ---------------------------------------------------------------


def _certificates(material: jsonsafe.Fields) -> list[x509.Certificate]:
    """The leaf and any intermediates (none for a public key hint)."""
    if material.has("certificate"):
        raws = [material.obj("certificate").text("rawBytes")]
    elif material.has("x509CertificateChain"):
        chain = material.obj("x509CertificateChain").objects("certificates")
        raws = [item.text("rawBytes") for item in chain[:8]]
        if not raws:
            raise Rejected("the Sigstore bundle's certificate chain is empty")
    elif material.has("publicKey"):
        return []
    else:
        raise Rejected("the Sigstore bundle has no public key, certificate or chain")
    certificates = []
    for raw in raws:
        try:
            certificates.append(x509.load_der_x509_certificate(b64decode(raw, "a certificate")))
        except ValueError:
            raise Rejected("the Sigstore bundle's certificate is not DER") from None
    return certificates


def _entries(material: jsonsafe.Fields) -> list[_Entry]:
    found = material.objects("tlogEntries")
    if len(found) > MAX_TLOG_ENTRIES:
        raise Rejected(f"the Sigstore bundle has more than {MAX_TLOG_ENTRIES} log entries")
    entries = []
    for entry in found:
        promise = entry.optional_obj("inclusionPromise")
        entries.append(
            _Entry(
                kind=entry.obj("kindVersion").text("kind"),
                body=b64decode(entry.text("canonicalizedBody"), "the log entry's body"),
                integrated=_int64(entry, "integratedTime"),
                index=_int64(entry, "logIndex"),
                log_id=b64decode(entry.obj("logId").text("keyId"), "the log ID").hex(),
                promise=(
                    b64decode(promise.text("signedEntryTimestamp"), "the signed entry timestamp")
                    if promise is not None
                    else None
                ),
            )
        )
    return entries


def _int64(fields: jsonsafe.Fields, key: str) -> int:
    """A protobuf int64 as protojson writes it (a string), or a plain JSON integer."""
    value = fields.raw(key)
    if isinstance(value, str) and _INT64_RE.match(value):
        return int(value)
    if value is None:
        return 0  # proto3 leaves zero values out
    return fields.integer(key)


# -- signers ------------------------------------------------------------------------


def _keyed(signed: _Signed, entries: list[_Entry], trust: Trust) -> str:
    for named in trust.keys:
        if _verifies(named.key, signed):
            if entries and trust.rekor_keys:
                _logged_at(entries, signed, key_der(named.key), trust)
            return f"key {named.name} (Sigstore bundle)"
    reasons = []
    if trust.keys:
        reasons.append(f"no trusted key verifies it ({', '.join(k.name for k in trust.keys)})")
    if trust.identities:
        reasons.append("it has no certificate (not a keyless signature)")
    raise Rejected("; ".join(reasons) or "the policy trusts no key and no identity")


def _keyless(
    signed: _Signed,
    leaf: x509.Certificate,
    intermediates: list[x509.Certificate],
    entries: list[_Entry],
    trust: Trust,
) -> str:
    if not trust.identities:
        raise Rejected("a keyless signature, and the policy names no keyless identity")
    if not entries:
        raise Rejected("no transparency log entry: a keyless signature cannot be dated offline")
    integrated = _logged_at(entries, signed, leaf.public_bytes(serialization.Encoding.DER), trust)
    names, issuer = keyless_signer(leaf, intermediates, trust, integrated)
    if not _verifies(certificate_key(leaf), signed):
        raise Rejected("the signature does not verify with its certificate's key")
    return f"keyless {names[0]} ({issuer}) (Sigstore bundle)"


def _verifies(key: PublicKey, signed: _Signed) -> bool:
    if not signed.prehashed:
        return verifies(key, signed.signature, signed.data)
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signed.signature, signed.data, ec.ECDSA(Prehashed(hashes.SHA256())))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(
                signed.signature, signed.data, padding.PKCS1v15(), Prehashed(hashes.SHA256())
            )
        else:
            return False  # Ed25519 signs messages, never digests
    except (InvalidSignature, ValueError):
        return False
    return True


# -- the transparency log -------------------------------------------------------------


def _logged_at(entries: list[_Entry], signed: _Signed, public_der: bytes, trust: Trust) -> datetime:
    """The integrated time of the first entry whose promise verifies with a trusted log
    key; every such entry must log this very signature (else Rejected)."""
    reasons: list[str] = []
    verified: datetime | None = None
    for entry in entries:
        if entry.promise is None:
            reasons.append("a log entry has no inclusion promise (signed entry timestamp)")
            continue
        body = base64.b64encode(entry.body).decode()
        try:
            at = verify_set(entry.promise, body, entry.integrated, entry.index, entry.log_id, trust)
        except Rejected as exc:
            reasons.append(str(exc))
            continue
        _check_logged(entry, signed, public_der)
        verified = verified or at
    if verified is None:
        raise Rejected(reasons[0] if reasons else "no transparency log entry")
    return verified


def _check_logged(entry: _Entry, signed: _Signed, public_der: bytes) -> None:
    logged = parse_entry(entry.body)
    if logged.kind != entry.kind:
        raise Rejected(
            f"the log entry's body is a {shown(logged.kind)}, its kindVersion a {shown(entry.kind)}"
        )
    if logged.kind != signed.kind:
        raise Rejected(
            f"the log entry is a {shown(logged.kind)}; this signature needs a {signed.kind!r}"
        )
    if logged.signature != signed.signature:
        raise Rejected("the Rekor entry logs another signature")
    if logged.public_der != public_der:
        raise Rejected("the Rekor entry logs another key or certificate")
    if logged.algorithm != "sha256" or logged.value != signed.logged_hash:
        raise Rejected("the Rekor entry logs another payload")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
