"""airgap.net.fasthttp, the registry's HTTP/1.1 transport, on the wire.

The real registry (tests/test_registry_client.py, whose clients use this transport as
RegistryPool's do) covers what a well-behaved server sends. Here a scripted socket
server sends what a registry, a proxy in front of one or a hostile peer may send instead:
chunked and close-delimited bodies, split heads, conflicting lengths, an answer before
the request body is in, a connection closed while idle in the pool.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict, Unpack

import httpx
import pytest

from airgap.net import fasthttp
from airgap.net.filebody import FileBody
from airgap.net.pacing import Pacing

pytestmark = pytest.mark.integration

Script = Callable[[socket.socket, bytes], None]


class _Server:
    """Accepts connections and runs ``script(conn, request_head)`` for each request."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffered = b""
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                self.requests.append(head)
                length = _content_length(head)
                while len(buffered) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                body, buffered = buffered[:length], buffered[length:]
                self.script(conn, head + b"\r\n\r\n" + body)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class _PacingFields(TypedDict, total=False):
    idle: float
    progress: float
    minimum: int


@contextmanager
def _client(
    script: Script, **pacing: Unpack[_PacingFields]
) -> Iterator[tuple[httpx.Client, _Server]]:
    server = _Server(script)
    transport = fasthttp.FastTransport(pacing=Pacing(**pacing) if pacing else Pacing())
    with httpx.Client(transport=transport) as client:
        yield client, server
    server.listener.close()


def _answer(body: bytes, *extra: str) -> Script:
    def script(conn: socket.socket, request: bytes) -> None:
        headers = "".join(f"{h}\r\n" for h in extra)
        conn.sendall(f"HTTP/1.1 200 OK\r\n{headers}".encode() + b"\r\n" + body)

    return script


def test_sized_bodies_reuse_one_connection_and_heads_may_arrive_in_pieces() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        for piece in (b"HTTP/1.1 200 OK\r\nConte", b"nt-Length: 5\r\n", b"\r\nhel", b"lo"):
            conn.sendall(piece)

    with _client(script) as (client, server):
        assert [client.get(f"{server.url}/{n}").content for n in range(3)] == [b"hello"] * 3
        assert server.connections == 1


def test_chunked_bodies_with_extensions_and_trailers() -> None:
    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
    with _client(_answer(body, "Transfer-Encoding: chunked")) as (client, server):
        assert client.get(server.url).content == b"hello world"
        assert client.get(server.url).content == b"hello world"
        assert server.connections == 1


def test_a_body_without_length_runs_to_the_close_and_the_connection_is_not_reused() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        conn.shutdown(socket.SHUT_WR)

    with _client(script) as (client, server):
        assert client.get(server.url).content == b"until the end"
        assert client.get(server.url).content == b"until the end"
        assert server.connections == 2


def test_head_and_204_have_no_body_whatever_their_length_says() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        status = "204 No Content" if request.startswith(b"GET") else "200 OK"
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 1000\r\n\r\n".encode())

    with _client(script) as (client, server):
        assert client.head(server.url).headers["Content-Length"] == "1000"
        assert client.get(server.url).status_code == 204
        assert client.head(server.url).status_code == 200
        assert server.connections == 1


def test_connection_close_and_http_1_0_end_the_connection_with_or_without_a_body() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        if request.startswith(b"HEAD"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 9\r\n\r\n")
        else:
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with _client(script) as (client, server):
        assert client.head(server.url).status_code == 200
        assert client.get(server.url).content == b"ok"
        assert client.get(server.url).content == b"ok"
        assert server.connections == 3
        assert "connection" not in client.get(server.url).headers  # nothing made up


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        # keep-alive by the headers, closed in fact; a request sent on it before the
        # close arrived finds it shut (the client sends such a GET again)
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.shutdown(socket.SHUT_WR)

    with _client(script) as (client, server):
        for _ in range(3):
            assert client.get(server.url).content == b"ok"
        assert server.connections == 3


def test_request_bodies_are_sent_as_declared_and_chunked_without_a_length() -> None:
    received: list[bytes] = []

    def script(conn: socket.socket, request: bytes) -> None:
        received.append(request)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")

    with _client(script) as (client, server):
        pieces = [b"a" * 70000, b"b" * 5]
        answer = client.put(server.url, content=iter(pieces), headers={"Content-Length": "70005"})
        assert answer.status_code == 201
        assert received[0].endswith(b"a" * 70000 + b"bbbbb")
        with pytest.raises(httpx.LocalProtocolError, match="not its Content-Length 9"):
            client.put(server.url, content=iter([b"short"]), headers={"Content-Length": "9"})


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n", "malformed response header"),
        (b"HTTP/1.1 200 OK\r\nLocation: /a\nX: y\r\n\r\n", "malformed response header"),
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "malformed response header"),
        (b"HTTP/9 200 OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n", "over 64 KiB"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "received 5 bytes, expected 10"),
        (b"", "without sending a response"),
    ],
    ids=[
        "two-lengths",
        "negative",
        "5000-digit-length",
        "obs-fold",
        "bare-lf",
        "nul",
        "version",
        "huge-head",
        "chunk",
        "short",
        "none",
    ],
)
def test_malformed_answers_are_protocol_errors(answer: bytes, message: str) -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_WR)

    with _client(script) as (client, server), pytest.raises(httpx.RemoteProtocolError) as caught:
        client.get(server.url)
    assert message in str(caught.value)


def test_an_answer_sent_before_the_body_is_taken_is_what_the_caller_sees() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        raise AssertionError("never reached: the server answers from the head")

    server = _Server(script)

    def refuse_early(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        conn.close()

    server._serve = refuse_early  # type: ignore[method-assign]
    body = iter([b"x" * (1 << 20)] * 64)
    with httpx.Client(transport=fasthttp.FastTransport()) as client:
        answer = client.put(server.url, content=body, headers={"Content-Length": str(64 << 20)})
    assert answer.status_code == 413
    server.listener.close()


def test_a_trickled_head_fails_on_the_progress_deadline() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        with contextlib.suppress(OSError):  # the client gives up and closes
            for byte in b"HTTP/1.1 200 OK\r\n":
                conn.sendall(bytes([byte]))
                threading.Event().wait(0.1)

    with (
        _client(script, idle=5, progress=0.3) as (client, server),
        pytest.raises(httpx.ReadTimeout, match="no progress"),
    ):
        client.get(server.url)


def test_a_silent_server_fails_on_the_idle_timeout() -> None:
    with (
        _client(lambda conn, request: None, idle=0.3, progress=30) as (client, server),
        pytest.raises(httpx.ReadTimeout, match="idle for 0.3 s"),
    ):
        client.get(server.url)


def test_line_breaks_never_reach_the_wire() -> None:
    with _client(_answer(b"", "Content-Length: 0")) as (client, server):
        request = httpx.Request("GET", server.url)
        request.headers._list.append((b"x", b"x", b"a\r\nInjected: 1"))
        with pytest.raises(httpx.LocalProtocolError, match="line break"):
            client.send(request)
        assert client.get(server.url).status_code == 200
    assert not any(b"Injected" in head for head in server.requests)


def test_connection_failures_keep_their_cause() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with (
        httpx.Client(transport=fasthttp.FastTransport()) as client,
        pytest.raises(httpx.ConnectError) as caught,
    ):
        client.get(f"http://127.0.0.1:{port}/")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


def test_a_file_body_goes_by_sendfile_across_files_and_reports_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FileBody (a pushed blob, spanning two parts of a split bundle here) is sent by
    the kernel, step by step, with its progress; the server gets exactly its bytes."""
    received: list[bytes] = []

    def script(conn: socket.socket, request: bytes) -> None:
        received.append(request)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")

    first, second = tmp_path / "part.000", tmp_path / "part.001"
    first.write_bytes(b"x" * 1000 + bytes(range(256)) * 400)
    second.write_bytes(b"y" * 150_000 + b"tail")
    sent_by_kernel: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        moved = real_sendfile(out_fd, in_fd, offset, count)
        sent_by_kernel.append(moved)
        return moved

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    monkeypatch.setattr(fasthttp, "SENDFILE_STEP", 64 * 1024)
    reached: list[int] = []
    with open(first, "rb") as a, open(second, "rb") as b, _client(script) as (client, server):
        spans = [(a.fileno(), 1000, 102_400), (b.fileno(), 0, 150_004)]
        body = FileBody(
            spans, ended_early=lambda: AssertionError("not truncated"), reached=reached.append
        )
        request = client.build_request("PUT", server.url, headers={"Content-Length": "252404"})
        request.stream = body
        assert client.send(request).status_code == 201
        # the same body again, as a retry would send it
        assert client.send(request).status_code == 201
    expected = bytes(range(256)) * 400 + b"y" * 150_000 + b"tail"
    assert [r.partition(b"\r\n\r\n")[2] for r in received] == [expected, expected]
    assert sum(sent_by_kernel) == 2 * len(expected)
    assert reached == sorted(reached[: len(reached) // 2]) * 2 and reached[-1] == len(expected)
    assert len(reached) // 2 > 3  # one report per step


def test_a_file_body_whose_file_shrank_fails_with_its_owners_error(tmp_path: Path) -> None:
    def script(conn: socket.socket, request: bytes) -> None:  # pragma: no cover
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")

    path = tmp_path / "bundle.tar"
    path.write_bytes(b"z" * 4096)

    class Truncated(Exception):
        pass

    with open(path, "rb") as handle, _client(script) as (client, server):
        body = FileBody([(handle.fileno(), 0, 10_000)], ended_early=lambda: Truncated("member X"))
        request = client.build_request("PUT", server.url, headers={"Content-Length": "10000"})
        request.stream = body
        with pytest.raises(Truncated, match="member X"):
            client.send(request)
        with pytest.raises(Truncated):  # iterated (TLS, a proxy): the same error
            list(body)


def _read_all(read_into: Callable[[memoryview], int], size: int = 7) -> list[bytes]:
    """Every read of a body through ``read_into``, into one small reused buffer."""
    view = memoryview(bytearray(size))
    pieces = []
    while count := read_into(view):
        pieces.append(bytes(view[:count]))
    return pieces


def test_a_sized_body_reads_into_one_reused_buffer_and_the_connection_is_kept() -> None:
    """What collect's downloads use: no bytes object per read, the whole body, then the
    connection back in the pool as an iterated body's would be."""
    body = bytes(range(256)) * 40
    with _client(_answer(body, f"Content-Length: {len(body)}")) as (client, server):
        for _ in range(2):
            with client.stream("GET", server.url) as response:
                read_into = fasthttp.body_reader(response)
                assert read_into is not None
                pieces = _read_all(read_into)
                assert b"".join(pieces) == body
                assert max(len(p) for p in pieces) <= 7
        assert server.connections == 1


def test_a_head_read_with_the_body_is_given_back_before_the_socket_is_read() -> None:
    """Bytes of the body that arrived with the head are buffered: read_into takes them
    first, in pieces no larger than the buffer."""

    def script(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world")

    with _client(script) as (client, server), client.stream("GET", server.url) as response:
        read_into = fasthttp.body_reader(response)
        assert read_into is not None
        assert b"".join(_read_all(read_into, 4)) == b"hello world"


def test_a_sized_body_cut_short_fails_reading_into_a_buffer() -> None:
    def script(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        conn.shutdown(socket.SHUT_WR)

    with _client(script) as (client, server), client.stream("GET", server.url) as response:
        read_into = fasthttp.body_reader(response)
        assert read_into is not None
        with pytest.raises(httpx.RemoteProtocolError, match="received 9 bytes, expected 100"):
            _read_all(read_into, 64)


def test_only_sized_bodies_of_this_transport_read_into_a_buffer() -> None:
    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    chunked_answer = _answer(chunked, "Transfer-Encoding: chunked")
    with _client(chunked_answer) as (client, server), client.stream("GET", server.url) as response:
        assert fasthttp.body_reader(response) is None  # iterated, as before
        assert response.read() == b"hello"
    sized_answer = _answer(b"hello", "Content-Length: 5")
    with _client(sized_answer) as (client, server), client.stream("GET", server.url) as response:
        response.read()  # consumed by iteration: never read twice
        assert fasthttp.body_reader(response) is None
    assert fasthttp.body_reader(httpx.Response(200, content=b"x")) is None
