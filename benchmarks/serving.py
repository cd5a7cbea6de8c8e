"""Serving pulls: ``airgap serve`` against ``docker-registry`` serving the same blobs.

Each server is asked for every config and layer of the main set by one ``curl
--parallel --parallel-max P`` (nodes pulling at once), largest first, each body
discarded: what is measured is how fast a server hands out blobs, not a disk write.
``airgap serve`` answers from the bundle the repetition collected (it verifies the whole
bundle before it listens; that start-up is not part of the figure, it is ``airgap
verify``'s), docker-registry from its filesystem store: the source registry the bundle
was collected from. Both read what the collect just moved, so both start from the page
cache; the order alternates between repetitions. Every byte must arrive (curl reports
each transfer's size), so no failed or short transfer counts as speed.
"""

from __future__ import annotations

import re
import selectors
import signal
import subprocess
from pathlib import Path

from benchmarks.measure import Sample, curl_config, curl_timed

START_TIMEOUT = 600  # verifying the main bundle before listening
_ADDRESS = re.compile(r" on https?://([^ /]+)/ ")


class Served:
    """``airgap serve BUNDLE`` on an ephemeral loopback port, until ``stop``."""

    def __init__(self, airgap: list[str], bundle: Path, key: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*airgap, "serve", str(bundle), "--key", str(key), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        assert self.process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        banner = self.process.stdout.readline() if selector.select(START_TIMEOUT) else ""
        found = _ADDRESS.search(banner)
        if found is None:
            self.stop()
            raise RuntimeError(f"airgap serve did not start: {banner!r}")
        self.host = found.group(1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


def pull_all(
    host: str,
    server_pid: int,
    repositories: dict[str, str],
    sizes: dict[str, int],
    parallel: int,
    env: dict[str, str],
    workdir: Path,
) -> Sample:
    """Every blob (digest -> a repository serving it) from ``host``, ``parallel`` at a
    time; CPU of curl and of the server process are recorded."""
    order = sorted(repositories, key=lambda digest: sizes[digest], reverse=True)
    workdir.mkdir(parents=True, exist_ok=True)
    pulls = [
        {"url": f"http://{host}/v2/{repositories[digest]}/blobs/{digest}", "output": "/dev/null"}
        for digest in order
    ]
    config = curl_config(workdir / "pulls.cfg", pulls)
    with curl_timed(server_pid) as timed:
        result = subprocess.run(
            [
                *("curl", "-sS", "-f", "-g", "-K", str(config)),
                *("--parallel", "--no-progress-meter", "--parallel-max", str(parallel)),
                *("-w", "%{size_download}\\n"),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    received = sum(int(line) for line in result.stdout.split())
    expected = sum(sizes[digest] for digest in order)
    if received != expected:
        raise RuntimeError(f"pulls from {host}: {received} bytes received, {expected} expected")
    return timed.sample(_peak_rss_kib(server_pid))


def _peak_rss_kib(pid: int) -> int:
    """The server's peak resident set so far (VmHWM), in KiB; 0 if it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) if found else 0
