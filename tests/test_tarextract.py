"""The tests' tar extraction helper refuses what PEP 706's data filter refuses, on
interpreters with the filter (3.11.4+) and without it (Debian 12's 3.11.2)."""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path

import pytest

from tests.harness.tarextract import extract

pytestmark = pytest.mark.unit


def _tar(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w") as tar:
        for member in members:
            data = b"x" * member.size if member.isfile() else None
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


@pytest.mark.parametrize(
    "member",
    [_file("../escaped"), _link("link", "/etc/passwd"), _link("up", "../../outside")],
    ids=["parent", "absolute-link", "link-up"],
)
def test_members_leaving_the_target_are_refused(tmp_path: Path, member: tarfile.TarInfo) -> None:
    archive = _tar(tmp_path / "hostile.tar", [member])
    target = tmp_path / "out"
    target.mkdir()
    with tarfile.open(archive) as tar, pytest.raises(tarfile.TarError):
        extract(tar, target)
    assert not (tmp_path / "escaped").exists()
    assert list(target.iterdir()) == []


def test_an_absolute_name_stays_under_the_target(tmp_path: Path) -> None:
    """The data filter strips the leading slash; without it the member is refused.
    Either way nothing is written at the absolute path."""
    outside = tmp_path / "absolute-escape"
    archive = _tar(tmp_path / "absolute.tar", [_file(str(outside))])
    target = tmp_path / "out"
    with tarfile.open(archive) as tar, contextlib.suppress(tarfile.TarError):
        extract(tar, target)
    assert not outside.exists()


def test_plain_members_are_extracted(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "plain.tar", [_file("a/b.txt"), _file("c.txt")])
    with tarfile.open(archive) as tar:
        extract(tar, tmp_path / "out", [tar.getmember("a/b.txt")])
    assert (tmp_path / "out/a/b.txt").read_bytes() == b"x"
    assert not (tmp_path / "out/c.txt").exists()
