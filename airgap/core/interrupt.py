"""Ctrl-C and SIGTERM: stop within a second or two and leave no temporary file behind.

Transfers run on worker threads that may sit in a socket read for as long as the idle
timeout allows, and Python waits for those threads at exit. So a signal raises
``Interrupted`` in the main thread, whose unwinding removes what it was writing
(temporary files, staging directories), and the process then ends with ``os._exit``
without waiting for the workers. Every temporary path is also registered here
(``track``), and a watchdog started by the first signal removes whatever is still
registered and ends the process after ``GRACE_SECONDS`` even if the unwinding itself
got stuck; a second signal does that at once.

A server is different: a signal is how it is meant to stop, and an exception raised at
whatever bytecode the main thread happens to be on can land inside library code that
catches and drops it (socketserver hands what ``process_request`` raises to
``handle_error``), leaving the server running until the watchdog kills it. So
``serve`` asks for the signal as a request instead (``stop_requests``): the handler
calls the server's own shutdown and the serving loop returns cleanly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

GRACE_SECONDS = 1.5
_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_lock = threading.Lock()
_temporaries: dict[Path, bool] = {}  # path -> is a directory
_received: list[int] = []
_finishing = threading.Lock()
_stop_request: list[Callable[[], None]] = []  # set by stop_requests: ask, do not raise


def track(path: Path, *, directory: bool = False) -> None:
    """Remember a temporary file or directory until ``untrack``: removed on a signal."""
    with _lock:
        _temporaries[path] = directory


def untrack(path: Path) -> None:
    with _lock:
        _temporaries.pop(path, None)


@contextlib.contextmanager
def tracked(path: Path, *, directory: bool = False) -> Iterator[Path]:
    """``track`` for the duration of a block."""
    track(path, directory=directory)
    try:
        yield path
    finally:
        untrack(path)


def remove_temporaries() -> None:
    """Remove every registered temporary path (best effort, never raises)."""
    with _lock:
        paths = list(_temporaries.items())
        _temporaries.clear()
    for path, directory in paths:
        with contextlib.suppress(OSError):
            if directory:
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


class Interrupted(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM. Not a KeyboardInterrupt: click
    answers one with an empty line on stderr before its own Abort, and every error
    is one line."""


def install() -> None:
    """Handle SIGINT and SIGTERM as described above (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number in _SIGNALS:
        signal.signal(number, _on_signal)


def _on_signal(number: int, frame: FrameType | None) -> None:
    if _received:
        finish()  # a second signal: no more waiting
    _received.append(number)
    if _stop_request:  # a server: its loop ends by itself; a second signal still finishes
        _stop_request[0]()
        return
    threading.Thread(target=_watchdog, name="airgap-interrupt", daemon=True).start()
    raise Interrupted


@contextlib.contextmanager
def stop_requests(stop: Callable[[], None]) -> Iterator[None]:
    """For the block, SIGINT and SIGTERM call ``stop`` (which must not block: the
    handler runs on the main thread) instead of raising ``Interrupted``; a signal
    received before the block is raised at its start."""
    _stop_request.append(stop)
    try:
        if _received:
            raise Interrupted
        yield
    finally:
        _stop_request.clear()


def _watchdog() -> None:
    time.sleep(GRACE_SECONDS)
    finish()


def exit_code() -> int:
    """128 + the signal's number, as shells report it (130 for Ctrl-C)."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def signal_name() -> str:
    """The name of the first signal received (SIGINT when none was)."""
    return signal.Signals(_received[0]).name if _received else "SIGINT"


def finish() -> None:
    """Remove what is left, say so on one line and end the process now."""
    if not _finishing.acquire(blocking=False):
        time.sleep(GRACE_SECONDS)  # another thread is finishing: let it
        os._exit(exit_code())
    remove_temporaries()
    name = signal_name()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"airgap: error: interrupted ({name})\n")
        sys.stderr.flush()
    os._exit(exit_code())
