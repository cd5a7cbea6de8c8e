"""HTTP/1.1 reverse proxy in front of a registry with a programmable fault schedule.

Retry logic can only be trusted if it is tested against real failures: this proxy forwards
traffic to a real registry, byte for byte and streaming, except for requests matched by an
injected fault, which get a chosen status (e.g. 503 + ``Retry-After``) or a dropped
connection.  The client's ``Host`` header is preserved so the registry's ``Location``
headers (upload sessions) point back at the proxy and *every* hop of a flow can be faulted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

__all__ = ["Fault", "FaultProxy", "FaultProxyFactory", "ProxyRecord"]

CHUNK = 64 * 1024
# Hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded; framing is redone per hop.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


class ProxyRecord(NamedTuple):
    """``(method, path, status)``; status is an int or ``"reset"``. Path excludes the query."""

    method: str
    path: str
    status: int | str


@dataclass
class Fault:
    """One scheduled fault; ``remaining`` counts down to zero, then it is dropped."""

    method: str | None
    pattern: re.Pattern[str]
    status: int | None
    headers: dict[str, str]
    reset: bool
    remaining: int
    delay: float
    body: bytes | None
    after: int = 0  # matching requests to let through before the fault applies
    query: re.Pattern[str] | None = None  # also ``re.search`` on the query string
    strip_query: bool = False  # forward without the query (a server ignoring parameters)

    def matches(self, method: str, path: str, query: str = "") -> bool:
        """Method (case-insensitive, None = any) and ``re.search`` on the path (and on
        the query string, when the fault has a ``query`` pattern)."""
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self.query is not None and self.query.search(query) is None:
            return False
        return self.pattern.search(path) is not None


class FaultProxy:
    """Threaded reverse proxy on ``127.0.0.1:<ephemeral>`` in front of ``upstream_url``.

    ``url``/``host`` address the proxy; ``requests`` lists :class:`ProxyRecord` for every
    request seen (forwarded or faulted).  For an HTTPS upstream pass ``ca_file``; the proxy
    itself always speaks plain HTTP and sends ``X-Forwarded-Proto: http`` so the registry
    builds ``http://`` Location URLs.
    """

    def __init__(self, upstream_url: str, *, ca_file: Path | None = None) -> None:
        split = urlsplit(upstream_url)
        if split.scheme not in ("http", "https") or split.hostname is None:
            raise ValueError(f"bad upstream URL {upstream_url!r}")
        self.upstream_url = upstream_url.rstrip("/")
        self._upstream_scheme = split.scheme
        self._upstream_host = split.hostname
        self._upstream_port = split.port or (443 if split.scheme == "https" else 80)
        self._ssl_context: ssl.SSLContext | None = None
        if split.scheme == "https":
            self._ssl_context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        self.requests: list[ProxyRecord] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        # Client connections accepted so far: lets tests check keep-alive reuse.
        self.connections_accepted = 0
        # Bytes per second for request and response bodies together, over every
        # connection (None: as fast as it goes): a transfer that takes a while.
        self.rate: float | None = None
        self._next_slot = 0.0

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fault-proxy-{self.port}",
            daemon=True,
        )
        self._thread.start()

    def throttle(self, size: int) -> None:
        """Wait until ``size`` more body bytes fit under ``rate``."""
        rate = self.rate
        if not rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_slot)
            self._next_slot = start + size / rate
            wait = self._next_slot - now
        time.sleep(wait)

    # -- schedule -------------------------------------------------------------------------

    def inject(
        self,
        method: str | None,
        path_regex: str,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        reset: bool = False,
        times: int = 1,
        delay: float = 0.0,
        body: bytes | None = None,
        after: int = 0,
        query_regex: str | None = None,
        strip_query: bool = False,
    ) -> Fault:
        """Fault the next ``times`` requests whose method and path match.

        Exactly one of ``status`` (answer with it, plus ``headers``/``body``), ``reset``
        (close the socket without answering) or ``strip_query`` (forward the request
        without its query string, as to a server that ignores its parameters) must be
        given.  ``delay`` sleeps first.
        Faults are consulted in insertion order; the first match wins.
        """
        if [status is not None, reset, strip_query].count(True) != 1:
            raise ValueError("give exactly one of status=..., reset=True or strip_query=True")
        fault = Fault(
            method=method,
            pattern=re.compile(path_regex),
            status=status,
            headers=dict(headers or {}),
            reset=reset,
            remaining=times,
            delay=delay,
            body=body,
            after=after,
            query=re.compile(query_regex) if query_regex is not None else None,
            strip_query=strip_query,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Drop pending faults and the request log."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()

    @property
    def pending_faults(self) -> list[Fault]:
        """Faults not yet used up."""
        with self._lock:
            return list(self._faults)

    def _take_fault(self, method: str, path: str, query: str = "") -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path, query):
                    if fault.after > 0:  # let this many matching requests through first
                        fault.after -= 1
                        return None
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _record(self, method: str, path: str, status: int | str) -> int:
        """Log a request *before* its answer leaves, so clients never outrun the log."""
        with self._lock:
            self.requests.append(ProxyRecord(method, path, status))
            return len(self.requests) - 1

    def _amend(self, index: int, status: int | str) -> None:
        with self._lock:
            if index < len(self.requests):  # clear() may have run meanwhile
                self.requests[index] = self.requests[index]._replace(status=status)

    def _upstream(self) -> http.client.HTTPConnection:
        if self._ssl_context is not None:
            return http.client.HTTPSConnection(
                self._upstream_host, self._upstream_port, timeout=60, context=self._ssl_context
            )
        return http.client.HTTPConnection(self._upstream_host, self._upstream_port, timeout=60)

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop accepting, and shut down open client connections so nothing lingers."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FaultProxyFactory(Protocol):
    """Type of the ``fault_proxy_factory`` fixture (upstream: RegistryServer or URL)."""

    def __call__(self, upstream: Any, *, ca_file: Path | None = ...) -> FaultProxy: ...


def _make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: httpx reuses connections
        timeout = 120  # idle keep-alive connections eventually go away

        def setup(self) -> None:
            super().setup()
            with proxy._lock:
                proxy._connections.add(self.connection)
                proxy.connections_accepted += 1

        def finish(self) -> None:
            with proxy._lock:
                proxy._connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            """Silence the default stderr access log."""

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (ConnectionError, TimeoutError):
                self.close_connection = True

        def __getattr__(self, name: str) -> Any:
            # BaseHTTPRequestHandler dispatches to do_<METHOD>; accept every method.
            if name.startswith("do_"):
                return self._handle
            raise AttributeError(name)

        # -- request body ------------------------------------------------------------------

        def _body_chunks(self) -> Any:
            """Yield the request body as it arrives (Content-Length or chunked)."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while True:
                    line = self.rfile.readline(65537)
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        # Skip trailers up to the blank line.
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass
                        return
                    left = size
                    while left:
                        data = self.rfile.read(min(left, CHUNK))
                        if not data:
                            raise ConnectionError("client closed mid-chunk")
                        left -= len(data)
                        proxy.throttle(len(data))
                        yield data
                    self.rfile.readline(3)  # CRLF after the chunk
            else:
                left = int(self.headers.get("Content-Length") or 0)
                while left:
                    data = self.rfile.read(min(left, CHUNK))
                    if not data:
                        raise ConnectionError("client closed mid-body")
                    left -= len(data)
                    proxy.throttle(len(data))
                    yield data

        # -- dispatch -----------------------------------------------------------------------

        def _handle(self) -> None:
            method = self.command
            split = urlsplit(self.path)
            path = split.path
            fault = proxy._take_fault(method, path, split.query)
            if fault is not None and fault.strip_query:
                self.path = path  # forwarded as if it had no query
                fault = None
            if fault is not None:
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.reset:
                    proxy._record(method, path, "reset")
                    self._reset()
                    return
                for _ in self._body_chunks():  # drain so keep-alive framing stays intact
                    pass
                assert fault.status is not None
                proxy._record(method, path, fault.status)
                self._send_fault(fault)
                return
            self._record_index: int | None = None
            try:
                self._forward(method, path)
            except (OSError, http.client.HTTPException) as exc:
                self.close_connection = True
                if self._record_index is not None:
                    # Too late for a clean error: the client sees a truncated response.
                    proxy._amend(self._record_index, "reset")
                else:
                    proxy._record(method, path, 502)
                    message = {"errors": [{"code": "BAD_GATEWAY", "message": str(exc)}]}
                    with contextlib.suppress(OSError):
                        self._send_simple(
                            502, {"Connection": "close"}, json.dumps(message).encode()
                        )

        def _reset(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                # SO_LINGER 0 turns close() into a TCP RST: a hard connection reset.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )

        def _send_fault(self, fault: Fault) -> None:
            assert fault.status is not None
            body = fault.body
            if body is None:
                message = {"errors": [{"code": "UNAVAILABLE", "message": "injected fault"}]}
                body = json.dumps(message).encode()
            self._send_simple(fault.status, fault.headers, body)

        def _send_simple(self, status: int, headers: dict[str, str], body: bytes) -> None:
            """Answer locally (fault or gateway error) with a correctly framed response."""
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Injected"
            self.send_response_only(status, phrase)
            lowered = {k.lower() for k in headers}
            if "content-type" not in lowered:
                self.send_header("Content-Type", "application/json")
            for key, value in headers.items():
                if key.lower() != "content-length":
                    self.send_header(key, value)
            send_body = self.command != "HEAD" and status not in (204, 304)
            self.send_header("Content-Length", str(len(body) if send_body else 0))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
            self.wfile.flush()

        def _forward(self, method: str, path: str) -> None:
            upstream = proxy._upstream()
            try:
                upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
                for key, value in self.headers.items():
                    if key.lower() in _HOP_BY_HOP:
                        continue
                    if key.lower() == "x-forwarded-proto":
                        continue
                    upstream.putheader(key, value)
                if proxy._upstream_scheme == "https":
                    upstream.putheader("X-Forwarded-Proto", "http")
                if chunked:
                    upstream.putheader("Transfer-Encoding", "chunked")
                upstream.endheaders()
                try:
                    for data in self._body_chunks():
                        if chunked:
                            upstream.send(b"%x\r\n" % len(data) + data + b"\r\n")
                        else:
                            upstream.send(data)
                    if chunked:
                        upstream.send(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    # The registry may answer early (e.g. 401 to an unauthenticated upload)
                    # and stop reading; relay that answer if it arrived. The client's body
                    # is only partly read, so this connection cannot be reused.
                    self.close_connection = True
                response = upstream.getresponse()
                self._record_index = proxy._record(method, path, response.status)
                self._relay(response)
            finally:
                upstream.close()

        def _relay(self, response: http.client.HTTPResponse) -> None:
            self.send_response_only(response.status, response.reason)
            length = response.getheader("Content-Length")
            no_body = (
                self.command == "HEAD"
                or response.status in (204, 304)
                or (100 <= response.status < 200)
            )
            for key, value in response.getheaders():
                if key.lower() in _HOP_BY_HOP:
                    continue
                self.send_header(key, value)
            stream_chunked = not no_body and length is None
            if stream_chunked:
                self.send_header("Transfer-Encoding", "chunked")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if no_body:
                return
            while True:
                data = response.read(CHUNK)
                if not data:
                    break
                proxy.throttle(len(data))
                if stream_chunked:
                    self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
                else:
                    self.wfile.write(data)
            if stream_chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
