"""Free space checked before the long part of a run, not discovered at its end.

A 200 GiB collect that fails at 190 GiB because the USB disk was full costs a day.
Collect knows every blob's size once the manifests are read, so it asks each
filesystem it is about to fill for its free space first and refuses in one line,
naming what is needed and what is free, before any blob is requested.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from airgap.core.errors import AirgapError
from airgap.core.textfmt import human_size


class NoSpaceError(AirgapError):
    """A filesystem lacks the space a run is about to need."""


@dataclass(frozen=True)
class Need:
    """``size`` bytes about to be written under ``directory``, for ``what``."""

    directory: Path
    size: int
    what: str


def free_bytes(directory: Path) -> int:
    """What an unprivileged writer may still put on ``directory``'s filesystem."""
    info = os.statvfs(directory)
    return info.f_bavail * info.f_frsize


def check_space(needs: list[Need]) -> None:
    """Refuse when a filesystem lacks what ``needs`` add up to on it (needs on one
    filesystem, such as a bundle and a staging directory beside it, are summed)."""
    by_device: dict[int, list[Need]] = {}
    for need in needs:
        by_device.setdefault(need.directory.stat().st_dev, []).append(need)
    problems = []
    for group in by_device.values():
        wanted = sum(need.size for need in group)
        free = free_bytes(group[0].directory)
        if wanted > free:
            what = " and ".join(f"{need.what} ({human_size(need.size)})" for need in group)
            problems.append(
                f"{group[0].directory} needs {human_size(wanted)} for {what}, "
                f"{human_size(free)} free"
            )
    if problems:
        raise NoSpaceError(f"not enough space: {'; '.join(problems)}")
