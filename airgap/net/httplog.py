"""``--debug``: one line on stderr per HTTP request, with nothing secret in it.

Each line says what a transfer did: ``GET https://registry/v2/app/blobs/sha256:… 200
received 4.2 MiB in 0.31 s``. It is written when the response is closed, so streamed
bodies are counted as they really went by. URLs lose their user info and every query
value but a few that name content, not secrets (``digest``, ``mount``, ``from``,
``scope``, ``service``); headers (Authorization, tokens, cookies) are never shown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import httpx

from airgap.core.textfmt import human_size

_STARTED = "airgap.started"
_SAFE_QUERY_KEYS = frozenset({"digest", "mount", "from", "scope", "service", "n", "last"})

_sink: Callable[[str], None] | None = None
_lock = threading.Lock()


def enable(sink: Callable[[str], None] | None) -> None:
    """Send one line per request to ``sink`` from now on (None: stop)."""
    global _sink
    _sink = sink


def enabled() -> bool:
    return _sink is not None


def loggable_url(url: object) -> str:
    """``url`` fit for a log line: no user info, query values other than content
    names replaced by ``…`` (pure)."""
    text = str(url)
    try:
        parts = urlsplit(text)
        netloc = parts.hostname or ""
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
    except ValueError:
        return text.split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1]
    query = "&".join(
        f"{quote(key, safe='')}={quote(value, safe=':/,') if key in _SAFE_QUERY_KEYS else '…'}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def on_request(request: httpx.Request) -> None:
    """httpx request hook: remember when the request started."""
    if _sink is not None:
        request.extensions[_STARTED] = time.monotonic()


def on_response(response: httpx.Response) -> None:
    """httpx response hook: count the body as it is read and log when it is closed."""
    if _sink is not None:
        response.stream = _CountingStream(response)


class _CountingStream(httpx.SyncByteStream):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._inner = response.stream
        self._received = 0
        self._logged = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:  # type: ignore[union-attr]
            self._received += len(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self._inner.close()  # type: ignore[union-attr]
        finally:
            if not self._logged:
                self._logged = True
                _emit(line_for(self._response, self._received))


def line_for(response: httpx.Response, received: int) -> str:
    """``METHOD URL STATUS [sent N] received N in S s`` for one finished exchange."""
    request = response.request
    started = request.extensions.get(_STARTED)
    seconds = time.monotonic() - started if isinstance(started, float) else 0.0
    length = request.headers.get("Content-Length", "")
    sent = int(length) if length.isdigit() else 0
    moved = f"sent {human_size(sent)}, " if sent else ""
    return (
        f"{request.method} {loggable_url(request.url)} {response.status_code} "
        f"{moved}received {human_size(received)} in {seconds:.3f} s"
    )


def _emit(line: str) -> None:
    sink = _sink
    if sink is not None:
        with _lock:
            sink(line)
