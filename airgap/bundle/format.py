"""The bundle manifest: what a bundle holds, in one signed JSON document.

A bundle is an uncompressed tar. Its first member is ``airgap-bundle.json`` (this
manifest), its second ``airgap-bundle.json.sig`` (a detached Ed25519 signature over the
manifest's exact bytes); every other member is listed in ``files`` with its sha256 and
size, so one signature covers everything. Layers are already compressed, and an
uncompressed tar can be read member by member with seeks, which is what lets import
push straight from it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from airgap.errors import BundleError

FORMAT_VERSION = 1
MANIFEST_NAME = "airgap-bundle.json"
SIGNATURE_NAME = "airgap-bundle.json.sig"
IMAGES_DIR = "images"
PROVIDERS_DIR = "providers"


@dataclass(frozen=True)
class FileRecord:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ProviderRecord:
    name: str
    type: str  # the operator kind: CoreProvider, InfrastructureProvider, ...
    version: str
    contract: str
    label: str  # clusterctl local-repository label: cluster-api, infrastructure-docker, ...
    source: str
    metadata: str  # bundle path of metadata.yaml
    components: str  # bundle path of the components file
    images: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ImageRecord:
    reference: str  # the normalised original reference, also its ref.name in the layout
    digest: str  # digest of the top manifest or index stored in the bundle
    media_type: str
    platforms: list[str]
    size: int  # manifests + unique blobs of this image, in bytes
    source_digest: str | None = None  # set when a platform filter rewrote the index
    kept_whole: str | None = None  # why a platform filter left it whole ("pinned by digest")


@dataclass(frozen=True)
class BundleManifest:
    created: str
    tool_version: str
    providers: list[ProviderRecord]
    images: list[ImageRecord]
    files: list[FileRecord]
    format_version: int = FORMAT_VERSION

    def to_bytes(self) -> bytes:
        """Deterministic JSON: the exact bytes that get signed."""
        document = {
            "formatVersion": self.format_version,
            "created": self.created,
            "tool": {"name": "airgap", "version": self.tool_version},
            "providers": [_camel(asdict(p)) for p in self.providers],
            "images": [_camel(asdict(i)) for i in self.images],
            "files": [asdict(f) for f in self.files],
        }
        return json.dumps(document, indent=2, sort_keys=False).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> BundleManifest:
        try:
            document = json.loads(data)
            if document.get("formatVersion") != FORMAT_VERSION:
                raise BundleError(
                    f"{MANIFEST_NAME}: unsupported format version {document.get('formatVersion')!r}"
                )
            return cls(
                created=str(document["created"]),
                tool_version=str(document["tool"]["version"]),
                providers=[ProviderRecord(**_snake(p)) for p in document["providers"]],
                images=[ImageRecord(**_snake(i)) for i in document["images"]],
                files=[FileRecord(**f) for f in document["files"]],
            )
        except BundleError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"{MANIFEST_NAME} is malformed: {exc}") from exc

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        head, *rest = key.split("_")
        out[head + "".join(part.title() for part in rest)] = value
    return out


def _snake(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        out["".join(f"_{c.lower()}" if c.isupper() else c for c in key)] = value
    return out


def blob_member(digest: str) -> str:
    """The tar member name of a blob in the bundle's OCI layout."""
    algorithm, _, hexpart = digest.partition(":")
    return f"{IMAGES_DIR}/blobs/{algorithm}/{hexpart}"
