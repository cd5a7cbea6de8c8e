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
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from airgap.inputfile import open_regular
from airgap.limits import (
    MAX_EXTENDED_HEADER_BYTES,
    MAX_EXTENDED_HEADERS_PER_MEMBER,
    describe_size,
)
from airgap.names import shown

BLOCK = 512
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
_POSIX_MAGIC = b"ustar\x0000"
_MAX_SIZE_DIGITS = 20  # a PAX size has at most 20 decimal digits (2**64)


class TarFormatError(Exception):
    """The archive cannot be read on past this point; the message says why and where."""


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
            size = _number(header[124:136], "size", self.offset)
            data_at = self.offset + BLOCK
            if kind not in _PAX and kind not in (_GNU_LONG_NAME, _GNU_LONG_LINK, _GLOBAL_PAX):
                entry = _entry(header, kind, size, start, data_at, overrides, sparse)
                return self._place(entry)
            if kind == _GLOBAL_PAX:
                raise TarFormatError(f"global PAX header at byte {self.offset} (bundles have none)")
            data = self._extended(size, data_at)
            if kind == _GNU_LONG_NAME:
                overrides["path"] = _text(data)
            elif kind == _GNU_LONG_LINK:
                overrides["linkpath"] = _text(data)
            else:
                records = _pax_records(data, self.offset)
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
        if not _checksum_ok(block):
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
    name = _text(header[0:100])
    if header[257:265] == _POSIX_MAGIC:
        prefix = _text(header[345:500])
        if prefix:
            name = f"{prefix}/{name}"
    name = overrides.get("path", name)
    if "size" in overrides:
        size = _pax_size(overrides["size"], start)
    if kind == b"\0" and name.endswith("/"):
        kind = DIRECTORY  # the old V7 way of writing a directory
    if kind == DIRECTORY:
        name = name.rstrip("/") or name
    linkname = overrides.get("linkpath", _text(header[157:257]))
    return TarEntry(name, kind, size, start, data_at, linkname, sparse)


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, what: str, offset: int) -> int:
    """A numeric header field: octal text, or GNU base-256 (never negative here)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise TarFormatError(f"header at byte {offset} has a negative {what}")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):  # 0-7
        raise TarFormatError(f"header at byte {offset} has an invalid {what} field {text!r}")
    return int(text, 8)


def _pax_size(value: str, offset: int) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > _MAX_SIZE_DIGITS:
        raise TarFormatError(f"PAX header at byte {offset} has an invalid size {value[:40]!r}")
    return int(value)


def _checksum_ok(block: bytes) -> bool:
    """The header checksum, as POSIX (unsigned) or as some old tars wrote it (signed)."""
    try:
        recorded = _number(block[148:156], "checksum", 0)
    except TarFormatError:
        return False
    unsigned = 256 + sum(block[:148]) + sum(block[156:])
    signed = (
        256 + sum(struct.unpack_from("148b", block)) + sum(struct.unpack_from("356b", block, 156))
    )
    return recorded in (unsigned, signed)


def _pax_records(data: bytes, offset: int) -> dict[str, str]:
    """``LENGTH KEY=VALUE\\n`` records, each length checked against the data it claims."""
    records: dict[str, str] = {}
    position = 0
    where = f"PAX header at byte {offset}"
    while position < len(data):
        if data[position] == 0:
            if data.count(b"\0", position) != len(data) - position:
                raise TarFormatError(f"{where} has data after a NUL byte")
            break
        space = data.find(b" ", position, position + _MAX_SIZE_DIGITS + 1)
        digits = data[position:space] if space > position else b""
        if not digits.isdigit():
            raise TarFormatError(f"{where} has a record without a valid length")
        end = position + int(digits)
        if end <= space + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise TarFormatError(f"{where} has a record whose length does not match it")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals or not key:
            raise TarFormatError(f"{where} has a record without KEY=VALUE")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        position = end
    return records
