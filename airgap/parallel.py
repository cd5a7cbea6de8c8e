"""Run independent transfers on a thread pool, failing fast.

Threads suit this work: sockets, file I/O and hashlib (on buffers over 2 KiB) all
release the GIL, so several blobs really do move at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar, cast

T = TypeVar("T")

WINDOW = 2  # jobs submitted ahead per worker: enough to keep every worker busy


def run_parallel(jobs: Sequence[Callable[[], T]], concurrency: int) -> list[T]:
    """Results in job order; the first failure stops what has not started and is raised.

    Jobs are submitted a few per worker ahead, not all at once: a future (with its
    lock and condition, ~0.4 KiB) per job of a 2,000-image bundle would be held for
    the whole run, and none is needed before a worker is free to take it."""
    if not jobs:
        return []
    workers = max(1, min(concurrency, len(jobs)))
    results: list[T | None] = [None] * len(jobs)
    upcoming = iter(enumerate(jobs))
    pending: dict[Future[T], int] = {}
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        for index, job in itertools.islice(upcoming, workers * WINDOW):
            pending[pool.submit(job)] = index
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            errors = [f.exception() for f in sorted(done, key=pending.__getitem__)]
            error = next((e for e in errors if e is not None), None)
            if error is not None:
                pool.shutdown(wait=True, cancel_futures=True)
                raise error
            for future in done:
                results[pending.pop(future)] = future.result()
            for index, job in itertools.islice(upcoming, len(done)):
                pending[pool.submit(job)] = index
    except BaseException:
        # Ctrl-C or SIGTERM (airgap.interrupt): do not wait for transfers in flight
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return cast(list[T], results)
