"""Atomic file writing: outputs appear whole at their final path or not at all, and a
tree of outputs stays inside its directory (``write_tree``)."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from airgap.core import interrupt
from airgap.core.errors import AirgapError, InputError


class SecretBytes(bytes):
    """File content that holds a secret (a password, a filled variable): written mode
    0600 whatever the umask, and never shown by ``repr`` in a log or a traceback."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<secret: {len(self)} bytes>"


def file_mode(data: bytes) -> int:
    """The mode an output file gets: 0600 for secrets, 0644 for everything else."""
    return 0o600 if isinstance(data, SecretBytes) else 0o644


def check_replaceable(path: Path, *, overwrite: bool, what: str) -> None:
    """Refuse to write a ``what`` at ``path``: always where something other than a
    regular file or a link is (a rename would put a file in place of ``/dev/null`` and
    break the machine), otherwise where anything is, unless ``overwrite``."""
    if _refuse_special(path, what) and not overwrite:
        raise InputError(f"{path} already exists; refusing to overwrite a {what} (use --force)")


def _refuse_special(path: Path, what: str) -> bool:
    """Whether anything is at ``path`` (a dangling link too), refusing what is neither a
    regular file nor a link."""
    try:
        kind = os.lstat(path).st_mode
    except OSError:
        return False  # nothing there (or nothing airgap can see): the write says what
    if not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        raise InputError(f"{path} is not a regular file; refusing to replace it with a {what}")
    return True


def require_directory_of(path: Path) -> None:
    """Refuse a file to write whose directory is missing rather than create it: an
    unmounted USB disk would have the root filesystem written instead."""
    parent = path.parent
    if not parent.is_dir():
        state = "is not a directory" if parent.exists() else "does not exist"
        raise InputError(
            f"{path}: directory {parent} {state} (is the disk mounted? airgap does not create it)"
        )


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Write to a temporary file beside ``path`` and rename it into place on success.

    The temporary file is registered with ``airgap.core.interrupt`` (removed on Ctrl-C or
    SIGTERM), and a full disk names ``path`` in its error. A device, FIFO, socket or
    directory at ``path`` is never replaced."""
    _refuse_special(path, "file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        with interrupt.tracked(temp), os.fdopen(fd, "wb") as handle:
            yield handle
        temp.chmod(mode)
        temp.replace(path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise name_the_path(exc, path) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def name_the_path(exc: OSError, path: Path) -> OSError:
    """``exc`` naming ``path`` if it names no file (a write to a descriptor that hit a
    full disk says only "No space left on device")."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_writer(path, mode) as handle:
        handle.write(data)


# -- writing a tree of outputs under one directory ------------------------------------------


class UnsafeOutputPath(AirgapError):
    """A relative output path is not a plain path below the output directory."""


class OutputSymlink(InputError):
    """The output directory holds a symbolic link where airgap would write through it."""


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_SEGMENT_BYTES = 255


def output_parts(relative: str) -> list[str]:
    """The segments of an output path, refusing anything that is not a plain relative
    path: absolute, empty, ``.`` or ``..`` segments, NUL, backslashes, huge names.

    Output paths are built from names a bundle carries (labels, versions, provider and
    file names); verify refuses bad ones, and this is the last line of defence."""
    parts = relative.split("/")
    shown = repr(relative[:200])
    if not relative or relative.startswith("/"):
        raise UnsafeOutputPath(f"refusing to write {shown}: not a relative path")
    for part in parts:
        if part in ("", ".", "..") or "\0" in part or "\\" in part:
            raise UnsafeOutputPath(f"refusing to write {shown}: it would leave its directory")
        if len(part.encode("utf-8", "surrogateescape")) > _MAX_SEGMENT_BYTES:
            raise UnsafeOutputPath(f"refusing to write {shown}: a name is too long")
    return parts


def check_output_dir(root: Path) -> None:
    """Refuse an output directory that exists as something else (``/dev/null``, a FIFO),
    where ``mkdir`` would only say "File exists"; checked before a command starts work."""
    if root.exists() and not root.is_dir():
        raise InputError(f"output directory {root} is not a directory")


def write_tree(root: Path, files: Mapping[str, bytes]) -> None:
    """Write ``files`` (relative path -> bytes) below ``root``, all or nothing.

    Every file is first written to a temporary name in its final directory, then all
    are renamed into place, so a failure leaves no half-written output. Directories are
    created and entered one segment at a time through directory descriptors opened with
    ``O_NOFOLLOW``: a symbolic link anywhere below ``root`` (``out/operator ->
    /elsewhere``) is refused, never written through, and no path can leave ``root``.
    ``root`` itself is the user's choice and may be a link. ``SecretBytes`` are written
    mode 0600, everything else 0644, whatever the umask."""
    plans = [(relative, output_parts(relative), data) for relative, data in files.items()]
    check_output_dir(root)
    root.mkdir(parents=True, exist_ok=True)
    with _DirectoryTree(root) as tree:
        for _, parts, _ in plans:  # refuse a link before creating or writing anything
            tree.check(parts[:-1])
        staged: list[tuple[int, str, str]] = []  # directory fd, temporary name, final name
        renamed = 0
        try:
            for relative, parts, data in plans:
                directory = tree.open(parts[:-1])
                temporary = f".{parts[-1][:200]}.{secrets.token_hex(6)}.tmp"
                staged.append((directory, temporary, parts[-1]))
                _write_new(directory, temporary, data, file_mode(data), root / relative)
                if _is_directory(parts[-1], directory):
                    raise AirgapError(f"{root / relative} is a directory, not a file")
            for (directory, temporary, final), (relative, _, _) in zip(staged, plans, strict=True):
                # a rename replaces a link at the final name itself, never its target
                try:
                    os.rename(temporary, final, src_dir_fd=directory, dst_dir_fd=directory)
                except OSError as exc:
                    where = root / relative
                    raise AirgapError(f"{where}: cannot write ({exc.strerror or exc})") from None
                renamed += 1
        finally:
            for directory, temporary, _ in staged[renamed:]:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=directory)


def remove_files(root: Path, relatives: Iterable[str]) -> list[str]:
    """Remove these regular files below ``root`` (best effort), and the directories they
    leave empty; returns those that could not be removed. As ``write_tree`` writes,
    nothing is followed: a link among the directories, or in a file's place, is left
    alone, and no path leaves ``root``."""
    left: list[str] = []
    emptied: set[tuple[str, ...]] = set()
    with _DirectoryTree(root) as tree:
        for relative in relatives:
            try:
                parts = output_parts(relative)
                directory = tree.open(parts[:-1], create=False)
                found = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
                if not stat.S_ISREG(found.st_mode):
                    left.append(relative)
                    continue
                os.unlink(parts[-1], dir_fd=directory)
            except FileNotFoundError:
                continue  # gone already
            except (OSError, AirgapError):
                left.append(relative)
                continue
            emptied.update(tuple(parts[:end]) for end in range(1, len(parts)))
        for segments in sorted(emptied, key=len, reverse=True):  # the deepest first
            with contextlib.suppress(OSError, AirgapError):  # not empty: kept
                os.rmdir(segments[-1], dir_fd=tree.open(list(segments[:-1]), create=False))
    return left


def _write_new(directory: int, name: str, data: bytes, mode: int, shown: Path) -> None:
    try:
        fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
    except OSError as exc:
        raise AirgapError(f"{shown}: cannot write ({exc.strerror or exc})") from None


class _DirectoryTree:
    """Directory descriptors below one root, opened (and created) segment by segment
    without following symbolic links; closed together."""

    def __init__(self, root: Path) -> None:
        self._root = root
        try:
            opened = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self._fds: dict[tuple[str, ...], int] = {(): opened}
        except OSError as exc:
            raise AirgapError(f"{root}: cannot open ({exc.strerror or exc})") from None

    def __enter__(self) -> _DirectoryTree:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def check(self, parts: list[str]) -> None:
        """Refuse a link or a file among the existing directories of ``parts``."""
        for end in range(1, len(parts) + 1):
            try:
                self.open(parts[:end], create=False)
            except FileNotFoundError:
                return  # the rest is created by ``open``

    def open(self, parts: list[str], *, create: bool = True) -> int:
        """The descriptor of ``root/parts...``, creating missing directories (unless
        ``create`` is false: then a missing one raises FileNotFoundError)."""
        key = tuple(parts)
        found = self._fds.get(key)
        if found is not None:
            return found
        parent = self.open(parts[:-1], create=create)
        path = self._root.joinpath(*parts)
        if create:
            try:
                os.mkdir(parts[-1], 0o755, dir_fd=parent)
            except FileExistsError:
                pass  # a directory, or a link or file the open below refuses
            except OSError as exc:
                raise AirgapError(f"{path}: cannot create ({exc.strerror or exc})") from None
        try:
            fd = os.open(parts[-1], _DIRECTORY_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if create:
                raise AirgapError(f"{path}: vanished while being created") from None
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(parts[-1], parent):
                raise OutputSymlink(
                    f"{path} is a symbolic link: airgap never writes through links inside "
                    "its output directory (remove it, or choose another --output-dir)"
                ) from None
            if exc.errno == errno.ENOTDIR:
                raise AirgapError(f"{path} exists and is not a directory") from None
            raise AirgapError(f"{path}: cannot open ({exc.strerror or exc})") from None
        self._fds[key] = fd
        return fd


def _is_directory(name: str, directory: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_link(name: str, directory: int) -> bool:
    """Whether ``name`` in ``directory`` is a symbolic link (Linux answers ENOTDIR, not
    ELOOP, to ``O_DIRECTORY | O_NOFOLLOW`` on one)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


class FileAt:
    """A file as ``socket.sendfile`` takes it: its descriptor for ``os.sendfile``, and
    ``seek``/``read`` by ``pread`` with a position of its own for the fallback, so
    threads sharing the descriptor never move each other's place."""

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._position = 0

    def fileno(self) -> int:
        return self._fd

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = position
        return position

    def read(self, size: int) -> bytes:
        data = os.pread(self._fd, size, self._position)
        self._position += len(data)
        return data
