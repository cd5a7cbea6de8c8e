"""Reading a bundle's header members without reading the rest of it.

``inspect`` only needs the manifest and signature, which collect writes as the first
two members, so it reads two headers and two small payloads however large the bundle,
with the same bounded tar reader verify uses (``airgap.bundle.tarread``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest
from airgap.bundle.tarread import TarFormatError, TarReader, TarTruncated
from airgap.errors import BundleError
from airgap.inputfile import open_regular
from airgap.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_SIGNATURE_BYTES, describe_size


@dataclass(frozen=True)
class BundleHead:
    manifest_bytes: bytes
    signature: bytes

    @property
    def manifest(self) -> BundleManifest:
        return BundleManifest.from_bytes(self.manifest_bytes)


def read_head(path: Path) -> BundleHead:
    """The manifest and signature bytes at the start of the bundle at ``path``."""
    fd, size = open_regular(path, "bundle")
    try:
        reader = TarReader(fd, size)
        manifest = _next_payload(reader, MANIFEST_NAME, MAX_BUNDLE_MANIFEST_BYTES, path)
        signature = _next_payload(reader, SIGNATURE_NAME, MAX_SIGNATURE_BYTES, path)
    except (TarFormatError, TarTruncated) as exc:
        raise BundleError(f"{path} is not a readable bundle tar: {exc}") from None
    finally:
        os.close(fd)
    return BundleHead(manifest, signature)


def _next_payload(reader: TarReader, expected: str, limit: int, path: Path) -> bytes:
    member = reader.next()
    if member is None or member.name != expected or not member.isreg():
        found = member.name if member else "end of archive"
        raise BundleError(f"{path}: expected {expected} next, found {found!r}")
    if member.size > limit:
        raise BundleError(f"{path}: {expected} is larger than the {describe_size(limit)} limit")
    data = os.pread(reader.fd, member.size, member.offset_data)
    if len(data) != member.size:
        raise BundleError(f"{path}: {expected} is truncated")
    return data
