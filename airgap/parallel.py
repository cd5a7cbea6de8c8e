"""Run independent transfers on a thread pool, failing fast.

Threads suit this work: sockets, file I/O and hashlib (on buffers over 2 KiB) all
release the GIL, so several blobs really do move at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")


def run_parallel(jobs: Sequence[Callable[[], T]], concurrency: int) -> list[T]:
    """Results in job order; the first failure cancels what has not started and is raised."""
    if not jobs:
        return []
    pool = ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(jobs))))
    try:
        futures = [pool.submit(job) for job in jobs]
        wait(futures, return_when=FIRST_EXCEPTION)
    except BaseException:
        # Ctrl-C or SIGTERM (airgap.interrupt): do not wait for transfers in flight
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    with pool:
        for future in futures:
            if future.done() and not future.cancelled():
                error = future.exception()
                if error is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise error
        return [future.result() for future in futures]
