"""One pass over a bundle tar: member safety, completeness and every file's sha256.

The tar is read once, in constant memory and without extracting anything: headers are
walked in order by airgap's own bounded reader (``airgap.bundle.tarread``; no library
ever sees a header first) while member data is hashed on a few worker threads, each
reading by offset into a reusable buffer, from the bundle file or across its parts
(``airgap.bundle.source``). What it learns (where each member's bytes
are) lets import push blobs straight out of the tar afterwards.

Nothing but the manifest's own bytes is parsed before its signature is checked: the
scan reads the first two members as bytes, asks ``authenticate``, and only then parses
the manifest and goes on; a bundle that fails the check is not read any further.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

from airgap.bundle.format import IMAGES_DIR, MANIFEST_NAME, SIGNATURE_NAME, member_key
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.source import BundleSource, open_source
from airgap.bundle.tarread import TarEntry, TarReader, TarTruncated
from airgap.core.errors import BundleError
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_SIGNATURE_BYTES, MiB
from airgap.core.progress import QUIET, Progress
from airgap.core.textfmt import printable
from airgap.formats import jsonsafe
from airgap.formats.tarheader import BLOCK, TarFormatError
from airgap.verify.hashpool import (
    BLOB_RE,
    _HashPool,
    _read_buffer,
)
from airgap.verify.scanresult import ScanResult


def _usable_cores() -> int:
    """The cores this process may run on (taskset's or a cpuset's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


HASH_WORKERS = min(4, _usable_cores())
MAX_HEAD_BYTES = MAX_BUNDLE_MANIFEST_BYTES
# Zero bytes allowed after the end-of-archive marker (tar pads to its record size,
# 10 KiB for GNU tar); a sparse file of endless zeros is not a bundle.
MAX_TRAILING_ZEROS = 1 * MiB


# Called once the manifest and signature bytes are read, before anything is parsed:
# True lets the scan go on, False stops it (the callback records its own failure).
Authenticate = Callable[[ScanResult], bool]


def _unsafe_reason(info: TarEntry) -> str | None:
    """Why a member may not be in a bundle, or None if it is an acceptable member."""
    if info.issym():
        return f"is a symlink (to {info.linkname})"
    if info.islnk():
        return f"is a hardlink (to {info.linkname})"
    if info.ischr() or info.isblk():
        return "is a device file"
    if info.isfifo():
        return "is a FIFO"
    if info.issparse():
        return "is a sparse file"
    if not (info.isreg() or info.isdir()):
        return f"has unsupported member type {info.type!r}"
    name = info.name
    if not name:
        return "has an empty name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute path"
    if ".." in name.split("/"):
        return "has a '..' path component"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "has a name that is not valid UTF-8"
    if "\\" in name or not name.isprintable():
        return "has a name with control characters or backslashes"
    if unicodedata.normalize("NFC", name) != name:
        return "has a name that is not NFC-normalised UTF-8"
    if posixpath.normpath(name) != name.rstrip("/"):
        return "has a name that is not normalised"
    return None


def _read_small(reader: TarReader, info: TarEntry) -> bytes:
    return reader.pread(min(info.size, MAX_HEAD_BYTES), info.offset_data)


def scan(
    path: Path | BundleSource,
    *,
    hash_blobs: bool = True,
    authenticate: Authenticate | None = None,
    progress: Progress = QUIET,
) -> ScanResult:
    """Scan the bundle ``path`` names (a file or its parts, or an open source);
    failures are collected, not raised, so a report can list everything wrong. Only a
    path that is not a readable bundle raises.

    ``hash_blobs=False`` hashes every member but the image layout's blobs, which are
    only located: their users (import) hash them as they read them. ``authenticate``
    judges the manifest's bytes and signature before anything is parsed."""
    if isinstance(path, BundleSource):
        return _scan(path, hash_blobs, authenticate, progress)
    with open_source(path) as source:
        return _scan(source, hash_blobs, authenticate, progress)


def _scan(
    source: BundleSource,
    hash_blobs: bool,
    authenticate: Authenticate | None,
    progress: Progress = QUIET,
) -> ScanResult:
    result = ScanResult()
    hashes = _HashPool(source, result, HASH_WORKERS, hash_blobs=hash_blobs, progress=progress)
    try:
        _walk_members(TarReader(source), source.path, result, hashes, authenticate)
        if result.authenticated is None:  # the archive ended before a third member
            _open_manifest(result, authenticate, source.pread)
    except BaseException:
        hashes.abandon()
        raise
    hashes.drain()
    if not result.authenticated:
        _check_head(result)
        return result  # nothing after an untrusted manifest is worth a look
    if result.end_offset is not None:
        _check_end(source, result.end_offset, result.last_member, result)
    _check_completeness(result)
    return result


def _open_manifest(
    result: ScanResult,
    authenticate: Authenticate | None,
    pread: Callable[[int, int], bytes],
) -> bool:
    """Authenticate the head members, then parse the manifest; False: stop the scan."""
    result.authenticated = authenticate(result) if authenticate else True
    if not result.authenticated or result.manifest_bytes is None:
        return result.authenticated
    result.manifest_sha256 = hashlib.sha256(result.manifest_bytes).hexdigest()
    # judged and hashed: read again a piece at a time as it is parsed (checked against
    # that sha256), not held beside its records
    result.manifest_bytes = None
    offset, size = result.manifest_at or (0, 0)

    def read() -> Iterator[bytes]:
        return _chunks(pread, offset, size)

    try:
        result.manifest = BundleManifest.from_chunks(read, result.manifest_sha256)
    except BundleError as exc:
        result.fail("member", MANIFEST_NAME, str(exc))
        return True
    result.members.index(result.manifest.files)
    return True


def _chunks(pread: Callable[[int, int], bytes], offset: int, size: int) -> Iterator[bytes]:
    """``size`` bytes at ``offset`` in pieces; fewer if the file ends first."""
    while size > 0:
        data = pread(min(size, jsonsafe.STREAM_CHUNK), offset)
        if not data:
            return
        yield data
        offset += len(data)
        size -= len(data)


def _walk_members(
    reader: TarReader,
    path: Path,
    result: ScanResult,
    hashes: _HashPool,
    authenticate: Authenticate | None,
) -> None:
    position = 0
    last = "the start of the archive"
    while True:
        try:
            info = reader.next()
        except TarTruncated as exc:
            entry = exc.entry
            result.fail("tar", entry.name, f"is truncated ({exc.available} of {entry.size} bytes)")
            result.fail("tar", "archive", f"is truncated after {last}")
            return
        except TarFormatError as exc:
            if position == 0:
                result.fail("tar", path.name, f"is not a readable tar archive: {exc}")
            else:
                result.fail("tar", "archive", f"cannot be read past {last}: {exc}")
            return
        if info is None:
            result.end_offset, result.last_member = reader.offset, last
            return
        position += 1
        last = f"member {position} ({info.name})"
        key = member_key(info.name)
        if not result.met(key):  # a second one of a name: the first is kept
            result.located.setdefault(info.name, (info.offset_data, info.size))
        head_open = position == 3 and result.authenticated is None
        if head_open and not _open_manifest(result, authenticate, reader.pread):
            return
        reason = _unsafe_reason(info)
        if reason:
            result.fail("member", info.name, reason)
            continue
        if info.isdir():
            continue
        if position <= 2:
            _read_head_member(reader, info, position, result)
            result.seen.add(key)
            continue
        if result.met(key):
            result.fail("member", info.name, "appears more than once")
            continue
        result.seen.add(key)
        _check_member(info, result, hashes)


def _check_end(source: BundleSource, offset: int, last: str, result: ScanResult) -> None:
    """The reader stops quietly at a zero block, a corrupt header or the end of the
    file; only two zero blocks, then a little padding of zeros, are a complete archive."""
    with _read_buffer() as buffer:
        _check_trailer(source, offset, last, result, buffer)


def _check_trailer(
    source: BundleSource, offset: int, last: str, result: ScanResult, buffer: memoryview
) -> None:
    zeros = 0
    while True:
        got = source.readinto(buffer, offset + zeros)
        if not got:
            break
        data = bytes(buffer[:got])
        stripped = data.lstrip(b"\0")
        if stripped:
            where = offset + zeros + (got - len(stripped))
            if zeros + (got - len(stripped)) >= BLOCK:
                result.fail(
                    "tar", "archive", f"has data after the end-of-archive marker at byte {where}"
                )
            elif zeros + got < BLOCK:
                result.fail("tar", "archive", f"is truncated: partial tar header after {last}")
            else:
                result.fail(
                    "tar", "archive", f"has a corrupt tar header at byte {offset} after {last}"
                )
            return
        zeros += got
        if zeros > MAX_TRAILING_ZEROS:
            result.fail(
                "tar", "archive", f"has more than {MAX_TRAILING_ZEROS} zero bytes after {last}"
            )
            return
    if zeros < 2 * BLOCK:
        result.fail(
            "tar", "archive", f"is truncated: it ends after {last} without an end-of-archive marker"
        )


def _read_head_member(reader: TarReader, info: TarEntry, position: int, result: ScanResult) -> None:
    """Keep the manifest's or the signature's bytes; nothing is parsed here."""
    wanted = MANIFEST_NAME if position == 1 else SIGNATURE_NAME
    if info.name != wanted:
        result.fail("member", info.name, f"found where {wanted} must be (member {position})")
        return
    limit = MAX_HEAD_BYTES if position == 1 else MAX_SIGNATURE_BYTES
    if info.size > limit:
        result.fail("member", info.name, f"is implausibly large ({info.size} bytes)")
        return
    data = _read_small(reader, info)
    if len(data) != info.size:
        result.fail("tar", info.name, f"is truncated ({len(data)} of {info.size} bytes)")
        return
    if position == 2:
        result.signature = data
    else:
        result.manifest_bytes = data
        result.manifest_at = (info.offset_data, info.size)


def _check_member(
    info: TarEntry,
    result: ScanResult,
    hashes: _HashPool,
) -> None:
    name = info.name
    record = result.members.listed(member_key(name))
    if record is None:
        if result.manifest is not None:
            result.fail("member", name, "is not listed in the bundle manifest")
        return
    if info.size != record.size:
        result.fail("member", name, f"is {info.size} bytes, the manifest says {record.size}")
        return
    hashes.submit(info, record)


def _check_head(result: ScanResult) -> None:
    if result.manifest_at is None:
        result.fail("member", MANIFEST_NAME, "is missing (it must be the first member)")
    if result.signature is None:
        result.fail("member", SIGNATURE_NAME, "is missing (it must be the second member)")


def _check_completeness(result: ScanResult) -> None:
    """Every listed member present, and listed once (looked for only when the index
    says some path is listed twice), blobs named by digest."""
    _check_head(result)
    if result.manifest is None:
        return
    failed = {f.subject for f in result.failures}
    repeated = result.members.listed_twice
    listed: set[bytes | str] = set()  # member keys: no path text per blob
    for record in result.manifest.files:
        key = record.key
        if repeated:
            if key in listed:
                result.fail("member", record.path, "is listed twice in the bundle manifest")
            listed.add(key)
        if not result.members.keyed(key) and printable(record.path) not in failed:
            result.fail("member", record.path, "is listed in the manifest but missing")
        if record.blob_named:
            continue  # a well-formed blob name that equals its digest
        if record.path.startswith(f"{IMAGES_DIR}/blobs/"):
            if not BLOB_RE.match(record.path):
                result.fail("layout", record.path, "is not named blobs/sha256/<64 hex digits>")
            elif record.path.rsplit("/", 1)[1] != record.sha256:
                result.fail("layout", record.path, "blob name does not equal its sha256 digest")
