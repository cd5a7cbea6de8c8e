"""Atomic file writing: outputs appear whole at their final path or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class SecretBytes(bytes):
    """File content that holds a secret (a password, a filled variable): written mode
    0600 whatever the umask, and never shown by ``repr`` in a log or a traceback."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<secret: {len(self)} bytes>"


def file_mode(data: bytes) -> int:
    """The mode an output file gets: 0600 for secrets, 0644 for everything else."""
    return 0o600 if isinstance(data, SecretBytes) else 0o644


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write to a temporary file beside ``path`` and rename it into place on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        temp.chmod(mode)
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_writer(path, mode) as handle:
        handle.write(data)
