"""Run independent transfers on a thread pool, failing fast.

Threads suit this work: sockets, file I/O and hashlib (on buffers over 2 KiB) all
release the GIL, so several blobs really do move at once.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Generic, TypeVar, cast

T = TypeVar("T")

WINDOW = 2  # jobs submitted ahead per worker: enough to keep every worker busy


class Ahead(Generic[T]):
    """A call on a thread of its own, started before work it does not depend on so
    that the two overlap; ``result`` joins it, re-raising its error. A result never
    asked for (the work before it failed) is dropped with its error: the thread is a
    daemon, and holds nothing that must be released."""

    def __init__(self, name: str, call: Callable[[], T]) -> None:
        self._call = call
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to the thread that asks for the result
            self._error = exc

    def wait(self) -> None:
        """Join the call, keeping its result and error for ``result``."""
        self._thread.join()

    def result(self) -> T | None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


class Started(Generic[T]):
    """Jobs started on a pool at once, their results taken one by one as the caller
    gets to them (``result(index)`` waits for that job, re-raising its error): the
    caller works on each result while the later jobs still run. Leaving the ``with``
    block drops the jobs not yet started and waits for the running ones."""

    def __init__(self, jobs: Sequence[Callable[[], T]], concurrency: int) -> None:
        workers = max(1, min(concurrency, len(jobs)))
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._futures = [self._pool.submit(job) for job in jobs]

    def result(self, index: int) -> T:
        return self._futures[index].result()

    def __enter__(self) -> Started[T]:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Ctrl-C or SIGTERM (airgap.core.interrupt): do not wait for transfers in flight, as
        # _run does not; a job's error or the caller's waits for the running ones
        interrupted = kind is not None and not issubclass(kind, Exception)
        self._pool.shutdown(wait=not interrupted, cancel_futures=True)


class ByteBudget:
    """At most ``total`` bytes of work held at once across threads: ``hold(n)`` waits
    until ``n`` more fit. Work larger than the whole budget runs alone, never forever
    waiting, so a budget bounds memory without refusing anything."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._free = total
        self._changed = threading.Condition()

    def hold(self, size: int) -> Callable[[], None]:
        """Wait until ``size`` bytes fit; the returned call gives them back."""
        share = min(size, self._total)
        with self._changed:
            self._changed.wait_for(lambda: self._free >= share)
            self._free -= share

        def release() -> None:
            with self._changed:
                self._free += share
                self._changed.notify_all()

        return release


def run_parallel(jobs: Sequence[Callable[[], T]], concurrency: int) -> list[T]:
    """Results in job order; the first failure stops what has not started and is raised.

    Jobs are submitted a few per worker ahead, not all at once: a future (with its
    lock and condition, ~0.4 KiB) per job of a 2,000-image bundle would be held for
    the whole run, and none is needed before a worker is free to take it."""
    results: list[T | None] = [None] * len(jobs)

    def store(index: int, value: T) -> list[Callable[[], T]]:
        results[index] = value
        return []

    _run(jobs, concurrency, store)
    return cast(list[T], results)


def run_unlocking(
    jobs: Sequence[Callable[[], object]],
    concurrency: int,
    unlocked: Callable[[int], Sequence[Callable[[], object]]],
) -> None:
    """``run_parallel`` for work that other work makes possible: once job ``i`` is done,
    the jobs ``unlocked(i)`` names (called on this thread) run before any job not yet
    started, and are not themselves asked about. The first failure of any stops the
    rest and is raised.

    Why: an image's manifests can go as soon as its own blobs are in, while the
    largest blobs of other images still upload; pushed in a phase of their own, they
    would wait for the last blob while workers sat idle in the upload's tail."""

    def follow(index: int, _: object) -> list[Callable[[], object]]:
        return list(unlocked(index)) if index < len(jobs) else []

    _run(jobs, concurrency, follow)


def _run(
    jobs: Sequence[Callable[[], T]],
    concurrency: int,
    done_with: Callable[[int, T], list[Callable[[], T]]],
) -> None:
    """The pool both share: ``done_with(index, result)`` for each job as it ends, on
    this thread; what it returns runs next (numbered on from ``len(jobs)``)."""
    if not jobs:
        return
    workers = max(1, min(concurrency, len(jobs)))
    upcoming = iter(enumerate(jobs))  # taken as workers free up: nothing held per job
    follows: deque[tuple[int, Callable[[], T]]] = deque()  # what done_with returned
    numbers = itertools.count(len(jobs))
    pending: dict[Future[T], int] = {}
    pool = ThreadPoolExecutor(max_workers=workers)

    def submit(count: int) -> None:
        for _ in range(count):
            taken = follows.popleft() if follows else next(upcoming, None)
            if taken is None:
                return
            index, job = taken
            pending[pool.submit(job)] = index

    try:
        submit(workers * WINDOW)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            errors = [f.exception() for f in sorted(done, key=pending.__getitem__)]
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                pool.shutdown(wait=True, cancel_futures=True)
                raise error
            for future in sorted(done, key=pending.__getitem__):
                index = pending.pop(future)
                follows.extend((next(numbers), job) for job in done_with(index, future.result()))
            submit(len(done))
    except BaseException:
        # Ctrl-C or SIGTERM (airgap.core.interrupt): do not wait for transfers in flight
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
