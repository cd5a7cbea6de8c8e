"""Reading a bundle's header members without reading the rest of it.

``inspect`` only needs the manifest and signature, which collect writes as the first
two members, so it reads two headers and two small payloads however large the bundle,
with the same bounded tar reader verify uses (``airgap.bundle.tarread``), from the
bundle file or its first part (``airgap.bundle.source``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.source import BundleSource, open_source
from airgap.bundle.tarread import TarReader, TarTruncated
from airgap.core.errors import BundleError
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_SIGNATURE_BYTES, describe_size
from airgap.core.names import shown
from airgap.formats.tarheader import TarFormatError


@dataclass(frozen=True)
class BundleHead:
    """A bundle's first two members as bytes, unparsed until the signature over them has
    been checked."""

    manifest_bytes: bytes
    signature: bytes

    @property
    def manifest(self) -> BundleManifest:
        return BundleManifest.from_bytes(self.manifest_bytes)


def read_head(path: Path | BundleSource) -> BundleHead:
    """The manifest and signature bytes at the start of the bundle ``path`` names (a
    file, or its parts), or of an open source."""
    if isinstance(path, BundleSource):
        return _read_head(path)
    with open_source(path) as source:
        return _read_head(source)


def _read_head(source: BundleSource) -> BundleHead:
    path = source.path
    try:
        reader = TarReader(source)
        manifest = _next_payload(reader, MANIFEST_NAME, MAX_BUNDLE_MANIFEST_BYTES, path)
        signature = _next_payload(reader, SIGNATURE_NAME, MAX_SIGNATURE_BYTES, path)
    except (TarFormatError, TarTruncated) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from None
    return BundleHead(manifest, signature)


def _next_payload(reader: TarReader, expected: str, limit: int, path: Path) -> bytes:
    member = reader.next()
    if member is None or member.name != expected or not member.isreg():
        found = member.name if member else "end of archive"
        raise BundleError(f"{path}: expected {expected} next, found {shown(found)}")
    if member.size > limit:
        raise BundleError(f"{path}: {expected} is larger than the {describe_size(limit)} limit")
    data = reader.pread(member.size, member.offset_data)
    if len(data) != member.size:
        raise BundleError(f"{path}: {expected} is truncated")
    return data
