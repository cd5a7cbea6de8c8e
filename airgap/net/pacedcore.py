"""httpcore's connections held to a ``Pacing`` (``airgap.net.pacing``): every connection
of an httpx transport of httpx's own (proxied connections, the clients that are not the
registry's) goes through ``PacedBackend``. A module of its own so that httpcore (with
h11 and anyio, ~15 ms of start-up) is imported only by a process that makes such a
transport: the registry's transport (``airgap.net.fasthttp``) paces itself, and a no-op
re-import never loads httpcore.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from airgap.net.pacing import Pacing, ProgressWindow


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
        self._window.turn("read")
        budget = self._window.budget()
        started = time.monotonic()
        try:
            data = self._inner.read(max_bytes, self._wait(timeout, budget))
        except httpcore.ReadTimeout:
            raise httpcore.ReadTimeout(self._window.timeout_message(budget)) from None
        if self._window.account(len(data), time.monotonic() - started):
            raise httpcore.ReadTimeout(self._window.stall_message())
        if data and len(data) < max_bytes and self._tls is not None:
            data = self._more_records(data, max_bytes)
        return data

    def _more_records(self, data: bytes, max_bytes: int) -> bytes:
        """Over TLS a read returns one record (16 KiB) however much is asked, and every
        read costs an h11 parse, a hash call and a write: take the records that have
        already arrived too, without waiting (the socket is non-blocking for these
        reads only). A condition met here (end of stream, an error) is left for the
        next read to meet again."""
        sock = self._tls
        assert sock is not None
        pieces = [data]
        total = len(data)
        previous = sock.gettimeout()
        try:
            sock.settimeout(0.0)
            while total < max_bytes:
                more = sock.recv(max_bytes - total)
                if not more:
                    break
                pieces.append(more)
                total += len(more)
        except OSError:  # SSLWantReadError (nothing more yet), or left for the next read
            pass
        finally:
            sock.settimeout(previous)
        if total > len(data):
            self._window.account(total - len(data), 0.0)
        return b"".join(pieces)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._window.turn("write")
        budget = self._window.budget()
        started = time.monotonic()
        try:
            # a view: httpcore's send loop slices what is left after each partial send,
            # and slicing bytes copies the rest of a 1 MiB chunk every time
            self._inner.write(memoryview(buffer), self._wait(timeout, budget))  # type: ignore[arg-type]
        except httpcore.WriteTimeout:
            raise httpcore.WriteTimeout(self._window.timeout_message(budget)) from None
        if self._window.account(len(buffer), time.monotonic() - started):
            raise httpcore.WriteTimeout(self._window.stall_message())

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
