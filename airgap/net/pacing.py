"""Slow servers fail in bounded time: an idle timeout per read and a progress deadline.

A per-read timeout alone never fires on a server that sends one byte a second, and a
release server or registry can keep collect busy forever that way, headers included.
Every connection airgap opens is paced (``airgap.net.fasthttp``'s own, and httpcore's
through ``airgap.net.pacedcore.PacedBackend``): each read or write waits
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from airgap.core.limits import KiB, env_seconds

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
            idle=env_seconds(environment, IDLE_ENV, DEFAULT_IDLE_TIMEOUT),
            progress=env_seconds(environment, PROGRESS_ENV, DEFAULT_PROGRESS_TIMEOUT),
        )


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


class PaceExceeded(Exception):
    """A paced operation waited past the idle timeout or the progress deadline; the
    message says which. Each transport raises its own library's timeout from it."""


def run_paced(
    window: ProgressWindow,
    direction: str,
    operation: Callable[[float], int],
    idle_errors: tuple[type[BaseException], ...],
) -> int:
    """One socket operation held to its direction's window: ``operation(budget)`` waits
    at most ``budget`` seconds (as the idle timeout allows) and returns the bytes it
    moved; one of ``idle_errors`` means it waited that long. Raises PaceExceeded."""
    window.turn(direction)
    budget = window.budget()
    started = time.monotonic()
    try:
        moved = operation(budget)
    except idle_errors:
        raise PaceExceeded(window.timeout_message(budget)) from None
    if window.account(moved, time.monotonic() - started):
        raise PaceExceeded(window.stall_message())
    return moved


def read_arrived(sock: ssl.SSLSocket, view: memoryview) -> int:
    """Over TLS a read returns one record (16 KiB) however much is asked: fill ``view``
    with the records that have already arrived, without waiting (the caller has made
    the socket non-blocking), and return how many bytes that took. A condition met here
    (end of stream, an error) is left for the next read to meet again."""
    total = 0
    try:
        while total < len(view):
            more = sock.recv_into(view[total:])
            if not more:
                break
            total += more
    except OSError:  # SSLWantReadError: nothing more yet
        pass
    return total
