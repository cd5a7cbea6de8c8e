"""The names cosign and the OCI distribution spec give attached artifacts (pure).

Checked against upstream sources:

- cosign ``pkg/oci/remote``: signatures, attestations and SBOMs of ``sha256:HEX`` live
  in the subject's repository under the tags ``sha256-HEX.sig``, ``.att`` and ``.sbom``
  (``normalizeWithSeparator``); cosign's OCI 1.1 mode instead pushes a manifest with a
  ``subject`` whose config media type (its artifact type) is
  ``application/vnd.dev.cosign.artifact.sig.v1+json``, and cosign 3 pushes Sigstore
  bundles (``application/vnd.dev.sigstore.bundle.v0.3+json``, annotation
  ``dev.sigstore.bundle.content: dsse-envelope``, and ``dev.sigstore.bundle.predicateType``
  naming the statement's predicate: ``https://sigstore.dev/cosign/sign/v1`` for what
  ``cosign sign`` writes, a signature, anything else an attestation;
  ``pkg/oci/remote/write.go`` ``WriteAttestationNewBundleFormat``).
- cosign ``pkg/oci/static``: a signature layer is the simple-signing payload
  (``application/vnd.dev.cosign.simplesigning.v1+json``) with the base64 signature in
  annotation ``dev.cosignproject.cosign/signature``; keyless ones add
  ``dev.sigstore.cosign/certificate``, ``dev.sigstore.cosign/chain`` (PEM) and
  ``dev.sigstore.cosign/bundle`` (the Rekor SET).
- OCI distribution spec 1.1: ``GET /v2/NAME/referrers/DIGEST`` answers an image index
  of descriptors carrying ``artifactType`` and annotations; a registry without the API
  answers 404 and clients use the referrers tag ``ALG-HEX`` (algorithm cut to 32
  characters, hex to 64) holding such an index.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from airgap.core.names import digest_problem
from airgap.oci.manifest import Manifest

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
CHAIN_ANNOTATION = "dev.sigstore.cosign/chain"
BUNDLE_ANNOTATION = "dev.sigstore.cosign/bundle"
COSIGN_SIGNATURE_TYPE = "cosign container image signature"
COSIGN_SIGNATURE_ARTIFACT = "application/vnd.dev.cosign.artifact.sig.v1+json"
SIGSTORE_BUNDLE_PREFIX = "application/vnd.dev.sigstore.bundle"
SIGSTORE_BUNDLE_CONTENT = "dev.sigstore.bundle.content"
SIGSTORE_BUNDLE_PREDICATE = "dev.sigstore.bundle.predicateType"
COSIGN_SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
OCI_EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"


class Kind(StrEnum):
    """What an attached artifact is."""

    SIGNATURE = "signature"
    ATTESTATION = "attestation"
    SBOM = "sbom"
    OTHER = "other"


class Via(StrEnum):
    """How an artifact is attached to its subject (and so how import re-attaches it)."""

    TAG = "tag"  # cosign's tag schema: sha256-HEX.sig|.att|.sbom
    REFERRERS = "referrers"  # a manifest with ``subject`` (referrers API or its tag)
    INDEX = "index"  # a buildx attestation manifest inside the image's own index


# cosign's tag suffixes, in the order collect asks for them
TAG_KINDS: dict[str, Kind] = {"sig": Kind.SIGNATURE, "att": Kind.ATTESTATION, "sbom": Kind.SBOM}
_TAG_RE = re.compile(r"^sha256-([0-9a-f]{64})(?:\.(sig|att|sbom))?$")


def _hex(subject: str) -> str:
    problem = digest_problem(subject)
    if problem or not subject.startswith("sha256:"):
        raise ValueError(f"not a sha256 digest: {subject[:80]!r}")
    return subject.split(":", 1)[1]


def cosign_tag(subject: str, suffix: str) -> str:
    """``sha256:HEX`` + ``sig`` -> ``sha256-HEX.sig`` (cosign's tag schema)."""
    if suffix not in TAG_KINDS:
        raise ValueError(f"not a cosign tag suffix: {suffix!r}")
    return f"sha256-{_hex(subject)}.{suffix}"


def referrers_tag(subject: str) -> str:
    """``sha256:HEX`` -> ``sha256-HEX``: the referrers tag schema (sha256 needs no cut)."""
    return f"sha256-{_hex(subject)}"


def parse_tag(tag: str) -> tuple[str, Kind | None] | None:
    """``sha256-HEX.sig`` -> (``sha256:HEX``, signature); ``sha256-HEX`` -> (digest,
    None); anything else -> None."""
    match = _TAG_RE.match(tag)
    if match is None:
        return None
    suffix = match.group(2)
    return f"sha256:{match.group(1)}", TAG_KINDS[suffix] if suffix else None


def is_signature_layer(media_type: str) -> bool:
    """A layer verify reads whole: a simple-signing payload or a Sigstore bundle."""
    return media_type == SIMPLE_SIGNING or media_type.lower().startswith(SIGSTORE_BUNDLE_PREFIX)


def classify(artifact_type: str | None, annotations: dict[str, str]) -> Kind:
    """The kind of a referrer from its artifact type (or config media type)."""
    kind = (artifact_type or "").lower()
    if kind.startswith(SIGSTORE_BUNDLE_PREFIX):
        # cosign 3 ``sign`` writes a DSSE envelope too, its predicate cosign's own
        dsse = annotations.get(SIGSTORE_BUNDLE_CONTENT) == "dsse-envelope"
        signs = annotations.get(SIGSTORE_BUNDLE_PREDICATE) == COSIGN_SIGN_PREDICATE
        return Kind.ATTESTATION if dsse and not signs else Kind.SIGNATURE
    if kind.startswith("application/vnd.dev.cosign.artifact."):
        suffix = kind.removeprefix("application/vnd.dev.cosign.artifact.").split(".", 1)[0]
        return TAG_KINDS.get(suffix, Kind.OTHER)
    if "signature" in kind:  # notation: application/vnd.cncf.notary.signature
        return Kind.SIGNATURE
    if "in-toto" in kind or "dsse" in kind or "attestation" in kind or "provenance" in kind:
        return Kind.ATTESTATION
    if "spdx" in kind or "cyclonedx" in kind or "sbom" in kind or "syft" in kind:
        return Kind.SBOM
    return Kind.OTHER


def referrer_descriptor(manifest: Manifest) -> dict[str, Any]:
    """A referrers-list descriptor: ``artifactType`` from the manifest, else its config's
    media type; the manifest's annotations copied (distribution spec 1.1)."""
    document = manifest.json
    entry: dict[str, Any] = {
        "mediaType": manifest.media_type,
        "digest": manifest.digest,
        "size": manifest.size,
    }
    config = document.get("config")
    artifact_type = document.get("artifactType") or (
        config.get("mediaType") if isinstance(config, dict) else None
    )
    if isinstance(artifact_type, str) and artifact_type:
        entry["artifactType"] = artifact_type
    annotations = document.get("annotations")
    if isinstance(annotations, dict) and annotations:
        entry["annotations"] = annotations
    return entry
