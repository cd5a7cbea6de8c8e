"""Sign test images the way cosign does, with ``cryptography`` alone.

cosign's formats (checked against sigstore/cosign ``pkg/oci/static``,
``pkg/cosign/verify.go``, ``pkg/oci/remote``):

- the simple-signing payload ``{"critical": {"identity": {"docker-reference": R},
  "image": {"docker-manifest-digest": D}, "type": "cosign container image signature"},
  "optional": …}`` is a layer of media type
  ``application/vnd.dev.cosign.simplesigning.v1+json``, the base64 ECDSA (SHA-256)
  signature over its bytes in annotation ``dev.cosignproject.cosign/signature``;
- keyless: ``dev.sigstore.cosign/certificate`` (the short-lived leaf, PEM),
  ``dev.sigstore.cosign/chain`` (intermediates and root, PEM) and
  ``dev.sigstore.cosign/bundle``: ``{"SignedEntryTimestamp": b64, "Payload": {"body":
  b64 hashedrekord entry, "integratedTime", "logIndex", "logID"}}`` where the SET is the
  Rekor key's ECDSA signature over the RFC 8785 canonical JSON of ``Payload``;
- the signature manifest is pushed as ``sha256-HEX.sig`` in the image's repository.

A test Fulcio (root and intermediate CA issuing code-signing leaves with the issuer in
OIDs 1.3.6.1.4.1.57264.1.1 and .1.8) and a test Rekor key stand in for sigstore's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.harness import skopeo
from tests.harness.images import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, Descriptor, OciLayout

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE = "dev.cosignproject.cosign/signature"
CERTIFICATE = "dev.sigstore.cosign/certificate"
CHAIN = "dev.sigstore.cosign/chain"
BUNDLE = "dev.sigstore.cosign/bundle"
ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
SIGNED_AT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)  # long expired: checked at log time


def pem_public(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def payload(digest: str, reference: str, optional: dict[str, Any] | None = None) -> bytes:
    """cosign's simple-signing payload, as cosign marshals it (Go's json, one line)."""
    document = {
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": optional,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def sign(key: ec.EllipticCurvePrivateKey, data: bytes) -> str:
    return base64.b64encode(key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()


@dataclass
class Fulcio:
    """A test Fulcio: root and intermediate CA issuing code-signing leaves."""

    root_key: ec.EllipticCurvePrivateKey
    root: x509.Certificate
    intermediate_key: ec.EllipticCurvePrivateKey
    intermediate: x509.Certificate
    parents: tuple[x509.Certificate, ...] = ()  # CAs between the intermediate and root

    @classmethod
    def create(cls, name: str = "sigstore") -> Fulcio:
        root_key = ec.generate_private_key(ec.SECP384R1())
        root = _ca(f"{name}-root", root_key, root_key, None)
        intermediate_key = ec.generate_private_key(ec.SECP384R1())
        intermediate = _ca(f"{name}-intermediate", intermediate_key, root_key, root)
        return cls(root_key, root, intermediate_key, intermediate)

    def beneath(
        self,
        name: str,
        *,
        path_length: int | None = None,
        excluded_email: str | None = None,
        expired: bool = False,
    ) -> Fulcio:
        """This Fulcio with a new issuing CA signed by its intermediate (kept in the
        chain): a path-length limit, an excluded e-mail domain, or validity that ended
        before the signing time, as an attacker's or a careless CA's would have."""
        key = ec.generate_private_key(ec.SECP384R1())
        constraints = (
            x509.NameConstraints(None, [x509.RFC822Name(excluded_email)])
            if excluded_email
            else None
        )
        ca = _ca(
            name,
            key,
            self.intermediate_key,
            self.intermediate,
            path_length=path_length,
            name_constraints=constraints,
            expired=expired,
        )
        parents = (self.intermediate, *self.parents)
        return Fulcio(self.root_key, self.root, key, ca, parents)

    def root_pem(self) -> bytes:
        return self.root.public_bytes(serialization.Encoding.PEM)

    def chain_pem(self) -> str:
        return b"".join(
            c.public_bytes(serialization.Encoding.PEM)
            for c in (self.intermediate, *self.parents, self.root)
        ).decode()

    def issue(
        self,
        key: ec.EllipticCurvePrivateKey,
        identity: str,
        issuer: str,
        *,
        code_signing: bool = True,
        critical: tuple[x509.ExtensionType, ...] = (),
    ) -> x509.Certificate:
        """A ten-minute leaf for ``identity`` (an email, or a URI if it has ``://``),
        with the ``critical`` extensions added."""
        san: x509.GeneralName = (
            x509.UniformResourceIdentifier(identity)
            if "://" in identity
            else x509.RFC822Name(identity)
        )
        usages = [
            ExtendedKeyUsageOID.CODE_SIGNING if code_signing else ExtendedKeyUsageOID.SERVER_AUTH
        ]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(SIGNED_AT)
            .not_valid_after(SIGNED_AT + timedelta(minutes=10))
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                critical=True,
            )
            .add_extension(x509.UnrecognizedExtension(ISSUER_V1, issuer.encode()), critical=False)
            .add_extension(
                x509.UnrecognizedExtension(ISSUER_V2, _utf8_string(issuer)), critical=False
            )
        )
        for extension in critical:
            builder = builder.add_extension(extension, critical=True)
        return builder.sign(self.intermediate_key, hashes.SHA384())


def _utf8_string(text: str) -> bytes:
    data = text.encode()
    assert len(data) < 128
    return bytes([0x0C, len(data)]) + data


def _ca(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    signer: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    *,
    path_length: int | None = None,
    name_constraints: x509.NameConstraints | None = None,
    expired: bool = False,
) -> x509.Certificate:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.test"),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(SIGNED_AT - timedelta(days=365))
        .not_valid_after(
            SIGNED_AT - timedelta(days=1) if expired else SIGNED_AT + timedelta(days=3650)
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
    )
    if name_constraints is not None:
        builder = builder.add_extension(name_constraints, critical=True)
    return builder.sign(signer, hashes.SHA384())


@dataclass
class Rekor:
    """A test Rekor log key: signs entry timestamps (SETs) as the real log does."""

    key: ec.EllipticCurvePrivateKey = field(default_factory=new_key)
    log_index: int = 1000

    @property
    def log_id(self) -> str:
        der = self.key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return hashlib.sha256(der).hexdigest()

    def public_pem(self) -> bytes:
        return pem_public(self.key)

    def bundle(
        self, payload_bytes: bytes, signature_b64: str, public_pem: bytes, *, at: datetime
    ) -> str:
        """The ``dev.sigstore.cosign/bundle`` annotation for a hashedrekord entry."""
        body = {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {
                    "hash": {
                        "algorithm": "sha256",
                        "value": hashlib.sha256(payload_bytes).hexdigest(),
                    }
                },
                "signature": {
                    "content": signature_b64,
                    "publicKey": {"content": base64.b64encode(public_pem).decode()},
                },
            },
        }
        entry, promise = self.log(json.dumps(body, separators=(",", ":")).encode(), at=at)
        return json.dumps(
            {"SignedEntryTimestamp": base64.b64encode(promise).decode(), "Payload": entry},
            separators=(",", ":"),
        )

    def log(self, body: bytes, *, at: datetime) -> tuple[dict[str, Any], bytes]:
        """Log an entry body: ``{body, integratedTime, logIndex, logID}`` and the signed
        entry timestamp over its RFC 8785 canonical JSON."""
        self.log_index += 1
        entry = {
            "body": base64.b64encode(body).decode(),
            "integratedTime": int(at.timestamp()),
            "logIndex": self.log_index,
            "logID": self.log_id,
        }
        canonical = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
        return entry, self.key.sign(canonical, ec.ECDSA(hashes.SHA256()))


@dataclass(frozen=True)
class SignatureLayer:
    """One layer of a cosign signature manifest: payload bytes and annotations."""

    payload: bytes
    annotations: dict[str, str]


def keyed_layer(key: ec.EllipticCurvePrivateKey, digest: str, reference: str) -> SignatureLayer:
    data = payload(digest, reference)
    return SignatureLayer(data, {SIGNATURE: sign(key, data)})


def keyless_layer(
    fulcio: Fulcio,
    rekor: Rekor,
    digest: str,
    reference: str,
    *,
    identity: str,
    issuer: str,
    code_signing: bool = True,
    payload_bytes: bytes | None = None,
    critical: tuple[x509.ExtensionType, ...] = (),
) -> SignatureLayer:
    """A keyless signature: ephemeral key, Fulcio leaf, chain, Rekor bundle."""
    key = new_key()
    data = payload_bytes if payload_bytes is not None else payload(digest, reference)
    signature = sign(key, data)
    leaf = fulcio.issue(key, identity, issuer, code_signing=code_signing, critical=critical)
    leaf_pem = leaf.public_bytes(serialization.Encoding.PEM)
    bundle = rekor.bundle(data, signature, leaf_pem, at=SIGNED_AT + timedelta(minutes=1))
    return SignatureLayer(
        data,
        {
            SIGNATURE: signature,
            CERTIFICATE: leaf_pem.decode(),
            CHAIN: fulcio.chain_pem(),
            BUNDLE: bundle,
        },
    )


def signature_manifest(layout: OciLayout, layers: list[SignatureLayer]) -> Descriptor:
    """A cosign signature image: config naming the payloads, one layer per signature."""
    descriptors = []
    for layer in layers:
        blob = layout.write_blob(layer.payload, SIMPLE_SIGNING)
        descriptors.append(
            Descriptor(SIMPLE_SIGNING, blob.digest, blob.size, annotations=layer.annotations)
        )
    config = {
        "architecture": "",
        "config": {},
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": [d.digest for d in descriptors]},
    }
    config_blob = layout.write_blob(json.dumps(config, separators=(",", ":")).encode(), OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_blob.to_json(),
        "layers": [d.to_json() for d in descriptors],
    }
    return layout.write_blob(json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)


def referrer_manifest(
    layout: OciLayout,
    subject: Descriptor,
    artifact_type: str,
    content: bytes,
    content_type: str,
    annotations: dict[str, str] | None = None,
) -> Descriptor:
    """An OCI 1.1 artifact with ``subject`` (an SBOM, say): empty config, one layer."""
    empty = layout.write_blob(b"{}", "application/vnd.oci.empty.v1+json")
    layer = layout.write_blob(content, content_type)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": empty.to_json(),
        "layers": [layer.to_json()],
        "subject": subject.to_json(),
    }
    if annotations:
        manifest["annotations"] = annotations
    return layout.write_blob(json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)


def referrers_index(layout: OciLayout, referrers: list[tuple[Descriptor, str]]) -> Descriptor:
    """The index a referrers tag (``sha256-HEX``) holds: one descriptor per referrer."""
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{**d.to_json(), "artifactType": kind} for d, kind in referrers],
    }
    return layout.write_blob(
        json.dumps(index, separators=(",", ":")).encode(),
        "application/vnd.oci.image.index.v1+json",
    )


def push(layout: OciLayout, descriptor: Descriptor, registry: Any, reference: str) -> None:
    """Push one manifest (and its blobs) from ``layout`` as ``reference`` (``repo:tag``
    or ``repo@digest``), byte for byte, with skopeo."""
    name = f"push-{descriptor.digest[7:19]}"
    layout.tag(name, descriptor)
    skopeo.copy(
        layout.ref(name),
        skopeo.docker_ref(reference, registry),
        dest_registry=registry,
        preserve_digests=True,
    )


def write_pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def put_manifest(
    registry: Any, repository: str, reference: str, data: bytes, media_type: str
) -> None:
    """PUT manifest bytes as they are (an index skopeo would insist on converting, such
    as a referrers tag's index of artifacts) into a plain-HTTP, password-less registry."""
    put_manifest_url(registry.url, repository, reference, data, media_type)


def upload(
    url: str, repository: str, layout: OciLayout, descriptor: Descriptor, reference: str
) -> None:
    """Push a manifest and everything below it from ``layout`` with plain HTTP requests
    (monolithic uploads), for a password-less registry at ``url``."""
    data = layout.blob_path(descriptor.digest).read_bytes()
    document = json.loads(data)
    for child in document.get("manifests", []):
        child_descriptor = Descriptor(child["mediaType"], child["digest"], child["size"])
        upload(url, repository, layout, child_descriptor, child["digest"])
    blobs = [document["config"]] if "config" in document else []
    for blob in blobs + document.get("layers", []):
        start = httpx.post(f"{url}/v2/{repository}/blobs/uploads/")
        assert start.status_code == 202, start.text
        location = httpx.URL(url).join(start.headers["Location"])
        done = httpx.put(
            location.copy_add_param("digest", blob["digest"]),
            content=layout.blob_path(blob["digest"]).read_bytes(),
        )
        assert done.status_code == 201, done.text
    put_manifest_url(url, repository, reference, data, descriptor.media_type)


def put_manifest_url(
    url: str, repository: str, reference: str, data: bytes, media_type: str
) -> None:
    response = httpx.put(
        f"{url}/v2/{repository}/manifests/{reference}",
        content=data,
        headers={"Content-Type": media_type},
    )
    assert response.status_code in (200, 201), (response.status_code, response.text)


def attestation_manifest(layout: OciLayout, statement: dict[str, Any]) -> Descriptor:
    """A buildx-style attestation manifest: one in-toto statement layer."""
    layer = layout.write_blob(
        json.dumps(statement, separators=(",", ":")).encode(), "application/vnd.in-toto+json"
    )
    config = layout.write_blob(b'{"architecture":"unknown","os":"unknown"}', OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config.to_json(),
        "layers": [
            {
                **layer.to_json(),
                "annotations": {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"},
            }
        ],
    }
    return layout.write_blob(json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)


def buildx_index(
    layout: OciLayout, children: list[tuple[Descriptor, dict[str, str]]]
) -> tuple[Descriptor, dict[str, Descriptor]]:
    """An index as ``docker buildx build --provenance`` writes it: every platform's
    manifest, then an attestation manifest per platform (``unknown/unknown``,
    ``vnd.docker.reference.type: attestation-manifest``). Returns the index and each
    child's attestation manifest by child digest."""
    entries = [{**d.to_json(), "platform": p} for d, p in children]
    attestations = {}
    for child, _ in children:
        statement = {
            "_type": "https://in-toto.io/Statement/v0.1",
            "subject": [{"digest": {"sha256": child.digest[7:]}}],
        }
        attestation = attestation_manifest(layout, statement)
        attestations[child.digest] = attestation
        entries.append(
            {
                **attestation.to_json(),
                "platform": {"architecture": "unknown", "os": "unknown"},
                "annotations": {
                    "vnd.docker.reference.digest": child.digest,
                    "vnd.docker.reference.type": "attestation-manifest",
                },
            }
        )
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    data = json.dumps(index, separators=(",", ":")).encode()
    return layout.write_blob(data, OCI_INDEX), attestations


def dsse_manifest(layout: OciLayout, digest: str) -> Descriptor:
    """cosign's ``.att`` image: a DSSE envelope layer (its signature is not checked)."""
    statement = {
        "_type": "https://in-toto.io/Statement/v0.1",
        "subject": [{"digest": {"sha256": digest[7:]}}],
    }
    envelope = {
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64.b64encode(json.dumps(statement).encode()).decode(),
        "signatures": [{"keyid": "", "sig": "MEUCIQ=="}],
    }
    layer = layout.write_blob(
        json.dumps(envelope).encode(), "application/vnd.dsse.envelope.v1+json"
    )
    config = layout.write_blob(b"{}", OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config.to_json(),
        "layers": [layer.to_json()],
    }
    return layout.write_blob(json.dumps(manifest, separators=(",", ":")).encode(), OCI_MANIFEST)


# -- cosign 3: Sigstore bundles as OCI referrers ---------------------------------------

BUNDLE_V03 = "application/vnd.dev.sigstore.bundle.v0.3+json"
COSIGN_SIGN = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO = "application/vnd.in-toto+json"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def sigstore_bundle(
    rekor: Rekor,
    digest: str,
    *,
    key: ec.EllipticCurvePrivateKey | None = None,
    fulcio: Fulcio | None = None,
    identity: str = "",
    issuer: str = "",
    predicate: str = COSIGN_SIGN,
    logged: datetime = SIGNED_AT + timedelta(minutes=1),
) -> dict[str, Any]:
    """What ``cosign sign`` (v3) writes for ``digest``: a v0.3 bundle holding a DSSE
    envelope of an in-toto statement (cosign's signature predicate), its certificate
    (keyless, a Fulcio leaf; else a public key hint) and a ``dsse`` Rekor entry with its
    inclusion promise. Returned as a document for tests to tamper with."""
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": predicate,
        "predicate": {},
    }
    payload = json.dumps(statement, separators=(",", ":")).encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(IN_TOTO), IN_TOTO.encode(), len(payload), payload)
    material: dict[str, Any]
    if fulcio is not None:
        key = new_key()
        leaf = fulcio.issue(key, identity, issuer)
        verifier = leaf.public_bytes(serialization.Encoding.PEM)
        material = {
            "certificate": {"rawBytes": _b64(leaf.public_bytes(serialization.Encoding.DER))}
        }
    else:
        assert key is not None
        verifier = pem_public(key)
        material = {"publicKey": {"hint": _b64(hashlib.sha256(verifier).digest())}}
    signature = key.sign(pae, ec.ECDSA(hashes.SHA256()))
    envelope = {
        "payload": _b64(payload),
        "payloadType": IN_TOTO,
        "signatures": [{"sig": _b64(signature)}],
    }
    body = {
        "apiVersion": "0.0.1",
        "kind": "dsse",
        "spec": {
            "envelopeHash": {
                "algorithm": "sha256",
                "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest(),
            },
            "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
            "signatures": [{"signature": _b64(signature), "verifier": _b64(verifier)}],
        },
    }
    entry, promise = rekor.log(json.dumps(body, separators=(",", ":")).encode(), at=logged)
    tlog = {
        "logIndex": str(entry["logIndex"]),
        "logId": {"keyId": _b64(bytes.fromhex(rekor.log_id))},
        "kindVersion": {"kind": "dsse", "version": "0.0.1"},
        "integratedTime": str(entry["integratedTime"]),
        "inclusionPromise": {"signedEntryTimestamp": _b64(promise)},
        "canonicalizedBody": entry["body"],
    }
    return {
        "mediaType": BUNDLE_V03,
        "verificationMaterial": {**material, "tlogEntries": [tlog]},
        "dsseEnvelope": envelope,
    }


def bundle_referrer(
    layout: OciLayout, subject: Descriptor, bundle: dict[str, Any], predicate: str = COSIGN_SIGN
) -> Descriptor:
    """The referrer cosign 3 pushes: artifact type and one layer the v0.3 bundle, the
    annotations ``WriteAttestationNewBundleFormat`` sets."""
    annotations = {
        "dev.sigstore.bundle.content": "dsse-envelope",
        "dev.sigstore.bundle.predicateType": predicate,
        "org.opencontainers.image.created": "2024-05-01T12:01:00Z",
    }
    data = json.dumps(bundle, separators=(",", ":")).encode()
    return referrer_manifest(layout, subject, BUNDLE_V03, data, BUNDLE_V03, annotations)
