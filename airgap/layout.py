"""OCI image layout on disk (``oci-layout``, ``index.json``, ``blobs/sha256/HEX``).

Blobs are written through a temporary file and renamed only after their digest and size
check out, so a blob present under its name is always a good blob; that makes an
interrupted copy safe to resume and lets blobs shared between images be stored once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from pathlib import Path
from typing import BinaryIO

from airgap.errors import DigestMismatchError
from airgap.fsutil import atomic_writer, write_atomic
from airgap.oci import OCI_INDEX, REF_NAME_ANNOTATION, Descriptor, Manifest, digest_hex

OCI_LAYOUT_FILE = "oci-layout"
INDEX_FILE = "index.json"
OCI_LAYOUT_CONTENT = b'{"imageLayoutVersion": "1.0.0"}'


class LayoutWriter:
    """Builds an OCI image layout; safe to use from several threads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._blobs = root / "blobs" / "sha256"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._entries: list[Descriptor] = []
        self._lock = threading.Lock()
        write_atomic(root / OCI_LAYOUT_FILE, OCI_LAYOUT_CONTENT)

    def blob_path(self, digest: str) -> Path:
        return self._blobs / digest_hex(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def blob_sink(self, digest: str) -> contextlib.AbstractContextManager[BinaryIO]:
        """A file to stream a blob into; it takes the blob's name only if the caller
        finishes without error (the caller verifies the digest while streaming)."""
        return atomic_writer(self.blob_path(digest))

    def write_manifest(self, manifest: Manifest) -> None:
        """Store a manifest's exact bytes as a blob (checked against its digest)."""
        if hashlib.sha256(manifest.data).hexdigest() != digest_hex(manifest.digest):
            raise DigestMismatchError(f"manifest bytes do not match {manifest.digest}")
        if not self.has_blob(manifest.digest):
            write_atomic(self.blob_path(manifest.digest), manifest.data)

    def add_reference(self, ref_name: str, descriptor: Descriptor) -> None:
        """Name ``descriptor`` in ``index.json`` (``oci:DIR:REF`` for skopeo)."""
        entry = Descriptor(
            descriptor.media_type,
            descriptor.digest,
            descriptor.size,
            annotations={REF_NAME_ANNOTATION: ref_name},
        )
        with self._lock:
            self._entries.append(entry)

    def write_index(self) -> bytes:
        """Write ``index.json`` (entries in the order they were added); returns its bytes."""
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [entry.to_json() for entry in self._entries],
        }
        data = json.dumps(index, indent=2).encode() + b"\n"
        write_atomic(self.root / INDEX_FILE, data)
        return data
