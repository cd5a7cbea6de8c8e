"""httpcore's connections held to a ``Pacing`` (``airgap.net.pacing``): proxied
connections and the clients that are not the registry's go through ``PacedTransport``,
an httpx transport over an httpcore pool whose network backend is ``PacedBackend``,
built from httpx's and httpcore's public API only. A module of its own so that httpcore
(with h11 and anyio, a noticeable part of start-up) is imported only by a process that
makes such a transport: the registry's transport (``airgap.net.fasthttp``) paces itself,
and a no-op re-import never loads httpcore.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

from airgap.net.pacing import PaceExceeded, Pacing, ProgressWindow, read_arrived, run_paced

# Bytes taken from the socket per read of a response. httpcore asks for 64 KiB, and each
# read costs one recv, one h11 parse and one hash/write round of Python's per-read work,
# which then dominates a transfer's CPU; a bigger read is no worse for h11, which takes
# what it is given. Over TLS a read returns one 16 KiB record whatever is asked (the
# records already arrived are added, ``read_arrived``).
RESPONSE_READ_BYTES = 256 * 1024


class PacedStream(httpcore.NetworkStream):
    """A network stream whose reads and writes are held to a ``Pacing``."""

    def __init__(self, inner: httpcore.NetworkStream, pacing: Pacing) -> None:
        self._inner = inner
        self._pacing = pacing
        self._window = ProgressWindow(pacing)
        # a TLS socket whose records already received can be read without waiting
        sock = inner.get_extra_info("socket")
        self._tls = sock if isinstance(sock, ssl.SSLSocket) else None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        max_bytes = max(max_bytes, RESPONSE_READ_BYTES)
        received = [b""]

        def receive(budget: float) -> int:
            received[0] = self._inner.read(max_bytes, self._wait(timeout, budget))
            return len(received[0])

        try:
            run_paced(self._window, "read", receive, (httpcore.ReadTimeout,))
        except PaceExceeded as exc:
            raise httpcore.ReadTimeout(str(exc)) from None
        data = received[0]
        if data and len(data) < max_bytes and self._tls is not None:
            data = self._more_records(data, max_bytes)
        return data

    def _more_records(self, data: bytes, max_bytes: int) -> bytes:
        """``data`` and the TLS records that have already arrived after it, up to
        ``max_bytes`` in all (``read_arrived``): every read costs an h11 parse, a hash
        call and a write. The socket is non-blocking for these reads only."""
        sock = self._tls
        assert sock is not None
        more = memoryview(bytearray(max_bytes - len(data)))
        previous = sock.gettimeout()
        try:
            sock.settimeout(0.0)
            count = read_arrived(sock, more)
        finally:
            sock.settimeout(previous)
        if not count:
            return data
        self._window.account(count, 0.0)
        return b"".join((data, more[:count]))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        def send(budget: float) -> int:
            # a view: httpcore's send loop slices what is left after each partial send,
            # and slicing bytes copies the rest of a 1 MiB chunk every time
            self._inner.write(memoryview(buffer), self._wait(timeout, budget))  # type: ignore[arg-type]
            return len(buffer)

        try:
            run_paced(self._window, "write", send, (httpcore.WriteTimeout,))
        except PaceExceeded as exc:
            raise httpcore.WriteTimeout(str(exc)) from None

    def _wait(self, timeout: float | None, budget: float) -> float:
        return min(self._pacing.idle, budget, timeout if timeout is not None else budget)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, timeout)
        return PacedStream(inner, self._pacing)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PacedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every stream paced."""

    def __init__(self, inner: httpcore.NetworkBackend, pacing: Pacing) -> None:
        self._inner = inner
        self._pacing = pacing

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return PacedStream(stream, self._pacing)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return PacedStream(stream, self._pacing)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# httpcore's exceptions as httpx's, the most specific first (a ReadTimeout is also a
# TimeoutException): callers handle httpx's alone
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


class _Body(httpx.SyncByteStream):
    """An httpcore response body read as httpx reads one, its errors as httpx's."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class PacedTransport(httpx.BaseTransport):
    """httpx's transport over an httpcore pool (direct, or through an HTTP(S) proxy)
    whose every connection is paced: built from httpcore's public pool classes with a
    ``PacedBackend``, so nothing of httpx's own transport is reached into."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        pacing: Pacing,
        limits: httpx.Limits,
        proxy: httpx.Proxy | None = None,
    ) -> None:
        backend = PacedBackend(httpcore.SyncBackend(), pacing)
        pool: dict[str, Any] = {
            "ssl_context": ssl_context,
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "network_backend": backend,
        }
        self._pool: httpcore.ConnectionPool
        if proxy is None:
            self._pool = httpcore.ConnectionPool(**pool)
        else:
            self._pool = httpcore.HTTPProxy(
                proxy_url=_core_url(proxy.url),
                proxy_auth=proxy.raw_auth,
                proxy_headers=proxy.headers.raw,
                proxy_ssl_context=proxy.ssl_context,
                **pool,
            )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=_core_url(request.url),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            answer = self._pool.handle_request(core_request)
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        self._pool.close()


def _core_url(url: httpx.URL) -> httpcore.URL:
    return httpcore.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
    )
