"""httpx clients of httpcore pools (every client but the registry's fast transport, and
every proxied request) are paced and built from httpx's and httpcore's public API: a
server that trickles its answer fails on the progress deadline, direct or through a
proxy, with httpx's own timeout."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from airgap.net.httpclient import build_client
from airgap.net.pacing import Pacing

pytestmark = pytest.mark.integration

PACING = Pacing(idle=5.0, progress=0.5)


@contextmanager
def trickling_server() -> Iterator[tuple[int, threading.Event]]:
    """A loopback HTTP server that answers any request with headers at once and then one
    body byte every 0.1 s until the client goes away; its port, and an event set once
    a client went away."""
    listener = socket.create_server(("127.0.0.1", 0))
    gone = threading.Event()

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                if request.startswith(b"CONNECT"):  # a proxy's tunnel: answer as the origin
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                try:
                    while not gone.wait(0.1):
                        conn.sendall(b"x")
                except OSError:
                    pass
            gone.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], gone
    finally:
        gone.set()
        thread.join(timeout=10)


def test_a_direct_client_of_an_httpcore_pool_fails_on_the_progress_deadline() -> None:
    with (
        trickling_server() as (port, _),
        build_client(pacing=PACING) as client,
        pytest.raises(httpx.ReadTimeout, match="no progress"),
    ):
        client.get(f"http://127.0.0.1:{port}/slow").read()


def test_a_proxied_request_is_paced_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy variable names the trickling server itself: as a plain-HTTP proxy it
    is sent the absolute URL and answers, so the proxied pool's reads are the ones
    paced. Loopback hosts never go through a proxy, so the target is a name that is
    never resolved (the proxy is asked for it)."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    with trickling_server() as (port, _):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        with (
            build_client(pacing=PACING, fast=True) as client,
            pytest.raises(httpx.ReadTimeout, match="no progress"),
        ):
            client.get("http://registry.invalid/v2/").read()
