"""A bundle's signed manifest, from the bundle or from the manifest file on its own.

``diff`` and ``collect --base`` need only what a bundle's manifest says, never its
blobs: the manifest is read from the head of the bundle (two members, however large the
bundle), or from ``airgap-bundle.json`` extracted from it (``tar -xf B.tar
airgap-bundle.json airgap-bundle.json.sig``), which is all a connected side keeps of a
bundle that crossed the gap. With keys, the signature (the bundle's second member, or
the ``.sig`` file next to the manifest) is checked before the manifest is parsed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import SIGNATURE_NAME
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.bundle.signing import verify
from airgap.core.errors import BundleError, SignatureError
from airgap.core.inputfile import open_regular, read_small
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_SIGNATURE_BYTES

SNIFF_BYTES = 64


@dataclass(frozen=True)
class SignedManifest:
    """A manifest, its exact bytes, and who signed them (None: not checked)."""

    path: Path
    data: bytes
    manifest: BundleManifest
    signer: str | None

    @property
    def digest(self) -> str:
        """``sha256:…`` of the signed manifest bytes: what names a bundle as a base."""
        return "sha256:" + hashlib.sha256(self.data).hexdigest()


def is_manifest_file(path: Path) -> bool:
    """Whether ``path`` is a manifest on its own (JSON) rather than a bundle (tar, or
    its parts ``NAME.tar.000``, … when ``NAME.tar`` itself does not exist)."""
    if not path.exists() and not path.is_symlink():
        return False  # a split bundle, or nothing: the bundle reader says which
    fd, _ = open_regular(path, "bundle")
    try:
        head = os.pread(fd, SNIFF_BYTES, 0)
    finally:
        os.close(fd)
    return head.lstrip()[:1] == b"{"


def load_manifest(
    path: Path, keys: list[Ed25519PublicKey] | None, *, what: str = "bundle"
) -> SignedManifest:
    """The manifest of the bundle (or manifest file) at ``path``; with ``keys``, its
    signature is verified first, and a bad one is a SignatureError naming ``path``."""
    if is_manifest_file(path):
        data = read_small(path, MAX_BUNDLE_MANIFEST_BYTES, f"{what} manifest")
        signature = _sibling_signature(path, what) if keys is not None else b""
    else:
        head = read_head(path)
        data, signature = head.manifest_bytes, head.signature
    signer = None
    if keys is not None:
        try:
            signer = verify(signature, data, keys)
        except SignatureError as exc:
            raise SignatureError(f"{what} {path}: {exc}") from None
    try:
        manifest = BundleManifest.from_bytes(data)
    except BundleError as exc:
        raise BundleError(f"{what} {path}: {exc}") from None
    return SignedManifest(path, data, manifest, signer)


def _sibling_signature(path: Path, what: str) -> bytes:
    """``PATH.sig``, or ``airgap-bundle.json.sig`` beside it, as tar extracts it."""
    for candidate in (Path(f"{path}.sig"), path.with_name(SIGNATURE_NAME)):
        if candidate.is_file():
            return read_small(candidate, MAX_SIGNATURE_BYTES, f"{what} signature")
    raise BundleError(
        f"{what} {path}: no signature next to it ({path.name}.sig); extract "
        f"{SIGNATURE_NAME} with the manifest, or leave out the key"
    )
