"""Hashing a bundle's members on worker threads while one thread reads the tar: hashlib
leaves the GIL, so reading and hashing overlap.
"""

from __future__ import annotations

import hashlib
import heapq
import mmap
import re
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from airgap.bundle.format import (
    IMAGES_DIR,
    FileRecord,
)
from airgap.bundle.source import BundleSource
from airgap.bundle.tarread import TarEntry
from airgap.core.progress import QUIET, Progress
from airgap.verify.scanresult import Member, ScanResult

READ_SIZE = 1 << 20
SMALL_READ = 64 << 10  # the read size of a member smaller than READ_SIZE
# members the header walk may run ahead of the oldest unfinished hash: a few hundred
# bytes each, and enough for the largest members of a bundle to be seen early
MAX_QUEUED = 1024
BLOB_RE = re.compile(rf"^{IMAGES_DIR}/blobs/sha256/[0-9a-f]{{64}}$")


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
                if self._hash_blobs or not (r.blob_named or BLOB_RE.match(r.path))
            )
            self._progress.total(self._task, sum(hashed))
        if not self._hash_blobs and BLOB_RE.match(info.name):
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
