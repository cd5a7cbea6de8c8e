"""What the far side already holds, for a delta: from a base bundle or a have-list.

``collect --base OLD.tar`` and ``collect --have have.json`` carry only the manifests and
blobs the disconnected registry does not already hold; the rest is recorded in the new
bundle as relied on (``DeltaRecord``), and import checks the target holds it before it
pushes anything.

Trust: the base and the have-list are only used to leave content out. A lying base (or
have-list) can only make the delta incomplete, never put a byte into it that was not
fetched and checked by digest here, and the import of an incomplete delta fails before
it pushes anything, naming the images. ``--base-key`` checks the base's signature all
the same, so a delta is only ever made against a bundle its signer vouched for.

Where a digest is held matters: import looks for it in the target repositories of the
images that rely on it (a blob mounts from one to another, a manifest is copied). So a
digest is left out only if an image using it comes from a source repository that held
it; one held only by an image the update drops, or by another repository, is carried
again. A manifest file alone (no tar) does not say which image a blob belongs to: its
digests count as held anywhere, and import finds them in the repositories of the images
relying on them, or through its mount hints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import ImageRecord, blob_member
from airgap.bundle.manifestfile import is_manifest_file, load_manifest
from airgap.core.errors import AirgapError, BundleError, InputError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_HAVE_LIST_BYTES
from airgap.oci.havelist import HaveList
from airgap.oci.manifest import Manifest
from airgap.oci.reference import parse_reference
from airgap.verify.bundle import VerifiedBundle, verify_bundle


@dataclass
class Holdings:
    """Source repository -> digests the far side holds for it; ``anywhere``: digests
    held in some repository nobody can name (a base given as a manifest only)."""

    repositories: dict[str, set[str]] = field(default_factory=dict)
    anywhere: set[str] = field(default_factory=set)
    base: str | None = None  # sha256 of the base bundle's signed manifest
    have_list: str | None = None  # sha256 of the have-list file

    def add(self, repository: str, digests: Iterable[str]) -> None:
        self.repositories.setdefault(repository, set()).update(digests)

    def held_for(self, repository: str) -> set[str]:
        """Every digest held under ``repository`` (a source repository), or anywhere."""
        return self.repositories.get(repository, set()) | self.anywhere


def load_holdings(
    base: Path | None, base_keys: list[Ed25519PublicKey] | None, have: Path | None
) -> Holdings | None:
    """What ``--base`` and ``--have`` say the far side holds (None: neither given)."""
    if base is None and have is None:
        return None
    holdings = Holdings()
    if base is not None:
        try:
            _add_base(holdings, base, base_keys)
        except InputError as exc:  # not found, not a file: say it was the base
            raise InputError(f"--base: {exc}") from None
    if have is not None:
        data = read_small(have, MAX_HAVE_LIST_BYTES, "have-list")
        listed = HaveList.from_bytes(data, str(have))
        for repository, digests in listed.repositories.items():
            holdings.add(repository, digests)
        holdings.have_list = "sha256:" + hashlib.sha256(data).hexdigest()
    return holdings


def _add_base(holdings: Holdings, path: Path, keys: list[Ed25519PublicKey] | None) -> None:
    if is_manifest_file(path):
        signed = load_manifest(path, keys, what="base")
        manifest = signed.manifest
        holdings.anywhere |= {_blob_digest(f.path) for f in manifest.files} - {""}
        holdings.anywhere |= {need.digest for need in manifest.needs}
        holdings.base = signed.digest
        return
    bundle = verify_bundle(path, keys, hash_blobs=False)
    try:
        manifest = bundle.require_verified()
    except BundleError as exc:
        raise BundleError(f"base {exc}") from None
    for image in manifest.images:
        holdings.add(parse_reference(image.reference).name, _tree(bundle, image))
    holdings.base = "sha256:" + hashlib.sha256(bundle.manifest_bytes).hexdigest()


def _tree(bundle: VerifiedBundle, image: ImageRecord) -> set[str]:
    """Every digest of an image in a verified base: its manifests and blobs as carried,
    and what a delta base relies on for it (the target held that too)."""
    found = set(image.needs)
    visited: set[str] = set()
    pending = [(image.digest, image.media_type)]
    while pending:
        digest, media_type = pending.pop()
        if digest in visited:
            continue
        visited.add(digest)
        found.add(digest)
        member = blob_member(digest)
        if member not in bundle.members:
            continue  # relied on by a delta base: listed in its needs
        try:
            manifest = Manifest.from_bytes(bundle.read(member), media_type)
        except AirgapError as exc:
            raise BundleError(f"base {bundle.path}: {image.reference}: {exc}") from None
        pending += [(child.digest, child.media_type) for child in manifest.children()]
        found |= {blob.digest for blob in manifest.blobs()}
    return found


def _blob_digest(member: str) -> str:
    """``images/blobs/sha256/HEX`` -> ``sha256:HEX``; other members -> ``""``."""
    folder, _, hexpart = member.rpartition("/")
    if not folder.startswith("images/blobs/"):
        return ""
    return f"{folder.rsplit('/', 1)[1]}:{hexpart}"
