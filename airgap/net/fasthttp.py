"""A small HTTP/1.1 transport for httpx: registry traffic without h11 in the byte path.

Why it exists: collect and import move gigabytes through one process on machines where
the registry shares the cores. httpx's default transport (httpcore + h11) copies every
received byte into and out of h11's ``bytearray`` buffer under the GIL, and frames every
sent chunk with a join; profiles of collect put a third of its Python time there, and
on two cores that CPU is taken from the registry (benchmarks/README.md, Findings).
Here a response body is ``recv``'d straight into the bytes handed to the caller and a
request body is ``sendall``'d as given: the only per-byte work left is the kernel's.

Everything above the wire stays httpx's: requests, redirects, auth headers, event
hooks, proxies (a proxied URL goes to httpx's own proxy transport, never here). What
this module owns is what any transport owns, bounded as the rest of airgap is:

- keep-alive connections per origin, checked for a half-closed peer before reuse;
- response heads of at most ``MAX_HEAD_BYTES``, strictly parsed (no obs-fold, one
  Content-Length), bodies framed by Content-Length, chunked coding or close;
- pacing (``airgap.net.pacing``): an idle timeout per socket wait and a progress deadline
  per direction, with the same messages as the default transport;
- failures raised as httpx's transport exceptions with the socket or TLS error as
  their cause, so retries and messages (``airgap.net.httpclient``) treat both transports alike.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterable

import httpx

from airgap.core.fsutil import FileAt
from airgap.net.filebody import FileBody
from airgap.net.http1frames import MAX_HEAD_BYTES, _Body, _parse_head, _values
from airgap.net.pacing import PaceExceeded, Pacing, ProgressWindow, read_arrived, run_paced

MAX_INFORMATIONAL = 5  # 1xx heads before the final one, as Go's client allows
MAX_IDLE_PER_ORIGIN = 32
SENDFILE_STEP = 1 << 20  # a file body's bytes per paced sendfile (and progress report)
_BODYLESS_STATUSES = frozenset({204, 304})
_RESENDABLE = frozenset({"GET", "HEAD"})

Origin = tuple[str, str, int]
_BODY = "airgap.body"  # the response extension holding this transport's body stream


def body_reader(response: httpx.Response) -> Callable[[memoryview], int] | None:
    """``read_into`` of a sized body this transport is reading, else None (another
    transport's response, chunked or close-delimited, or already being iterated)."""
    body = response.extensions.get(_BODY)
    if isinstance(body, _Body) and body.sized and not response.is_stream_consumed:
        return body.read_into
    return None


class FastTransport(httpx.BaseTransport):
    """HTTP/1.1 over plain sockets or TLS, one request per connection at a time."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        pacing: Pacing | None = None,
        connect_timeout: float = 15.0,
    ) -> None:
        self._verify = verify
        self._tls: ssl.SSLContext | None = None  # made at the first https connection
        self._pacing = pacing or Pacing.from_env()
        self._connect_timeout = connect_timeout
        self._idle: dict[Origin, list[_Connection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        origin = _origin(request.url)
        while True:
            connection = self._checkout(origin, request)
            try:
                status, reason, headers = connection.exchange(request)
                break
            except (_PeerClosed, httpx.WriteError):
                connection.close()
                # a kept-alive connection the peer closed as it was taken (the check
                # before reuse cannot see a close still in flight): the request never
                # reached it, and one without a body is sent again on a new connection
                if connection.fresh or connection.received or request.method not in _RESENDABLE:
                    raise
            except BaseException:
                connection.close()
                raise
        if status == 101:  # switched to another protocol, unasked: not HTTP any more
            connection.reusable = False
        bodyless = request.method == "HEAD" or status in _BODYLESS_STATUSES or 100 <= status < 200
        try:
            stream = _Body(self, connection, request, headers, bodyless=bodyless)
        except BaseException:  # a body that cannot be framed (two lengths)
            connection.close()
            raise
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason, _BODY: stream},
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()

    # -- the pool -----------------------------------------------------------------------

    def _checkout(self, origin: Origin, request: httpx.Request) -> _Connection:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                connection = idle.pop() if idle else None
            if connection is None:
                return self._connect(origin, request)
            if connection.usable():
                connection.fresh = False
                return connection
            connection.close()  # the peer closed it while it sat idle

    def _checkin(self, connection: _Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(connection.origin, [])
            if not self._closed and len(idle) < MAX_IDLE_PER_ORIGIN:
                idle.append(connection)
                return
        connection.close()

    def _tls_context(self) -> ssl.SSLContext:
        """The context TLS connections are made with, made once: loading the system CA
        store costs tens of milliseconds, which a plain-HTTP registry never needs."""
        with self._lock:
            if self._tls is None:
                self._tls = _tls_context(self._verify)
            return self._tls

    def _connect(self, origin: Origin, request: httpx.Request) -> _Connection:
        scheme, host, port = origin
        timeout = _timeouts(request).get("connect") or self._connect_timeout
        raw: socket.socket | None = None
        try:
            # the host as the URL encodes it (IDNA, ASCII bytes): a str would be encoded
            # by getaddrinfo, whose first use loads the idna codec (a millisecond of a
            # no-op re-import over plain HTTP); TLS still names the host as a str.
            # CPython's getaddrinfo takes bytes hosts; typeshed only says str
            address = (request.url.raw_host, port)
            raw = socket.create_connection(address, timeout=timeout)  # type: ignore[arg-type]
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = raw
            if scheme == "https":
                sock = self._tls_context().wrap_socket(raw, server_hostname=host)
        except OSError as exc:  # ssl.SSLError and TimeoutError are OSErrors
            if raw is not None:
                raw.close()
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout(str(exc) or "timed out", request=request) from exc
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return _Connection(origin, sock, self._pacing)


class _PeerClosed(httpx.RemoteProtocolError):
    """The connection ended before a byte of the answer: the peer closed it."""


class _Connection:
    """One socket, its unread bytes, and the pacing of its two directions."""

    def __init__(self, origin: Origin, sock: socket.socket, pacing: Pacing) -> None:
        self.origin = origin
        self._sock = sock
        self._plain = not isinstance(sock, ssl.SSLSocket)  # sendfile works only here
        self._pacing = pacing
        self._window = ProgressWindow(pacing)
        self._buffer = bytearray()
        self._timeout: float | None = None
        self.reusable = True
        self.fresh = True  # not yet used: a failure on it is not a stale keep-alive
        self.received = 0  # bytes of the current exchange's answer read so far

    def usable(self) -> bool:
        """Idle and still open: a readable idle socket has been closed by the peer (or
        sent something unasked), and is not used again."""
        if self._buffer:
            return False
        if isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return False
        try:
            poller = select.poll()
            poller.register(self._sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        self.reusable = False
        with contextlib.suppress(OSError):
            self._sock.close()

    # -- one exchange -------------------------------------------------------------------

    def exchange(self, request: httpx.Request) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """Send ``request`` and read the head of its final (non-1xx) response."""
        self.received = 0
        self._send_head(request)
        try:
            self._send_body(request)
        except httpx.WriteError as failure:
            # the server may have answered (a 401, a 413) and closed before taking the
            # whole body: that answer says more than the broken pipe
            try:
                answer = self._read_final_head(request)
            except httpx.TransportError:
                raise failure from failure.__cause__
            self.reusable = False
            return answer
        return self._read_final_head(request)

    def _send_head(self, request: httpx.Request) -> None:
        target = request.url.raw_path
        lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
        lines += [name + b": " + value for name, value in request.headers.raw]
        if any(b"\r" in line or b"\n" in line for line in lines):
            raise httpx.LocalProtocolError("a request line or header holds a line break")
        self._write(b"\r\n".join(lines) + b"\r\n\r\n", request)

    def _send_body(self, request: httpx.Request) -> None:
        stream = request.stream
        assert isinstance(stream, Iterable)
        declared = request.headers.get("Content-Length")
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if isinstance(stream, FileBody) and not chunked and self._plain:
            sent = self._send_file(stream, request)
        else:
            sent = self._send_chunks(stream, request, chunked=chunked)
        if not chunked and declared is not None and declared.isdigit() and sent != int(declared):
            self.reusable = False
            raise httpx.LocalProtocolError(
                f"the request body was {sent} bytes, not its Content-Length {declared}"
            )

    def _send_file(self, body: FileBody, request: httpx.Request) -> int:
        """The body's file spans by ``sendfile``, paced per ``SENDFILE_STEP``: the bytes
        go from the page cache to the socket without a copy through Python."""
        sent = 0
        for fd, offset, length in body.spans:
            end = offset + length
            while offset < end:
                step = min(SENDFILE_STEP, end - offset)

                def send(fd: int = fd, offset: int = offset, step: int = step) -> int:
                    return self._sock.sendfile(FileAt(fd), offset, step)

                if self._paced("write", send, request) < step:  # the file was truncated
                    self.reusable = False
                    raise body.ended_early()
                offset += step
                sent += step
                body.reached(sent)
        return sent

    def _send_chunks(
        self, stream: Iterable[bytes], request: httpx.Request, *, chunked: bool
    ) -> int:
        sent = 0
        for chunk in stream:
            if not chunk:
                continue
            if chunked:
                self._write(b"%x\r\n" % len(chunk), request)
                self._write(chunk, request)
                self._write(b"\r\n", request)
            else:
                self._write(chunk, request)
            sent += len(chunk)
        if chunked:
            self._write(b"0\r\n\r\n", request)
        return sent

    def _read_final_head(
        self, request: httpx.Request
    ) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        for _ in range(MAX_INFORMATIONAL + 1):
            status, reason, headers = self._read_head(request)
            if status == 101 or not 100 <= status < 200:
                return status, reason, headers
        self.reusable = False
        raise httpx.RemoteProtocolError(
            f"more than {MAX_INFORMATIONAL} informational (1xx) responses", request=request
        )

    def _read_head(self, request: httpx.Request) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        while True:
            end = self._buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
            if end >= 0:
                break
            if len(self._buffer) >= MAX_HEAD_BYTES + 4:
                raise httpx.RemoteProtocolError(
                    f"response headers over {MAX_HEAD_BYTES // 1024} KiB", request=request
                )
            data = self._recv(request, MAX_HEAD_BYTES)
            if not data:
                if not self._buffer:
                    raise _PeerClosed(
                        "Server disconnected without sending a response.", request=request
                    )
                raise httpx.RemoteProtocolError(
                    "Server disconnected in the middle of a response head.", request=request
                )
            self._buffer += data
        head = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        version, status, reason, headers = _parse_head(head, request)
        # HTTP/1.0 keeps no connection alive unasked; `Connection: close` ends it, whether
        # or not a body follows
        if version == b"HTTP/1.0" or any(
            b"close" in value.lower() for value in _values(headers, b"connection")
        ):
            self.reusable = False
        return status, reason, headers

    # -- socket operations, paced -------------------------------------------------------

    def _write(self, data: bytes | memoryview, request: httpx.Request) -> None:
        def send() -> int:
            self._sock.sendall(data)
            return len(data)

        self._paced("write", send, request)

    def read_some(self, request: httpx.Request, limit: int) -> bytes:
        """At most ``limit`` bytes: buffered ones first, else one paced ``recv`` (over
        TLS, the records already arrived too). ``b""`` at the end of the stream."""
        if self._buffer:
            data = bytes(self._buffer[:limit])
            del self._buffer[:limit]
            return data
        return self._recv(request, limit)

    def read_into(self, request: httpx.Request, view: memoryview) -> int:
        """``read_some`` into ``view``: the bytes read, 0 at the end of the stream.
        Over TLS the records that have already arrived are taken too (``_more_records``)."""
        if self._buffer:
            count = min(len(view), len(self._buffer))
            view[:count] = self._buffer[:count]
            del self._buffer[:count]
            return count
        received = [0]

        def receive() -> int:
            received[0] = self._sock.recv_into(view)
            return received[0]

        self._paced("read", receive, request)
        count = received[0]
        if count and count < len(view) and isinstance(self._sock, ssl.SSLSocket):
            count += self._more_records_into(view[count:])
        self.received += count
        return count

    def _more_records_into(self, view: memoryview) -> int:
        """The TLS records that have already arrived, into ``view`` (``read_arrived``)."""
        self._set_timeout(0.0)
        total = read_arrived(self._sock, view)  # type: ignore[arg-type]  # an SSLSocket
        if total:
            self._window.account(total, 0.0)
        return total

    def _recv(self, request: httpx.Request, limit: int) -> bytes:
        """One paced ``recv`` of at most ``limit`` bytes, past anything buffered."""
        received = [b""]

        def receive() -> int:
            received[0] = self._sock.recv(limit)
            return len(received[0])

        self._paced("read", receive, request)
        data = received[0]
        self.received += len(data)
        if data and len(data) < limit and isinstance(self._sock, ssl.SSLSocket):
            data = self._more_records(data, limit)
        return data

    def _paced(self, direction: str, operation: Callable[[], int], request: httpx.Request) -> int:
        """One socket operation (returning the bytes it moved) held to the idle timeout
        and the progress deadline of its direction (``run_paced``); failures as httpx's
        exceptions. The bytes moved."""
        timeout_error: type[httpx.TimeoutException] = httpx.ReadTimeout
        failure: type[httpx.NetworkError] = httpx.ReadError
        if direction == "write":
            timeout_error, failure = httpx.WriteTimeout, httpx.WriteError

        def timed(budget: float) -> int:
            self._set_timeout(budget)
            return operation()

        try:
            return run_paced(self._window, direction, timed, (TimeoutError,))
        except PaceExceeded as exc:
            self.reusable = False
            raise timeout_error(str(exc), request=request) from None
        except OSError as exc:
            self.reusable = False
            raise failure(str(exc) or type(exc).__name__, request=request) from exc

    def _more_records(self, data: bytes, limit: int) -> bytes:
        """``data`` and, over TLS, the records that have already arrived after it, up to
        ``limit`` bytes in all (``_more_records_into``)."""
        more = memoryview(bytearray(limit - len(data)))
        count = self._more_records_into(more)
        return b"".join((data, more[:count])) if count else data

    def _set_timeout(self, budget: float) -> None:
        timeout = min(self._pacing.idle, budget)
        if timeout != self._timeout:  # settimeout costs two fcntl calls
            self._sock.settimeout(timeout)
            self._timeout = timeout

    def unread(self, data: bytes) -> None:
        """Give back bytes read past a chunked body's line, for the next read: what is
        left after the body ends makes the connection unusable (``usable``)."""
        if data:
            self._buffer[:0] = data


def _origin(url: httpx.URL) -> Origin:
    scheme = url.scheme
    if scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
    port = url.port or (443 if scheme == "https" else 80)
    return scheme, url.host, port


def _timeouts(request: httpx.Request) -> dict[str, float | None]:
    timeouts = request.extensions.get("timeout")
    return timeouts if isinstance(timeouts, dict) else {}


def _tls_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """The context TLS connections are made with; ``False`` as httpx has it: no checks."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
