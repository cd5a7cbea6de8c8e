"""Writing the bundle tar from a plan: every member's place is known before any byte.

Collect knows every blob's digest and size once the manifests are resolved, so the
signed manifest, the signature and the whole tar layout are computed first; blobs are
then downloaded straight into their slots in the output file (``pwrite``, in parallel),
written once, never staged and copied. Small members are written inline; files on disk
are copied in-kernel. The tar is a temporary file until it is complete.

A split bundle (``collect --part-size``) is the same tar written into consecutive part
files (``airgap.bundle.parts``): every write goes to the part, or the parts, holding its
offsets, so no part ever grows past the part size and ``cat`` of the parts is the
single-file bundle byte for byte. The parts are hashed once complete (which also reads
back what landed on the medium) and described by the signed parts list, written last.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import hashlib
import itertools
import os
import tarfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.parts import (
    MAX_PARTS,
    PartRecord,
    PartsList,
    part_name,
    part_sizes,
    parts_list_path,
    parts_signature_path,
    split_part_name,
)
from airgap.bundle.source import ensure_descriptors
from airgap.core.errors import InputError
from airgap.core.fsutil import atomic_writer, check_replaceable, write_atomic

BLOCK = tarfile.BLOCKSIZE
END_OF_ARCHIVE = b"\0" * (BLOCK * 2)


class Sink:
    """Where the bundle's bytes go: one file, or consecutive part files (``spans``
    says which descriptor holds which offsets, like ``BundleSource.spans``)."""

    def __init__(
        self, fds: Sequence[int], sizes: Sequence[int], names: Sequence[Path] = ()
    ) -> None:
        self._fds = list(fds)
        self._sizes = list(sizes)
        self._names = {fd: path for fd, path in zip(fds, names, strict=False)}
        self._starts = list(itertools.accumulate(self._sizes, initial=0))[:-1]
        self.size = sum(self._sizes)

    @classmethod
    def single(cls, fd: int, size: int) -> Sink:
        return cls([fd], [size])

    def spans(self, offset: int, length: int) -> Iterator[tuple[int, int, int]]:
        """``(descriptor, offset in that file, length)`` covering ``length`` bytes from
        ``offset``; bytes past the end of the bundle are refused, never spilled."""
        if offset < 0 or offset + length > self.size:
            raise OSError(errno.EFBIG, f"bytes {offset}+{length} are outside the bundle")
        index = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while length > 0:
            start = self._starts[index]
            piece = min(start + self._sizes[index], offset + length) - offset
            yield self._fds[index], offset - start, piece
            offset += piece
            length -= piece
            index += 1

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset`` (safe from many threads at once)."""
        view = memoryview(data)
        done = 0
        for fd, position, length in self.spans(offset, len(view)):
            end = done + length
            with self.naming(fd):
                while done < end:
                    written = os.pwrite(fd, view[done:end], position)
                    done += written
                    position += written

    def allocate(self) -> None:
        """Give every file its final size (sparse: no block is written yet)."""
        for fd, size in zip(self._fds, self._sizes, strict=True):
            with self.naming(fd):
                os.ftruncate(fd, size)

    @contextlib.contextmanager
    def naming(self, fd: int) -> Iterator[None]:
        """An OSError while writing ``fd`` names its file (which part was too large for
        the medium, say), not whichever file a caller happens to be closing."""
        try:
            yield
        except OSError as exc:
            path = self._names.get(fd)
            if path is None or exc.filename is not None or exc.errno is None:
                raise
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def _as_sink(target: int | Sink, size: int) -> Sink:
    return Sink.single(target, size) if isinstance(target, int) else target


@dataclass(frozen=True, slots=True)
class PlannedMember:
    """A member to write: from ``data``, from ``path`` (its ``size`` bytes from
    ``offset``: collect spills small blobs into one staging file), or (neither) filled
    in later."""

    name: str
    size: int
    data: bytes | None = None
    path: Path | None = None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Region:
    """Where a deferred member's bytes go in the output file."""

    name: str
    offset: int
    size: int


def _header(name: str, size: int, mtime: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def _header_length(name: str, size: int, mtime: int) -> int:
    """``len(_header(name, size, mtime))`` without keeping (or, usually, building) it:
    one 512-byte ustar block unless tarfile's PAX format needs an extended header (a
    non-ASCII name or one over 100 characters, a size or mtime past 11 octal digits).
    A 2,000-image plan would otherwise hold ~3 MiB of headers until the end;
    ``write_skeleton`` builds each header when it writes it and checks its length."""
    fits = 0 <= size < 8**11 and 0 <= mtime < 8**11 and len(name) <= 100 and name.isascii()
    return BLOCK if fits else len(_header(name, size, mtime))


def _padding(size: int) -> int:
    return -size % BLOCK


def member_span(name: str, size: int, mtime: int = 0) -> int:
    """The bytes a member takes in the tar: its header(s), data and padding."""
    return _header_length(name, size, mtime) + size + _padding(size)


@dataclass(frozen=True)
class TarPlan:
    """Offsets for the whole archive, manifest and signature first (headers are built
    as they are written). The members are kept as given, which may be a collection
    making each member when it is iterated (collect's blobs: ``PlannedMembers``), and
    their data offsets in one array: no tuple, int or member held per blob."""

    parts: list[Iterable[PlannedMember]]  # [manifest and signature], the rest; [] once spent
    offsets: array[int]  # each member's data offset, in order
    total_size: int
    mtime: int

    @classmethod
    def build(
        cls, manifest: bytes, signature: bytes, members: Iterable[PlannedMember], mtime: int
    ) -> TarPlan:
        """``members`` is iterated again to write them: a collection, not an iterator."""
        head = [
            PlannedMember(MANIFEST_NAME, len(manifest), data=manifest),
            PlannedMember(SIGNATURE_NAME, len(signature), data=signature),
        ]
        offsets = array("q")
        offset = 0
        for member in itertools.chain(head, members):
            offset += _header_length(member.name, member.size, mtime)
            offsets.append(offset)
            offset += member.size + _padding(member.size)
        return cls([head, members], offsets, offset + len(END_OF_ARCHIVE), mtime)

    @property
    def members(self) -> Iterator[tuple[int, PlannedMember]]:
        """``(data offset, member)`` of each member, in tar order (none once spent)."""
        return zip(self.offsets, itertools.chain.from_iterable(self.parts), strict=False)

    def spend(self) -> None:
        """Let go of the members (the manifest's bytes, whatever the rest holds)."""
        self.parts.clear()

    def manifest(self) -> bytes:
        """The bundle manifest's bytes: the first member, until the plan is spent."""
        member = next((m for _, m in self.members), None)
        if member is None or member.name != MANIFEST_NAME or member.data is None:
            raise RuntimeError("the tar plan does not start with the bundle manifest")
        return member.data

    def regions(self) -> list[Region]:
        """The members to be filled in after ``write_skeleton``."""
        return [
            Region(m.name, offset, m.size)
            for offset, m in self.members
            if m.data is None and m.path is None
        ]

    def write_skeleton(self, target: int | Sink) -> None:
        """Size the file (or parts), write every header, inline and on-disk member, and
        the end."""
        sink = _as_sink(target, self.total_size)
        sink.allocate()
        with _Sources() as sources:
            for offset, member in self.members:
                header = _header(member.name, member.size, self.mtime)
                if len(header) != _header_length(member.name, member.size, self.mtime):
                    raise RuntimeError(f"{member.name}: its tar header is not the planned size")
                sink.pwrite(header, offset - len(header))
                if member.data is not None:
                    sink.pwrite(member.data, offset)
                elif member.path is not None:
                    source = sources.open(member.path)
                    _copy_into(sink, source, member.path, offset, member.size, member.offset)
            sink.pwrite(END_OF_ARCHIVE, self.total_size - len(END_OF_ARCHIVE))


class _Sources(contextlib.AbstractContextManager["_Sources"]):
    """The file members are copied from, open while one path follows another: the
    thousands of small blobs collect spilled into one file are read through one
    descriptor, not one ``open`` each."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._handle: BinaryIO | None = None

    def open(self, path: Path) -> BinaryIO:
        if self._handle is None or path != self._path:
            self.close()
            self._handle = path.open("rb")
            self._path = path
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = self._path = None

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy_into(
    sink: Sink, source: BinaryIO, path: Path, offset: int, size: int, start: int = 0
) -> None:
    """Copy ``size`` bytes of ``source`` (``path``), from ``start``, to ``offset`` of
    the bundle, in-kernel where possible (per part, when the bytes cross into the next
    one)."""
    done = start
    for fd, position, length in sink.spans(offset, size):
        with sink.naming(fd):
            done = _copy_span(source, fd, done, position, length, path)


def _copy_span(source: BinaryIO, fd: int, done: int, position: int, length: int, path: Path) -> int:
    """Copy ``length`` bytes from ``done`` of ``source`` to ``position`` of ``fd``."""
    copied = 0
    try:
        while copied < length:
            got = os.copy_file_range(
                source.fileno(), fd, length - copied, done + copied, position + copied
            )
            if got == 0:
                break
            copied += got
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    source.seek(done + copied)
    while copied < length:
        chunk = source.read(min(1 << 20, length - copied))
        if not chunk:
            raise OSError(f"{path} shrank while being written into the bundle")
        os.pwrite(fd, chunk, position + copied)
        copied += len(chunk)
    return done + copied


class RegionWriter:
    """A file-like window onto one region of the output file, for streamed downloads.

    Writes land at the region's offset with ``pwrite`` (safe from many threads on one
    descriptor), in the part or parts holding it; ``seek(0)``/``truncate()`` restart it
    for a retried download, and a byte past the region's end is refused rather than
    spilling into the next member.
    """

    takes_views = True  # write is done with the bytes when it returns (BlobSink)

    def __init__(self, target: int | Sink, region: Region) -> None:
        self._sink = _as_sink(target, region.offset + region.size)
        self._region = region
        self._position = 0

    def seek(self, position: int, whence: int = 0) -> int:
        if position != 0 or whence != 0:
            raise OSError(errno.ESPIPE, "a region can only be rewound")
        self._position = 0
        return 0

    def truncate(self, size: int | None = None) -> int:
        return self._position

    def write(self, data: bytes | bytearray | memoryview) -> int:
        end = self._position + len(data)
        if end > self._region.size:
            raise OSError(
                errno.EFBIG,
                f"{self._region.name}: more bytes than the {self._region.size} expected",
            )
        self._sink.pwrite(data, self._region.offset + self._position)
        self._position = end
        return len(data)


# -- writing a bundle, whole or in parts -------------------------------------------------

Fill = Callable[[Sink, list[Region]], None]  # downloads the deferred members into place


def write_bundle(plan: TarPlan, output: Path, fill: Fill) -> None:
    """The bundle at ``output`` as one file, renamed into place when complete."""
    with atomic_writer(output) as out:
        sink = Sink([out.fileno()], [plan.total_size], [output])
        fill(sink, _lay_out(plan, sink))


def _lay_out(plan: TarPlan, sink: Sink) -> list[Region]:
    """Write the skeleton and let go of the plan's members (the plan is spent): the
    inline ones, the signed manifest and every image manifest and config, are in the
    file now and need not be held while the blobs download."""
    plan.write_skeleton(sink)
    regions = plan.regions()
    plan.spend()
    return regions


def check_parts_output(output: Path, *, overwrite: bool) -> None:
    """Refuse to write parts over an earlier split bundle unless ``overwrite``."""
    for path in (part_name(output, 0), parts_list_path(output)):
        check_replaceable(path, overwrite=overwrite, what="bundle")


def write_parts(
    plan: TarPlan,
    output: Path,
    part_size: int,
    fill: Fill,
    *,
    sign: Callable[[bytes], bytes],
) -> list[Path]:
    """The bundle as ``output.000``, ``output.001``, … of ``part_size`` bytes (the last
    one shorter), then the signed parts list. Each part is a temporary file until every
    part is complete and hashed; the list is written last, so a set with its list is a
    whole set. An earlier bundle of the same name (one file, or more parts) is
    removed: its parts would otherwise be read with the new ones."""
    sizes = part_sizes(plan.total_size, part_size)
    if len(sizes) > MAX_PARTS:
        raise InputError(
            f"--part-size {part_size} would cut the {plan.total_size}-byte bundle into "
            f"{len(sizes)} parts, more than {MAX_PARTS}: choose a larger part size"
        )
    ensure_descriptors(len(sizes))
    manifest_sha256 = _sha256(plan.manifest())
    paths = [part_name(output, index) for index in range(len(sizes))]
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(atomic_writer(path)) for path in paths]
        sink = Sink([h.fileno() for h in handles], sizes, paths)
        fill(sink, _lay_out(plan, sink))
        records = _hash_parts([h.fileno() for h in handles], sizes)
    _remove_stale(output, len(sizes))
    listed = PartsList(output.name, plan.total_size, part_size, manifest_sha256, records)
    data = listed.to_bytes()
    write_atomic(parts_signature_path(output), sign(data))
    write_atomic(parts_list_path(output), data)
    return paths


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hash_parts(fds: list[int], sizes: list[int]) -> list[PartRecord]:
    """Each part's sha256, read back from the files just written, parts in parallel."""

    def digest(fd: int, size: int) -> PartRecord:
        hasher = hashlib.sha256()
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(1 << 20, size - offset), offset)
            if not chunk:
                raise OSError(errno.EIO, "a part is shorter than it was written")
            hasher.update(chunk)
            offset += len(chunk)
        return PartRecord(size, hasher.hexdigest())

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(digest, fds, sizes))


def _remove_stale(output: Path, count: int) -> None:
    """Parts past ``count`` and a single-file bundle of the same name, from an earlier
    collect that ``--force`` overwrites."""
    output.unlink(missing_ok=True)
    for sibling in output.parent.glob(f"{output.name}.*"):
        found = split_part_name(sibling)
        if found is not None and found[0].name == output.name and found[1] >= count:
            sibling.unlink(missing_ok=True)
