"""OCI and Docker manifest vocabulary: media types, descriptors, manifest parsing (pure).

A manifest is always carried as its exact bytes plus the media type it was served with;
the parsed JSON is only ever read, never re-serialised, so digests never change.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from airgap.core.errors import AirgapError
from airgap.core.limits import MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES
from airgap.core.names import digest_problem, shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"

INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
IMAGE_MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
MANIFEST_TYPES = INDEX_TYPES | IMAGE_MANIFEST_TYPES
_MANIFEST_TYPE = {kind: kind for kind in MANIFEST_TYPES}
MANIFEST_ACCEPT = ", ".join([OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST])

REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
TITLE_ANNOTATION = "org.opencontainers.image.title"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_hex(digest: str) -> str:
    """The hex part of a ``sha256:`` digest; anything else is refused."""
    algorithm, _, hexpart = digest.partition(":")
    if algorithm != "sha256" or len(hexpart) != 64:
        raise AirgapError(f"unsupported digest {shown(digest)}: only sha256 is supported")
    return hexpart


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor as found in manifests and indexes."""

    media_type: str
    digest: str
    size: int
    platform: str | None = None
    annotations: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.annotations:
            data["annotations"] = dict(self.annotations)
        return data


@dataclass(frozen=True, slots=True)
class Manifest:
    """A manifest or index: its exact bytes, media type and digest."""

    data: bytes
    media_type: str
    digest: str

    @classmethod
    def from_bytes(
        cls, data: bytes, media_type: str | None = None, *, shape: bool = True
    ) -> Manifest:
        """A manifest of a supported type; with ``shape``, one that has what every
        manifest of its kind has (``_check_shape``)."""
        parsed = _load(data)
        declared = parsed.get("mediaType")
        kind = declared if isinstance(declared, str) and declared else media_type
        if not kind:
            kind = OCI_INDEX if "manifests" in parsed else OCI_MANIFEST
        kind = kind.split(";")[0].strip()
        if kind not in MANIFEST_TYPES:
            raise AirgapError(f"unsupported manifest media type {shown(kind)}")
        # the constant, not the parsed text: one string for all (collect holds 2,000)
        kind = _MANIFEST_TYPE[kind]
        if shape:
            _check_shape(parsed, kind)
        return cls(data=data, media_type=kind, digest=sha256_digest(data))

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES

    @property
    def json(self) -> dict[str, Any]:
        return _load(self.data)

    @property
    def size(self) -> int:
        return len(self.data)

    def descriptor(self, platform: str | None = None) -> Descriptor:
        return Descriptor(self.media_type, self.digest, len(self.data), platform)

    def children(self) -> list[Descriptor]:
        """Manifests an index points at (empty for an image manifest)."""
        if not self.is_index:
            return []
        index = Fields(self.json, "manifest")
        return [_descriptor(entry) for entry in index.objects("manifests")]

    def blobs(self) -> list[Descriptor]:
        """Config and layers of an image manifest (empty for an index)."""
        if self.is_index:
            return []
        parsed = Fields(self.json, "manifest")
        config = parsed.optional_obj("config")
        found = [_descriptor(config)] if config is not None else []
        found.extend(_descriptor(layer) for layer in parsed.objects("layers"))
        return found


def _check_shape(parsed: dict[str, Any], kind: str) -> None:
    """What every manifest of its kind has (the image spec's and Docker's schema 2):
    ``schemaVersion`` 2, and an index's ``manifests`` or an image's ``config``. Any JSON
    object a registry served was otherwise carried, signed, as an image with no blobs."""
    version = parsed.get("schemaVersion")
    if type(version) is not int or version != 2:
        raise AirgapError(f"manifest.schemaVersion is {shown(version)}, not 2")
    needed, shape = ("manifests", list) if kind in INDEX_TYPES else ("config", dict)
    if not isinstance(parsed.get(needed), shape):
        what = "a list" if shape is list else "an object"
        raise AirgapError(f"manifest.{needed}: expected {what} in a {kind}")


def _load(data: bytes) -> dict[str, Any]:
    """A manifest's JSON, within the size containerd and distribution accept and the
    depth any real manifest needs."""
    parsed = jsonsafe.loads(data, "manifest", max_bytes=MAX_MANIFEST_BYTES)
    if not isinstance(parsed, dict):
        raise AirgapError("manifest is not a JSON object")
    return parsed


def _descriptor(entry: Fields) -> Descriptor:
    """A descriptor with every field of its OCI type; a wrong one names its path
    (``manifest.layers[2].size: expected a non-negative integer, got ...``)."""
    digest = entry.text("digest")
    problem = digest_problem(digest)
    if problem:  # it becomes a URL path and a bundle member name: never a path of our own
        raise JSONShapeError(f"{entry.path('digest')}: {problem}")
    return Descriptor(
        media_type=entry.optional_text("mediaType") or "",
        digest=digest,
        size=entry.integer("size"),
        platform=format_platform(entry.raw("platform")),
        annotations=entry.text_map("annotations"),
    )


def format_platform(platform: Any) -> str | None:
    """``{"os": "linux", "architecture": "arm64", "variant": "v8"}`` -> ``linux/arm64/v8``."""
    if not isinstance(platform, dict):
        return None
    parts = [str(platform.get("os", "")), str(platform.get("architecture", ""))]
    if platform.get("variant"):
        parts.append(str(platform["variant"]))
    return "/".join(parts)


def platform_matches(platform: str | None, wanted: tuple[str, ...]) -> bool:
    """``linux/arm64`` matches ``linux/arm64/v8``; a variant in ``wanted`` must match."""
    if platform is None:
        return False
    have = platform.split("/")
    for want in wanted:
        parts = want.split("/")
        if have[: len(parts)] == parts:
            return True
    return False


def config_platform(config: bytes) -> str | None:
    """The platform an image config declares, for single-manifest images."""
    try:
        parsed = jsonsafe.loads(config, "image config", max_bytes=MAX_CONFIG_BYTES)
    except jsonsafe.JSONShapeError:
        return None  # the platform is only informative; the config is carried as is
    if not isinstance(parsed, dict) or "os" not in parsed:
        return None
    return format_platform(parsed)


# docker buildx puts attestation manifests (SLSA provenance, SBOMs) into the index
# itself, with platform unknown/unknown and these annotations naming their subject.
REFERENCE_TYPE_ANNOTATION = "vnd.docker.reference.type"
REFERENCE_DIGEST_ANNOTATION = "vnd.docker.reference.digest"
ATTESTATION_MANIFEST = "attestation-manifest"


def attestation_subject(entry: Any) -> str | None:
    """The digest a buildx attestation-manifest entry of an index is about, else None."""
    if not isinstance(entry, dict):
        return None
    annotations = entry.get("annotations")
    if not isinstance(annotations, dict):
        return None
    subject = annotations.get(REFERENCE_DIGEST_ANNOTATION)
    if annotations.get(REFERENCE_TYPE_ANNOTATION) != ATTESTATION_MANIFEST:
        return None
    return subject if isinstance(subject, str) else None


def filter_index(
    index: Manifest, wanted: tuple[str, ...], *, attestations: bool = True
) -> Manifest:
    """A new index keeping only ``wanted`` platforms (its digest necessarily changes),
    and, with ``attestations``, the buildx attestation manifests of the children it
    keeps (their platform is ``unknown/unknown``: they go with their subject, not with a
    platform)."""
    parsed = index.json
    entries = parsed.get("manifests", [])
    kept_digests = {
        entry.get("digest")
        for entry in entries
        if platform_matches(format_platform(entry.get("platform")), wanted)
    }
    kept = [
        entry
        for entry in entries
        if entry.get("digest") in kept_digests
        or (attestations and attestation_subject(entry) in kept_digests)
    ]
    parsed["manifests"] = kept
    data = json.dumps(parsed, indent=2).encode()
    return Manifest(data=data, media_type=index.media_type, digest=sha256_digest(data))
