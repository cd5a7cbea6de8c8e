"""Progress that tells the truth: a bar on a terminal, a periodic line elsewhere.

Commands report bytes through a ``Progress`` object as they move (per chunk sent,
received or hashed, never per finished blob); how that is shown is decided once, here:

- on a terminal, a rich bar (binary units: KiB, MiB, GiB, as every summary says);
- off a terminal (CI, ``| tee log``), one line on stderr at most every
  ``AIRGAP_PROGRESS_INTERVAL`` seconds (default 5) while something is under way:
  ``airgap: pushing 1.2 GiB of 3.2 GiB (37%), 45.0 MiB/s, about 45 s left``;
- with ``--quiet``, nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TextIO, TypeAlias

from airgap.core.limits import env_seconds
from airgap.core.textfmt import human_size

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress

Task: TypeAlias = int | None  # a progress handle; None when nothing is shown

INTERVAL_ENV = "AIRGAP_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0


@dataclass
class _Counter:
    """One task's byte count, for the bar or the periodic lines."""

    description: str
    total: int
    completed: int = 0
    started: float = 0.0
    finished: bool = False


class Progress:
    """Byte-counting progress; shows nothing unless a mode says how."""

    def __init__(
        self,
        enabled: bool = False,
        *,
        lines: bool = False,
        stream: TextIO | None = None,
        interval: float | None = None,
    ) -> None:
        """``enabled``: a rich bar on stderr; ``lines``: periodic lines on ``stream``."""
        self._rich: RichProgress | None = None
        self._rich_ids: dict[int, object] = {}
        self._lock = threading.Lock()
        self._counters: dict[int, _Counter] = {}
        self._lines = lines and not enabled
        self._stream = stream
        if interval is None:  # only periodic lines have an interval to read
            interval = interval_from_env() if self._lines else DEFAULT_INTERVAL
        self._interval = interval
        self._stop = threading.Event()
        self._reporter: threading.Thread | None = None
        if enabled:  # rich is imported only when something will be drawn
            self._rich = _rich_progress()

    @classmethod
    def for_terminal(cls, quiet: bool) -> Progress:
        """A bar on a terminal, periodic lines elsewhere, nothing with ``--quiet``."""
        if quiet:
            return cls()
        if sys.stderr.isatty():
            return cls(enabled=True)
        return cls(lines=True)

    @property
    def active(self) -> bool:
        return self._rich is not None or self._lines

    def __enter__(self) -> Progress:
        if self._rich:
            self._rich.start()
        elif self._lines:
            self._reporter = threading.Thread(
                target=self._report, name="airgap-progress", daemon=True
            )
            self._reporter.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich:
            self._rich.stop()
        self._stop.set()
        if self._reporter is not None:
            self._reporter.join(timeout=1.0)

    def task(self, description: str, total: int) -> Task:
        """A new counter of ``total`` bytes (shown at once on a terminal)."""
        if not self.active:
            return None
        with self._lock:
            handle = len(self._counters)
            self._counters[handle] = _Counter(description, total, started=time.monotonic())
            if self._rich is not None:
                self._rich_ids[handle] = self._rich.add_task(description, total=total)
        return handle

    def total(self, task: Task, total: int) -> None:
        """Correct a counter's total once it is known (verification learns it from the
        bundle manifest after the first members)."""
        if task is None:
            return
        with self._lock:
            counter = self._counters.get(task)
            if counter is not None:
                counter.total = total
            if self._rich is not None and task in self._rich_ids:
                self._rich.update(self._rich_ids[task], total=total)  # type: ignore[arg-type]

    def advance(self, task: Task, amount: int) -> None:
        """``amount`` more bytes moved (negative: a retry takes some back)."""
        if task is None or not amount:
            return
        with self._lock:
            counter = self._counters.get(task)
            if counter is not None:
                counter.completed = max(0, counter.completed + amount)
            if self._rich is not None and task in self._rich_ids:
                self._rich.advance(self._rich_ids[task], amount)  # type: ignore[arg-type]

    def finish(self, task: Task) -> None:
        """The counter is done, whatever it says (nothing more is periodic about it)."""
        if task is None:
            return
        with self._lock:
            counter = self._counters.get(task)
            if counter is not None:
                counter.finished = True
                rest = counter.total - counter.completed
                counter.completed = counter.total
            else:
                rest = 0
            if self._rich is not None and task in self._rich_ids and rest > 0:
                self._rich.advance(self._rich_ids[task], rest)  # type: ignore[arg-type]

    def note(self, message: str) -> None:
        """A line above the bars (e.g. which provider is being fetched); terminal only."""
        if self._rich:
            self._rich.console.print(message)

    # -- off a terminal ---------------------------------------------------------------

    def _report(self) -> None:
        while not self._stop.wait(self._interval):
            line = self.status_line(time.monotonic())
            if line:
                stream = self._stream or sys.stderr
                try:
                    stream.write(f"airgap: {line}\n")
                    stream.flush()
                except (OSError, ValueError):  # stderr went away: nothing to report to
                    return

    def status_line(self, now: float) -> str | None:
        """``pushing 1.2 GiB of 3.2 GiB (37%), 45.0 MiB/s, about 45 s left`` for the
        counters under way, or None when nothing is."""
        with self._lock:
            running = [c for c in self._counters.values() if not c.finished]
            parts = [_describe(counter, now) for counter in running if counter.total > 0]
        return "; ".join(parts) if parts else None


def _describe(counter: _Counter, now: float) -> str:
    done, total = min(counter.completed, counter.total), counter.total
    elapsed = max(now - counter.started, 1e-6)
    rate = done / elapsed
    text = (
        f"{counter.description} {human_size(done)} of {human_size(total)} "
        f"({100 * done // total}%), {human_size(int(rate))}/s"
    )
    if rate > 0 and done < total:
        text += f", about {_duration((total - done) / rate)} left"
    return text


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def interval_from_env() -> float:
    """``AIRGAP_PROGRESS_INTERVAL`` seconds (default 5; tests set it short). A value that
    is not a number of seconds is an InputError naming the variable, as the pacing
    variables' are: a typo silently taken as 5 s would look like a progress bug."""
    return env_seconds(os.environ, INTERVAL_ENV, DEFAULT_INTERVAL)


def _rich_progress() -> RichProgress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        ProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as RichProgress
    from rich.progress import Task as RichTask
    from rich.text import Text

    class BinaryRateColumn(ProgressColumn):
        """Bytes per second in KiB/MiB/GiB (rich's own column is decimal)."""

        def render(self, task: RichTask) -> Text:
            speed = task.finished_speed or task.speed
            if speed is None:
                return Text("?", style="progress.data.speed")
            return Text(f"{human_size(int(speed))}/s", style="progress.data.speed")

    return RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        BinaryRateColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


QUIET = Progress()
