"""A bundle's bytes, read by offset, whether it is one file or a list of parts.

Every reader of a bundle (verify's scan, inspect, import, configmaps, serve) reads it
through a ``BundleSource``: random access by ``(offset, length)`` with ``pread``, across
part boundaries when the bundle is split, so nothing ever reassembles the parts or
extracts a member. Reads use no file position, so any number of threads share one
source.

Naming a bundle: ``NAME.tar`` opens that file if it exists, else its parts
``NAME.tar.000``, ``NAME.tar.001``, … (``airgap.bundle.parts``); naming ``NAME.tar.000``
opens the parts too. With the parts list beside them (``NAME.tar.parts.json``) the parts
are opened as it lists them, so a missing or short part is named at once
(``part 3 of 7 (NAME.tar.002): missing``); without it, the consecutive parts found.
Every file must be a regular file (``/dev/zero`` or a FIFO would be read forever).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import resource
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from airgap.bundle.parts import (
    MAX_PARTS,
    MAX_PARTS_LIST_BYTES,
    PartsList,
    part_name,
    parts_list_path,
    parts_signature_path,
    split_part_name,
)
from airgap.core.errors import BundleError, InputError
from airgap.core.inputfile import open_regular, read_small
from airgap.core.limits import MAX_SIGNATURE_BYTES

READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One file of the bundle and the bytes of the bundle it holds."""

    path: Path
    offset: int  # where its first byte is in the bundle
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


class BundleSource:
    """Random access to a bundle's bytes (see the module docstring); close it when done
    (it is a context manager; descriptors are also closed when it is collected)."""

    def __init__(
        self,
        path: Path,
        files: list[tuple[Path, int, int]],
        *,
        parts_list: PartsList | None = None,
        parts_list_bytes: bytes | None = None,
        parts_signature: bytes | None = None,
        split: bool = False,
    ) -> None:
        self.path = path  # the bundle as named to people: NAME.tar, split or not
        self.split = split
        self.parts_list = parts_list
        self.parts_list_bytes = parts_list_bytes
        self.parts_signature = parts_signature
        parts: list[Part] = []
        offset = 0
        for part_path, _, size in files:
            parts.append(Part(part_path, offset, size))
            offset += size
        self.parts = tuple(parts)
        self.size = offset
        self._fds = [fd for _, fd, _ in files]
        self._starts = [part.offset for part in self.parts]
        self._finalizer = weakref.finalize(self, _close_all, list(self._fds))

    # -- reading -------------------------------------------------------------------------

    def pread(self, length: int, offset: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer only at the end of the bundle).

        ``os.pread`` reads straight into the bytes handed out: no zeroed buffer and no
        copy out of it, which every 1 MiB chunk of a pushed blob would otherwise pay
        (import's CPU per byte is what the registry loses on a small machine)."""
        pieces: list[bytes] = []
        for fd, position, size in self.spans(offset, length):
            while size:
                data = os.pread(fd, size, position)
                if not data:
                    return b"".join(pieces)
                pieces.append(data)
                position, size = position + len(data), size - len(data)
        return b"".join(pieces)  # one piece: that very object, no copy

    def readinto(self, buffer: memoryview, offset: int) -> int:
        """Fill ``buffer`` from ``offset``, crossing parts; the count read (short only at
        the end of the bundle, or where a file turned out shorter than it was)."""
        done = 0
        for fd, position, length in self.spans(offset, len(buffer)):
            while length:
                got = os.preadv(fd, [buffer[done : done + length]], position)
                if not got:
                    return done
                done, position, length = done + got, position + got, length - got
        return done

    def spans(self, offset: int, length: int) -> Iterator[tuple[int, int, int]]:
        """``(descriptor, offset in that file, length)`` pieces covering ``length`` bytes
        of the bundle from ``offset``, in order: for ``os.sendfile`` and ``preadv``."""
        end = min(offset + length, self.size)
        index = self.part_index(offset) if offset < end else len(self.parts)
        while offset < end:
            part = self.parts[index]
            piece = min(end, part.end) - offset
            yield self._fds[index], offset - part.offset, piece
            offset += piece
            index += 1

    def chunks(self, offset: int, length: int, chunk: int = READ_CHUNK) -> Iterator[bytes]:
        """``length`` bytes from ``offset`` in pieces of at most ``chunk`` bytes; a
        BundleError if the bundle ends first."""
        while length > 0:
            data = self.pread(min(chunk, length), offset)
            if not data:
                raise BundleError(f"{self.path} is truncated at byte {offset}")
            yield data
            offset += len(data)
            length -= len(data)

    # -- parts ---------------------------------------------------------------------------

    def part_index(self, offset: int) -> int:
        """The index of the part holding byte ``offset`` of the bundle."""
        return max(0, bisect.bisect_right(self._starts, offset) - 1)

    def describe_part(self, index: int) -> str:
        """``part 3 of 7 (NAME.tar.002)``, for messages that tell what to copy again."""
        return f"part {index + 1} of {len(self.parts)} ({self.parts[index].path.name})"

    def parts_touching(self, offset: int, length: int) -> list[int]:
        """The indexes of the parts holding bytes ``[offset, offset + length)``."""
        if not self.split:
            return []
        first = self.part_index(offset)
        last = self.part_index(max(offset, offset + length - 1))
        return list(range(first, last + 1))

    def damaged_parts(self, indexes: list[int] | None = None) -> list[int]:
        """Those of the given parts (default: all) whose sha256 is not the one the parts
        list gives. Without a parts list nothing can be said, and nothing is read."""
        if self.parts_list is None:
            return []
        chosen = range(len(self.parts)) if indexes is None else indexes
        return [i for i in chosen if self._part_sha256(i) != self.parts_list.parts[i].sha256]

    def _part_sha256(self, index: int) -> str:
        hasher = hashlib.sha256()
        part = self.parts[index]
        for data in self.chunks(part.offset, part.size):
            hasher.update(data)
        return hasher.hexdigest()

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> BundleSource:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def open_source(path: Path) -> BundleSource:
    """The bundle named ``path``: the file itself, or its parts (see the module
    docstring). A path that names nothing readable is an input error; a part that is
    missing or not the size the parts list gives is a BundleError naming every such
    part."""
    split = split_part_name(path)
    if split is not None and _exists(path) and not _exists(split[0]):
        base, number = split
        if number == 0:
            return _open_parts(base)
        if _exists(part_name(base, 0)):
            raise InputError(
                f"{path} is part {number + 1} of a split bundle: name {base.name} or "
                f"{part_name(base, 0).name}"
            )
    if not _exists(path) and _exists(part_name(path, 0)):
        return _open_parts(path)
    fd, size = open_regular(path, "bundle")
    return BundleSource(path, [(path, fd, size)])


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _open_parts(bundle: Path) -> BundleSource:
    listed: PartsList | None = None
    listed_bytes = signature = None
    list_path = parts_list_path(bundle)
    if _exists(list_path):
        listed_bytes = read_small(list_path, MAX_PARTS_LIST_BYTES, "parts list")
        listed = PartsList.from_bytes(listed_bytes, list_path.name)
        signature_path = parts_signature_path(bundle)
        if _exists(signature_path):
            signature = read_small(signature_path, MAX_SIGNATURE_BYTES, "parts list signature")
    count = len(listed.parts) if listed else _count_parts(bundle)
    files: list[tuple[Path, int, int]] = []
    problems: list[str] = []
    ensure_descriptors(count)
    try:
        for index in range(count):
            path = part_name(bundle, index)
            where = f"part {index + 1} of {count} ({path.name})"
            if not _exists(path):
                problems.append(f"{where}: missing")
                continue
            try:
                fd, size = open_regular(path, "bundle part")
            except InputError as exc:
                problems.append(f"{where}: {exc}")
                continue
            files.append((path, fd, size))
            wanted = listed.parts[index].size if listed else size
            if size != wanted:
                problems.append(f"{where}: {size} bytes, the parts list says {wanted}")
        extra = part_name(bundle, count)
        if listed and _exists(extra):
            problems.append(f"{extra.name}: not in the parts list ({count} parts)")
    except BaseException:
        _close_all([fd for _, fd, _ in files])
        raise
    if problems:
        _close_all([fd for _, fd, _ in files])
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        detail = "; ".join(problems[:5])
        raise BundleError(f"{bundle}: {detail}{more}: copy these files again")
    return BundleSource(
        bundle,
        files,
        parts_list=listed,
        parts_list_bytes=listed_bytes,
        parts_signature=signature,
        split=True,
    )


def _count_parts(bundle: Path) -> int:
    """Consecutive parts from 000, when no parts list says how many there are; a gap
    (``.003`` missing while ``.004`` is there) is named."""
    count = 0
    while count < MAX_PARTS and _exists(part_name(bundle, count)):
        count += 1
    later = sorted(
        number
        for sibling in bundle.parent.glob(f"{_glob_escape(bundle.name)}.[0-9][0-9][0-9]*")
        for found in [split_part_name(sibling)]
        if found is not None and found[0].name == bundle.name and (number := found[1]) > count
    )
    if later:
        raise BundleError(
            f"{bundle}: part {count + 1} ({part_name(bundle, count).name}) is missing, yet "
            f"{part_name(bundle, later[0]).name} is there: copy the missing parts again"
        )
    return count


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def ensure_descriptors(count: int) -> None:
    """Room for ``count`` open parts (and the rest of the process): the soft limit on
    open files is raised to the hard one if need be, else an input error."""
    wanted = count + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        raise InputError(
            f"{count} parts need {wanted} open files, over this system's limit of {hard}: "
            "collect with a larger --part-size, or cat the parts into one file"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
