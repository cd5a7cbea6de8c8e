"""One pass over a bundle tar: member safety, completeness and every file's sha256.

The tar is read sequentially, once, in constant memory and without extracting anything:
headers are parsed by ``tarfile``, member data is hashed straight from the file into a
reusable buffer. What it learns (where each member's bytes are) lets import push blobs
straight out of the tar afterwards.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest, FileRecord
from airgap.errors import BundleError, InputError
from airgap.verify.findings import Failure

READ_SIZE = 1 << 20
MAX_HEAD_BYTES = 64 << 20


@dataclass(frozen=True)
class Member:
    """Where a verified member's bytes live inside the tar."""

    name: str
    offset: int
    size: int


@dataclass
class ScanResult:
    manifest_bytes: bytes | None = None
    signature: bytes | None = None
    manifest: BundleManifest | None = None
    members: dict[str, Member] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def fail(self, kind: str, subject: str, message: str) -> None:
        self.failures.append(Failure(kind, subject, message))


def _unsafe_reason(info: tarfile.TarInfo) -> str | None:
    """Why a member may not be in a bundle, or None if it is an acceptable member."""
    if info.issym():
        return f"is a symlink (to {info.linkname})"
    if info.islnk():
        return f"is a hardlink (to {info.linkname})"
    if info.ischr() or info.isblk():
        return "is a device file"
    if info.isfifo():
        return "is a FIFO"
    if not (info.isreg() or info.isdir()):
        return f"has unsupported member type {info.type!r}"
    name = info.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in name.split("/"):
        return "has a '..' path component"
    if "\\" in name or "\x00" in name or any(ord(c) < 32 for c in name):
        return "has a name with control characters or backslashes"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "has a name that is not valid UTF-8"
    if posixpath.normpath(name) != name.rstrip("/"):
        return "has a name that is not normalised"
    return None


def _hash_range(handle: BinaryIO, offset: int, size: int, buffer: memoryview) -> tuple[str, int]:
    """sha256 of ``size`` bytes at ``offset``; also how many bytes were really there."""
    handle.seek(offset)
    hasher = hashlib.sha256()
    remaining = size
    while remaining:
        got = handle.readinto(buffer[: min(len(buffer), remaining)])  # type: ignore[attr-defined]
        if not got:
            break
        hasher.update(buffer[:got])
        remaining -= got
    return hasher.hexdigest(), size - remaining


def _read_small(handle: BinaryIO, info: tarfile.TarInfo) -> bytes:
    handle.seek(info.offset_data)
    return handle.read(min(info.size, MAX_HEAD_BYTES))


def scan(path: Path) -> ScanResult:
    """Scan the bundle at ``path``; failures are collected, not raised, so a report can
    list everything wrong. Only an unreadable file raises."""
    try:
        handle: BinaryIO = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot open bundle {path}: {exc.strerror}") from exc
    result = ScanResult()
    with handle, _open_tar(handle, path) as tar:
        _scan_members(tar, handle, result)
    _check_completeness(result)
    return result


def _open_tar(handle: BinaryIO, path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=handle, mode="r:", errorlevel=2)
    except tarfile.TarError as exc:
        raise BundleError(f"{path} is not a tar archive: {exc}") from exc


def _scan_members(tar: tarfile.TarFile, handle: BinaryIO, result: ScanResult) -> None:
    buffer = memoryview(bytearray(READ_SIZE))
    expected: dict[str, FileRecord] = {}
    position = 0
    while True:
        try:
            info = tar.next()
        except tarfile.TarError as exc:
            result.fail("tar", "archive", f"unreadable after member {position}: {exc}")
            return
        if info is None:
            return
        position += 1
        reason = _unsafe_reason(info)
        if reason:
            result.fail("member", info.name, reason)
            continue
        if info.isdir():
            continue
        if position <= 2:
            _read_head_member(handle, info, position, result, expected)
            continue
        _hash_member(handle, info, buffer, result, expected)


def _read_head_member(
    handle: BinaryIO,
    info: tarfile.TarInfo,
    position: int,
    result: ScanResult,
    expected: dict[str, FileRecord],
) -> None:
    wanted = MANIFEST_NAME if position == 1 else SIGNATURE_NAME
    if info.name != wanted:
        result.fail("member", info.name, f"found where {wanted} must be (member {position})")
        return
    if info.size > MAX_HEAD_BYTES:
        result.fail("member", info.name, "is implausibly large")
        return
    data = _read_small(handle, info)
    if len(data) != info.size:
        result.fail("tar", info.name, "is truncated")
        return
    if position == 2:
        result.signature = data
        return
    result.manifest_bytes = data
    try:
        result.manifest = BundleManifest.from_bytes(data)
    except BundleError as exc:
        result.fail("member", MANIFEST_NAME, str(exc))
        return
    expected.update({record.path: record for record in result.manifest.files})


def _hash_member(
    handle: BinaryIO,
    info: tarfile.TarInfo,
    buffer: memoryview,
    result: ScanResult,
    expected: dict[str, FileRecord],
) -> None:
    name = info.name
    if name in (MANIFEST_NAME, SIGNATURE_NAME) or name in result.members:
        result.fail("member", name, "appears more than once")
        return
    record = expected.get(name)
    if record is None:
        if result.manifest is not None:
            result.fail("member", name, "is not listed in the bundle manifest")
        return
    if info.size != record.size:
        result.fail("member", name, f"is {info.size} bytes, the manifest says {record.size}")
        return
    digest, got = _hash_range(handle, info.offset_data, info.size, buffer)
    if got != info.size:
        result.fail("tar", name, f"is truncated ({got} of {info.size} bytes)")
        return
    if digest != record.sha256:
        result.fail("member", name, f"sha256 {digest} does not match the manifest")
        return
    result.members[name] = Member(name, info.offset_data, info.size)


def _check_completeness(result: ScanResult) -> None:
    if result.manifest_bytes is None:
        result.fail("member", MANIFEST_NAME, "is missing (it must be the first member)")
    if result.signature is None:
        result.fail("member", SIGNATURE_NAME, "is missing (it must be the second member)")
    if result.manifest is None:
        return
    failed = {f.subject for f in result.failures}
    for record in result.manifest.files:
        if record.path not in result.members and record.path not in failed:
            result.fail("member", record.path, "is listed in the manifest but missing")
        if record.path.startswith("images/blobs/sha256/") and (
            record.path.rsplit("/", 1)[1] != record.sha256
        ):
            result.fail("layout", record.path, "blob name does not equal its sha256 digest")
