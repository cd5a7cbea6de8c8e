"""Progress on a terminal (rich), silence everywhere else.

Commands report bytes through a ``Progress`` object; whether anything is drawn is
decided once, here: only on a TTY and never with ``--quiet``.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID

    Task: TypeAlias = TaskID | None  # a progress bar handle; None when nothing is drawn
else:
    Task = object


class Progress:
    """Byte-counting progress; a no-op unless enabled."""

    def __init__(self, enabled: bool) -> None:
        self._rich: RichProgress | None = None
        self._lock = threading.Lock()
        if enabled:  # rich is imported only when something will be drawn
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    @classmethod
    def for_terminal(cls, quiet: bool) -> Progress:
        return cls(enabled=not quiet and sys.stderr.isatty())

    def __enter__(self) -> Progress:
        if self._rich:
            self._rich.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich:
            self._rich.stop()

    def task(self, description: str, total: int) -> Task:
        if not self._rich:
            return None
        return self._rich.add_task(description, total=total)

    def advance(self, task: Task, amount: int) -> None:
        if self._rich is not None and task is not None:
            self._rich.advance(task, amount)

    def note(self, message: str) -> None:
        """A line above the bars (e.g. which provider is being fetched)."""
        if self._rich:
            self._rich.console.print(message)


QUIET = Progress(enabled=False)
