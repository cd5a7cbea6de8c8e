"""``airgap.core.parallel``: results in job order, the first failure stops the rest, work
that other work unlocks runs before what has not started yet, and a byte budget holds
work back until it fits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import pytest

from airgap.core.parallel import ByteBudget, Started, run_parallel, run_unlocking

pytestmark = pytest.mark.unit


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


def test_a_byte_budget_holds_work_back_until_its_bytes_fit() -> None:
    budget = ByteBudget(100)
    release_first = budget.hold(60)
    release_small = budget.hold(40)  # fits beside the first
    got: list[str] = []

    def second() -> None:
        budget.hold(60)()
        got.append("second")

    waiting = threading.Thread(target=second)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and got == []  # 60 more do not fit while 100 are held
    release_small()
    waiting.join(0.2)
    assert waiting.is_alive()  # 40 freed: still not 60
    release_first()
    waiting.join(5)
    assert got == ["second"]


def test_work_larger_than_the_whole_budget_runs_alone() -> None:
    budget = ByteBudget(100)
    release_huge = budget.hold(10**9)  # never waits forever: it takes the whole budget
    done = threading.Event()

    def hold_one_then_signal() -> None:
        budget.hold(1)()
        done.set()

    waiting = threading.Thread(target=hold_one_then_signal)
    waiting.start()
    assert not done.wait(0.2)  # nothing else runs beside it
    release_huge()
    assert done.wait(5)
    waiting.join(5)


def test_started_jobs_run_while_the_caller_works_on_earlier_results() -> None:
    second_ran = threading.Event()

    def first() -> str:
        return "first"

    def second() -> str:
        second_ran.set()
        return "second"

    with Started([first, second], 2) as started:
        assert started.result(0) == "first"
        # the caller's work on the first result: the second job is already under way
        assert second_ran.wait(5)
        assert started.result(1) == "second"


def test_a_started_jobs_error_comes_with_its_result_and_nothing_runs_on_after() -> None:
    release = threading.Event()
    began: list[int] = []
    ended: list[int] = []

    def job(index: int) -> int:
        began.append(index)
        if index == 0:
            assert release.wait(5)
            raise ValueError("job 0 failed")
        ended.append(index)
        return index

    with (
        pytest.raises(ValueError, match="job 0 failed"),
        Started([partial(job, i) for i in range(50)], 2) as started,
    ):
        release.set()
        started.result(0)
    settled = (list(began), list(ended))
    assert len(settled[0]) == len(settled[1]) + 1  # every job begun has ended but job 0
    assert (began, ended) == settled  # and none begins after the block is left


def test_leaving_started_jobs_on_an_interrupt_does_not_wait_for_the_running_ones() -> None:
    began, release, finished = threading.Event(), threading.Event(), threading.Event()

    def transfer() -> None:
        began.set()
        release.wait(5)
        finished.set()

    with pytest.raises(KeyboardInterrupt), Started([transfer], 1):
        assert began.wait(5)
        raise KeyboardInterrupt  # Ctrl-C, as airgap.core.interrupt raises it
    assert not finished.is_set()  # the block was left with the transfer still running
    release.set()
    assert finished.wait(5)
