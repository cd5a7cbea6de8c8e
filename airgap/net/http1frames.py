"""HTTP/1.1 framing read from a connection, strictly and within bounds: a response's
head, and its body by Content-Length, chunks or the end of the connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx

from airgap.core.limits import MAX_LENGTH_DIGITS

if TYPE_CHECKING:
    from airgap.net.fasthttp import FastTransport, _Connection

READ_BYTES = 1 << 20  # asked of the socket per body read
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response
MAX_HEADER_LINES = 256
MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions, or one trailer line
# what a chunked body may spend on framing (size lines, extensions, trailers) beyond one
# byte per byte of data: a server sending one-byte chunks with 4 KiB extensions, or
# trailers without end, is cut off instead of read for ever
CHUNK_FRAMING_ALLOWANCE = MAX_HEAD_BYTES
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class _Body(httpx.SyncByteStream):
    """A response body as the bytes ``recv`` returned, framed by its headers; the
    connection goes back to the pool only when the body was read to its end."""

    def __init__(
        self,
        transport: FastTransport,
        connection: _Connection,
        request: httpx.Request,
        headers: list[tuple[bytes, bytes]],
        *,
        bodyless: bool,
    ) -> None:
        self._transport = transport
        self._connection = connection
        self._request = request
        self._done = bodyless
        self._closed = False
        self._length: int | None = None
        self._read = 0  # bytes of a sized body taken through read_into
        self._chunked = False
        self._keep_alive = True
        if not bodyless:
            self._frame(headers)

    def _frame(self, headers: list[tuple[bytes, bytes]]) -> None:
        encodings = _values(headers, b"transfer-encoding")
        lengths = {value.strip() for value in _values(headers, b"content-length")}
        if encodings:
            codings = [c.strip().lower() for e in encodings for c in e.split(b",")]
            self._chunked = codings[-1] == b"chunked"
            self._keep_alive = self._chunked
        elif lengths:
            # at most 19 digits: int() refuses 4,300, and 10^19 bytes is no real body
            if len(lengths) != 1 or not is_length(next(iter(lengths))):
                self._connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "invalid or conflicting Content-Length", request=self._request
                )
            self._length = int(next(iter(lengths)))
            self._done = self._length == 0
        else:
            self._keep_alive = False  # the body runs to the end of the connection

    @property
    def sized(self) -> bool:
        """Framed by Content-Length: what ``read_into`` reads."""
        return self._length is not None

    def read_into(self, view: memoryview) -> int:
        """The next bytes of a sized body into ``view``, 0 at its end: a reader that
        reuses one buffer allocates nothing per read. Why: ``recv`` makes a new bytes
        object per read, and eight threads each freeing ~1 MiB objects leave glibc's
        per-thread arenas holding tens of MiB (collect's peak grows with the image
        count). Either this or iteration reads a body, never both."""
        if self._done:
            return 0
        if self._length is None:
            raise RuntimeError("read_into reads bodies framed by Content-Length")
        remaining = self._length - self._read
        count = self._connection.read_into(self._request, view[: min(len(view), remaining)])
        if not count:
            self._connection.reusable = False
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body: "
                f"received {self._read} bytes, expected {self._length}",
                request=self._request,
            )
        self._read += count
        self._done = self._read == self._length
        return count

    def __iter__(self) -> Iterator[bytes]:
        if self._done:
            return
        if self._length is not None:
            yield from self._sized(self._length)
        elif self._chunked:
            yield from self._chunks()
        else:
            yield from self._until_close()
        self._done = True

    def _sized(self, length: int) -> Iterator[bytes]:
        remaining = length
        connection, request = self._connection, self._request
        while remaining:
            data = connection.read_some(request, min(READ_BYTES, remaining))
            if not data:
                connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: "
                    f"received {length - remaining} bytes, expected {length}",
                    request=request,
                )
            remaining -= len(data)
            yield data

    def _until_close(self) -> Iterator[bytes]:
        while True:
            data = self._connection.read_some(self._request, READ_BYTES)
            if not data:
                return
            yield data

    def _chunks(self) -> Iterator[bytes]:
        framing = CHUNK_FRAMING_ALLOWANCE  # spent on lines, earned back by data
        while True:
            line = self._line()
            framing -= len(line) + 2
            self._check_framing(framing)
            size_text = line.split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 16 or not _is_hex(size_text):
                self._connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "invalid chunk size in a chunked body", request=self._request
                )
            size = int(size_text, 16)
            if size == 0:
                while trailer := self._line():  # trailers, up to the empty line
                    framing -= len(trailer) + 2
                    self._check_framing(framing)
                return
            framing += size
            yield from self._sized(size)
            if self._line():
                self._connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "a chunk not followed by CRLF", request=self._request
                )

    def _check_framing(self, left: int) -> None:
        if left < 0:
            self._connection.reusable = False
            raise httpx.RemoteProtocolError(
                f"a chunked body's framing (chunk lines, extensions, trailers) over "
                f"{CHUNK_FRAMING_ALLOWANCE // 1024} KiB beyond its data",
                request=self._request,
            )

    def _line(self) -> bytes:
        collected = b""
        while True:
            data = self._connection.read_some(self._request, MAX_CHUNK_LINE)
            if not data:
                self._connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "peer closed connection inside a chunked body", request=self._request
                )
            collected += data
            end = collected.find(b"\r\n")
            if end >= 0:
                self._connection.unread(collected[end + 2 :])
                return collected[:end]
            if len(collected) > MAX_CHUNK_LINE:
                self._connection.reusable = False
                raise httpx.RemoteProtocolError(
                    "a chunked body line over 4 KiB", request=self._request
                )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        connection = self._connection
        if self._done and self._keep_alive and connection.reusable:
            self._transport._checkin(connection)
        else:
            connection.close()


def _parse_head(
    head: bytes, request: httpx.Request
) -> tuple[bytes, int, bytes, list[tuple[bytes, bytes]]]:
    """The HTTP version, status, reason and headers of a response head, strictly."""
    lines = head.split(b"\r\n")
    if len(lines) > MAX_HEADER_LINES:
        raise httpx.RemoteProtocolError("too many response header lines", request=request)
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:60]!r}", request=request)
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        # a bare CR or LF, NUL or any other control in a value (RFC 9110 5.5 allows HTAB
        # only) is refused, as h11 refuses it: a line break h11 would see is never hidden
        # inside a value here
        if not colon or not name or not _TOKEN.issuperset(name) or _CONTROL.search(value):
            raise httpx.RemoteProtocolError(
                f"malformed response header line {line[:60]!r}", request=request
            )
        headers.append((name, value.strip(b" \t")))
    return version, int(code), reason, headers


def _values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [value for key, value in headers if key.lower() == name]


def _is_hex(text: bytes) -> bool:
    return all(c in b"0123456789abcdefABCDEF" for c in text)


def is_length(text: bytes) -> bool:
    """A Content-Length value: 1 to 19 ASCII digits (int()-safe, past any real body)."""
    return 0 < len(text) <= MAX_LENGTH_DIGITS and text.isdigit()
