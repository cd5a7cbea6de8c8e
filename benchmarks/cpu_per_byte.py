"""CPU seconds per GiB of airgap's blob transfer paths, load-independent.

    .venv/bin/python benchmarks/cpu_per_byte.py [--size-mib 1024] [--repeats 2]
        [--modes plain,tls] [--directions push,pull] [--airgap-path DIR]

On a machine shared with other work, wall clock says little; the CPU time of the
process (``getrusage``: user and system) spent moving one blob says what a byte costs.
For each mode (plain HTTP, TLS) it starts a loopback ``docker-registry`` from the test
harness and measures, in this process:

- push: ``Registry.upload_blob`` of one member of a ``VerifiedBundle`` over a file of
  random bytes (hashed while streamed, the last chunk held back: import's path);
- pull: ``Registry.download_blob`` of the same blob into a file (collect's path; the
  blob is put there first with curl, unmeasured).

It also prints the registry's CPU for the same transfer (``/proc/PID/stat``).
``--airgap-path DIR`` measures another airgap (e.g. ``git archive REV airgap | tar -x
-C DIR``) for before/after comparisons. The blob file is read from the page cache
after the first repetition, as in the benchmark.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MIB = 1 << 20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_blob(path: Path, size: int) -> str:
    """``size`` random bytes at ``path``; their sha256 digest."""
    hasher = hashlib.sha256()
    with path.open("wb") as handle:
        remaining = size
        while remaining:
            data = os.urandom(min(MIB, remaining))
            hasher.update(data)
            handle.write(data)
            remaining -= len(data)
    return "sha256:" + hasher.hexdigest()


def _seed(server: Any, blob: Path, digest: str, ca: list[str]) -> None:
    """Put the blob in the registry with curl (not measured), for the pull case."""
    url = f"{server.url}/v2/bench/x/blobs/uploads/"
    head = subprocess.run(
        ["curl", "-sS", "-f", *ca, "-X", "POST", "-o", "/dev/null", "-D", "-", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    location = next(
        line.split(":", 1)[1].strip()
        for line in head.splitlines()
        if line.lower().startswith("location:")
    )
    if location.startswith("/"):
        location = server.url + location
    location += ("&" if "?" in location else "?") + f"digest={digest}"
    subprocess.run(
        ["curl", "-sS", "-f", *ca, "-X", "PUT", "-T", str(blob), location],
        check=True,
        stdout=subprocess.DEVNULL,
    )


class _FileSink:
    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._position = 0

    def seek(self, position: int, whence: int = 0, /) -> int:
        self._position = 0
        return 0

    def truncate(self, size: int | None = None, /) -> int:
        return self._position

    def write(self, data: bytes, /) -> int:
        os.pwrite(self._fd, data, self._position)
        self._position += len(data)
        return len(data)


def measure(mode: str, directions: list[str], blob: Path, digest: str, repeats: int) -> None:
    from airgap.bundle.source import open_source
    from airgap.net import httpclient
    from airgap.registry.client import Registry
    from airgap.verify.bundle import VerifiedBundle
    from airgap.verify.scanresult import Member
    from tests.harness.pki import make_pki
    from tests.harness.registry import RegistryMode, RegistryServer

    size = blob.stat().st_size
    work = Path(tempfile.mkdtemp(prefix="cpu-per-byte-", dir=blob.parent))
    pki = make_pki(work / "pki") if mode == "tls" else None
    server = RegistryServer(work / "registry", RegistryMode(mode), pki=pki)
    try:
        assert server._process is not None
        pid = server._process.pid
        verify = httpclient.ssl_context(str(pki.ca_cert)) if pki else True
        # the transport RegistryPool gives registries (an airgap before it had none)
        fast: dict[str, Any] = (
            {"fast": True}
            if "fast" in inspect.signature(httpclient.build_client).parameters
            else {}
        )
        client = httpclient.build_client(verify=verify, **fast)
        registry = Registry(server.host, client=client, plain_http=mode == "plain")
        registry.ping()
        source = open_source(blob)
        member = Member("blob", 0, size, digest.removeprefix("sha256:"))
        bundle = VerifiedBundle(source=source, manifest=None, signer=None, members={"blob": member})
        # the upload body: ``body`` (sendfile) today, ``stream`` (hashed chunks) before it
        member_body = getattr(bundle, "body", None) or getattr(bundle, "stream")  # noqa: B009
        out_fd = os.open(work / "download.bin", os.O_RDWR | os.O_CREAT, 0o600)
        steps: dict[str, Callable[[int], None]] = {
            "push": lambda rep: registry.upload_blob(
                f"bench/push{rep}", digest, size, partial(member_body, "blob"), what="blob"
            ),
            "pull": lambda rep: registry.download_blob(
                "bench/x", digest, size, _FileSink(out_fd), what="blob"
            ),
        }
        if "pull" in directions:
            _seed(server, blob, digest, ["--cacert", str(pki.ca_cert)] if pki else [])
        for rep in range(repeats):
            for direction in directions:
                cpu, server_cpu, started = _cpu(), _server_cpu(pid), time.monotonic()
                steps[direction](rep)
                wall = time.monotonic() - started
                cpu, server_cpu = _cpu() - cpu, _server_cpu(pid) - server_cpu
                gib = size / GIB
                print(
                    f"{direction} {mode}: airgap {cpu / gib:.2f} CPU-s/GiB, registry "
                    f"{server_cpu / gib:.2f} CPU-s/GiB, wall {wall:.2f} s",
                    flush=True,
                )
        os.close(out_fd)
        source.close()
        client.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="plain,tls")
    parser.add_argument("--directions", default="push,pull")
    parser.add_argument("--airgap-path", type=Path, help="an airgap tree to measure instead")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.airgap_path:
        sys.path.insert(0, str(args.airgap_path.resolve()))
    import airgap

    print(f"airgap from {Path(airgap.__file__).parent}", flush=True)
    with tempfile.TemporaryDirectory(prefix="cpu-per-byte-") as scratch:
        blob = Path(scratch) / "blob.bin"
        digest = make_blob(blob, args.size_mib * MIB)
        for mode in args.modes.split(","):
            measure(mode, args.directions.split(","), blob, digest, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
