"""Hostile inputs for the hostile-input suite: crafted tar headers, a programmable
loopback HTTP server that misbehaves on purpose, and a CLI runner that measures.

The server speaks HTTP/1.1 over a real socket but lets a test decide every byte of an
answer: endless bodies, one byte a second, missing headers, redirect loops, a
registry that says 201 and stores nothing. ``run_measured`` runs the real ``airgap``
entry point in a subprocess with a timeout and reports its peak RSS (sampled VmHWM), so
a test can check time and memory stay bounded without timing anything itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tests.harness.cli import AIRGAP

BLOCK = tarfile.BLOCKSIZE

# -- running the CLI ---------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    max_rss_mib: float

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def start_airgap(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``airgap ARGS``; stdout and stderr go to files in a fresh directory."""
    # logs live outside any directory a test inspects for leftovers
    logs = Path(tempfile.mkdtemp(prefix="airgap-run-"))
    stdout = (logs / "stdout").open("wb")
    stderr = (logs / "stderr").open("wb")
    process = subprocess.Popen(
        [*AIRGAP, *map(str, args)],
        env={**os.environ, **(env or {})},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
    )
    stdout.close()
    stderr.close()
    return process, logs


def wait_measured(process: subprocess.Popen[bytes], logs: Path, timeout: float) -> Outcome:
    """Wait for ``process`` (killed after ``timeout``) while sampling its peak RSS.

    The peak is the kernel's VmHWM of the process's own address space, read every few
    milliseconds: ``wait4``'s ru_maxrss would include the test process's own RSS,
    which a child inherits at fork and keeps across exec."""
    deadline = time.monotonic() + timeout
    peak_kib = 0
    status_file = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        peak_kib = max(peak_kib, _hwm_kib(status_file))
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError(f"airgap did not finish within {timeout} s: {_read(logs)}")
        time.sleep(0.005)
    stdout = (logs / "stdout").read_text(errors="replace")
    stderr = (logs / "stderr").read_text(errors="replace")
    shutil.rmtree(logs, ignore_errors=True)
    return Outcome(process.returncode, stdout, stderr, peak_kib / 1024)


def _hwm_kib(status_file: Path) -> int:
    """VmHWM of a running process in KiB (0 once it is gone)."""
    try:
        for line in status_file.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _read(logs: Path) -> str:
    return (logs / "stderr").read_text(errors="replace")[-2000:]


def run_measured(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> Outcome:
    process, logs = start_airgap(*args, env=env, cwd=cwd)
    return wait_measured(process, logs, timeout)


def assert_one_line(outcome: Outcome, codes: Iterable[int], *needles: str) -> str:
    """Exit code in ``codes``, exactly one line on stderr, no traceback, the needles in
    that line."""
    assert outcome.returncode in tuple(codes), (outcome.returncode, outcome.stderr[-3000:])
    assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    assert len(outcome.lines) == 1, outcome.stderr[-3000:]
    line = outcome.lines[0]
    assert outcome.stderr == line + "\n", repr(outcome.stderr[-3000:])  # no blank line either
    assert line.startswith("airgap: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    if os.environ.get("HOSTILE_SHOW"):
        print(f"\n{outcome.returncode} {outcome.max_rss_mib:.0f}MiB {line}")
    return line


def send_signal_when(
    process: subprocess.Popen[bytes], ready: Callable[[], bool], number: int, timeout: float
) -> None:
    """Send signal ``number`` to ``process`` once ``ready()`` holds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, "airgap ended before it was interrupted"
        assert time.monotonic() < deadline, "the interruption point was never reached"
        time.sleep(0.02)
    os.kill(process.pid, number)


# -- crafting tar headers ----------------------------------------------------------------


def _checksummed(header: bytearray) -> bytes:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def raw_header(
    name: bytes,
    *,
    size: int = 0,
    kind: bytes = b"0",
    size_field: bytes | None = None,
) -> bytes:
    """A POSIX ustar header block; ``size_field`` overrides the 12-byte size field
    byte for byte (e.g. GNU base-256 with its sign bit set)."""
    header = bytearray(BLOCK)
    header[0 : len(name)] = name
    header[100:108] = b"0000644\0"
    header[108:116] = b"0000000\0"
    header[116:124] = b"0000000\0"
    header[124:136] = size_field if size_field is not None else b"%011o\0" % size
    header[136:148] = b"%011o\0" % 1_700_000_000
    header[156:157] = kind
    header[257:265] = b"ustar\x0000"
    return _checksummed(header)


def pax_record(key: str, value: str) -> bytes:
    """One ``LENGTH key=value\\n`` record with its length computed."""
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % BLOCK)


def pax_member(records: bytes, name: bytes, data: bytes) -> bytes:
    """A PAX extended header carrying ``records``, then a regular member."""
    return (
        raw_header(b"././@PaxHeader", size=len(records), kind=b"x")
        + padded(records)
        + raw_header(name, size=len(data))
        + padded(data)
    )


END = b"\0" * (2 * BLOCK)


# -- a programmable HTTP server ------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""


class Wire:
    """One client connection, for a handler to answer as it likes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.keep_alive = True

    def send(
        self,
        status: int,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        reason: str = "X",
        length: bool = True,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {reason}"]
        merged = dict(headers or {})
        if length:
            merged.setdefault("Content-Length", str(len(body)))
        lines.extend(f"{name}: {value}" for name, value in merged.items())
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def endless(self, status: int, headers: dict[str, str] | None = None) -> None:
        """Headers, then body bytes for as long as the client reads (no length)."""
        self.keep_alive = False
        self.send(status, {**(headers or {}), "Connection": "close"}, length=False)
        chunk = b"[" * 65536
        with contextlib.suppress(OSError):
            while True:
                self.sock.sendall(chunk)

    def trickle(self, data: bytes, interval: float = 1.0) -> None:
        """``data`` one byte every ``interval`` seconds."""
        self.keep_alive = False
        with contextlib.suppress(OSError):
            for byte in data:
                self.sock.sendall(bytes([byte]))
                time.sleep(interval)


Handler = Callable[[Request, Wire], None]


class HostileServer:
    """A loopback HTTP/1.1 server whose every answer comes from ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                connection.close()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(connection)
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, connection: socket.socket) -> None:
        wire = Wire(connection)
        reader = connection.makefile("rb")
        with contextlib.suppress(OSError, ValueError):
            while wire.keep_alive and not self._stopped.is_set():
                request = _read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                self.handler(request, wire)
        with contextlib.suppress(OSError):
            connection.close()


def _read_request(reader: object) -> Request | None:
    read_line = reader.readline  # type: ignore[attr-defined]
    line = read_line(65536)
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = read_line(65536)
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = b""
    length = int(headers.get("content-length", "0") or 0)
    if length:
        body = reader.read(length)  # type: ignore[attr-defined]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = _read_chunked(reader)
    parts = urlsplit(target)
    return Request(method, parts.path, parts.query, headers, body)


def _read_chunked(reader: object) -> bytes:
    chunks: list[bytes] = []
    while True:
        size = int(reader.readline().split(b";")[0], 16)  # type: ignore[attr-defined]
        if size == 0:
            reader.readline()  # type: ignore[attr-defined]
            return b"".join(chunks)
        chunks.append(reader.read(size))  # type: ignore[attr-defined]
        reader.readline()  # type: ignore[attr-defined]


@contextlib.contextmanager
def hostile_server(handler: Handler) -> Iterator[HostileServer]:
    server = HostileServer(handler)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class LiarRegistry:
    """A registry that accepts every push (201/202, digests echoed) and stores nothing:
    every HEAD and GET says 404. Variants break one answer on purpose."""

    upload_location: bool = True
    chunk_min_length: str | None = None
    token_reply: bytes | None = None  # set: bearer auth whose token service answers this
    host: str = ""  # set once the server runs, for the token realm
    seen: list[str] = field(default_factory=list)

    def __call__(self, request: Request, wire: Wire) -> None:
        self.seen.append(f"{request.method} {request.path}")
        path = request.path
        if self.token_reply is not None and path == "/token":
            wire.send(200, {"Content-Type": "application/json"}, self.token_reply)
        elif self.token_reply is not None and "authorization" not in request.headers:
            realm = f"http://{self.host}/token"
            wire.send(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="liar"'})
        elif path == "/v2/":
            wire.send(200, {"Docker-Distribution-API-Version": "registry/2.0"})
        elif request.method == "POST" and path.endswith("/blobs/uploads/"):
            headers = {"Docker-Upload-UUID": "u1"}
            if self.upload_location:
                headers["Location"] = path + "u1"
            if self.chunk_min_length is not None:
                headers["OCI-Chunk-Min-Length"] = self.chunk_min_length
            wire.send(202, headers)
        elif request.method in ("PUT", "PATCH") and "/blobs/uploads/" in path:
            wire.send(201 if request.method == "PUT" else 202, {"Location": path})
        elif request.method == "PUT" and "/manifests/" in path:
            wire.send(201, {})
        else:
            wire.send(404, {"Content-Type": "application/json"}, b'{"errors": []}')


def sparse_file(path: Path, head: bytes, size: int) -> Path:
    """``head`` followed by a hole up to ``size`` bytes: large to read, tiny on disk."""
    with path.open("wb") as out:
        out.write(head)
        out.truncate(size)
    return path


def struct_negative_base256(value: int) -> bytes:
    """A 12-byte GNU base-256 size field holding a negative number."""
    return b"\xff" + struct.pack(">q", value)[-11:].rjust(11, b"\xff")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class TinyRegistry:
    """A read-only registry serving one single-layer image ``NAME:TAG``; a test swaps
    in ``on_manifest``, ``on_layer`` or ``on_ping`` to misbehave at that step."""

    name: str = "hostile/app"
    tag: str = "v1"
    layer: bytes = b"layer bytes " * 100
    on_ping: Handler | None = None
    on_manifest: Handler | None = None
    on_layer: Handler | None = None
    config: bytes = b'{"architecture": "amd64", "os": "linux"}'

    @property
    def manifest(self) -> bytes:
        return json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": digest_of(self.config),
                    "size": len(self.config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": digest_of(self.layer),
                        "size": len(self.layer),
                    }
                ],
            }
        ).encode()

    def __call__(self, request: Request, wire: Wire) -> None:
        path = request.path
        if path == "/v2/":
            if self.on_ping:
                return self.on_ping(request, wire)
            return wire.send(200, {})
        if path == f"/v2/{self.name}/manifests/{self.tag}":
            if self.on_manifest:
                return self.on_manifest(request, wire)
            return wire.send(
                200,
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                self.manifest if request.method == "GET" else b"",
            )
        if path == f"/v2/{self.name}/blobs/{digest_of(self.config)}":
            return wire.send(200, {}, self.config)
        if path == f"/v2/{self.name}/blobs/{digest_of(self.layer)}":
            if self.on_layer:
                return self.on_layer(request, wire)
            return wire.send(200, {}, self.layer)
        return wire.send(404, {"Content-Type": "application/json"}, b'{"errors": []}')
