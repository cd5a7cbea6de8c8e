"""Writing the bundle tar from a plan: every member's place is known before any byte.

Collect knows every blob's digest and size once the manifests are resolved, so the
signed manifest, the signature and the whole tar layout are computed first; blobs are
then downloaded straight into their slots in the output file (``pwrite``, in parallel),
written once, never staged and copied. Small members are written inline; files on disk
are copied in-kernel. The tar is a temporary file until it is complete.
"""

from __future__ import annotations

import errno
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME

BLOCK = tarfile.BLOCKSIZE
END_OF_ARCHIVE = b"\0" * (BLOCK * 2)


@dataclass(frozen=True)
class PlannedMember:
    """A member to write: from ``data``, from ``path``, or (neither) filled in later."""

    name: str
    size: int
    data: bytes | None = None
    path: Path | None = None


@dataclass(frozen=True)
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


def _padding(size: int) -> int:
    return -size % BLOCK


@dataclass(frozen=True)
class TarPlan:
    """Headers and offsets for the whole archive, manifest and signature first."""

    members: list[tuple[int, bytes, PlannedMember]]  # (data offset, header, member)
    total_size: int

    @classmethod
    def build(
        cls, manifest: bytes, signature: bytes, members: Sequence[PlannedMember], mtime: int
    ) -> TarPlan:
        ordered = [
            PlannedMember(MANIFEST_NAME, len(manifest), data=manifest),
            PlannedMember(SIGNATURE_NAME, len(signature), data=signature),
            *members,
        ]
        placed = []
        offset = 0
        for member in ordered:
            header = _header(member.name, member.size, mtime)
            offset += len(header)
            placed.append((offset, header, member))
            offset += member.size + _padding(member.size)
        return cls(placed, offset + len(END_OF_ARCHIVE))

    def regions(self) -> list[Region]:
        """The members to be filled in after ``write_skeleton``."""
        return [
            Region(m.name, offset, m.size)
            for offset, _, m in self.members
            if m.data is None and m.path is None
        ]

    def write_skeleton(self, fd: int) -> None:
        """Size the file, write every header, inline and on-disk member, and the end."""
        os.ftruncate(fd, self.total_size)
        for offset, header, member in self.members:
            os.pwrite(fd, header, offset - len(header))
            if member.data is not None:
                os.pwrite(fd, member.data, offset)
            elif member.path is not None:
                _copy_into(fd, member.path, offset, member.size)
        os.pwrite(fd, END_OF_ARCHIVE, self.total_size - len(END_OF_ARCHIVE))


def _copy_into(fd: int, path: Path, offset: int, size: int) -> None:
    """Copy ``size`` bytes of ``path`` to ``offset`` of ``fd``, in-kernel where possible."""
    with path.open("rb") as source:
        done = 0
        try:
            while done < size:
                copied = os.copy_file_range(source.fileno(), fd, size - done, done, offset + done)
                if copied == 0:
                    break
                done += copied
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
        source.seek(done)
        while done < size:
            chunk = source.read(min(1 << 20, size - done))
            if not chunk:
                raise OSError(f"{path} shrank while being written into the bundle")
            os.pwrite(fd, chunk, offset + done)
            done += len(chunk)


class RegionWriter:
    """A file-like window onto one region of the output file, for streamed downloads.

    Writes land at the region's offset with ``pwrite`` (safe from many threads on one
    descriptor); ``seek(0)``/``truncate()`` restart it for a retried download, and a
    byte past the region's end is refused rather than spilling into the next member.
    """

    def __init__(self, fd: int, region: Region) -> None:
        self._fd = fd
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
        written = 0
        view = memoryview(data)
        while written < len(view):
            written += os.pwrite(
                self._fd, view[written:], self._region.offset + self._position + written
            )
        self._position = end
        return len(data)
