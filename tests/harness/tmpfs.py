"""A real size-limited filesystem for a test: a tmpfs mounted on a directory, for what
a full disk does (split bundles on a small medium, free space checked first)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def mount_tmpfs(directory: Path, size: int) -> None:
    """Mount a tmpfs of ``size`` bytes on ``directory`` (made here); the test is skipped
    where that is not allowed (not root, no mount in this namespace)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    directory.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")


def unmount(directory: Path) -> None:
    subprocess.run(["umount", "-l", str(directory)], check=False)


@contextmanager
def tmpfs(directory: Path, size: int) -> Iterator[Path]:
    """``mount_tmpfs`` for the ``with`` block, unmounted after, also when it fails."""
    mount_tmpfs(directory, size)
    try:
        yield directory
    finally:
        unmount(directory)
