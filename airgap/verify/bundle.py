"""Verify a bundle end to end and hand back what was verified.

``verify_bundle`` is the one code path for ``airgap verify``, ``airgap import`` and
``airgap configmaps`` (and ``airgap serve``): they all act only on a
``VerifiedBundle``, whose members are read by offset from the tar or its parts.
Every read hashes what it hands out against the signed manifest, whatever was checked
before: a file can change between two reads (another writer, or a USB disk edited
elsewhere keeping size and times), and no earlier check, no file metadata and no cache
can vouch for bytes that were not hashed as they were used. ``airgap verify`` hashes
every member; import and configmaps leave the image layout's blobs to be checked as
they are pushed, so blobs the target already holds need no bytes from the bundle at
all. A pushed blob goes from the bundle's files to the socket by ``sendfile`` (``body``)
and is committed under its digest, which the registry checks as it takes the bytes
(the distribution spec's ``DIGEST_INVALID``): bytes changed since signing are refused
there, and ``confirm`` hashes the member to say which one changed.

A split bundle's parts list (``airgap.bundle.parts``) is checked with the manifest,
before anything else is parsed: signed by a trusted key, for this very manifest. When a
member of a split bundle is damaged, the parts holding it are hashed against the list,
so the report names the file to copy again (``part 3 of 7 (NAME.tar.002): sha256
mismatch``).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.parts import parts_list_path, parts_signature_path
from airgap.bundle.signing import fingerprint
from airgap.bundle.signing import verify as verify_signature
from airgap.bundle.source import BundleSource, open_source
from airgap.core.errors import BundleError, SignatureError
from airgap.core.progress import QUIET, Progress
from airgap.formats.jsonsafe import STREAM_CHUNK
from airgap.verify.artifacts import check_artifacts
from airgap.verify.delta import check_delta
from airgap.verify.findings import Failure
from airgap.verify.installer import check_installer
from airgap.verify.layoutcheck import check_layout, check_providers
from airgap.verify.recordnames import check_names
from airgap.verify.records import check_contents
from airgap.verify.scan import scan
from airgap.verify.scanresult import Member, ScanResult

if TYPE_CHECKING:
    from airgap.net.filebody import FileBody

READ_CHUNK = 1 << 20
ED25519_SIGNATURE_BYTES = 64


@dataclass
class VerifiedBundle:
    """The outcome of verification, and random access to the verified members (through
    ``source``, which stays open as long as the bundle is used)."""

    source: BundleSource
    manifest: BundleManifest | None
    signer: str | None
    members: Mapping[str, Member]
    failures: list[Failure] = field(default_factory=list)
    # where the signed manifest's bytes are, and their sha256: they are read again when
    # asked for (``manifest_bytes``), not held for the bundle's lifetime
    manifest_at: tuple[int, int] | None = None
    manifest_sha256: str = ""
    all_hashed: bool = True  # False: the layout's blobs are left to the push (``body``)

    @property
    def manifest_bytes(self) -> bytes:
        """The signed manifest's bytes, exactly as in the tar (empty if there are none),
        read again and checked against the sha256 they had when verified."""
        if self.manifest_at is None:
            return b""
        offset, size = self.manifest_at
        data = self.source.pread(size, offset)
        actual = hashlib.sha256(data).hexdigest()
        if actual != self.manifest_sha256:
            raise BundleError(
                f"{self.path}: {MANIFEST_NAME} changed after it was verified "
                f"(sha256 {actual}, verified {self.manifest_sha256})"
            )
        return data

    @property
    def path(self) -> Path:
        """The bundle as named to people (``NAME.tar``, split or not)."""
        return self.source.path

    @property
    def verified(self) -> bool:
        return not self.failures and self.manifest is not None

    def read(self, name: str) -> bytes:
        """A small member's bytes (manifests, metadata, components), hashed on every
        read against the signed manifest."""
        member = self.members[name]
        data = self.source.pread(member.size, member.offset)
        if len(data) != member.size:
            raise BundleError(f"{self.path}: {name} is truncated")
        self._check(member, hashlib.sha256(data).hexdigest())
        return data

    def read_chunks(self, name: str) -> Iterator[bytes]:
        """A member's bytes in pieces, hashed as they are read; after the last piece,
        ``read``'s BundleError if they are not the signed bytes. What a reader makes of
        the pieces counts only once the iteration ended (index.json of 2,000 images is
        ~0.6 MB: the layout check need not hold it whole)."""
        member = self.members[name]
        hasher = hashlib.sha256()
        got = 0
        while got < member.size:
            data = self.source.pread(min(STREAM_CHUNK, member.size - got), member.offset + got)
            if not data:
                break
            hasher.update(data)
            got += len(data)
            yield data
        if got != member.size:
            raise BundleError(f"{self.path}: {name} is truncated")
        self._check(member, hasher.hexdigest())

    def body(
        self, name: str, start: int = 0, *, reached: Callable[[int], None] | None = None
    ) -> FileBody:
        """A member's bytes from ``start`` as an upload body that the kernel sends from
        the bundle's files (``sendfile``), unhashed: only for uploads committed under
        the member's digest, which the receiver checks (``confirm`` then names the
        damage when it refuses them). ``reached`` hears the bytes sent, for progress."""
        from airgap.net.filebody import FileBody  # httpx's: not loaded for verify alone

        member = self.members[name]
        spans = list(self.source.spans(member.offset + start, member.size - start))
        return FileBody(
            spans,
            ended_early=lambda: BundleError(f"{self.path}: {name} is truncated"),
            reached=reached,
        )

    def confirm(self, name: str) -> None:
        """Hash a whole member against the signed manifest: a BundleError naming the
        member (and a damaged part) if it changed since it was signed or verified."""
        member = self.members[name]
        hasher = hashlib.sha256()
        for chunk in self.source.chunks(member.offset, member.size, READ_CHUNK):
            hasher.update(chunk)
        self._check(member, hasher.hexdigest())

    def _check(self, member: Member, actual: str) -> None:
        if actual != member.sha256:
            touching = self.source.parts_touching(member.offset, member.size)
            damaged = self.source.damaged_parts(touching)
            where = "".join(f"; {_part_damage(self.source, i)}" for i in damaged)
            raise BundleError(
                f"{self.path}: member {member.name} does not match the signed manifest "
                f"(sha256 {actual}, signed {member.sha256}): the bundle changed after "
                f"it was signed or verified{where}"
            )

    def close(self) -> None:
        self.source.close()

    def require_verified(self) -> BundleManifest:
        """The manifest, or a BundleError summarising why the bundle is refused."""
        if self.verified and self.manifest is not None:
            return self.manifest
        first = self.failures[0] if self.failures else None
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        raise BundleError(f"{self.path} failed verification: {first}{more}")


def verify_bundle(
    path: Path | BundleSource,
    keys: list[Ed25519PublicKey] | None,
    *,
    hash_blobs: bool = True,
    progress: Progress = QUIET,
) -> VerifiedBundle:
    """Scan, check the signature (unless ``keys`` is None: explicitly unsigned), then
    check the layout and providers against the verified members.

    ``path`` names a bundle file or its parts (``airgap.bundle.source``); the returned
    bundle keeps the source open for reading. ``hash_blobs=False`` (import, configmaps)
    hashes every member but the layout's blobs; the image manifests among them are
    hashed when the layout check reads them, the others by the registry as import pushes
    them (``body``).
    ``progress`` counts the bytes hashed (a terminal bar, or periodic lines)."""
    source = path if isinstance(path, BundleSource) else open_source(path)
    try:
        return _verify(source, keys, hash_blobs, progress)
    except BaseException:
        source.close()
        raise


def _verify(
    source: BundleSource,
    keys: list[Ed25519PublicKey] | None,
    hash_blobs: bool,
    progress: Progress = QUIET,
) -> VerifiedBundle:
    path = source.path

    def authenticate(scanned: ScanResult) -> bool:
        # before anything but the manifest's bytes is parsed: an untrusted bundle is
        # judged by its signature alone, and read no further
        scanned.signer = _check_signature(scanned, keys)
        if scanned.signer is not None or keys is None:
            _check_parts_list(source, scanned, keys)
        return keys is None or scanned.signer is not None

    result = scan(source, hash_blobs=hash_blobs, authenticate=authenticate, progress=progress)
    if result.authenticated:
        _name_damaged_parts(source, result)
    signer = result.signer
    bundle = VerifiedBundle(
        source,
        result.manifest,
        signer,
        result.members,
        result.failures,
        result.manifest_at if result.manifest_sha256 else None,
        result.manifest_sha256,
        all_hashed=hash_blobs,
    )
    if result.manifest is not None:
        present = _Sizes(result.members)

        def read(name: str) -> bytes:
            try:
                return bundle.read(name)
            except BundleError as exc:  # altered since signing: the finding comes first
                bundle.failures.append(Failure("member", name, _reason(exc, path)))
                raise

        def chunks(name: str) -> Iterator[bytes]:
            try:
                yield from bundle.read_chunks(name)
            except BundleError as exc:  # as read's
                bundle.failures.append(Failure("member", name, _reason(exc, path)))
                raise

        bundle.failures.extend(check_names(result.manifest))
        bundle.failures.extend(check_installer(result.manifest))
        bundle.failures.extend(check_delta(result.manifest))
        bundle.failures.extend(check_layout(result.manifest, read, present, chunks))
        bundle.failures.extend(check_providers(result.manifest, read, present))
        bundle.failures.extend(check_contents(result.manifest, read, present))
        bundle.failures.extend(check_artifacts(result.manifest, read, present))
    return bundle


class _Sizes(Mapping[str, int]):
    """Each verified member's size, read from its ``Member``: the checks' ``present``
    without a second dict entry per member of the bundle."""

    def __init__(self, members: Mapping[str, Member]) -> None:
        self._members = members

    def __getitem__(self, name: str) -> int:
        return self._members[name].size

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


def _part_damage(source: BundleSource, index: int) -> str:
    return f"{source.describe_part(index)}: sha256 mismatch (copy this file again)"


def _check_parts_list(
    source: BundleSource, result: ScanResult, keys: list[Ed25519PublicKey] | None
) -> None:
    """A split bundle's parts list: present, signed by a trusted key (unless unsigned
    on purpose), and written for this manifest. Its part sizes were checked when the
    parts were opened."""
    if not source.split:
        return
    name = parts_list_path(source.path).name
    listed = source.parts_list
    if listed is None or source.parts_list_bytes is None:
        if keys is not None:
            result.fail(
                "parts",
                name,
                "is missing: a split bundle's signed parts list travels with its parts",
            )
        return
    if keys is not None:
        if source.parts_signature is None:
            result.fail("signature", parts_signature_path(source.path).name, "is missing")
            return
        try:
            verify_signature(source.parts_signature, source.parts_list_bytes, keys)
        except SignatureError:
            result.fail(
                "signature",
                name,
                "does not verify with any trusted key: the parts list or its signature "
                "was altered, or an untrusted key signed it",
            )
            return
    manifest_sha256 = hashlib.sha256(result.manifest_bytes or b"").hexdigest()
    if listed.manifest_sha256 != manifest_sha256 or listed.size != source.size:
        result.fail(
            "parts", name, f"belongs to another bundle than the one in {source.parts[0].path.name}"
        )


def _name_damaged_parts(source: BundleSource, result: ScanResult) -> None:
    """Failures that damaged bytes explain: hash the parts holding them against the
    parts list and name each mismatching part first, the file to copy again."""
    if not source.split or source.parts_list is None:
        return
    suspects: set[int] = set()
    for failure in result.failures:
        if failure.kind not in ("tar", "member", "layout"):
            continue
        where = result.where(failure.subject)
        if where is None:
            suspects.update(range(len(source.parts)))
            break
        suspects.update(source.parts_touching(*where))
    if not suspects:
        return
    named = [
        Failure("part", source.describe_part(i), "sha256 mismatch (copy this file again)")
        for i in source.damaged_parts(sorted(suspects))
    ]
    result.failures[:0] = named


def _reason(exc: BundleError, path: Path) -> str:
    """A read error's message without the bundle path the report already names."""
    return str(exc).removeprefix(f"{path}: ")


def _check_signature(result: ScanResult, keys: list[Ed25519PublicKey] | None) -> str | None:
    if keys is None or result.manifest_bytes is None or result.signature is None:
        return None
    try:
        raw = base64.b64decode(result.signature.strip(), validate=True)
    except ValueError:
        result.fail("signature", SIGNATURE_NAME, "is not valid base64")
        return None
    if len(raw) != ED25519_SIGNATURE_BYTES:
        result.fail("signature", SIGNATURE_NAME, f"is {len(raw)} bytes, not an Ed25519 signature")
        return None
    try:
        return verify_signature(result.signature, result.manifest_bytes, keys)
    except SignatureError:
        trusted = ", ".join(fingerprint(key) for key in keys)
        result.fail(
            "signature",
            SIGNATURE_NAME,
            f"does not verify {MANIFEST_NAME} with any trusted key ({trusted}): the "
            "manifest or its signature was altered, or an untrusted key signed it",
        )
        return None
