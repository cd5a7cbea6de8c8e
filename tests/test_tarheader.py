"""The one tar header reader (``formats.tarheader``), table-driven, and both archive
readers agreeing on it: the bundle's (``bundle.tarread``) and an image layer's
(``providers.imagefs``) once disagreed on a negative base-256 size (refused by one,
read as huge by the other), signed checksums and malformed PAX records."""

from __future__ import annotations

import io
import tarfile

import pytest

from airgap.bundle.tarread import TarReader
from airgap.formats.tarheader import (
    BLOCK,
    TarFormatError,
    checksum_ok,
    number,
    pax_records,
    pax_size,
)
from airgap.providers.imagefs import ImageFiles, LayerError

pytestmark = pytest.mark.unit

LAYER = "application/vnd.oci.image.layer.v1.tar"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (b"0000644\0", 0o644),
        (b"   12 \0", 0o12),
        (b"\0" * 8, 0),
        (b"\x80" + (5 << 33).to_bytes(11, "big"), 5 << 33),  # GNU base-256: over 8 GiB
    ],
)
def test_numbers_read(field: bytes, value: int) -> None:
    assert number(field, "size", 0) == value


@pytest.mark.parametrize(
    ("field", "refusal"),
    [
        (b"\xff" + b"\xff" * 11, "negative size"),
        (b"0000899\0", "invalid size field"),
        (b"12x\0", "invalid size field"),
    ],
)
def test_numbers_refused(field: bytes, refusal: str) -> None:
    with pytest.raises(TarFormatError, match=refusal):
        number(field, "size", 1024)


def _header(name: str = "a", size: int = 1) -> bytearray:
    info = tarfile.TarInfo(name)
    info.size = size
    return bytearray(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict"))


def test_checksums_unsigned_signed_and_wrong() -> None:
    block = _header("\u00e9t\u00e9")  # bytes over 127: signed and unsigned sums differ
    assert checksum_ok(bytes(block))
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 256
    block[148:156] = f"{signed:06o}\0 ".encode()
    assert checksum_ok(bytes(block))  # as some old tars wrote it
    block[0] ^= 1
    assert not checksum_ok(bytes(block))


@pytest.mark.parametrize(
    ("data", "result"),
    [
        (b"11 path=ab\n", {"path": "ab"}),
        (b"11 path=ab\n\0\0\0", {"path": "ab"}),
        (b"9 size=7\n13 mtime=1.5\n", {"size": "7", "mtime": "1.5"}),
    ],
)
def test_pax_records_read(data: bytes, result: dict[str, str]) -> None:
    assert pax_records(data, 0) == result


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (b"12 path=ab\n", "length does not match"),
        (b"11 path=ab!", "length does not match"),
        (b"x path=ab\n", "without a valid length"),
        (b"8 nokey\n", "without KEY=VALUE"),
        (b"11 path=ab\n\0x", "data after a NUL byte"),
    ],
)
def test_pax_records_refused(data: bytes, refusal: str) -> None:
    with pytest.raises(TarFormatError, match=refusal):
        pax_records(data, 0)


@pytest.mark.parametrize("value", ["9" * 21, "-1", "\u0661", ""])
def test_pax_sizes_refused(value: str) -> None:
    with pytest.raises(TarFormatError, match="invalid size"):
        pax_size(value, 0)


def _negative_size_archive() -> bytes:
    block = _header()
    block[124:136] = b"\xff" * 12
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block) + b"x" + b"\0" * (BLOCK - 1) + b"\0" * (2 * BLOCK)


def test_both_readers_refuse_a_negative_base_256_size() -> None:
    data = _negative_size_archive()
    with pytest.raises(TarFormatError, match="negative size"):
        TarReader(_Memory(data)).next()
    sink = ImageFiles(lambda path: 1 << 20, "image").layer(LAYER, "sha256:0")
    with pytest.raises(LayerError, match="image: .*negative size"):
        sink.write(data)
        sink.finish()


class _Memory:
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self._size = len(data)

    @property
    def size(self) -> int:
        return self._size

    def pread(self, length: int, offset: int) -> bytes:
        self._data.seek(offset)
        return self._data.read(length)
