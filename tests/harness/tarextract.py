"""Extracting test bundles with tarfile, safely on every Python 3.11.

``filter="data"`` (PEP 706) arrived in 3.11.4; a distribution's 3.11 may predate it
(Debian 12's 3.11.2). Without it, members are checked here before extracting: only
regular files and directories, nothing climbing out, and an absolute name is refused
(where the filter would strip its leading slash)."""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath


def extract(
    tar: tarfile.TarFile, target: Path, members: Sequence[tarfile.TarInfo] | None = None
) -> None:
    """Extract ``members`` (default: all) of ``tar`` under ``target``."""
    chosen = list(members) if members is not None else tar.getmembers()
    if hasattr(tarfile, "data_filter"):
        tar.extractall(target, members=chosen, filter="data")
        return
    for member in chosen:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
            raise tarfile.TarError(f"{member.name}: not extracted (outside the target or special)")
    tar.extractall(target, members=chosen)  # noqa: S202 (every member checked above)
