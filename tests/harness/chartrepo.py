"""A classic Helm chart repository on loopback: optional TLS and HTTP basic auth.

A real ``ThreadingHTTPServer`` serves files by path (``index.yaml``, packages, their
``.prov``), as ChartMuseum, Harbor or an nginx with ``auth_basic`` would: with
``credentials`` every request without the right ``Authorization: Basic`` gets 401 and a
``WWW-Authenticate: Basic`` challenge. Every request is recorded with the
``Authorization`` it carried, so tests can prove where credentials went.
"""

from __future__ import annotations

import base64
import gzip
import hmac
import io
import socket
import ssl
import tarfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["ChartRepository", "ChartRequest", "other_loopback_host", "package"]


@dataclass(frozen=True)
class ChartRequest:
    path: str
    authorization: str | None
    status: int


class ChartRepository:
    """Files by path under one loopback origin; ``url`` ends with ``/``."""

    def __init__(
        self,
        *,
        tls: tuple[Path, Path] | None = None,
        credentials: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._tls = tls
        self._expected = (
            "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
            if credentials
            else None
        )
        self._host = host
        self._files: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._requests: list[ChartRequest] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> ChartRepository:
        owner = self

        class Handler(_Handler):
            repository = owner

        server = ThreadingHTTPServer((self._host, 0), Handler)
        if self._tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        scheme = "https" if self._tls else "http"
        self.url = f"{scheme}://{self._host}:{server.server_address[1]}/"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def add(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``/path``; returns its absolute URL."""
        with self._lock:
            self._files[path.lstrip("/")] = data
        return self.url + path.lstrip("/")

    @property
    def requests(self) -> list[ChartRequest]:
        with self._lock:
            return list(self._requests)

    def _answer(self, path: str, authorization: str | None) -> tuple[int, bytes]:
        if self._expected is not None and not (
            authorization is not None
            and hmac.compare_digest(authorization.encode(), self._expected.encode())
        ):
            status, data = 401, b"401 Unauthorized\n"
        else:
            with self._lock:
                found = self._files.get(path.lstrip("/"))
            status, data = (200, found) if found is not None else (404, b"404 Not Found\n")
        with self._lock:
            self._requests.append(ChartRequest(path, authorization, status))
        return status, data


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    repository: ChartRepository

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        status, data = self.repository._answer(path, self.headers.get("Authorization"))
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="charts"')
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def other_loopback_host() -> str:
    """127.0.0.2 where it can be bound (Linux routes all of 127/8 to loopback): another
    host, not just another port, for "credentials go to their origin only" tests."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        return "127.0.0.1"


def package(top: str, files: dict[str, str | bytes]) -> bytes:
    """A chart package as ``helm package`` lays it out (members under NAME/)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)
