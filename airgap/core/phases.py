"""Opt-in wall-clock time per named phase, for the benchmark (``AIRGAP_PHASE_TIMES``).

With ``AIRGAP_PHASE_TIMES=PATH`` in the environment, every ``with timed("name"):``
adds its wall-clock seconds and the process's CPU seconds to ``name``, and the totals
are written to PATH when the process exits, as JSON:
``{"providers/parse": {"seconds": 0.12, "cpu_seconds": 0.11}, ...}``. CPU seconds say
what a phase costs even on a loaded machine (the provider phases run while no other
thread of the process works). Without it, ``timed`` returns one shared object whose
``__enter__`` and ``__exit__`` do nothing: a handful of calls per command, no cost.

Names are ``area/step``; ``providers/…`` is provider handling (fetch, parse and image
discovery in collect; rewrite, outputs and writing them in import and configmaps),
which the benchmark reports as a line of its own.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

ENV = "AIRGAP_PHASE_TIMES"


class _Off:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Timer:
    def __init__(self, totals: dict[str, list[float]], name: str) -> None:
        self._totals = totals
        self._name = name
        self._started = (0.0, 0.0)

    def __enter__(self) -> None:
        self._started = (time.perf_counter(), time.process_time())

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        total = self._totals.setdefault(self._name, [0.0, 0.0])
        total[0] += time.perf_counter() - self._started[0]
        total[1] += time.process_time() - self._started[1]


_OFF = _Off()
_path = os.environ.get(ENV)
_totals: dict[str, list[float]] | None = {} if _path else None


def timed(name: str, *, beside: bool = False) -> _Off | _Timer:
    """A context manager adding its duration to phase ``name`` (nothing when off).

    Only the main thread times phases: a worker's CPU seconds would count every other
    thread's too, and workers side by side would add up their walls. Work spread over
    threads is timed by the main thread's phase that waits for it. ``beside``: the one
    thread running this phase while the main thread waits in no phase (its CPU seconds
    are then the process's over that time, as the main thread's are)."""
    if _totals is None:
        return _OFF
    if not beside and threading.current_thread() is not threading.main_thread():
        return _OFF
    return _Timer(_totals, name)


def _write() -> None:
    """The times, written by rename as every output is (``fsutil.write_atomic``), so a
    device or FIFO named by the variable is never replaced: ``AIRGAP_PHASE_TIMES=/dev/null``
    once put a JSON file in place of /dev/null. A measurement aid never fails the command:
    what cannot be written is said on stderr."""
    if _path is None or _totals is None:
        return
    from airgap.core.errors import AirgapError
    from airgap.core.fsutil import write_atomic

    report = {
        name: {"seconds": round(wall, 6), "cpu_seconds": round(cpu, 6)}
        for name, (wall, cpu) in _totals.items()
    }
    try:
        write_atomic(Path(_path), json.dumps(report).encode())
    except (AirgapError, OSError) as exc:
        print(f"airgap: {ENV}: phase times not written: {exc}", file=sys.stderr)


if _totals is not None:
    atexit.register(_write)
