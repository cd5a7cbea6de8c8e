"""Progress that tells the truth (issue 14): byte counts that move while a blob is on the
wire (a pseudo-terminal watches the bar of an import slowed down by a throttling proxy),
binary units, periodic lines off a terminal, silence with --quiet, verification that
counts what it hashes, and a first Ctrl-C typed on the terminal that stops at once.

Real pieces only: distribution registries, the fault proxy throttling real traffic, the
CLI in a subprocess on a real pseudo-terminal (``pty``), a real bundle for the scan.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.signing import load_public_key
from airgap.core.progress import Progress
from airgap.importing.importer import run_import
from airgap.importing.model import ImportOptions
from airgap.rewrite.mapping import Target
from airgap.verify.bundle import verify_bundle
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import AIRGAP, collect_args, run_airgap
from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.images import OciLayout, make_big_image, push_image
from tests.harness.registry import RegistryFactory, RegistryServer

MIB = 1 << 20
# Larger than what the kernel buffers on a loopback connection (up to 4 MiB of send
# buffer take the first bytes of an upload at once): the rest shows the wire's pace.
LAYER = 12 * MIB
RATE = 6 * MIB  # bytes per second through the throttling proxy: a push of ~2 s


@dataclass(frozen=True)
class BigBundle:
    path: Path
    key: SigningKey
    reference: str


@pytest.fixture(scope="module")
def big_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    plain_registry: RegistryServer,
    signing_key: SigningKey,
) -> BigBundle:
    directory = tmp_path_factory.mktemp("progress")
    layout = OciLayout(directory / "layout")
    make_big_image(layout, "big", LAYER, seed=14)
    image = push_image(layout, "big", plain_registry, "progress/big", "v1")
    spec = write_spec(directory / "spec.yaml", {"images": [image.reference]})
    bundle = directory / "big.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert result.returncode == 0, result.stderr
    return BigBundle(bundle, signing_key, image.reference)


@pytest.fixture
def slow_target(
    registry_factory: RegistryFactory, fault_proxy_factory: FaultProxyFactory
) -> FaultProxy:
    proxy = fault_proxy_factory(registry_factory("plain"))
    proxy.rate = RATE
    return proxy


def _import_args(bundle: BigBundle, target: FaultProxy, prefix: str) -> list[str]:
    return [
        "import", str(bundle.path), "--key", str(bundle.key.public),
        "--registry", f"{target.host}/{prefix}",
    ]  # fmt: skip


# -- a pseudo-terminal --------------------------------------------------------------------


@dataclass
class Terminal:
    """airgap on a pseudo-terminal: everything it showed, with when it showed it."""

    code: int
    frames: list[tuple[float, str]]

    @property
    def text(self) -> str:
        return "".join(chunk for _, chunk in self.frames)


def run_on_terminal(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    when: Callable[[str], bool] | None = None,
    keys: bytes = b"",
    timeout: float = 60,
) -> Terminal:
    """Run airgap with a 120x40 pseudo-terminal as stdin, stdout and stderr (its
    controlling terminal); once ``when(output so far)`` holds, type ``keys``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child
        os.environ.update(env or {})
        os.execv(AIRGAP[0], [*AIRGAP, *args])  # noqa: S606 (our own interpreter, no shell)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    frames: list[tuple[float, str]] = []
    shown = ""
    typed = not keys
    deadline = time.monotonic() + timeout
    status = None
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(fd, 65536).decode(errors="replace")
                except OSError:
                    chunk = ""
                if not chunk:
                    break
                frames.append((time.monotonic(), chunk))
                shown += chunk
            if not typed and when is not None and when(shown):
                os.write(fd, keys)
                typed = True
    finally:
        while status is None:
            finished, status_word = os.waitpid(pid, os.WNOHANG)
            if finished:
                status = status_word
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            else:
                time.sleep(0.05)
        os.close(fd)
    return Terminal(os.waitstatus_to_exitcode(status), frames)


PUSHING = re.compile(r"pushing.*?(\d+\.\d)/(\d+\.\d) (KiB|MiB)")


@pytest.mark.e2e
def test_the_bar_moves_while_a_blob_is_on_the_wire(
    big_bundle: BigBundle, slow_target: FaultProxy
) -> None:
    shown = run_on_terminal(_import_args(big_bundle, slow_target, "tty"))
    assert shown.code == 0, shown.text
    counts = [
        (float(done), float(total))
        for _, chunk in shown.frames
        for done, total, unit in PUSHING.findall(chunk)
        if unit == "MiB"
    ]
    assert counts, shown.text[-2000:]
    total = counts[-1][1]
    assert total >= LAYER / MIB
    # bytes counted while the one big layer is still going up: not 0, not all of it
    assert any(0 < done < total for done, _ in counts), counts
    assert len({done for done, _ in counts}) >= 3, counts  # it moved, more than once
    summary = shown.text.rfind("imported 1 image ")
    first_partial = min(
        shown.text.find(f"{done}/{total_:.1f} MiB")
        for done, total_ in ((f"{d:.1f}", t) for d, t in counts if 0 < d < t)
    )
    assert 0 <= first_partial < summary  # before the end, not after it
    # binary units in the bar and the summary, never rich's decimal ones
    assert "MiB/s" in shown.text or "KiB/s" in shown.text
    assert not re.search(r"\d (kB|MB|GB)\b", shown.text)
    assert re.search(r"\(\d+\.\d MiB\)", shown.text)  # the summary line


@pytest.mark.e2e
def test_off_a_terminal_a_line_every_few_seconds_and_quiet_is_quiet(
    big_bundle: BigBundle, slow_target: FaultProxy
) -> None:
    env = {"AIRGAP_PROGRESS_INTERVAL": "0.3"}
    result = run_airgap(*_import_args(big_bundle, slow_target, "lines"), env=env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("airgap: pushing")]
    assert lines, result.stderr
    line = re.compile(
        r"^airgap: pushing (\d+(\.\d)? (B|KiB|MiB)) of (\d+\.\d MiB) \((\d+)%\), "
        r"\d+(\.\d)? (B|KiB|MiB)/s(, about \d+ s left)?$"
    )
    assert all(line.match(text) for text in lines), lines
    assert any(0 < int(line.match(text).group(5)) < 100 for text in lines), lines  # type: ignore[union-attr]
    assert len(result.stderr.splitlines()) == len(lines)  # nothing else on stderr
    quiet = run_airgap(*_import_args(big_bundle, slow_target, "quiet"), "--quiet", env=env)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


@pytest.mark.e2e
def test_a_fast_command_prints_no_progress_line(big_bundle: BigBundle) -> None:
    # the default interval is 5 s (an empty setting is the default): a verify of a few
    # MiB says nothing on stderr
    result = run_airgap(
        "verify",
        big_bundle.path,
        "--key",
        big_bundle.key.public,
        env={"AIRGAP_PROGRESS_INTERVAL": ""},
    )
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.e2e
def test_verify_reports_progress_off_a_terminal_and_quiet_silences_it(
    big_bundle: BigBundle,
) -> None:
    # an interval shorter than the hashing: verify says how far it got, on stderr only
    env = {"AIRGAP_PROGRESS_INTERVAL": "0.001"}
    args = ("verify", big_bundle.path, "--key", big_bundle.key.public)
    loud = run_airgap(*args, env=env)
    assert loud.returncode == 0, loud.stderr
    assert any("verifying" in line or "hash" in line for line in loud.stderr.splitlines()), (
        loud.stderr
    )
    quiet = run_airgap(*args, "--quiet", env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout == loud.stdout


# -- verification counts what it hashes ---------------------------------------------------


class Recorder(Progress):
    """A real Progress (lines mode, never printing) that keeps what it was told."""

    def __init__(self) -> None:
        super().__init__(lines=True, interval=3600)
        self.tasks: dict[int, str] = {}
        self.totals: dict[int, int] = {}
        self.moved: dict[int, list[int]] = {}

    def task(self, description: str, total: int) -> int | None:
        handle = super().task(description, total)
        assert handle is not None
        self.tasks[handle], self.totals[handle], self.moved[handle] = description, total, []
        return handle

    def total(self, task: int | None, total: int) -> None:
        super().total(task, total)
        assert task is not None
        self.totals[task] = total

    def advance(self, task: int | None, amount: int) -> None:
        super().advance(task, amount)
        assert task is not None
        self.moved[task].append(amount)


@pytest.mark.e2e
def test_verify_and_the_imports_verification_count_every_byte_they_hash(
    big_bundle: BigBundle, registry_factory: RegistryFactory
) -> None:
    key = load_public_key(big_bundle.key.public)
    recorder = Recorder()
    with recorder:
        verified = verify_bundle(big_bundle.path, [key], progress=recorder)
    assert verified.manifest is not None and not verified.failures
    (handle,) = [h for h, name in recorder.tasks.items() if name == "verifying"]
    hashed = sum(record.size for record in verified.manifest.files)
    assert recorder.totals[handle] == hashed == sum(recorder.moved[handle])
    assert len(recorder.moved[handle]) >= LAYER // MIB  # per read, not per member
    verified.source.close()
    # import --reverify hashes everything first, and says so the same way; its push
    # counts the layer in pieces as it goes up
    target = registry_factory("plain")
    recorder = Recorder()
    options = ImportOptions(target=Target.parse(f"{target.host}/rec"), reverify=True)
    with recorder:
        run_import(big_bundle.path, [key], options, recorder)
    by_name = {name: handle for handle, name in recorder.tasks.items()}
    assert sum(recorder.moved[by_name["verifying"]]) == hashed
    pushed = recorder.moved[by_name["pushing"]]
    assert sum(pushed) == recorder.totals[by_name["pushing"]] >= LAYER
    assert len([amount for amount in pushed if 0 < amount < LAYER]) >= 2


@pytest.mark.unit
def test_status_lines_use_binary_units_and_say_what_is_left() -> None:
    progress = Progress(lines=True, interval=3600)
    handle = progress.task("pushing", 3 * 1024 * MIB)
    assert handle is not None
    progress.advance(handle, 1024 * MIB)
    started = progress._counters[handle].started
    line = progress.status_line(started + 10)
    assert line == "pushing 1.0 GiB of 3.0 GiB (33%), 102.4 MiB/s, about 20 s left"
    progress.finish(handle)
    assert progress.status_line(started + 11) is None


# -- Ctrl-C on the terminal -----------------------------------------------------------------


@pytest.mark.e2e
def test_a_first_ctrl_c_typed_on_the_terminal_stops_collect_and_import(
    tmp_path: Path,
    big_bundle: BigBundle,
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    slow_target: FaultProxy,
) -> None:
    slow_source = fault_proxy_factory(plain_registry)
    slow_source.rate = RATE / 4  # ~8 s for the layer: interrupted long before the end
    reference = big_bundle.reference.replace(plain_registry.host, slow_source.host, 1)
    spec = write_spec(tmp_path / "spec.yaml", {"images": [reference]})
    out = tmp_path / "out"
    out.mkdir()
    args = [str(arg) for arg in collect_args(spec, big_bundle.key.private, out / "b.tar")]

    def downloading(shown: str) -> bool:
        return bool(re.search(r"images.*?[1-9]\d*\.\d/", shown)) or bool(
            re.search(r"images.*?\d+\.\d/\d+\.\d MiB", shown) and len(list(out.iterdir())) == 2
        )

    shown = run_on_terminal(args, when=downloading, keys=b"\x03", timeout=60)
    assert shown.code == 130, shown.text[-2000:]
    assert "airgap: error: interrupted (SIGINT)" in shown.text
    assert list(out.iterdir()) == []  # no bundle, no temporary file, no staging directory
    slow_target.rate = RATE / 4
    pushing = run_on_terminal(
        _import_args(big_bundle, slow_target, "ctrlc"),
        when=lambda text: bool(re.search(r"pushing.*?[1-9]\d*\.\d/", text)),
        keys=b"\x03",
        timeout=60,
    )
    assert pushing.code == 130, pushing.text[-2000:]
    assert "interrupted (SIGINT)" in pushing.text


@pytest.mark.e2e
@pytest.mark.parametrize("value", ["5s", "-1", "0", "nan", "1e9"])
def test_a_malformed_progress_interval_is_a_usage_error(big_bundle: BigBundle, value: str) -> None:
    # a typo is named, as the pacing variables' are, not silently taken as 5 s; before
    # any work: nothing is verified or printed. --quiet reads no interval at all.
    args = ("verify", big_bundle.path, "--key", big_bundle.key.public)
    result = run_airgap(*args, env={"AIRGAP_PROGRESS_INTERVAL": value})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"airgap: error: AIRGAP_PROGRESS_INTERVAL={value!r}: "
        "expected a number of seconds above 0 and below 86400 (a day)\n"
    )
    quiet = run_airgap(*args, "--quiet", env={"AIRGAP_PROGRESS_INTERVAL": value})
    assert quiet.returncode == 0, quiet.stderr
