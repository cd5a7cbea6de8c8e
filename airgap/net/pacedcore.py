"""httpcore's connections held to a ``Pacing`` (``airgap.net.pacing``): every connection
of an httpx transport of httpx's own (proxied connections, the clients that are not the
registry's) goes through ``PacedBackend``. A module of its own so that httpcore (with
h11 and anyio, a noticeable part of start-up) is imported only by a process that makes such a
transport: the registry's transport (``airgap.net.fasthttp``) paces itself, and a no-op
re-import never loads httpcore.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

from airgap.net.pacing import PaceExceeded, Pacing, ProgressWindow, read_arrived, run_paced


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


def pace_client(client: Any, pacing: Pacing) -> bool:
    """Put every connection pool of an ``httpx.Client`` (its transport and any proxy
    mounts) on a paced backend; False if this httpx keeps its pools elsewhere (a test
    notices)."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    paced = False
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, httpcore.NetworkBackend) and not isinstance(backend, PacedBackend):
            pool._network_backend = PacedBackend(backend, pacing)  # type: ignore[union-attr]
            paced = True
    return paced
