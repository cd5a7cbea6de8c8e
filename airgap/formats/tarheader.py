"""The fields of one tar header block, read the one way airgap reads them.

Both tar readers use these: the bundle's (``bundle.tarread``, by offset) and an image
layer's (``providers.imagefs``, a push parser over a decompressing stream). Headers
come from outside and are attacker-chosen, so every field is checked: numbers are
octal text or non-negative GNU base-256, checksums match (unsigned, or signed as some
old tars wrote them), PAX records are ``LENGTH KEY=VALUE\\n`` with each length
checked. Errors are ``TarFormatError`` naming the header's byte offset; each reader
turns it into its own error with what it was reading.
"""

from __future__ import annotations

import struct

BLOCK = 512
MAX_SIZE_DIGITS = 20  # a PAX size has at most 20 decimal digits (2**64)
POSIX_MAGIC = b"ustar\x0000"


class TarFormatError(Exception):
    """The archive cannot be read on past this point; the message says why and where."""


def text(field: bytes) -> str:
    """A NUL-terminated text field; bytes that are not UTF-8 kept as surrogates."""
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def name_of(block: bytes) -> str:
    """The entry name of a header block: ``prefix/name`` for POSIX ustar."""
    name = text(block[0:100])
    if block[257:265] == POSIX_MAGIC:
        prefix = text(block[345:500])
        if prefix:
            name = f"{prefix}/{name}"
    return name


def number(field: bytes, what: str, offset: int) -> int:
    """A numeric header field: octal text, or GNU base-256 (never negative here)."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] == b"\xff":
        raise TarFormatError(f"header at byte {offset} has a negative {what}")
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    if not all(48 <= c <= 55 for c in digits):  # 0-7
        raise TarFormatError(f"header at byte {offset} has an invalid {what} field {digits!r}")
    return int(digits, 8)


def size_of(block: bytes, offset: int) -> int:
    """The data size a header block declares."""
    return number(block[124:136], "size", offset)


def checksum_ok(block: bytes) -> bool:
    """The header checksum, as POSIX (unsigned) or as some old tars wrote it (signed)."""
    try:
        recorded = number(block[148:156], "checksum", 0)
    except TarFormatError:
        return False
    unsigned = 256 + sum(block[:148]) + sum(block[156:])
    signed = (
        256 + sum(struct.unpack_from("148b", block)) + sum(struct.unpack_from("356b", block, 156))
    )
    return recorded in (unsigned, signed)


def pax_size(value: str, offset: int) -> int:
    """A PAX ``size`` record's value: decimal digits, at most ``MAX_SIZE_DIGITS``."""
    if not value.isascii() or not value.isdigit() or len(value) > MAX_SIZE_DIGITS:
        raise TarFormatError(f"PAX header at byte {offset} has an invalid size {value[:40]!r}")
    return int(value)


def pax_records(data: bytes, offset: int) -> dict[str, str]:
    """``LENGTH KEY=VALUE\\n`` records, each length checked against the data it claims."""
    records: dict[str, str] = {}
    position = 0
    where = f"PAX header at byte {offset}"
    while position < len(data):
        if data[position] == 0:
            if data.count(b"\0", position) != len(data) - position:
                raise TarFormatError(f"{where} has data after a NUL byte")
            break
        space = data.find(b" ", position, position + MAX_SIZE_DIGITS + 1)
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
