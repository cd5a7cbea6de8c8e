"""``airgap.parallel``: results in job order, the first failure stops the rest, and
work that other work unlocks runs before what has not started yet."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import pytest

from airgap.parallel import run_parallel, run_unlocking


def test_results_come_in_job_order_whatever_order_jobs_end_in() -> None:
    last_done = threading.Event()

    def job(index: int) -> int:
        if index == 0:
            assert last_done.wait(5)  # the first job ends after the last one
        if index == 3:
            last_done.set()
        return index * 10

    assert run_parallel([partial(job, i) for i in range(4)], 4) == [0, 10, 20, 30]


def test_the_first_failure_is_raised_and_what_has_not_started_never_runs() -> None:
    ran: list[int] = []

    def job(index: int) -> None:
        ran.append(index)
        if index == 0:
            raise ValueError("job 0 failed")

    with pytest.raises(ValueError, match="job 0 failed"):
        run_parallel([partial(job, i) for i in range(50)], 1)
    assert ran[0] == 0 and len(ran) < 50


def test_unlocked_work_runs_after_its_job_and_before_the_jobs_not_yet_started() -> None:
    log: list[str] = []
    lock = threading.Lock()

    def job(name: str) -> None:
        with lock:
            log.append(name)

    asked: list[int] = []

    def unlocked(index: int) -> list[Callable[[], object]]:
        asked.append(index)
        return [partial(job, f"after-{index}")] if index in (0, 2) else []

    jobs = [partial(job, f"job-{i}") for i in range(8)]
    run_unlocking(jobs, 1, unlocked)
    assert sorted(asked) == list(range(8))  # each job asked once, follow-ups never
    assert sorted(log) == sorted([f"job-{i}" for i in range(8)] + ["after-0", "after-2"])
    # one worker, two jobs handed to it ahead: a follow-up waits for at most that one
    assert log.index("job-0") < log.index("after-0") <= log.index("job-0") + 2
    assert log.index("job-2") < log.index("after-2") <= log.index("job-2") + 2
    assert log.index("after-0") < log.index("job-7")


def test_a_failing_unlocked_job_stops_the_rest() -> None:
    ran: list[int] = []

    def job(index: int) -> None:
        ran.append(index)

    def broken() -> None:
        raise RuntimeError("unlocked job failed")

    with pytest.raises(RuntimeError, match="unlocked job failed"):
        run_unlocking([partial(job, i) for i in range(50)], 1, lambda i: [broken] if i == 0 else [])
    assert len(ran) < 50


def test_no_jobs_is_nothing_to_do() -> None:
    assert run_parallel([], 4) == []
    run_unlocking([], 4, lambda index: pytest.fail("nothing to unlock"))
