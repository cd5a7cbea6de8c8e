"""Running and measuring commands: wall time and exact peak RSS per child process.

Every measured command is started by a small launcher process (``launcher.py``) and
reaped with ``os.wait4``, whose ``ru_maxrss`` (KiB on Linux) is the peak resident set of
exactly that process (the launcher keeps the fork floor at ~9 MiB, see its docstring).
Dirty pages are flushed (``sync``) before each timed command so write-back left by the
previous one is not charged to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from tests.harness import skopeo
from tests.harness.registry import RegistryServer

COMMAND_TIMEOUT = 3600.0
LAUNCHER = Path(__file__).resolve().parent / "launcher.py"


class CommandFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Sample:
    """One measured run: wall seconds, peak RSS (KiB) of the biggest process, CPU seconds
    of the command(s) and of the registries it talked to (out of 2 x wall on 2 cores),
    and the kernel's (system) share of each: what memory management and I/O cost, apart
    from the programs' own work."""

    seconds: float
    rss_kib: int
    cpu_seconds: float = 0.0
    server_cpu_seconds: float = 0.0
    system_seconds: float = 0.0
    server_system_seconds: float = 0.0


_TICK = os.sysconf("SC_CLK_TCK")


def process_times(pids: Sequence[int]) -> tuple[float, float]:
    """CPU seconds so far of live processes (registries): user + system, and system."""
    total = system = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
        system += int(fields[12]) / _TICK
    return total, system


def times_since(before: tuple[float, float], pids: Sequence[int]) -> tuple[float, float]:
    """``process_times`` of ``pids`` now, less ``before``."""
    total, system = process_times(pids)
    return total - before[0], system - before[1]


def registry_pid(registry: RegistryServer) -> int:
    process = registry._process  # the harness keeps it private; the benchmark only reads it
    return process.pid if process is not None else -1


class Runner:
    """Starts measured commands through the launcher, logging output under ``log_dir``."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.env = env
        self._count = 0
        self._launcher = subprocess.Popen(
            [sys.executable, "-S", "-I", str(LAUNCHER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def close(self) -> None:
        if self._launcher.stdin:
            self._launcher.stdin.close()
        self._launcher.wait(timeout=10)

    def run(
        self, cmd: Sequence[str], name: str, *, sync: bool = True, watch: Sequence[int] = ()
    ) -> Sample:
        """Run ``cmd`` to completion; raise CommandFailed on a non-zero exit. ``watch``:
        pids (registries) whose CPU time during the command is recorded too."""
        self._count += 1
        stem = self.log_dir / f"{self._count:04d}-{name}"
        stem.with_suffix(".cmd").write_text(shlex.join(cmd) + "\n")
        err = stem.with_suffix(".err")
        request = {
            "cmd": list(cmd),
            "out": str(stem.with_suffix(".out")),
            "err": str(err),
            "timeout": COMMAND_TIMEOUT,
        }
        assert self._launcher.stdin is not None and self._launcher.stdout is not None
        if sync:
            os.sync()
        before = process_times(watch)
        self._launcher.stdin.write(json.dumps(request) + "\n")
        self._launcher.stdin.flush()
        answer = json.loads(self._launcher.stdout.readline())
        servers, server_system = times_since(before, watch)
        if answer["rc"] != 0:
            tail = answer.get("error") or err.read_text(errors="replace")[-2000:]
            raise CommandFailed(f"{name} failed ({answer['rc']}): {shlex.join(cmd)}\n{tail}")
        return Sample(
            answer["seconds"],
            answer["maxrss_kib"],
            answer["cpu_seconds"],
            servers,
            answer.get("system_seconds", 0.0),
            server_system,
        )

    def run_loop(
        self, cmds: Sequence[Sequence[str]], name: str, *, watch: Sequence[int] = ()
    ) -> Sample:
        """Run commands one after the other: total time, largest peak RSS, total CPU."""
        os.sync()
        before = process_times(watch)
        started = time.perf_counter()
        peak, cpu, system = 0, 0.0, 0.0
        for cmd in cmds:
            sample = self.run(cmd, name, sync=False)
            peak, cpu = max(peak, sample.rss_kib), cpu + sample.cpu_seconds
            system += sample.system_seconds
        elapsed = time.perf_counter() - started
        servers, server_system = times_since(before, watch)
        return Sample(elapsed, peak, cpu, servers, system, server_system)


# -- environments ----------------------------------------------------------------------


def hermetic_env(workdir: Path) -> dict[str, str]:
    """No proxies, no host credentials: empty docker config and containers auth file."""
    skopeo.configure(workdir / "skopeo")
    docker_config = workdir / "docker-config"
    docker_config.mkdir(parents=True, exist_ok=True)
    (docker_config / "config.json").write_text("{}\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
        and not k.startswith("REGISTRY_")
    }
    env.update(
        {
            "DOCKER_CONFIG": str(docker_config),
            # import's verification cache: kept apart, and cleared before cold imports
            "AIRGAP_CACHE_DIR": str(workdir / "verify-cache"),
            "REGISTRY_AUTH_FILE": str(workdir / "skopeo" / "auth.json"),
            "CONTAINERS_REGISTRIES_CONF": str(workdir / "skopeo" / "registries.conf"),
            "TMPDIR": str(workdir / "skopeo" / "tmp"),
            "NO_PROXY": "127.0.0.1,localhost,::1",
        }
    )
    return env


def skopeo_cmd(workdir: Path, *args: str) -> list[str]:
    """``skopeo`` with the hermetic policy and registries.d that ``hermetic_env`` wrote."""
    config = workdir / "skopeo"
    return [
        skopeo.SKOPEO,
        "--policy",
        str(config / "policy.json"),
        "--registries.d",
        str(config / "registries.d"),
        *args,
    ]


@contextlib.contextmanager
def fresh_registry(directory: Path) -> Iterator[RegistryServer]:
    """An empty plain-HTTP registry whose storage is deleted when it stops."""
    shutil.rmtree(directory, ignore_errors=True)
    registry = RegistryServer(directory, "plain")
    try:
        yield registry
    finally:
        registry.stop()
        shutil.rmtree(directory, ignore_errors=True)


# -- the raw ingest limit --------------------------------------------------------------


@dataclass
class CurlRun:
    """Wall clock and CPU of curl runs and of the server they talk to (see curl_timed)."""

    seconds: float = 0.0
    curl_cpu: float = 0.0
    server_cpu: float = 0.0
    curl_system: float = 0.0
    server_system: float = 0.0

    def sample(self, rss_kib: int = 0) -> Sample:
        return Sample(
            self.seconds,
            rss_kib,
            self.curl_cpu,
            self.server_cpu,
            self.curl_system,
            self.server_system,
        )


@contextlib.contextmanager
def curl_timed(server_pid: int) -> Iterator[CurlRun]:
    """Time what runs inside: wall clock, CPU of the child processes it waited for
    (curl) and CPU of the server process, filled in when the block ends."""
    run = CurlRun()
    servers = process_times([server_pid])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    yield run
    run.seconds = time.perf_counter() - started
    run.server_cpu, run.server_system = times_since(servers, [server_pid])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.curl_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    run.curl_system = after.ru_stime - children.ru_stime


def curl_config(path: Path, entries: list[dict[str, str]]) -> Path:
    """A curl ``--config`` file: one block of ``key = "value"`` lines per transfer."""
    lines = []
    for entry in entries:
        lines += [f'{key} = "{value}"' for key, value in entry.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def raw_ingest(
    registry: RegistryServer,
    blobs: dict[str, Path],
    sizes: dict[str, int],
    parallel: int,
    env: dict[str, str],
    workdir: Path,
    repository: str = "raw/blobs",
) -> Sample:
    """Monolithic uploads of every blob (POST a session, PUT the file with ?digest=),
    ``parallel`` PUTs at a time, largest first, by two curl processes: one makes every
    upload session over one keep-alive connection, one runs all the PUTs with
    ``--parallel``. No per-blob process start, so what is measured is the registry."""
    order = sorted(blobs, key=lambda digest: sizes[digest], reverse=True)
    workdir.mkdir(parents=True, exist_ok=True)
    start_url = f"http://{registry.host}/v2/{repository}/blobs/uploads/"
    posts = curl_config(
        workdir / "posts.cfg", [{"url": start_url, "output": "/dev/null"} for _ in order]
    )
    os.sync()
    with curl_timed(registry_pid(registry)) as timed:
        codes = _upload(registry, order, blobs, posts, parallel, env, workdir)
    if codes != ["201"] * len(order):
        raise RuntimeError(f"raw ingest: unexpected statuses {sorted(set(codes))}")
    return timed.sample()


def _upload(
    registry: RegistryServer,
    order: list[str],
    blobs: dict[str, Path],
    posts: Path,
    parallel: int,
    env: dict[str, str],
    workdir: Path,
) -> list[str]:
    """raw_ingest's two curl runs: every upload session, then every PUT; their statuses."""
    result = subprocess.run(
        [
            *("curl", "-sS", "-f", "-X", "POST", "-K", str(posts)),
            *("-w", "%header{location}\\n"),
        ],
        capture_output=True,
        env=env,
        check=True,
    )
    locations = result.stdout.decode().split()
    if len(locations) != len(order):
        raise RuntimeError(f"raw ingest: {len(locations)} upload sessions for {len(order)} blobs")
    puts = []
    for digest, location in zip(order, locations, strict=True):
        url = urljoin(f"http://{registry.host}/", location)
        url += ("&" if "?" in url else "?") + f"digest={digest}"
        puts.append({"url": url, "upload-file": str(blobs[digest]), "output": "/dev/null"})
    config = curl_config(workdir / "puts.cfg", puts)
    result = subprocess.run(
        [
            *("curl", "-sS", "-g", "-X", "PUT", "-K", str(config)),
            *("-H", "Content-Type: application/octet-stream", "-H", "Expect:"),
            *("--parallel", "--no-progress-meter", "--parallel-max", str(parallel)),
            *("-w", "%{http_code}\\n"),
        ],
        capture_output=True,
        env=env,
        check=True,
    )
    return result.stdout.decode().split()


def raw_download(
    registry: RegistryServer,
    repositories: dict[str, str],
    sizes: dict[str, int],
    parallel: int,
    env: dict[str, str],
    workdir: Path,
    output: Path,
) -> Sample:
    """The raw download limit, measured as the ingest limit is: one ``curl --parallel
    --parallel-max P`` GETs every blob (digest -> a repository holding it), largest
    first, its output written into one new file as collect writes its bundle (curl
    interleaves the transfers' bytes; only their number matters). The file must end up
    holding every byte, so no failed or short transfer counts as speed."""
    order = sorted(repositories, key=lambda digest: sizes[digest], reverse=True)
    workdir.mkdir(parents=True, exist_ok=True)
    base = f"http://{registry.host}/v2"
    gets = [{"url": f"{base}/{repositories[digest]}/blobs/{digest}"} for digest in order]
    config = curl_config(workdir / "gets.cfg", gets)
    output.unlink(missing_ok=True)
    os.sync()
    with curl_timed(registry_pid(registry)) as timed, output.open("wb") as sink:
        subprocess.run(
            [
                *("curl", "-sS", "-f", "-g", "-K", str(config)),
                *("--parallel", "--no-progress-meter", "--parallel-max", str(parallel)),
            ],
            stdout=sink,
            env=env,
            check=True,
        )
    written = output.stat().st_size
    output.unlink()
    expected = sum(sizes[digest] for digest in order)
    if written != expected:
        raise RuntimeError(f"raw download: {written} bytes written, {expected} expected")
    return timed.sample()


def registry_has_blobs(registry: RegistryServer, repository: str, digests: list[str]) -> bool:
    """Spot check (HEAD) that uploads landed: a benchmark of failed uploads is no limit."""
    for digest in digests:
        result = subprocess.run(
            [
                *("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-I"),
                f"http://{registry.host}/v2/{repository}/blobs/{digest}",
            ],
            capture_output=True,
            check=False,
        )
        if result.stdout.decode().strip() != "200":
            return False
    return True


def machine_info() -> dict[str, object]:
    """What the figures were measured on."""

    def output(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    free = output(["free", "-g"]).splitlines()
    memory = next((line.split()[1] for line in free if line.startswith("Mem:")), "?")
    return {
        "nproc": int(output(["nproc"]) or 0),
        "memory_gib": memory,
        "free_g": "\n".join(free),
        "cpu": model,
        "kernel": output(["uname", "-r"]),
        "skopeo": output(["skopeo", "--version"]),
        "registry": output(["docker-registry", "--version"]),
        "openssl": output(["openssl", "version"]).split(" (")[0],
        "curl": output(["curl", "--version"]).splitlines()[0]
        if output(["curl", "--version"])
        else "",
        "date": output(["date", "-u", "+%Y-%m-%d %H:%M UTC"]),
        "python": python_info(),
    }


def python_info() -> str:
    """The interpreter airgap runs on (the benchmark's own: airgap is the same venv's
    script), and how it was built: a shared-library build pays for every call into the
    interpreter through the PLT, and a build without profile-guided optimisation is
    slower still, which airgap's start-up and per-request CPU show. Whether libpython is
    shared is read from what this process has mapped: sysconfig's ``Py_ENABLE_SHARED``
    says what the build also produced (Debian's says 1; its ``python3.11`` is static)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    linked = "shared libpython" if "/libpython3" in maps else "libpython linked in"
    return f"Python {platform.python_version()} ({os.path.realpath(sys.executable)}, {linked})"


def dump_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


# -- a comparable memory state ---------------------------------------------------------

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def settle_page_cache(inputs: Sequence[Path]) -> bool:
    """Start a repetition from the same memory state: write back, drop the clean page
    cache (root only; False otherwise) and read ``inputs`` (the workload files the timed
    phases read) back in. Without it, whatever earlier runs or other work left cached
    decides how much reclaim each new page costs, and that differs phase by phase: a 2 GiB
    registry ingest took 6 s with free memory and 11 s with the page cache full."""
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
        dropped = True
    except OSError:
        dropped = False
    for root in inputs:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            read_through(path)
    return dropped


def read_through(path: Path) -> None:
    """Read ``path`` once, untimed, so the next reader finds it in the page cache.

    Before verify and openssl: the bundle was written by collect a few phases earlier
    and part of it has been written back and reclaimed since, so whichever of the two ran
    first re-read that part from disk (airgap first: 2.36, 1.74, 1.38 s; after openssl:
    1.09, 1.13 s, in one run)."""
    buffer = bytearray(1 << 20)
    with path.open("rb", buffering=0) as handle:
        while handle.readinto(buffer):
            pass


def recycle_pages(directory: Path, size: int) -> None:
    """Write ``size`` bytes to a scratch file and delete it, right before a measured
    command that writes about as much new data.

    This VM reports free memory to its host (virtio-balloon free page reporting): a page
    that stays free for a few seconds is handed back, and touching it again costs a host
    fault. Pages freed a moment ago are reused first and are cheap. Without this, a
    registry ingesting 2 GiB spent 9 CPU-s when it ran first after a settle and 15 CPU-s
    when it ran third, so whichever tool went later lost; now every measured writer starts
    with the same supply of just-freed pages."""
    scratch = directory / "recycle-pages.bin"
    zeros = bytes(1 << 20)
    with scratch.open("wb", buffering=0) as handle:
        for _ in range(-(-size // len(zeros))):
            handle.write(zeros)
    scratch.unlink()
