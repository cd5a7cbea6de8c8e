"""Tar headers read with airgap's own bounds, before any library sees them.

A bundle arrives from the other side of the gap and its headers are attacker-chosen.
``tarfile`` trusts them: a negative PAX ``size`` sends CPython 3.11's reader into an
endless loop (CVE-2025-8194) and a PAX or GNU long-name header declaring 1 GiB is read
into memory whole. This reader parses the few header shapes a bundle may hold (ustar,
PAX ``x`` headers, GNU long names) with explicit bounds: checksums checked, sizes
non-negative and inside the file, extended headers at most
``MAX_EXTENDED_HEADER_BYTES``, a few per member. It reads by offset (``pread`` on a file
descriptor, or a ``BundleSource`` whose bytes may span several part files), so it never
moves a file position another reader depends on.

Bundles are opened with ``open_bundle``, which refuses anything but a regular file
(``/dev/zero``, a FIFO or a directory would otherwise be read forever or block).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from airgap.core.inputfile import open_regular
from airgap.core.limits import (
    MAX_EXTENDED_HEADER_BYTES,
    MAX_EXTENDED_HEADERS_PER_MEMBER,
    describe_size,
)
from airgap.core.names import shown
from airgap.formats.tarheader import (
    BLOCK,
    TarFormatError,
    checksum_ok,
    name_of,
    pax_records,
    pax_size,
    size_of,
    text,
)

REGULAR_TYPES = frozenset({b"0", b"\0", b"7"})
DIRECTORY = b"5"
SYMLINK = b"2"
HARDLINK = b"1"
CHAR_DEVICE = b"3"
BLOCK_DEVICE = b"4"
FIFO = b"6"
GNU_SPARSE = b"S"
_PAX = frozenset({b"x", b"X"})
_GLOBAL_PAX = b"g"
_GNU_LONG_NAME = b"L"
_GNU_LONG_LINK = b"K"
_NO_DATA = frozenset({DIRECTORY, SYMLINK, HARDLINK, CHAR_DEVICE, BLOCK_DEVICE, FIFO})


class TarTruncated(Exception):
    """A member's data runs past the end of the file."""

    def __init__(self, entry: TarEntry, available: int) -> None:
        super().__init__(entry.name)
        self.entry = entry
        self.available = available

    def __str__(self) -> str:
        return f"{self.entry.name} is truncated ({self.available} of {self.entry.size} bytes)"


@dataclass(frozen=True, slots=True)  # one per member of a bundle
class TarEntry:
    """One member: its name, type, size and where its header and data are."""

    name: str
    type: bytes
    size: int
    offset: int  # the first header block (extended headers included)
    offset_data: int
    linkname: str = ""
    sparse: bool = False

    def isreg(self) -> bool:
        return self.type in REGULAR_TYPES

    def isdir(self) -> bool:
        return self.type == DIRECTORY

    def issym(self) -> bool:
        return self.type == SYMLINK

    def islnk(self) -> bool:
        return self.type == HARDLINK

    def ischr(self) -> bool:
        return self.type == CHAR_DEVICE

    def isblk(self) -> bool:
        return self.type == BLOCK_DEVICE

    def isfifo(self) -> bool:
        return self.type == FIFO

    def issparse(self) -> bool:
        return self.sparse or self.type == GNU_SPARSE

    @property
    def end(self) -> int:
        """The offset of the next header."""
        return self.offset_data + _padded(self.size)


def _padded(size: int) -> int:
    return size + (-size % BLOCK)


def open_bundle(path: Path) -> tuple[int, int]:
    """A read-only descriptor of the bundle at ``path`` and its size: a regular file, or
    an input error at once (``/dev/zero`` or a FIFO would otherwise be read forever)."""
    return open_regular(path, "bundle")


class RandomAccess(Protocol):
    """Bytes read by offset: a ``BundleSource`` (one file or its parts)."""

    @property
    def size(self) -> int: ...

    def pread(self, length: int, offset: int) -> bytes: ...


class _Descriptor:
    """A plain file descriptor as RandomAccess."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self.fd, length, offset)


class TarReader:
    """Walks the headers of the tar in ``source`` (a descriptor of ``size`` bytes, or
    anything readable by offset), one member at a time.

    ``next`` returns None where the members end: at a zero block, at the end of the
    file, at a partial header, or at a header whose checksum is wrong; ``offset`` is then
    where that happened, for the caller's end-of-archive check. Anything it cannot read
    past safely raises TarFormatError, and a member whose data runs past the end of the
    file raises TarTruncated."""

    def __init__(self, source: int | RandomAccess, size: int | None = None) -> None:
        if isinstance(source, int):
            if size is None:
                raise TypeError("a descriptor needs its size")
            source = _Descriptor(source, size)
        self._source = source
        self._size = source.size if size is None else size
        self.offset = 0

    @property
    def source(self) -> RandomAccess:
        """What is read from (by offset: no file position is used)."""
        return self._source

    def pread(self, length: int, offset: int) -> bytes:
        return self._source.pread(length, offset)

    def next(self) -> TarEntry | None:
        start = self.offset
        overrides: dict[str, str] = {}
        sparse = False
        for _ in range(MAX_EXTENDED_HEADERS_PER_MEMBER + 1):
            header = self._header(self.offset, start)
            if header is None:
                if self.offset != start:
                    raise TarFormatError(
                        f"extended header at byte {start} is not followed by a member"
                    )
                return None
            kind = header[156:157]
            size = size_of(header, self.offset)
            data_at = self.offset + BLOCK
            if kind not in _PAX and kind not in (_GNU_LONG_NAME, _GNU_LONG_LINK, _GLOBAL_PAX):
                entry = _entry(header, kind, size, start, data_at, overrides, sparse)
                return self._place(entry)
            if kind == _GLOBAL_PAX:
                raise TarFormatError(f"global PAX header at byte {self.offset} (bundles have none)")
            data = self._extended(size, data_at)
            if kind == _GNU_LONG_NAME:
                overrides["path"] = text(data)
            elif kind == _GNU_LONG_LINK:
                overrides["linkpath"] = text(data)
            else:
                records = pax_records(data, self.offset)
                sparse = sparse or any(key.startswith("GNU.sparse.") for key in records)
                overrides.update(records)
            self.offset = data_at + _padded(size)
        raise TarFormatError(
            f"more than {MAX_EXTENDED_HEADERS_PER_MEMBER} extended headers in a row at byte {start}"
        )

    def _header(self, offset: int, start: int) -> bytes | None:
        """The header block at ``offset``, or None where the members end."""
        block = self._source.pread(BLOCK, offset)
        if offset == 0 and (len(block) < BLOCK or not block.strip(b"\0")):
            raise TarFormatError("it is empty or too small to be a tar archive")
        if len(block) < BLOCK or not block.strip(b"\0"):
            return None
        if not checksum_ok(block):
            if offset == 0:
                raise TarFormatError("its first header has a bad checksum (not a tar archive?)")
            return None
        return block

    def _extended(self, size: int, offset: int) -> bytes:
        """The payload of an extended header, bounded before a byte is read."""
        if size > MAX_EXTENDED_HEADER_BYTES:
            raise TarFormatError(
                f"extended header at byte {offset - BLOCK} declares {size} bytes, over the "
                f"{describe_size(MAX_EXTENDED_HEADER_BYTES)} limit"
            )
        if offset + size > self._size:
            raise TarFormatError(f"extended header at byte {offset - BLOCK} is truncated")
        data = self._source.pread(size, offset)
        if len(data) != size:
            raise TarFormatError(f"extended header at byte {offset - BLOCK} is truncated")
        return data

    def _place(self, entry: TarEntry) -> TarEntry:
        if entry.size and entry.type in _NO_DATA:
            raise TarFormatError(
                f"member {shown(entry.name)} at byte {entry.offset} has type {entry.type!r} "
                f"but declares {entry.size} bytes of data"
            )
        available = self._size - entry.offset_data
        if entry.size > available:
            self.offset = self._size
            raise TarTruncated(entry, max(available, 0))
        self.offset = entry.end
        return entry


def _entry(
    header: bytes,
    kind: bytes,
    size: int,
    start: int,
    data_at: int,
    overrides: dict[str, str],
    sparse: bool,
) -> TarEntry:
    name = name_of(header)
    name = overrides.get("path", name)
    if "size" in overrides:
        size = pax_size(overrides["size"], start)
    if kind == b"\0" and name.endswith("/"):
        kind = DIRECTORY  # the old V7 way of writing a directory
    if kind == DIRECTORY:
        name = name.rstrip("/") or name
    linkname = overrides.get("linkpath", text(header[157:257]))
    return TarEntry(name, kind, size, start, data_at, linkname, sparse)
