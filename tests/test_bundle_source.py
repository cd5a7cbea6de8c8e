"""BundleSource: one bundle's bytes read by offset from a file or across its parts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from airgap.bundle.parts import (
    PRESETS,
    PartRecord,
    PartsList,
    parse_part_size,
    part_name,
    part_sizes,
    parts_list_path,
)
from airgap.bundle.source import open_source
from airgap.core.errors import BundleError, InputError

pytestmark = pytest.mark.unit

MiB = 1 << 20


def _split(data: bytes, bundle: Path, part: int, *, listed: bool = True) -> list[Path]:
    sizes = part_sizes(len(data), part)
    paths = []
    offset = 0
    for index, size in enumerate(sizes):
        path = part_name(bundle, index)
        path.write_bytes(data[offset : offset + size])
        paths.append(path)
        offset += size
    if listed:
        records = [
            PartRecord(p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths
        ]
        document = PartsList(bundle.name, len(data), part, "0" * 64, records)
        parts_list_path(bundle).write_bytes(document.to_bytes())
    return paths


def test_part_sizes_parse_units_and_presets() -> None:
    assert parse_part_size("4GiB") == 4 << 30
    assert parse_part_size("700MiB") == 700 << 20
    assert parse_part_size("4.7GB") == 4_700_000_000
    assert parse_part_size("1048576") == MiB
    assert parse_part_size("fat32") == PRESETS["fat32"] == (4 << 30) - 1
    assert parse_part_size("DVD") == 4_700_372_992
    assert parse_part_size("bd") == 25_025_314_816
    for bad in ("", "4 parsecs", "-1", "1KiB", "0", "1.5", "16383", "\u0661\u0662MiB"):
        with pytest.raises(InputError):
            parse_part_size(bad)
    # past 20 digits: refused in one line, quoted briefly (a 5,000-digit size was a
    # traceback from int(), its whole text in none)
    for huge in ("9" * 5000, "9" * 21 + "TiB", "1." + "5" * 5000):
        with pytest.raises(InputError, match=r"expected bytes") as caught:
            parse_part_size(huge)
        assert len(str(caught.value)) < 200
    assert part_sizes(10, 4) == [4, 4, 2]
    assert part_sizes(8, 4) == [4, 4]


def test_reads_cross_part_boundaries(tmp_path: Path) -> None:
    data = os.urandom(3 * MiB + 12345)
    bundle = tmp_path / "b.tar"
    _split(data, bundle, MiB)
    for named in (bundle, part_name(bundle, 0)):
        with open_source(named) as source:
            assert source.split and source.path == bundle and source.size == len(data)
            assert len(source.parts) == 4
            for offset, length in ((0, 10), (MiB - 3, 7), (MiB - 1, 2 * MiB + 2), (0, len(data))):
                assert source.pread(length, offset) == data[offset : offset + length]
            assert source.pread(100, len(data) - 10) == data[-10:]
            spans = list(source.spans(MiB - 5, MiB + 10))
            assert [(o, n) for _, o, n in spans] == [(MiB - 5, 5), (0, MiB), (0, 5)]
            assert source.describe_part(2) == "part 3 of 4 (b.tar.002)"
            assert source.parts_touching(MiB - 1, 2) == [0, 1]
            assert source.damaged_parts() == []


def test_single_file_wins_and_is_not_split(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar"
    bundle.write_bytes(b"x" * 1000)
    with open_source(bundle) as source:
        assert not source.split and source.size == 1000 and source.pread(3, 998) == b"xx"


def test_missing_short_and_damaged_parts_are_named(tmp_path: Path) -> None:
    data = os.urandom(4 * MiB + 1)
    bundle = tmp_path / "b.tar"
    paths = _split(data, bundle, MiB)
    with pytest.raises(InputError, match=r"part 2 of a split bundle: name b.tar or b.tar.000"):
        open_source(paths[1])
    paths[2].unlink()
    with open(paths[3], "r+b") as handle:
        handle.truncate(MiB - 1)
    with pytest.raises(BundleError) as caught:
        open_source(bundle)
    assert "part 3 of 5 (b.tar.002): missing" in str(caught.value)
    assert "part 4 of 5 (b.tar.003): 1048575 bytes, the parts list says 1048576" in str(
        caught.value
    )
    parts_list_path(bundle).unlink()  # without the list: the gap is still named
    with pytest.raises(BundleError, match=r"part 3 \(b.tar.002\) is missing, yet b.tar.003"):
        open_source(bundle)


def test_a_damaged_part_is_found_by_its_sha256(tmp_path: Path) -> None:
    data = os.urandom(3 * MiB)
    bundle = tmp_path / "b.tar"
    paths = _split(data, bundle, MiB)
    with open(paths[1], "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff" if data[MiB + 100] != 0xFF else b"\0")
    with open_source(bundle) as source:
        assert source.damaged_parts() == [1]
        assert source.damaged_parts([0, 2]) == []


def test_a_hostile_parts_list_is_refused_before_any_part_is_opened(tmp_path: Path) -> None:
    bundle = tmp_path / "b.tar"
    part_name(bundle, 0).write_bytes(b"x" * 10)
    listed = parts_list_path(bundle)
    for text in (
        b"[]",
        b'{"formatVersion": 1, "kind": "airgap-bundle-parts", "bundle": "b.tar", "size": 10,'
        b' "partSize": 4, "manifestSha256": "' + b"0" * 64 + b'", "parts": []}',
        b'{"formatVersion": 1, "kind": "airgap-bundle-parts", "extra": 1}',
    ):
        listed.write_bytes(text)
        with pytest.raises(BundleError):
            open_source(bundle)
    listed.unlink()
    listed.mkdir()
    with pytest.raises(InputError, match="is a directory"):
        open_source(bundle)


def test_the_writer_sink_writes_across_parts_and_never_past_the_end(tmp_path: Path) -> None:
    from airgap.bundle.writer import Sink

    paths = [tmp_path / f"p{i}" for i in range(3)]
    fds = [os.open(p, os.O_RDWR | os.O_CREAT, 0o644) for p in paths]
    try:
        sink = Sink(fds, [10, 10, 5], paths)
        sink.allocate()
        sink.pwrite(b"abcdefghij" * 2 + b"12345", 0)
        sink.pwrite(b"XYZ", 9)  # across the first boundary
        assert [(o, n) for _, o, n in sink.spans(8, 14)] == [(8, 2), (0, 10), (0, 2)]
        with pytest.raises(OSError, match="outside the bundle"):
            sink.pwrite(b"!", 25)
    finally:
        for fd in fds:
            os.close(fd)
    assert [p.read_bytes() for p in paths] == [b"abcdefghiX", b"YZcdefghij", b"12345"]
