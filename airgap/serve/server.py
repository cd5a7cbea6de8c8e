"""The HTTP side of ``airgap serve``: the read-only half of the OCI distribution API.

Built on the standard library's ``http.server`` (``ThreadingHTTPServer``: a thread per
connection, HTTP/1.1 keep-alive), which already bounds request lines and headers; this
module adds the routes, a cap on concurrent connections, an idle timeout per read, a
deadline for each request's head (``HeadDeadlines``: a client trickling a byte a minute
would otherwise keep its connection slot for ever), TLS with the handshake on the
connection's own thread, and the distribution error format
(``{"errors": [{"code": "MANIFEST_UNKNOWN", ...}]}``).

Manifests are answered from memory, as the bytes verification hashed. Blob bytes go
from the tar, or its parts, to the socket with ``sendfile`` on plain HTTP: the kernel
copies them and Python never sees them; over TLS they are read by offset and sent in
large chunks. Every blob was hashed before the server started listening (``airgap
serve`` verifies the whole bundle first), and every client checks the digest of what it
pulls, as it does with any registry.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from airgap import __version__
from airgap.bundle.source import BundleSource
from airgap.core.fsutil import FileAt
from airgap.core.limits import env_seconds
from airgap.core.names import digest_problem
from airgap.oci.manifest import OCI_INDEX
from airgap.serve.catalog import EMPTY_REFERRERS, AmbiguousName, Catalog, Repository
from airgap.serve.ranges import Unsatisfiable, parse_range

MAX_CONNECTIONS = 128  # connections served at once; more wait in the listen queue
# connections one client address may hold at once: a node pulls over a handful, and one
# host that opens many and reads them slowly must leave the other slots to the others
MAX_CONNECTIONS_PER_CLIENT = 32
IDLE_TIMEOUT = 60.0  # seconds a connection may sit without sending or taking a byte
HEAD_TIMEOUT_ENV = "AIRGAP_SERVE_HEAD_TIMEOUT"
# seconds from a connection's start (its TLS handshake included), or from the end of its
# last request, until the next request line and headers are in, as Go's
# ReadHeaderTimeout: a waiting keep-alive connection is closed then, and clients reconnect
DEFAULT_HEAD_TIMEOUT = 30.0
TLS_CHUNK = 256 << 10
_ROUTES = ("manifests", "blobs", "tags", "referrers")
_ALLOWED = "GET, HEAD"


class HeadDeadlines:
    """Connections whose request head is being read, each with the time it is due by.

    One thread per server checks them twice a second and shuts down the late ones (the
    blocked read on the connection's own thread then ends), so a deadline costs a dict
    entry per request, not a thread or a timer."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._due: dict[int, tuple[float, socket.socket]] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="serve-head-deadlines", daemon=True).start()

    def start(self, key: int, connection: socket.socket) -> None:
        """From now (unless already started: a TLS handshake's deadline runs on)."""
        with self._lock:
            self._due.setdefault(key, (time.monotonic() + self.seconds, connection))

    def done(self, key: int) -> None:
        with self._lock:
            self._due.pop(key, None)

    def close(self) -> None:
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(0.5):
            now = time.monotonic()
            with self._lock:
                late = [key for key, (due, _) in self._due.items() if due <= now]
                connections = [self._due.pop(key)[1] for key in late]
            for connection in connections:
                with contextlib.suppress(OSError):  # already gone
                    connection.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True)
class Content:
    """What requests are answered from."""

    catalog: Catalog
    source: BundleSource
    blobs: dict[str, tuple[int, int]]  # digest -> (offset in the bundle, size)


class RegistryServer(ThreadingHTTPServer):
    """A threading HTTP server for one bundle; ``tls`` wraps its listening socket."""

    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        content: Content,
        *,
        tls: ssl.SSLContext | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # before binding: a bind that fails calls server_close, which stops the watcher
        self.head_deadlines = HeadDeadlines(
            env_seconds(os.environ, HEAD_TIMEOUT_ENV, DEFAULT_HEAD_TIMEOUT)
        )
        super().__init__(address, RegistryHandler)
        self.content = content
        self.log = log
        self.tls = tls is not None
        if tls is not None:  # the handshake happens on the connection's thread, not here
            self.socket = tls.wrap_socket(
                self.socket, server_side=True, do_handshake_on_connect=False
            )
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stopping = threading.Event()
        self._per_client: dict[str, int] = {}
        self._per_client_lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"{'https' if self.tls else 'http'}://{shown}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0])
        with self._per_client_lock:
            held = self._per_client.get(client, 0)
            refused = held >= MAX_CONNECTIONS_PER_CLIENT
            if not refused:
                self._per_client[client] = held + 1
        if refused:  # closed unread: the client's own connections are all busy
            if self.log is not None:
                self.log(f"{client} refused: {MAX_CONNECTIONS_PER_CLIENT} connections held")
            self.shutdown_request(request)
            return
        if not self._take_slot():  # stopping while every slot is held
            self.shutdown_request(request)
            self._left(client)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread was started: nothing else gives the slot back
            self._slots.release()
            self._left(client)
            raise

    def _take_slot(self) -> bool:
        """A connection slot; at the cap, accepting waits for a connection to end, or
        gives up (False) once the server is asked to stop."""
        while not self._slots.acquire(timeout=0.5):
            if self._stopping.is_set():
                return False
        return True

    def shutdown(self) -> None:
        """Stop the serving loop (from another thread), a wait for a slot included."""
        self._stopping.set()
        super().shutdown()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
            self._left(str(client_address[0]))

    def _left(self, client: str) -> None:
        with self._per_client_lock:
            held = self._per_client.get(client, 1) - 1
            if held > 0:
                self._per_client[client] = held
            else:
                self._per_client.pop(client, None)

    def server_close(self) -> None:
        self.head_deadlines.close()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or spoke garbage costs its connection, no traceback."""
        if self.log is not None:
            self.log(f"{client_address[0]} connection ended: {_current_error()}")


def _current_error() -> str:
    import sys

    error = sys.exc_info()[1]
    return f"{type(error).__name__}: {error}" if error else "unknown error"


class RegistryHandler(BaseHTTPRequestHandler):
    """The routes: ``/v2/``, ``/v2/_catalog``, ``/v2/NAME/tags/list``,
    ``/v2/NAME/manifests/REFERENCE``, ``/v2/NAME/blobs/DIGEST`` and
    ``/v2/NAME/referrers/DIGEST`` (GET and HEAD); every write method is
    ``405 UNSUPPORTED``."""

    protocol_version = "HTTP/1.1"
    server_version = f"airgap/{__version__}"
    sys_version = ""
    timeout = IDLE_TIMEOUT
    server: RegistryServer

    def setup(self) -> None:
        super().setup()
        self.server.head_deadlines.start(id(self), self.connection)
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def handle_one_request(self) -> None:
        self.server.head_deadlines.start(id(self), self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.head_deadlines.done(id(self))  # a request that never parsed

    def parse_request(self) -> bool:
        try:
            return super().parse_request()
        finally:  # the head is in (or refused): the body and the answer take their time
            self.server.head_deadlines.done(id(self))

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_POST(self) -> None:
        self._read_only()

    def do_PUT(self) -> None:
        self._read_only()

    def do_PATCH(self) -> None:
        self._read_only()

    def do_DELETE(self) -> None:
        self._read_only()

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log is not None:
            self.server.log(f"{self.client_address[0]} {format % args}")

    # -- routing -------------------------------------------------------------------------

    def _route(self, *, head: bool) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        path = url.path
        if path in ("/v2", "/v2/"):
            self._json(200, {}, head)
            return
        if path == "/v2/_catalog":
            self._listing(
                "/v2/_catalog", "repositories", {}, self.server.content.catalog.names(), query, head
            )
            return
        name, kind, reference = _split(path)
        if name is None:
            self._error(404, "UNSUPPORTED", "no such endpoint", head)
            return
        try:
            repository = self.server.content.catalog.repository(name, _first(query, "ns"))
        except AmbiguousName as exc:
            message = f"{name} is in several source registries: name one of {exc.choices}"
            self._error(404, "NAME_UNKNOWN", message, head, {"name": name})
            return
        if repository is None:
            self._error(
                404, "NAME_UNKNOWN", "repository name not known to registry", head, {"name": name}
            )
        elif kind == "manifests":
            self._manifest(repository, reference, head)
        elif kind == "blobs":
            self._blob(repository, reference, head)
        elif kind == "referrers":
            self._referrers(repository, reference, head)
        elif reference == "list":
            tags = sorted(repository.tags)
            self._listing(f"/v2/{name}/tags/list", "tags", {"name": name}, tags, query, head)
        else:
            self._error(404, "UNSUPPORTED", "no such endpoint", head)

    def _read_only(self) -> None:
        self.close_connection = True  # its body is not read: the connection cannot go on
        body = _errors("UNSUPPORTED", "airgap serve is read-only: push to a registry instead")
        self._reply(
            405, body, "application/json", False, {"Allow": _ALLOWED, "Connection": "close"}
        )

    # -- answers -------------------------------------------------------------------------

    def _manifest(self, repository: Repository, reference: str, head: bool) -> None:
        digest = reference if reference.startswith("sha256:") else repository.tags.get(reference)
        stored = self.server.content.catalog.manifests.get(digest or "")
        if digest is None or stored is None or digest not in repository.manifests:
            self._error(
                404,
                "MANIFEST_UNKNOWN",
                "manifest unknown",
                head,
                {"tag" if digest is None else "digest": reference},
            )
            return
        headers = {"Docker-Content-Digest": stored.digest, "ETag": f'"{stored.digest}"'}
        self._reply(200, stored.data, stored.media_type, head, headers)

    def _referrers(self, repository: Repository, digest: str, head: bool) -> None:
        """The referrers API (distribution spec 1.1): the listing the referrers tag holds,
        or an empty index for a digest nothing refers to."""
        if digest_problem(digest):
            self._error(400, "DIGEST_INVALID", "invalid digest", head, {"digest": digest})
            return
        listing = repository.referrers.get(digest)
        stored = self.server.content.catalog.manifests.get(listing or "")
        data = stored.data if stored is not None else EMPTY_REFERRERS
        self._reply(200, data, OCI_INDEX, head, {})

    def _blob(self, repository: Repository, digest: str, head: bool) -> None:
        content = self.server.content
        where = content.blobs.get(digest)
        if where is None or (digest not in repository.blobs and digest not in repository.manifests):
            self._error(404, "BLOB_UNKNOWN", "blob unknown to registry", head, {"digest": digest})
            return
        offset, size = where
        headers = {"Docker-Content-Digest": digest, "Accept-Ranges": "bytes", "ETag": f'"{digest}"'}
        try:
            wanted = parse_range(self.headers.get("Range"), size)
        except Unsatisfiable:
            headers["Content-Range"] = f"bytes */{size}"
            self._error(
                416,
                "BLOB_UNKNOWN",
                "requested range not satisfiable",
                head,
                {"digest": digest},
                headers,
            )
            return
        status, first, length = 200, 0, size
        if wanted is not None:
            status, first, length = 206, wanted[0], wanted[1] - wanted[0] + 1
            headers["Content-Range"] = f"bytes {wanted[0]}-{wanted[1]}/{size}"
        self._head(status, "application/octet-stream", length, headers)
        if not head:
            self._send_bundle_bytes(offset + first, length)

    def _listing(
        self,
        base: str,
        key: str,
        extra: dict[str, str],
        items: list[str],
        query: dict[str, list[str]],
        head: bool,
    ) -> None:
        """A paginated list (``n``, ``last``, a ``Link`` to the next page)."""
        last = _first(query, "last")
        if last is not None:
            items = [item for item in items if item > last]
        headers: dict[str, str] = {}
        number = _first(query, "n")
        # ASCII digits, int()-safe: a client's n=9…9 (5,000 digits) ended its connection
        if number is not None and number.isascii() and number.isdigit() and len(number) <= 9:
            count = int(number)
            if count < len(items) and count > 0:
                link = f"{base}?n={count}&last={quote(items[count - 1], safe='')}"
                headers["Link"] = f'<{link}>; rel="next"'
            items = items[:count]
        self._json(200, {**extra, key: items}, head, headers)

    # -- writing -------------------------------------------------------------------------

    def _json(
        self, status: int, document: object, head: bool, headers: dict[str, str] | None = None
    ) -> None:
        self._reply(status, json.dumps(document).encode(), "application/json", head, headers)

    def _error(
        self,
        status: int,
        code: str,
        message: str,
        head: bool,
        detail: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._reply(status, _errors(code, message, detail), "application/json", head, headers)

    def _reply(
        self,
        status: int,
        body: bytes,
        media_type: str,
        head: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._head(status, media_type, len(body), headers)
        if not head:
            self.wfile.write(body)

    def _head(
        self, status: int, media_type: str, length: int, headers: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def _send_bundle_bytes(self, offset: int, length: int) -> None:
        """``length`` bytes of the bundle from ``offset``: zero-copy on plain sockets."""
        source = self.server.content.source
        sent = 0
        for fd, position, count in source.spans(offset, length):
            if isinstance(self.connection, ssl.SSLSocket):
                sent += _send_buffered(self.connection, fd, position, count)
            else:
                sent += self.connection.sendfile(FileAt(fd), position, count)
        if sent != length:  # the file shrank under us: the client must not wait for more
            self.close_connection = True


def _send_buffered(connection: ssl.SSLSocket, fd: int, offset: int, count: int) -> int:
    sent = 0
    while sent < count:
        chunk = os.pread(fd, min(TLS_CHUNK, count - sent), offset + sent)
        if not chunk:
            break
        connection.sendall(chunk)
        sent += len(chunk)
    return sent


def _errors(code: str, message: str, detail: dict[str, str] | None = None) -> bytes:
    return json.dumps(
        {"errors": [{"code": code, "message": message, "detail": detail or {}}]}
    ).encode()


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _split(path: str) -> tuple[str | None, str, str]:
    """``/v2/NAME/KIND/REFERENCE`` -> ``(NAME, KIND, REFERENCE)``; NAME None otherwise."""
    if not path.startswith("/v2/"):
        return None, "", ""
    head, _, reference = path[4:].rpartition("/")
    name, _, kind = head.rpartition("/")
    if not name or kind not in _ROUTES or not reference:
        return None, "", ""
    return name, kind, reference
