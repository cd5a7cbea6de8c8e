"""Opening input files as regular files only, and reading small ones with a cap.

A path the user names (a bundle, a spec, a policy, a key) can be ``/dev/zero``, a FIFO
or a directory: reading those never ends, blocks, or fails obscurely. Files are opened
non-blocking (a FIFO cannot stall the open), checked with ``fstat``, and small ones are
read with a cap, so any of them fails at once with one line naming the path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from airgap.core.errors import InputError
from airgap.core.limits import describe_size


def open_regular(path: Path, what: str) -> tuple[int, int]:
    """A read-only descriptor of the regular file at ``path``, and its size.

    ``what`` names the file in messages (``bundle``, ``spec file``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(f"{what} {path} not found") from None
    except OSError as exc:
        raise InputError(f"cannot open {what} {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise InputError(f"{what} {path} is {_kind(info.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd, info.st_size


def check_regular(path: Path, what: str) -> None:
    """Fail as ``open_regular`` would for a file read later (a CA file at the TLS
    handshake): not found, unreadable, or a device, FIFO or directory."""
    fd, _ = open_regular(path, what)
    os.close(fd)


def open_small(path: Path, limit: int, what: str) -> tuple[int, int]:
    """``open_regular``, refusing a file of more than ``limit`` bytes (the descriptor is
    closed then): for readers that stream the file rather than read it whole."""
    fd, size = open_regular(path, what)
    if size > limit:
        os.close(fd)
        raise _too_large(path, limit, what)
    return fd, size


def check_small(path: Path, limit: int, what: str) -> None:
    """Fail as ``read_small`` would for a file another reader opens by its path (a CA
    bundle or key handed to OpenSSL): a FIFO would block it for ever, a device or a
    huge file would be read without end."""
    fd, _ = open_small(path, limit, what)
    os.close(fd)


def read_small(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    fd, _ = open_small(path, limit, what)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while we looked
        raise _too_large(path, limit, what)
    return data


def _too_large(path: Path, limit: int, what: str) -> InputError:
    return InputError(f"{what} {path} is larger than the {describe_size(limit)} limit")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"
