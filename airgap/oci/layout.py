"""OCI image layout vocabulary (``oci-layout``, ``index.json``, ``blobs/sha256/HEX``).

Bundles carry a layout under ``images/``; its ``index.json`` names each image with
``org.opencontainers.image.ref.name`` set to its full original reference, so
``skopeo inspect oci:DIR:REF`` works on an extracted bundle.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import BinaryIO

from airgap.formats.jsonsafe import dump_indented
from airgap.oci.manifest import OCI_INDEX, REF_NAME_ANNOTATION, Descriptor

OCI_LAYOUT_FILE = "oci-layout"
INDEX_FILE = "index.json"
OCI_LAYOUT_CONTENT = b'{"imageLayoutVersion": "1.0.0"}'


def index_json(entries: list[tuple[str, Descriptor]]) -> bytes:
    """``index.json`` naming each ``(reference, descriptor)``, in the order given."""
    out = io.BytesIO()
    write_index_json(entries, out)
    return out.getvalue()


def write_index_json(entries: Iterable[tuple[str, Descriptor]], out: BinaryIO) -> None:
    """``index_json(entries)`` written to ``out`` a piece at a time (collect stages it
    as a file instead of holding ~0.3 KB of text per image until the tar is laid out)."""
    manifests = (
        Descriptor(
            d.media_type, d.digest, d.size, annotations={REF_NAME_ANNOTATION: reference}
        ).to_json()
        for reference, d in entries
    )  # dumped one at a time: a 2,000-image index is ~0.6 MB of text, not all objects
    dump_indented([("schemaVersion", 2), ("mediaType", OCI_INDEX), ("manifests", manifests)], out)
