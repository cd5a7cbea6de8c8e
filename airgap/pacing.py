"""Slow servers fail in bounded time: an idle timeout per read and a progress deadline.

A per-read timeout alone never fires on a server that sends one byte a second, and a
release server or registry can keep collect busy forever that way, headers included.
Every connection airgap opens goes through ``PacedBackend``: each read or write waits
at most the idle timeout, and each direction of each request must move at least
``MIN_PROGRESS_BYTES`` (or finish) within every ``progress`` seconds spent waiting on
the socket. Time the program spends elsewhere (hashing, writing to disk) never counts.

Both values come from the environment, for operators on slow links and for tests:
``AIRGAP_IDLE_TIMEOUT`` (seconds, default 60) and ``AIRGAP_PROGRESS_TIMEOUT`` (default
120). A stall surfaces as an ``httpcore.ReadTimeout``/``WriteTimeout`` whose message
says which limit was hit, and is retried like any dropped connection.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpcore

from airgap.errors import InputError
from airgap.limits import KiB

DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_PROGRESS_TIMEOUT = 120.0
MIN_PROGRESS_BYTES = 64 * KiB
IDLE_ENV = "AIRGAP_IDLE_TIMEOUT"
PROGRESS_ENV = "AIRGAP_PROGRESS_TIMEOUT"


@dataclass(frozen=True)
class Pacing:
    """How long a connection may sit idle, and how long it may go without progress."""

    idle: float = DEFAULT_IDLE_TIMEOUT
    progress: float = DEFAULT_PROGRESS_TIMEOUT
    minimum: int = MIN_PROGRESS_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Pacing:
        environment = os.environ if env is None else env
        return cls(
            idle=_seconds(environment, IDLE_ENV, DEFAULT_IDLE_TIMEOUT),
            progress=_seconds(environment, PROGRESS_ENV, DEFAULT_PROGRESS_TIMEOUT),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise InputError(f"{name}={text!r}: expected a number of seconds between 0 and 86400")
    return value


class ProgressWindow:
    """Progress of one direction of one request: bytes moved and time spent waiting."""

    def __init__(self, pacing: Pacing) -> None:
        self._pacing = pacing
        self._direction = ""
        self._waited = 0.0
        self._moved = 0

    def turn(self, direction: str) -> None:
        """A new request writes after the last response was read, and its response is
        read after it was written: each phase gets a fresh window."""
        if direction != self._direction:
            self._direction, self._waited, self._moved = direction, 0.0, 0

    def budget(self) -> float:
        return max(self._pacing.progress - self._waited, 0.001)

    def account(self, moved: int, waited: float) -> bool:
        """Record one socket operation; True when the window ran out without progress."""
        self._waited += waited
        self._moved += moved
        if self._moved >= self._pacing.minimum:
            self._waited, self._moved = 0.0, 0
            return False
        return self._waited >= self._pacing.progress

    def timeout_message(self, budget: float) -> str:
        """Why a wait of ``budget`` seconds timed out: the progress deadline when it was
        the shorter of the two, else the idle timeout."""
        if budget < self._pacing.idle:
            return self.stall_message()
        return f"idle for {self._pacing.idle:g} s ({IDLE_ENV})"

    def stall_message(self) -> str:
        return (
            f"no progress: {self._moved} bytes in {self._pacing.progress:g} s "
            f"(at least {self._pacing.minimum} expected; {PROGRESS_ENV})"
        )


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
