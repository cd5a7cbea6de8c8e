"""Build tampered copies of a good bundle, one way of breaking it at a time.

A bundle is read member by member (headers and payloads, in order) and written back with
``tarfile``'s own header encoder, so every case changes exactly what it says and nothing
else: flip a byte in one member, drop, add, rename or duplicate members, insert symlinks,
hardlinks, devices, FIFOs, absolute or ``..`` members, truncate the archive, damage a
header, append data after the end marker, or re-sign an edited manifest with any key.
Everything works on the small CAPI test bundle in memory; nothing is ever extracted.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, FileRecord
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.signing import generate_keypair, load_private_key, sign

BLOCK = tarfile.BLOCKSIZE
ENCODING = "utf-8"
ERRORS = "surrogateescape"  # lets a test write a member name that is not UTF-8


@dataclass
class TarMember:
    """One member as it was in the tar: its header and, for regular files, its bytes."""

    info: tarfile.TarInfo
    data: bytes = b""

    @property
    def name(self) -> str:
        return self.info.name


# -- reading and writing ----------------------------------------------------------------


def read_members(bundle: Path) -> list[TarMember]:
    """Every member of ``bundle`` in archive order (the test bundle is small)."""
    members = []
    with tarfile.open(bundle, "r:", encoding=ENCODING, errors=ERRORS) as tar:
        for info in tar:
            data = b""
            if info.isreg():
                extracted = tar.extractfile(info)
                assert extracted is not None
                data = extracted.read()
            members.append(TarMember(copy.copy(info), data))
    return members


def member_data(bundle: Path, name: str) -> bytes:
    """The payload of member ``name``, read by :func:`read_members` (tampered tars too)."""
    return next(m.data for m in read_members(bundle) if m.name == name)


def tar_member(bundle: Path, name: str) -> bytes:
    """The payload of member ``name``, read with the standard library's tarfile."""
    with tarfile.open(bundle) as tar:
        extracted = tar.extractfile(name)
        assert extracted is not None
        return extracted.read()


def blob_data(bundle: Path, digest: str) -> bytes:
    """The bytes of blob ``digest`` ("sha256:HEX") as the bundle stores it."""
    return tar_member(bundle, f"images/blobs/sha256/{digest.removeprefix('sha256:')}")


def write_members(path: Path, members: Iterable[TarMember], *, end_marker: bool = True) -> Path:
    """Write ``members`` as a tar at ``path``: header, payload, padding, then two zero
    blocks (unless ``end_marker`` is false). Sizes follow the payloads."""
    with path.open("wb") as out:
        for member in members:
            info = copy.copy(member.info)
            info.size = len(member.data) if info.isreg() else 0
            out.write(info.tobuf(tarfile.PAX_FORMAT, ENCODING, ERRORS))
            out.write(member.data)
            out.write(b"\0" * (-len(member.data) % BLOCK))
        if end_marker:
            out.write(b"\0" * (2 * BLOCK))
    return path


def rewrite(src: Path, dst: Path, edit: Callable[[list[TarMember]], list[TarMember]]) -> Path:
    """``dst`` = ``src`` with its member list passed through ``edit``."""
    return write_members(dst, edit(read_members(src)))


def _index(members: list[TarMember], name: str) -> int:
    for number, member in enumerate(members):
        if member.name == name:
            return number
    raise KeyError(f"no member {name!r} in the bundle")


# -- member edits -----------------------------------------------------------------------


def flip_byte(src: Path, dst: Path, name: str, offset: int | None = None) -> Path:
    """Flip the low bit of one byte of member ``name`` (by default its middle byte)."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        member = members[_index(members, name)]
        data = bytearray(member.data)
        assert data, f"{name} is empty"
        at = len(data) // 2 if offset is None else offset
        data[at] ^= 0x01
        member.data = bytes(data)
        return members

    return rewrite(src, dst, edit)


def replace_data(src: Path, dst: Path, name: str, data: bytes) -> Path:
    """Member ``name`` with other bytes (its header size follows them)."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        members[_index(members, name)].data = data
        return members

    return rewrite(src, dst, edit)


def drop(src: Path, dst: Path, *names: str) -> Path:
    """Remove members from the tar (and only from the tar)."""
    return rewrite(src, dst, lambda members: [m for m in members if m.name not in names])


def insert(src: Path, dst: Path, member: TarMember, *, position: int | None = None) -> Path:
    """Insert ``member`` at ``position`` (default: the middle of the archive)."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        at = len(members) // 2 if position is None else position
        return [*members[:at], member, *members[at:]]

    return rewrite(src, dst, edit)


def rename(src: Path, dst: Path, old: str, new: str) -> Path:
    def edit(members: list[TarMember]) -> list[TarMember]:
        members[_index(members, old)].info.name = new
        return members

    return rewrite(src, dst, edit)


def duplicate(src: Path, dst: Path, name: str, *, data: bytes | None = None) -> Path:
    """A second member ``name`` at the end of the archive (same bytes unless ``data``)."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        original = members[_index(members, name)]
        twin = TarMember(copy.copy(original.info), original.data if data is None else data)
        return [*members, twin]

    return rewrite(src, dst, edit)


def replace_with(src: Path, dst: Path, name: str, member: TarMember) -> Path:
    """Put ``member`` (e.g. a symlink) where member ``name`` was."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        members[_index(members, name)] = member
        return members

    return rewrite(src, dst, edit)


# -- members a bundle must never contain ------------------------------------------------


def _info(name: str, kind: bytes, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644
    info.mtime = 1_700_000_000
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def regular(name: str, data: bytes = b"payload\n") -> TarMember:
    return TarMember(_info(name, tarfile.REGTYPE), data)


def symlink(name: str, target: str) -> TarMember:
    return TarMember(_info(name, tarfile.SYMTYPE, linkname=target))


def hardlink(name: str, target: str) -> TarMember:
    return TarMember(_info(name, tarfile.LNKTYPE, linkname=target))


def char_device(name: str, major: int = 1, minor: int = 3) -> TarMember:
    return TarMember(_info(name, tarfile.CHRTYPE, devmajor=major, devminor=minor))


def block_device(name: str, major: int = 8, minor: int = 0) -> TarMember:
    return TarMember(_info(name, tarfile.BLKTYPE, devmajor=major, devminor=minor))


def fifo(name: str) -> TarMember:
    return TarMember(_info(name, tarfile.FIFOTYPE))


def directory(name: str) -> TarMember:
    info = _info(name, tarfile.DIRTYPE)
    info.mode = 0o755
    return TarMember(info)


# -- byte-level damage ------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """Where a member sits in the tar: its (first) header and its payload."""

    header: int
    data: int
    size: int

    @property
    def end(self) -> int:
        """The offset just past the member's padded payload."""
        return self.data + self.size + (-self.size % BLOCK)


def spans(bundle: Path) -> dict[str, Span]:
    with tarfile.open(bundle, "r:", encoding=ENCODING, errors=ERRORS) as tar:
        return {info.name: Span(info.offset, info.offset_data, info.size) for info in tar}


def truncate(src: Path, dst: Path, size: int) -> Path:
    """The first ``size`` bytes of ``src``."""
    with src.open("rb") as source:
        dst.write_bytes(source.read(size))
    return dst


def archive_end(bundle: Path) -> int:
    """The offset of the end-of-archive marker (just past the last member)."""
    return max(span.end for span in spans(bundle).values())


def corrupt_header(src: Path, dst: Path, name: str) -> Path:
    """Flip a byte of member ``name``'s header name field: its checksum no longer holds."""
    data = bytearray(src.read_bytes())
    data[spans(src)[name].header + 1] ^= 0x01
    dst.write_bytes(bytes(data))
    return dst


def append_after_end(src: Path, dst: Path, payload: bytes) -> Path:
    """Bytes hidden after the end-of-archive marker (tarfile stops before them)."""
    dst.write_bytes(src.read_bytes() + payload)
    return dst


# -- re-signing -------------------------------------------------------------------------


def new_key(directory: Path, name: str = "untrusted") -> tuple[Path, Path]:
    """A fresh Ed25519 key pair (private, public) in ``directory``."""
    private = directory / f"{name}.key"
    public, _ = generate_keypair(private)
    return private, public


def manifest_of(bundle: Path) -> BundleManifest:
    members = read_members(bundle)
    return BundleManifest.from_bytes(members[_index(members, MANIFEST_NAME)].data)


def resign(
    src: Path,
    dst: Path,
    private_key: Path,
    *,
    drop: Iterable[str] = (),
    replace: dict[str, bytes] | None = None,
    rename: dict[str, str] | None = None,
    edit: Callable[[BundleManifest], BundleManifest] | None = None,
) -> Path:
    """A consistently edited bundle, signed by ``private_key``.

    Members in ``drop`` leave both the tar and the manifest's ``files``; members in
    ``replace`` get new bytes and a matching record; ``rename`` renames a member and its
    record; ``edit`` may then change anything else in the manifest. The manifest is
    re-serialised exactly as collect writes it, and signed.
    """
    dropped = set(drop)
    replace = replace or {}
    rename = rename or {}
    members = [m for m in read_members(src) if m.name not in dropped]
    manifest_member = members[_index(members, MANIFEST_NAME)]
    signature_member = members[_index(members, SIGNATURE_NAME)]
    manifest = BundleManifest.from_bytes(manifest_member.data)
    for member in members:
        if member.name in replace:
            member.data = replace[member.name]
        if member.name in rename:
            member.info.name = rename[member.name]
    files = []
    for record in manifest.files:
        if record.path in dropped:
            continue
        if record.path in replace:
            data = replace[record.path]
            record = FileRecord(record.path, hashlib.sha256(data).hexdigest(), len(data))
        if record.path in rename:
            record = FileRecord(rename[record.path], record.sha256, record.size)
        files.append(record)
    manifest = dataclasses.replace(manifest, files=files)
    if edit is not None:
        manifest = edit(manifest)
    manifest_member.data = manifest.to_bytes()
    signature_member.data = sign(load_private_key(private_key), manifest_member.data)
    return write_members(dst, members)


def resign_as_is(src: Path, dst: Path, private_key: Path) -> Path:
    """The very same manifest bytes, signed by another key."""

    def edit(members: list[TarMember]) -> list[TarMember]:
        manifest = members[_index(members, MANIFEST_NAME)].data
        members[_index(members, SIGNATURE_NAME)].data = sign(
            load_private_key(private_key), manifest
        )
        return members

    return rewrite(src, dst, edit)
