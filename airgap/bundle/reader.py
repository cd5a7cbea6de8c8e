"""Reading a bundle's header members without reading the rest of it.

``inspect`` only needs the manifest and signature, which collect writes as the first
two members, so it reads two headers and two small payloads however large the bundle.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest
from airgap.errors import BundleError, InputError

MAX_MANIFEST_BYTES = 64 << 20


@dataclass(frozen=True)
class BundleHead:
    manifest_bytes: bytes
    signature: bytes

    @property
    def manifest(self) -> BundleManifest:
        return BundleManifest.from_bytes(self.manifest_bytes)


def read_head(path: Path) -> BundleHead:
    """The manifest and signature bytes at the start of the bundle at ``path``."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot open bundle {path}: {exc.strerror}") from exc
    with handle:
        try:
            with tarfile.open(fileobj=handle, mode="r|") as tar:
                payloads = [
                    _next_payload(tar, name, path) for name in (MANIFEST_NAME, SIGNATURE_NAME)
                ]
        except tarfile.TarError as exc:
            raise BundleError(f"{path} is not a readable bundle tar: {exc}") from exc
    return BundleHead(payloads[0], payloads[1])


def _next_payload(tar: tarfile.TarFile, expected: str, path: Path) -> bytes:
    member = tar.next()
    if member is None or member.name != expected or not member.isfile():
        found = member.name if member else "end of archive"
        raise BundleError(f"{path}: expected {expected} next, found {found}")
    if member.size > MAX_MANIFEST_BYTES:
        raise BundleError(f"{path}: {expected} is implausibly large")
    extracted = tar.extractfile(member)
    assert extracted is not None
    return extracted.read()
