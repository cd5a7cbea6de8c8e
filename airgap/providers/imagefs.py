"""Read a few files out of an image's layers without a container runtime (pure).

OpenShift's provider images carry their manifests under ``/capi-operator-manifests/``;
to read them, collect applies the image's layers in order as a runtime would (OCI
image spec, "Applying Changesets"): later layers replace earlier entries, ``.wh.NAME``
deletes NAME from the layers below, ``.wh..wh..opq`` hides everything below in its
directory. Only the wanted files are kept, in memory (they are small, and capped);
nothing from a layer ever becomes a path on disk, so ``..``, absolute names and links
in a hostile layer cannot reach outside anything. Layers arrive as a stream of chunks
(``LayerSink`` is a registry ``BlobSink``): decompressed and parsed as they arrive, with
the tar headers read by this module (bounded), never by CPython's tarfile.
"""

from __future__ import annotations

import posixpath
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from airgap.core.errors import AirgapError
from airgap.core.limits import (
    MAX_EXTENDED_HEADER_BYTES,
    MAX_LAYER_ENTRIES,
    MAX_LAYER_UNPACKED_BYTES,
    describe_size,
)
from airgap.core.names import shown
from airgap.formats import tarheader
from airgap.formats.tarheader import BLOCK

WHITEOUT_PREFIX = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
_REGULAR = (b"0", b"\0", b"7")
_DIRECTORY = b"5"
_PAX = (b"x",)
_GLOBAL_PAX = b"g"
_GNU_LONGNAME = b"L"
_GNU_LONGLINK = b"K"
_INFLATE_STEP = 1 << 20


_T = TypeVar("_T")
_R = TypeVar("_R")


class LayerError(AirgapError):
    """A layer that cannot be read as a tar of the kind its media type says."""


@dataclass
class _Entry:
    """What a layer says about one wanted path: a file's bytes, or None for anything
    that is not a regular file (a directory, a link, a device) at that path."""

    data: bytes | None
    kind: str


@dataclass
class _LayerChanges:
    """One layer's changeset, applied to the layers below once the layer is complete."""

    added: dict[str, _Entry] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)  # non-directories: hide what was below
    deleted: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)


class ImageFiles:
    """The wanted files of an image, built layer by layer.

    ``wanted(path)`` says which normalised paths (``capi-operator-manifests/x/y``, no
    leading slash) to keep and returns the cap for each, or None to skip it.
    """

    def __init__(self, wanted: Callable[[str], int | None], what: str) -> None:
        self._wanted = wanted
        self._what = what
        self._files: dict[str, _Entry] = {}

    @property
    def files(self) -> dict[str, bytes]:
        """Every wanted regular file of the applied layers: path -> bytes."""
        return {path: e.data for path, e in sorted(self._files.items()) if e.data is not None}

    def kind_of(self, path: str) -> str | None:
        """``file``, ``directory``, ``link``... for a wanted path present, else None."""
        entry = self._files.get(path)
        return entry.kind if entry else None

    def layer(self, media_type: str, digest: str) -> LayerSink:
        """A sink for one layer's blob; call ``finish()`` on it after the download."""
        return LayerSink(self, media_type, f"{self._what}: layer {digest}")

    def _apply(self, changes: _LayerChanges) -> None:
        def hidden(path: str) -> bool:
            if path in changes.deleted:
                return True
            for ancestor in _ancestors(path):
                if ancestor in changes.deleted or ancestor in changes.replaced:
                    return True
                if ancestor in changes.opaque:
                    return True
            return "" in changes.opaque  # an opaque whiteout at the root

        self._files = {p: e for p, e in self._files.items() if not hidden(p)}
        self._files.update(changes.added)


class LayerSink:
    """Decompresses and parses one layer as its bytes arrive (a registry BlobSink: a
    retried download seeks back to 0 and truncates, which starts the layer again)."""

    def __init__(self, image: ImageFiles, media_type: str, what: str) -> None:
        self._image = image
        self._media_type = media_type
        self._what = what
        self._reset()

    def _reset(self) -> None:
        self._inflate = _decompressor(self._media_type, self._what)
        self._tar = _TarStream(self._entry, self._collected, self._what)
        self._changes = _LayerChanges()
        self._unpacked = 0

    # BlobSink
    def seek(self, position: int, whence: int = 0, /) -> int:
        if position == 0 and whence == 0:
            self._reset()
        return 0

    def truncate(self, size: int | None = None, /) -> int:
        return 0

    def write(self, data: bytes, /) -> int:
        for piece in self._inflate.feed(data):
            self._unpacked += len(piece)
            if self._unpacked > MAX_LAYER_UNPACKED_BYTES:
                raise LayerError(
                    f"{self._what}: unpacks to more than {describe_size(MAX_LAYER_UNPACKED_BYTES)}"
                )
            self._tar.feed(piece)
        return len(data)

    def finish(self) -> None:
        """The layer is complete: check it ended well and apply its changes."""
        for piece in self._inflate.close():
            self._tar.feed(piece)
        self._tar.close()
        self._image._apply(self._changes)

    def _entry(self, name: str, typeflag: bytes, size: int) -> int | None:
        """Called for every tar entry; returns the cap to collect its data, or None."""
        path = _normalise(name)
        if path is None:  # "..", empty: never a path we would keep or hide
            return None
        directory, base = posixpath.split(path)
        if base == OPAQUE_WHITEOUT:
            self._changes.opaque.add(directory)
            return None
        if base.startswith(WHITEOUT_PREFIX):
            self._changes.deleted.add(posixpath.join(directory, base[len(WHITEOUT_PREFIX) :]))
            return None
        if typeflag != _DIRECTORY:
            self._changes.replaced.add(path)  # a file where a directory was hides its tree
        cap = self._image._wanted(path)
        if cap is None:
            return None
        if typeflag not in _REGULAR:
            self._changes.added[path] = _Entry(None, _kind(typeflag))
            return None
        if size > cap:
            raise LayerError(f"{self._what}: /{path} is {size} bytes, over {describe_size(cap)}")
        return cap

    def _collected(self, name: str, data: bytes) -> None:
        path = _normalise(name)
        assert path is not None
        self._changes.added[path] = _Entry(data, "file")


def _ancestors(path: str) -> list[str]:
    """``a/b/c`` -> ``a``, ``a/b``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _kind(typeflag: bytes) -> str:
    return {b"1": "hard link", b"2": "symbolic link", b"5": "directory"}.get(
        typeflag, "special file"
    )


def _normalise(name: str) -> str | None:
    """``./capi-operator-manifests/default/x`` -> ``capi-operator-manifests/default/x``;
    None for a name with ``..`` or nothing in it."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


class _Inflate:
    def feed(self, data: bytes) -> list[bytes]:
        return [data] if data else []

    def close(self) -> list[bytes]:
        return []


class _Gunzip(_Inflate):
    """gzip, possibly several members, inflated in bounded steps."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._z = zlib.decompressobj(wbits=31)

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        try:
            while data:
                out.append(self._z.decompress(data, _INFLATE_STEP))
                data = self._z.unconsumed_tail
                if self._z.eof:
                    rest = self._z.unused_data + data
                    self._z = zlib.decompressobj(wbits=31)
                    data = rest
        except zlib.error as exc:
            raise LayerError(f"{self._what}: not gzip data ({exc})") from None
        return [piece for piece in out if piece]

    def close(self) -> list[bytes]:
        try:
            tail = self._z.flush()
        except zlib.error as exc:
            raise LayerError(f"{self._what}: truncated gzip data ({exc})") from None
        return [tail] if tail else []


class _Unzstd(_Inflate):
    def __init__(self, what: str) -> None:
        try:
            import zstandard  # type: ignore[import-not-found]  # optional
        except ImportError:
            raise LayerError(
                f"{what}: zstd-compressed layers need the Python package 'zstandard' "
                "(pip install zstandard)"
            ) from None
        self._z = zstandard.ZstdDecompressor().decompressobj()

    def feed(self, data: bytes) -> list[bytes]:
        piece: bytes = self._z.decompress(data)
        return [piece] if piece else []


def _decompressor(media_type: str, what: str) -> _Inflate:
    kind = media_type.split(";")[0].strip()
    if kind.endswith(("+gzip", ".tar.gzip")) or kind.endswith("diff.tar.gzip"):
        return _Gunzip(what)
    if kind.endswith("+zstd"):
        return _Unzstd(what)
    if kind.endswith((".tar", "image.rootfs.diff.tar")):
        return _Inflate()
    raise LayerError(f"{what}: unsupported layer media type {shown(kind)}")


class _TarStream:
    """A push parser of tar headers (ustar, PAX ``x`` path/size, GNU long names).

    Each entry is offered to ``on_entry(name, typeflag, size)``; when it returns a cap,
    the entry's data is collected (in memory) and handed to ``on_data(name, data)``.
    """

    def __init__(
        self,
        on_entry: Callable[[str, bytes, int], int | None],
        on_data: Callable[[str, bytes], None],
        what: str,
    ) -> None:
        self._on_entry = on_entry
        self._on_data = on_data
        self._what = what
        self._buffer = bytearray()
        self._skip = 0  # data + padding of the current entry still to pass over
        self._collect: tuple[str, int, str] | None = None  # name, size, role
        self._pax: dict[str, str] = {}
        self._long_name: str | None = None
        self._entries = 0
        self._ended = False
        self._position = 0  # bytes of the stream taken so far (for messages)
        self._header_at = 0  # where the header whose data is being collected starts

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._ended:
                return  # after the end marker: padding, ignored
            if self._skip:
                step = min(self._skip, len(view))
                if self._collect is not None:
                    self._buffer += view[:step]
                self._skip -= step
                self._position += step
                view = view[step:]
                if not self._skip and self._collect is not None:
                    self._finish_collect()
                continue
            need = BLOCK - len(self._buffer)
            self._buffer += view[:need]
            self._position += min(need, len(view))
            view = view[need:]
            if len(self._buffer) == BLOCK:
                header = bytes(self._buffer)
                self._buffer.clear()
                self._header(header)

    def close(self) -> None:
        if not self._ended and (self._skip or self._buffer):
            raise LayerError(f"{self._what}: truncated tar stream")

    def _header(self, block: bytes) -> None:
        if block == b"\0" * BLOCK:
            self._ended = True  # one zero block is where the archive ends for us
            return
        offset = self._position - BLOCK
        if not tarheader.checksum_ok(block):
            raise LayerError(f"{self._what}: tar header at byte {offset}: checksum mismatch")
        self._entries += 1
        if self._entries > MAX_LAYER_ENTRIES:
            raise LayerError(f"{self._what}: more than {MAX_LAYER_ENTRIES} tar entries")
        typeflag = block[156:157]
        size = self._checked(tarheader.size_of, block, offset)
        padded = size + (-size) % BLOCK
        if typeflag in _PAX or typeflag in (_GNU_LONGNAME, _GNU_LONGLINK, _GLOBAL_PAX):
            if size > MAX_EXTENDED_HEADER_BYTES:
                raise LayerError(f"{self._what}: extended tar header of {size} bytes")
            role = typeflag.decode()
            self._start(("", size, role), padded)
            return
        name = tarheader.name_of(block)
        if self._long_name is not None:
            name = self._long_name
        name = self._pax.get("path", name)
        if "size" in self._pax:
            size = self._checked(tarheader.pax_size, self._pax["size"], offset)
            padded = size + (-size) % BLOCK
        self._pax, self._long_name = {}, None
        cap = self._on_entry(name, typeflag, size)
        if cap is not None and typeflag in _REGULAR:
            self._start((name, size, "data"), padded)
        else:
            self._skip = padded

    def _checked(self, read: Callable[[_T, int], _R], field: _T, offset: int) -> _R:
        """A header field read by the one tar header reader, its refusal a LayerError."""
        try:
            return read(field, offset)
        except tarheader.TarFormatError as exc:
            raise LayerError(f"{self._what}: {exc}") from None

    def _start(self, collect: tuple[str, int, str], padded: int) -> None:
        self._header_at = self._position - BLOCK
        self._collect = collect
        self._skip = padded
        if padded == 0:
            self._finish_collect()

    def _finish_collect(self) -> None:
        assert self._collect is not None
        name, size, role = self._collect
        data = bytes(self._buffer[:size])
        self._buffer.clear()
        self._collect = None
        if role == "x":
            self._pax = self._checked(tarheader.pax_records, data, self._header_at)
        elif role == "L":
            self._long_name = tarheader.text(data)
        elif role in ("K", "g"):
            pass  # link targets and global headers: nothing we keep
        else:
            self._on_data(name, data)
