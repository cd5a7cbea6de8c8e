"""Verify cosign image signatures offline, as ``cosign verify`` does, with
``cryptography`` alone (pure: bytes in, a verdict out).

One signature is one layer of a signature manifest: the simple-signing payload and
its annotations (``airgap.supplychain.formats``). Checked as sigstore/cosign
``pkg/cosign/verify.go`` checks it:

- the payload's ``critical.image.docker-manifest-digest`` is the subject's digest
  (``SimpleClaimVerifier``);
- keyed: the base64 signature verifies over the payload's exact bytes with one of the
  policy's public keys (ECDSA with SHA-256, as ``signature.LoadVerifier(key, SHA256)``;
  RSA PKCS#1 v1.5 and Ed25519 keys too);
- keyless: the certificate annotation chains through the chain annotation's
  intermediates to a trusted Fulcio root (``TrustedCert``: code-signing usage), by
  ``cryptography``'s RFC 5280 path validation (path lengths, name constraints, no
  unknown critical extension), one of
  its subject alternative names and its OIDC issuer (extension 1.3.6.1.4.1.57264.1.8,
  else .1.1) match an identity of the policy (``CheckCertificatePolicy``), the Rekor
  bundle verifies (``VerifyBundle``: the signed entry timestamp is the log key's ECDSA
  signature over the RFC 8785 canonical JSON of ``{body, integratedTime, logIndex,
  logID}``, the key found by ``logID``; the entry's signature and public key are this
  signature's and this certificate's, its hash the payload's), the path is validated
  at the entry's integrated time (``CheckExpiry``: every certificate valid then), and the
  signature verifies with the certificate's key. A keyless signature without a Rekor
  bundle cannot be dated offline and is refused. (Embedded SCTs are not checked.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    Policy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from airgap.core.limits import MAX_SIGNATURE_PAYLOAD_BYTES
from airgap.formats import jsonsafe
from airgap.supplychain.formats import (
    BUNDLE_ANNOTATION,
    CERTIFICATE_ANNOTATION,
    CHAIN_ANNOTATION,
    SIGNATURE_ANNOTATION,
)

PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")  # the issuer's bytes as they are
ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")  # a DER UTF8String
MAX_CHAIN = 8
_PEM_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.+?-----END \1-----", re.DOTALL)
_B64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_HEX_RE = re.compile(r"^[0-9a-f]{1,128}$")


class Rejected(Exception):
    """Why a signature does not verify (one line, no secrets: all of it is public)."""


@dataclass(frozen=True)
class NamedKey:
    """A trusted public key and the name reports give it (its file, say)."""

    name: str
    key: PublicKey


@dataclass(frozen=True)
class Identity:
    """An accepted keyless signer: exact values or (unanchored, as cosign's Go
    ``regexp.MatchString``) patterns; an empty constraint accepts anything."""

    subject: str | None = None
    subject_regexp: str | None = None
    issuer: str | None = None
    issuer_regexp: str | None = None

    def matches(self, names: list[str], issuer: str) -> bool:
        if self.issuer is not None and issuer != self.issuer:
            return False
        if self.issuer_regexp is not None and not re.search(self.issuer_regexp, issuer):
            return False
        if self.subject is not None:
            return self.subject in names
        if self.subject_regexp is not None:
            pattern = self.subject_regexp
            return any(re.search(pattern, name) for name in names)
        return True


@dataclass(frozen=True)
class Trust:
    """What signatures are checked against: keys, keyless identities, and the trust
    material keyless needs (Fulcio roots, Rekor keys by log ID)."""

    keys: tuple[NamedKey, ...] = ()
    identities: tuple[Identity, ...] = ()
    roots: tuple[x509.Certificate, ...] = ()
    rekor_keys: tuple[ec.EllipticCurvePublicKey, ...] = ()

    def rekor_key(self, log_id: str) -> ec.EllipticCurvePublicKey | None:
        for key in self.rekor_keys:
            if log_id_of(key) == log_id:
                return key
        return None


def pem_blocks(data: bytes) -> Iterator[bytes]:
    """Every PEM block of ``data``, in order."""
    for match in _PEM_RE.finditer(data):
        yield match.group(0)


def load_public_keys(data: bytes, where: str) -> list[PublicKey]:
    """The public keys of a PEM file (one or more ``PUBLIC KEY`` blocks)."""
    keys: list[PublicKey] = []
    for block in pem_blocks(data):
        try:
            key = serialization.load_pem_public_key(block)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ValueError(f"{where}: not a PEM public key ({exc})") from None
        if not isinstance(
            key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
        ):
            raise ValueError(f"{where}: unsupported key type {type(key).__name__}")
        keys.append(key)
    if not keys:
        raise ValueError(f"{where}: no PEM public key in it")
    return keys


def load_certificates(data: bytes, where: str) -> list[x509.Certificate]:
    """The certificates of a PEM file."""
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ValueError(f"{where}: not PEM certificates ({exc})") from None
    return certificates


def log_id_of(key: ec.EllipticCurvePublicKey) -> str:
    """A Rekor log's ID: the sha256 of its public key's DER SubjectPublicKeyInfo."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def verify_layer(payload: bytes, annotations: dict[str, str], subject: str, trust: Trust) -> str:
    """Who signed ``payload`` for ``subject`` (``key NAME`` or ``keyless SAN (ISSUER)``),
    or Rejected saying why not."""
    _check_claims(payload, subject)
    encoded = annotations.get(SIGNATURE_ANNOTATION)
    if not encoded:
        raise Rejected("the layer has no signature annotation")
    signature = b64decode(encoded, "the signature annotation")
    reasons: list[str] = []
    for named in trust.keys:
        if verifies(named.key, signature, payload):
            _check_keyed_bundle(annotations, payload, encoded, named.key, trust)
            return f"key {named.name}"
    if CERTIFICATE_ANNOTATION in annotations and trust.identities:
        # a keyless signature: why its certificate fails says more than the keys
        return _keyless(payload, annotations, encoded, signature, trust)
    if trust.keys:
        reasons.append(f"no trusted key verifies it ({', '.join(k.name for k in trust.keys)})")
    if trust.identities:
        reasons.append("it has no certificate (not a keyless signature)")
    raise Rejected("; ".join(reasons) or "the policy trusts no key and no identity")


def _check_claims(payload: bytes, subject: str) -> None:
    try:
        document = jsonsafe.loads(payload, "payload", max_bytes=MAX_SIGNATURE_PAYLOAD_BYTES)
        claimed = document["critical"]["image"]["docker-manifest-digest"]
    except (jsonsafe.JSONShapeError, KeyError, TypeError):
        raise Rejected("the payload is not a cosign simple-signing payload") from None
    if claimed != subject:
        shown = claimed if isinstance(claimed, str) else repr(claimed)
        raise Rejected(f"the payload signs digest {shown[:80]}, not {subject}")


def verifies(key: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        else:
            key.verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Rejected(f"{what} is not base64") from None


# -- keyless --------------------------------------------------------------------------


def _keyless(
    payload: bytes, annotations: dict[str, str], encoded: str, signature: bytes, trust: Trust
) -> str:
    leaf = _certificate(annotations[CERTIFICATE_ANNOTATION], "the certificate annotation")
    chain_text = annotations.get(CHAIN_ANNOTATION, "")
    intermediates = _certificates(chain_text, "the chain annotation") if chain_text else []
    if BUNDLE_ANNOTATION not in annotations:
        raise Rejected("no Rekor bundle: a keyless signature cannot be dated offline")
    leaf_der = leaf.public_bytes(serialization.Encoding.DER)
    integrated = _check_bundle(annotations[BUNDLE_ANNOTATION], payload, encoded, leaf_der, trust)
    names, issuer = keyless_signer(leaf, intermediates, trust, integrated)
    if not verifies(certificate_key(leaf), signature, payload):
        raise Rejected("the signature does not verify with its certificate's key")
    return f"keyless {names[0]} ({issuer})"


def keyless_signer(
    leaf: x509.Certificate,
    intermediates: list[x509.Certificate],
    trust: Trust,
    integrated: datetime,
) -> tuple[list[str], str]:
    """A keyless signature's subject alternative names and OIDC issuer, or Rejected when
    its certificate has no valid path to a trusted Fulcio root at the log's integrated
    time or no identity of the policy matches (cosign's TrustedCert, CheckExpiry at the
    log's time, and CheckCertificatePolicy)."""
    if not trust.roots:
        raise Rejected("no Fulcio root to check its certificate against")
    check_path(leaf, intermediates, trust.roots, integrated)
    names, issuer = subject_names(leaf), oidc_issuer(leaf)
    if not any(identity.matches(names, issuer) for identity in trust.identities):
        raise Rejected(
            f"signed by {', '.join(names) or 'no identity'} (issuer {issuer or 'none'}), "
            "which no identity of the policy matches"
        )
    return names, issuer


def check_path(
    leaf: x509.Certificate,
    intermediates: list[x509.Certificate],
    roots: tuple[x509.Certificate, ...],
    at: datetime,
) -> None:
    """RFC 5280 path validation by ``cryptography``'s verifier, at the log's time: a
    path through ``intermediates`` to one of ``roots`` (each a trust anchor), every
    certificate valid at ``at``, path lengths, name constraints, no unknown critical
    extension; a code-signing leaf and CAs that may issue one."""
    verifier = (
        PolicyBuilder()
        .store(Store(list(roots)))
        .time(at)
        .max_chain_depth(MAX_CHAIN)
        .extension_policies(ca_policy=_CA_POLICY, ee_policy=_LEAF_POLICY)
        .build_client_verifier()
    )
    try:
        verifier.verify(leaf, intermediates)
    except (VerificationError, ValueError, x509.UnsupportedGeneralNameType) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise Rejected(
            "its certificate does not chain to a trusted Fulcio root when the signature "
            f"was logged ({at:%Y-%m-%dT%H:%M:%SZ}): {reason}"
        ) from None


def _code_signing_leaf(
    _policy: Policy, _certificate: x509.Certificate, usage: x509.ExtendedKeyUsage
) -> None:
    if ExtendedKeyUsageOID.CODE_SIGNING not in usage:
        raise ValueError("the certificate is not for code signing")


def _signing_key_usage(
    _policy: Policy, _certificate: x509.Certificate, usage: x509.KeyUsage | None
) -> None:
    if usage is not None and not usage.digital_signature:
        raise ValueError("the certificate's key usage does not allow digital signatures")


def _not_a_ca(
    _policy: Policy, _certificate: x509.Certificate, constraints: x509.BasicConstraints | None
) -> None:
    if constraints is not None and constraints.ca:
        raise ValueError("the signing certificate is a CA")


def _code_signing_ca(
    _policy: Policy, _certificate: x509.Certificate, usage: x509.ExtendedKeyUsage | None
) -> None:
    allowed = {ExtendedKeyUsageOID.CODE_SIGNING, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
    if usage is not None and not allowed.intersection(usage):
        raise ValueError("the CA may not issue code-signing certificates")


def _certificate_signer(
    _policy: Policy, _certificate: x509.Certificate, usage: x509.KeyUsage | None
) -> None:
    if usage is not None and not usage.key_cert_sign:
        raise ValueError("the CA's key usage does not allow signing certificates")


# Fulcio leaves are not web PKI leaves (an e-mail or URI identity in a critical SAN,
# code signing rather than client authentication): every extension the verifier does not
# know is still refused when critical; the usages are checked as cosign checks them.
_LEAF_POLICY = (
    ExtensionPolicy.permit_all()
    .require_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _code_signing_leaf)
    .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _signing_key_usage)
    .may_be_present(x509.BasicConstraints, Criticality.AGNOSTIC, _not_a_ca)
)
_CA_POLICY = (
    ExtensionPolicy.permit_all()
    .require_present(x509.BasicConstraints, Criticality.CRITICAL, None)
    .may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _code_signing_ca)
    .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _certificate_signer)
)


def certificate_key(certificate: x509.Certificate) -> PublicKey:
    """The certificate's public key, of a type signatures are checked with."""
    public = certificate.public_key()
    if not isinstance(
        public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey
    ):
        raise Rejected("the certificate's key type is not supported")
    return public


def key_der(key: PublicKey) -> bytes:
    """A public key's DER SubjectPublicKeyInfo (what a Rekor entry logs, in PEM)."""
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _certificate(text: str, what: str) -> x509.Certificate:
    certificates = _certificates(text, what)
    if len(certificates) != 1:
        raise Rejected(f"{what} holds {len(certificates)} certificates, not one")
    return certificates[0]


def _certificates(text: str, what: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        raise Rejected(f"{what} is not PEM certificates") from None


def subject_names(certificate: x509.Certificate) -> list[str]:
    """Every subject alternative name, as cosign's GetSubjectAlternateNames lists them."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    names: list[str] = []
    names += san.get_values_for_type(x509.RFC822Name)
    names += san.get_values_for_type(x509.UniformResourceIdentifier)
    names += san.get_values_for_type(x509.DNSName)
    names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    for other in san.get_values_for_type(x509.OtherName):
        text = _der_utf8(other.value)
        if text is not None:
            names.append(text)
    return names


def oidc_issuer(certificate: x509.Certificate) -> str:
    """The OIDC issuer Fulcio wrote: 1.3.6.1.4.1.57264.1.8 (DER), else .1.1 (raw)."""
    for oid, der in ((ISSUER_V2, True), (ISSUER_V1, False)):
        try:
            value = certificate.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        raw = value.value if isinstance(value, x509.UnrecognizedExtension) else b""
        text = _der_utf8(raw) if der else raw.decode("utf-8", "replace")
        if text:
            return text
    return ""


def _der_utf8(data: bytes) -> str | None:
    """A DER UTF8String's text (tag 0x0c, short or long length form)."""
    if len(data) < 2 or data[0] != 0x0C:
        return None
    length, offset = data[1], 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or len(data) < 2 + count:
            return None
        length, offset = int.from_bytes(data[2 : 2 + count], "big"), 2 + count
    if offset + length != len(data):
        return None
    return data[offset:].decode("utf-8", "replace")


# -- the Rekor bundle -------------------------------------------------------------------


def _check_keyed_bundle(
    annotations: dict[str, str], payload: bytes, encoded: str, key: PublicKey, trust: Trust
) -> None:
    """A keyed signature's Rekor bundle is checked when the log's key is known (a bundle
    that does not match its signature is tampering, whatever the key says)."""
    if BUNDLE_ANNOTATION not in annotations or not trust.rekor_keys:
        return
    _check_bundle(annotations[BUNDLE_ANNOTATION], payload, encoded, key_der(key), trust)


def _check_bundle(
    text: str, payload: bytes, encoded: str, public_der: bytes, trust: Trust
) -> datetime:
    """Verify a ``dev.sigstore.cosign/bundle`` annotation; its integrated time."""
    try:
        document = jsonsafe.Fields(
            jsonsafe.loads(text, "bundle", max_bytes=MAX_SIGNATURE_PAYLOAD_BYTES), "bundle"
        )
        timestamp = b64decode(document.text("SignedEntryTimestamp"), "the signed entry timestamp")
        entry = document.obj("Payload")
        body, log_id = entry.text("body"), entry.text("logID")
        integrated, index = entry.integer("integratedTime"), entry.integer("logIndex")
    except jsonsafe.JSONShapeError as exc:
        raise Rejected(f"the Rekor bundle is malformed ({exc})") from None
    integrated_at = verify_set(timestamp, body, integrated, index, log_id, trust)
    _check_entry(b64decode(body, "the Rekor entry"), payload, encoded, public_der)
    return integrated_at


def verify_set(
    timestamp: bytes, body: str, integrated: int, index: int, log_id: str, trust: Trust
) -> datetime:
    """Check a Rekor signed entry timestamp: the log's ECDSA signature over the RFC 8785
    canonical JSON of ``{body, integratedTime, logIndex, logID}`` (``body`` base64, ``logID``
    hex), the key found by ``logID``; the integrated time it vouches for."""
    if not _B64_RE.match(body) or not _HEX_RE.match(log_id):
        raise Rejected("the Rekor bundle's body or log ID is malformed")
    key = trust.rekor_key(log_id)
    if key is None:
        raise Rejected(f"logged by Rekor log {log_id[:16]}…, whose key is not trusted")
    # RFC 8785: keys sorted, no spaces; the values are ASCII (base64, hex, integers)
    canonical = json.dumps(
        {"body": body, "integratedTime": integrated, "logID": log_id, "logIndex": index},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    try:
        key.verify(timestamp, canonical, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise Rejected("the Rekor bundle's signed entry timestamp does not verify") from None
    try:
        return datetime.fromtimestamp(integrated, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise Rejected("the Rekor bundle's integrated time is out of range") from None


@dataclass(frozen=True)
class LoggedEntry:
    """What a Rekor entry body says was logged: its kind, the one signature, the key or
    certificate (DER) that verifies it, and the hash of what was signed (hashedrekord:
    the signed data; dsse: the envelope's payload)."""

    kind: str
    signature: bytes
    public_der: bytes | None
    algorithm: str
    value: str


def parse_entry(body: bytes) -> LoggedEntry:
    """A ``hashedrekord`` (or ``rekord``) or ``dsse`` v0.0.1 entry body, as Rekor logs it
    (sigstore/rekor ``pkg/types``); Rejected for anything else."""
    try:
        entry = jsonsafe.Fields(
            jsonsafe.loads(body, "entry", max_bytes=MAX_SIGNATURE_PAYLOAD_BYTES), "entry"
        )
        kind = entry.text("kind")
        spec = entry.obj("spec")
        if kind in ("hashedrekord", "rekord"):
            signature = spec.obj("signature")
            logged_signature = signature.text("content")
            logged_key = signature.obj("publicKey").text("content")
            digest = spec.obj("data").obj("hash")
        elif kind == "dsse":
            signatures = spec.objects("signatures")
            if len(signatures) != 1:
                raise Rejected(f"the Rekor entry logs {len(signatures)} signatures, not one")
            logged_signature = signatures[0].text("signature")
            logged_key = signatures[0].text("verifier")
            digest = spec.obj("payloadHash")
        else:
            raise Rejected(f"the Rekor entry is a {kind[:40]!r}, not a hashedrekord or dsse")
        algorithm, value = digest.text("algorithm"), digest.text("value")
    except jsonsafe.JSONShapeError as exc:
        raise Rejected(f"the Rekor entry is malformed ({exc})") from None
    return LoggedEntry(
        kind,
        b64decode(logged_signature, "the Rekor entry's signature"),
        pem_der(b64decode(logged_key, "the Rekor entry's public key")),
        algorithm,
        value,
    )


def _check_entry(body: bytes, payload: bytes, encoded: str, public_der: bytes) -> None:
    """The logged entry is this signature, by this key or certificate, over this payload
    (cosign's compareSigs, comparePublicKey and bundleHash)."""
    logged = parse_entry(body)
    if logged.kind == "dsse":
        raise Rejected("the Rekor entry is a 'dsse', not a hashedrekord")
    if logged.signature != b64decode(encoded, "the signature annotation"):
        raise Rejected("the Rekor entry logs another signature")
    if logged.public_der != public_der:
        raise Rejected("the Rekor entry logs another key or certificate")
    if logged.algorithm != "sha256" or logged.value != hashlib.sha256(payload).hexdigest():
        raise Rejected("the Rekor entry logs another payload")


def pem_der(pem: bytes) -> bytes | None:
    """The DER bytes of the one PEM block in ``pem``."""
    blocks = list(pem_blocks(pem))
    if len(blocks) != 1:
        return None
    lines = blocks[0].strip().splitlines()[1:-1]
    try:
        return base64.b64decode(b"".join(lines), validate=True)
    except (binascii.Error, ValueError):
        return None
