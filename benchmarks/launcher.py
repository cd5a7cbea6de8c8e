"""A tiny process that starts measured commands and reports their time and peak RSS.

Why a separate process: on Linux a child's ``ru_maxrss`` includes the resident set of
the process that forked it (exec keeps the old address space's high-water mark), so a
command spawned by the benchmark itself (~40 MiB of Python) would never show less than
that. This launcher runs as ``python -S -I`` with the standard library only (~9 MiB),
spawns each command with ``posix_spawn``, reaps it with ``os.wait4`` and answers one
JSON line per request on stdout: ``{"rc", "seconds", "maxrss_kib", "cpu_seconds",
"system_seconds"}`` (``cpu_seconds``: user + system time of the command;
``system_seconds``: the kernel's share of it).

Requests are JSON lines on stdin: ``{"cmd": [...], "out": PATH, "err": PATH,
"timeout": seconds}``.
"""

import json
import os
import signal
import sys
import time

# for mypy only (it knows this name): importing typing (or __future__) at run time would
# add to this process's resident set, and so to every measured command's peak RSS
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _run(request: "dict[str, Any]") -> dict[str, object]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, request["out"], flags, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, request["err"], flags, 0o644),
    ]
    started = time.perf_counter()
    pid = os.posix_spawnp(request["cmd"][0], request["cmd"], os.environ, file_actions=actions)

    def kill(*_: object) -> None:
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, kill)
    signal.setitimer(signal.ITIMER_REAL, float(request.get("timeout") or 3600))
    try:
        while True:
            try:
                _, status, usage = os.wait4(pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {
        "rc": os.waitstatus_to_exitcode(status),
        "seconds": time.perf_counter() - started,
        "maxrss_kib": usage.ru_maxrss,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "system_seconds": usage.ru_stime,
    }


def main() -> None:
    for line in sys.stdin:
        answer: dict[str, object]
        try:
            answer = _run(json.loads(line))
        except OSError as exc:
            answer = {"rc": 127, "seconds": 0.0, "maxrss_kib": 0, "cpu_seconds": 0.0}
            answer["error"] = str(exc)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
