"""Writing the bundle tar: manifest, signature, then every file, copied in-kernel.

Member data is copied with ``os.sendfile``/``copy_file_range`` where the platform has
it, so a multi-GiB bundle is written at disk speed without passing through Python.
The tar is written to a temporary name and renamed, so a failure leaves nothing.
"""

from __future__ import annotations

import errno
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.fsutil import atomic_writer

BLOCK = tarfile.BLOCKSIZE


def _header(name: str, size: int, mtime: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def _pad(out: BinaryIO, size: int) -> None:
    remainder = size % BLOCK
    if remainder:
        out.write(b"\0" * (BLOCK - remainder))


def _copy_file(out: BinaryIO, path: Path, size: int) -> None:
    """Append ``size`` bytes of ``path`` to ``out``: in-kernel where possible."""
    out.flush()
    offset = 0
    with path.open("rb") as source:
        try:
            while offset < size:
                sent = os.sendfile(out.fileno(), source.fileno(), offset, size - offset)
                if sent == 0:
                    break
                offset += sent
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
        source.seek(offset)
        while offset < size:
            chunk = source.read(min(1 << 20, size - offset))
            if not chunk:
                raise OSError(f"{path} shrank while being written into the bundle")
            out.write(chunk)
            offset += len(chunk)


def write_bundle(
    output: Path,
    manifest: bytes,
    signature: bytes,
    files: Iterable[tuple[str, Path, int]],
    *,
    mtime: int,
) -> None:
    """Write the bundle tar at ``output`` atomically.

    ``files`` are (member name, source path, size) in the order they should appear.
    """
    with atomic_writer(output) as out:
        for name, data in ((MANIFEST_NAME, manifest), (SIGNATURE_NAME, signature)):
            out.write(_header(name, len(data), mtime))
            out.write(data)
            _pad(out, len(data))
        for name, path, size in files:
            out.write(_header(name, size, mtime))
            _copy_file(out, path, size)
            _pad(out, size)
        out.write(b"\0" * (BLOCK * 2))
