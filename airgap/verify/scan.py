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

import bisect
import hashlib
import heapq
import itertools
import mmap
import os
import posixpath
import re
import threading
import unicodedata
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from airgap.bundle.format import (
    IMAGES_DIR,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    BundleManifest,
    FileRecord,
    member_key,
)
from airgap.bundle.source import BundleSource, open_source
from airgap.bundle.tarread import TarEntry, TarReader, TarTruncated
from airgap.core.errors import BundleError
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_SIGNATURE_BYTES, MiB
from airgap.core.progress import QUIET, Progress
from airgap.core.textfmt import printable
from airgap.formats import jsonsafe
from airgap.formats.tarheader import BLOCK, TarFormatError
from airgap.verify.findings import Failure


def _usable_cores() -> int:
    """The cores this process may run on (taskset's or a cpuset's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


READ_SIZE = 1 << 20
SMALL_READ = 64 << 10  # the read size of a member smaller than READ_SIZE
HASH_WORKERS = min(4, _usable_cores())
# members the header walk may run ahead of the oldest unfinished hash: a few hundred
# bytes each, and enough for the largest members of a bundle to be seen early
MAX_QUEUED = 1024
MAX_HEAD_BYTES = MAX_BUNDLE_MANIFEST_BYTES
# Zero bytes allowed after the end-of-archive marker (tar pads to its record size,
# 10 KiB for GNU tar); a sparse file of endless zeros is not a bundle.
MAX_TRAILING_ZEROS = 1 * MiB
_BLOB_RE = re.compile(rf"^{IMAGES_DIR}/blobs/sha256/[0-9a-f]{{64}}$")


class Member:
    """Where a member's bytes live inside the tar, and the sha256 the signed manifest
    gives them: every later read hashes what it uses against it (see VerifiedBundle).

    One per member of a bundle: its name, size and sha256 are its manifest record's
    (``record``, shared, compact), not copies."""

    __slots__ = ("hashed", "offset", "record")
    record: FileRecord
    offset: int
    hashed: bool  # False: located and sized only; its bytes are checked on use

    def __init__(self, name: str, offset: int, size: int, sha256: str, hashed: bool = True):
        self._set(FileRecord(name, sha256, size), offset, hashed)

    @classmethod
    def of(cls, record: FileRecord, offset: int, hashed: bool = True) -> Member:
        """The member a record describes, found at ``offset``."""
        member = cls.__new__(cls)
        member._set(record, offset, hashed)
        return member

    def _set(self, record: FileRecord, offset: int, hashed: bool) -> None:
        object.__setattr__(self, "record", record)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "hashed", hashed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    @property
    def name(self) -> str:
        return self.record.path

    @property
    def size(self) -> int:
        return self.record.size

    @property
    def sha256(self) -> str:
        return self.record.sha256

    def __repr__(self) -> str:
        return (
            f"Member(name={self.name!r}, offset={self.offset}, size={self.size}, "
            f"sha256={self.sha256!r}, hashed={self.hashed})"
        )


class Members(Mapping[str, Member]):
    """The verified members by name.

    Once told the manifest's records (``index``), a member of one is its offset in an
    array beside the record's position, found by bisecting the blob records sorted by
    digest: ~13 bytes a member, where a Member, its offset and a dict entry took ~140
    (6,000 members for 2,000 images). ``members[name]`` makes its Member on demand.
    A member whose record is not indexed is kept in a dict, keyed by ``member_key``."""

    def __init__(self) -> None:
        self._by_key: dict[bytes | str, Member] = {}
        self._files: Sequence[FileRecord] = ()
        self._blobs = array("I")  # positions of the blob-named records, by digest
        self._digests: list[bytes | str] = []  # their digests, in that order
        self._others: dict[bytes | str, int] = {}  # any other record's last position
        self._offsets = array("q")  # each record's member offset; -1: not a member
        self._unhashed = bytearray()
        self._count = 0
        self.listed_twice = False  # some path is listed more than once

    def index(self, files: Sequence[FileRecord]) -> None:
        """Index the manifest's records (before any of their members is added)."""
        positions = [n for n, record in enumerate(files) if record.blob_named]
        positions.sort(key=lambda n: files[n].key)  # stable: equal digests by position
        self._files = files
        self._blobs = array("I", positions)
        self._digests = [files[n].key for n in positions]  # the records' own bytes
        self._others = {r.key: n for n, r in enumerate(files) if not r.blob_named}
        self._offsets = array("q", [-1]) * len(files)
        self._unhashed = bytearray(len(files))
        others = sum(1 for record in files if not record.blob_named)
        self.listed_twice = len(self._others) < others or any(
            files[a].key == files[b].key for a, b in itertools.pairwise(positions)
        )
        if not self.listed_twice:
            self.listed_twice = any(
                type(key) is bytes and self._last_blob(key) is not None for key in self._others
            )

    def listed(self, key: bytes | str) -> FileRecord | None:
        """The record the manifest lists last under this ``member_key``."""
        position = self._position(key)
        return None if position is None else self._files[position]

    def add(self, member: Member) -> None:
        record = member.record
        position = self._position(record.key) if self._files else None
        if position is None or self._files[position] is not record:
            self._by_key[record.key] = member
            return
        if self._offsets[position] < 0:
            self._count += 1
        self._offsets[position] = member.offset
        self._unhashed[position] = not member.hashed

    def keyed(self, key: bytes | str) -> bool:
        """Whether a member of this ``member_key`` is here."""
        position = self._position(key) if self._files else None
        if position is not None and self._offsets[position] >= 0:
            return True
        return key in self._by_key

    def _member(self, key: bytes | str) -> Member | None:
        position = self._position(key) if self._files else None
        if position is not None and self._offsets[position] >= 0:
            record = self._files[position]
            return Member.of(record, self._offsets[position], not self._unhashed[position])
        return self._by_key.get(key)

    def _position(self, key: bytes | str) -> int | None:
        found = self._others.get(key, -1)
        if type(key) is bytes:
            blob = self._last_blob(key)
            if blob is not None:
                found = max(found, blob)
        return None if found < 0 else found

    def _last_blob(self, key: bytes) -> int | None:
        digests = self._digests
        at = bisect.bisect_right(digests, key)
        return self._blobs[at - 1] if at and digests[at - 1] == key else None

    def __getitem__(self, name: str) -> Member:
        member = self._member(member_key(name))
        if member is None:
            raise KeyError(name)
        return member

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.keyed(member_key(name))

    def __iter__(self) -> Iterator[str]:
        for position, offset in enumerate(self._offsets):
            if offset >= 0:
                yield self._files[position].path
        yield from (member.name for member in self._by_key.values())

    def __len__(self) -> int:
        return self._count + len(self._by_key)


@dataclass
class ScanResult:
    """What one pass over the tar learned: where each member is, what failed, and the
    manifest once its signature holds."""

    # the signed manifest's bytes, kept only until it is parsed (a 2,000-image bundle's
    # manifest is ~2 MiB): later readers re-read them at ``manifest_at`` and check them
    # against ``manifest_sha256``
    manifest_bytes: bytes | None = None
    manifest_at: tuple[int, int] | None = None  # (offset, size) of its data in the tar
    manifest_sha256: str = ""
    signature: bytes | None = None
    manifest: BundleManifest | None = None
    members: Members = field(default_factory=Members)
    failures: list[Failure] = field(default_factory=list)
    end_offset: int | None = None  # where the members end (end marker or damage)
    last_member: str = "the start of the archive"
    signer: str | None = None  # set by ``authenticate``
    authenticated: bool | None = None  # None: not asked yet
    # the data (offset, size) of the first member of each name not in ``members`` (failed
    # ones, the head): which part holds a damage (see ``where``). One being hashed is
    # not here (its job knows where it is) unless its hash fails.
    located: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the ``member_key`` of each regular member met so far that is not in ``members``:
    # with it, every name met (a second member of one is refused), no name held twice
    seen: set[bytes | str] = field(default_factory=set)

    def fail(self, kind: str, subject: str, message: str) -> None:
        self.failures.append(Failure(kind, subject, message))

    def add(self, member: Member) -> None:
        """A member that passed: its place is its record's, not kept twice."""
        self.members.add(member)
        self.seen.discard(member.record.key)
        if self.located:
            self.located.pop(member.name, None)

    def met(self, key: bytes | str) -> bool:
        """Whether a regular member of this ``member_key`` came before."""
        return key in self.seen or self.members.keyed(key)

    def where(self, name: str) -> tuple[int, int] | None:
        """Where the tar holds the data of the first member of this name, if anywhere."""
        member = self.members.get(name)
        if member is not None:
            return member.offset, member.size
        return self.located.get(name)


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


class _Job:
    """One member to hash; the worker that takes it sets ``digest`` and ``got`` (or
    ``error``), then ``done``."""

    __slots__ = ("digest", "done", "error", "got", "offset", "record")

    def __init__(self, info: TarEntry, record: FileRecord) -> None:
        # not the header's entry: up to MAX_QUEUED jobs wait, and the record has the
        # name (the same text) and the size (checked equal)
        self.offset = info.offset_data
        self.record = record
        self.digest = ""
        self.got = 0
        self.error: BaseException | None = None
        self.done = False


@contextmanager
def _read_buffer() -> Iterator[memoryview]:
    """A ``READ_SIZE`` buffer in an anonymous mapping of its own, not on the heap: only
    the pages a read fills become resident (a bundle of small members touches a few),
    and all of them go back to the system when it is closed (a freed heap buffer
    stays with the process, a worker thread's in that thread's malloc arena)."""
    with mmap.mmap(-1, READ_SIZE) as mapped:
        buffer = memoryview(mapped)
        try:
            yield buffer
        finally:
            buffer.release()


class _HashPool:
    """Hashes member data on worker threads while the main thread walks the headers.

    Each worker reads with ``pread`` into its own reusable buffer (sha256 and reads both
    release the GIL), so verification uses every core yet still reads each byte once,
    in constant memory. A member's sha256 is sequential, so a large member taken late
    leaves the other cores idle while it alone is hashed: workers take the largest
    member waiting, and the walk runs up to ``MAX_QUEUED`` members ahead of the oldest
    unfinished one, so the large members start early. Results are taken back in tar
    order, so failures are reported in tar order."""

    def __init__(
        self,
        source: BundleSource,
        result: ScanResult,
        workers: int,
        *,
        hash_blobs: bool,
        progress: Progress = QUIET,
    ) -> None:
        self._source = source
        self._result = result
        self._hash_blobs = hash_blobs
        self._progress = progress
        self._task = progress.task("verifying", source.size)
        self._totalled = False
        self._workers = workers
        self._threads: list[threading.Thread] = []  # started with the first job
        self._pending: deque[_Job] = deque()  # tar order
        self._waiting: list[tuple[int, int, _Job]] = []  # heap: the largest first
        self._submitted = 0
        self._closed = False  # no more jobs: idle workers end
        self._abandoned = False  # an error or an interrupt: running hashes stop too
        self._changed = threading.Condition()

    def submit(self, info: TarEntry, record: FileRecord) -> None:
        if not self._totalled and self._result.manifest is not None:
            # what will be hashed, now that the (authenticated) manifest says
            self._totalled = True
            files = self._result.manifest.files
            hashed = (
                r.size
                for r in files
                if self._hash_blobs or not (r.blob_named or _BLOB_RE.match(r.path))
            )
            self._progress.total(self._task, sum(hashed))
        if not self._hash_blobs and _BLOB_RE.match(info.name):
            # import leaves blob bytes to the registry's digest check, and needs none of
            # the blobs the target already holds: here they are only located
            # keyed and named by the record's path (the same text): the header's copy of
            # the name is not kept for every member of the bundle
            self._result.add(Member.of(record, info.offset_data, hashed=False))
            return
        if not self._threads:
            self._start()
        located = self._result.located
        if located.get(info.name) == (info.offset_data, info.size):  # this member's own
            del located[info.name]  # the job knows where it is; a failure says it again
        job = _Job(info, record)
        with self._changed:
            heapq.heappush(self._waiting, (-info.size, self._submitted, job))
            self._changed.notify_all()
        self._submitted += 1
        self._pending.append(job)
        while len(self._pending) > MAX_QUEUED:
            self._finish_one()

    def drain(self) -> None:
        """Take back every result (in tar order), then end the workers."""
        try:
            while self._pending:
                self._finish_one()
        except BaseException:
            self.abandon()
            raise
        self._stop()
        self._progress.finish(self._task)

    def abandon(self) -> None:
        """After an error or an interrupt: hash nothing more, and end the workers (a
        running hash stops at its next read) instead of hashing the rest of the tar."""
        with self._changed:
            self._waiting.clear()
            self._abandoned = True
        self._stop()
        self._progress.finish(self._task)  # nothing more to report about it

    def _start(self) -> None:
        for number in range(self._workers):
            thread = threading.Thread(target=self._work, name=f"airgap-hash-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _stop(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()

    def _work(self) -> None:
        with _read_buffer() as buffer:
            self._take_jobs(buffer)

    def _take_jobs(self, buffer: memoryview) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._waiting or self._closed)
                if not self._waiting:
                    return
                job = heapq.heappop(self._waiting)[2]
            try:
                job.digest, job.got = self._hash(job.offset, job.record.size, buffer)
            except BaseException as exc:  # re-raised on the main thread, in tar order
                job.error = exc
            with self._changed:
                job.done = True
                self._changed.notify_all()

    def _hash(self, offset: int, size: int, buffer: memoryview) -> tuple[str, int]:
        """sha256 of ``size`` bytes at ``offset``; also how many bytes were there.

        A member smaller than the buffer is read in ``SMALL_READ`` pieces: the buffer's
        pages a read touches stay resident until the scan ends, and a large member fills
        them all anyway, while one medium member (a 2,000-image bundle's index.json,
        0.6 MB) would hold as many for no reason."""
        hasher = hashlib.sha256()
        remaining = size
        if size < len(buffer):
            buffer = buffer[:SMALL_READ]
        while remaining and not self._abandoned:
            got = self._source.readinto(buffer[: min(len(buffer), remaining)], offset)
            if not got:
                break
            hasher.update(buffer[:got])
            offset += got
            remaining -= got
            self._progress.advance(self._task, got)
        return hasher.hexdigest(), size - remaining

    def _finish_one(self) -> None:
        job = self._pending.popleft()
        with self._changed:
            self._changed.wait_for(lambda: job.done)
        if job.error is not None:
            raise job.error
        record = job.record
        if job.got == record.size and job.digest == record.sha256:
            self._result.add(Member.of(record, job.offset))
            return
        self._result.located.setdefault(record.path, (job.offset, record.size))
        if job.got != record.size:
            message = f"is truncated ({job.got} of {record.size} bytes)"
            self._result.fail("tar", record.path, message)
        else:
            message = f"sha256 {job.digest} does not match the manifest"
            self._result.fail("member", record.path, message)


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
            if not _BLOB_RE.match(record.path):
                result.fail("layout", record.path, "is not named blobs/sha256/<64 hex digits>")
            elif record.path.rsplit("/", 1)[1] != record.sha256:
                result.fail("layout", record.path, "blob name does not equal its sha256 digest")
