"""Shared HTTP plumbing: clients, retry with backoff, and status-to-error mapping.

Release sources and the registry client both talk HTTP; they share one retry policy
(429 and 5xx with Retry-After honoured, dropped connections) and one way of turning a
failed response into a typed, credential-free, one-line error.
"""

from __future__ import annotations

import email.utils
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from airgap import __version__
from airgap.errors import (
    AuthError,
    HTTPStatusError,
    NetworkError,
    NotFoundError,
    TLSError,
)
from airgap.redact import redact_url as redact_url  # re-exported: the one helper

USER_AGENT = f"airgap/{__version__}"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Bytes asked of the socket per read of an HTTP/1.1 response. httpcore's 64 KiB default
# costs one recv, one h11 parse and one hash/pwrite round per 64 KiB of every blob, and
# Python's per-read work then dominates collect's CPU: 256 KiB cut collect's CPU and wall
# time by ~30% on loopback (benchmarks/README.md, Findings). Over TLS a read
# returns at most one 16 KiB record whatever is asked, so this changes nothing there.
RESPONSE_READ_BYTES = 256 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures."""

    attempts: int = 5
    base_delay: float = 0.25
    max_delay: float = 20.0
    statuses: frozenset[int] = field(default=RETRY_STATUSES)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Exponential backoff, or the server's Retry-After when it gave one."""
        if retry_after is not None:
            return float(min(max(retry_after, 0.0), self.max_delay))
        return float(min(self.base_delay * 2.0**attempt, self.max_delay))


DEFAULT_RETRY = RetryPolicy()


def ssl_context(ca_file: str | None = None, skip_verify: bool = False) -> ssl.SSLContext | bool:
    """TLS settings for httpx: system trust plus an optional extra CA bundle."""
    if skip_verify:
        return False
    context = ssl.create_default_context()
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            from airgap.errors import InputError

            raise InputError(f"cannot load CA file {ca_file}: {exc}") from exc
    return context


def build_client(
    *,
    verify: ssl.SSLContext | bool = True,
    timeout: float = 60.0,
    max_connections: int = 32,
    follow_redirects: bool = True,
) -> httpx.Client:
    """An httpx client sized for concurrent transfers; redirects drop cross-host auth."""
    _read_responses_in_bigger_pieces()
    return httpx.Client(
        verify=verify,
        timeout=httpx.Timeout(timeout, connect=15.0),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers={"User-Agent": USER_AGENT},
        follow_redirects=follow_redirects,
    )


def _read_responses_in_bigger_pieces() -> None:
    """Raise httpcore's per-read size (a class attribute, the knob httpcore tunes it with)
    for the whole process: fewer, bigger reads are no worse for any other HTTP user, at
    192 KiB more buffer per busy connection. Left alone if a future httpcore drops the
    attribute (tests/test_registry_client.py then notices)."""
    connection = httpcore.HTTP11Connection
    if getattr(connection, "READ_NUM_BYTES", RESPONSE_READ_BYTES) < RESPONSE_READ_BYTES:
        connection.READ_NUM_BYTES = RESPONSE_READ_BYTES


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Parse Retry-After as seconds or an HTTP date."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # malformed: fall back to our own backoff
        return None
    return max(0.0, parsed.timestamp() - time.time())


def describe_transport_error(exc: httpx.TransportError, url: str | httpx.URL) -> NetworkError:
    """Turn an httpx transport failure into a one-line NetworkError or TLSError."""
    target = redact_url(url)
    text = str(exc) or type(exc).__name__
    if _is_tls_failure(exc):
        return TLSError(
            f"{target}: TLS certificate not trusted ({_short(text)}); "
            "pass --ca-file with the registry's CA, or configure caFile"
        )
    if isinstance(exc, httpx.ConnectError):
        return NetworkError(f"{target}: cannot connect ({_short(text)})")
    if isinstance(exc, httpx.TimeoutException):
        return NetworkError(f"{target}: timed out ({type(exc).__name__})")
    return NetworkError(f"{target}: connection failed ({_short(text)})")


def _short(text: str) -> str:
    return text.splitlines()[0][:200] if text else "unknown error"


def status_error(response: httpx.Response, what: str) -> HTTPStatusError:
    """A typed error for a failed response; ``what`` says what we were doing."""
    status = response.status_code
    reason = response.reason_phrase or ""
    where = f"{response.request.method} {redact_url(response.request.url)}"
    message = f"{what}: {where}: HTTP {status} {reason}".rstrip()
    detail = _error_detail(response)
    if detail:
        message += f" ({detail})"
    if status in (401, 403):
        return AuthError(message, status)
    if status == 404:
        return NotFoundError(message, status)
    return HTTPStatusError(message, status)


def _error_detail(response: httpx.Response) -> str:
    """The first error message of a distribution-spec error body, if any."""
    try:
        if not response.is_stream_consumed:
            response.read()
        body = response.json()
    except Exception:  # the body is only decoration for the message
        return ""
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        code = errors[0].get("code", "")
        msg = errors[0].get("message", "")
        return f"{code}: {msg}".strip(": ")[:200]
    return ""


def _sleep_for(policy: RetryPolicy, attempt: int, response: httpx.Response | None) -> None:
    time.sleep(policy.delay(attempt, retry_after_seconds(response) if response else None))


def send(
    client: httpx.Client,
    request_factory: Callable[[], httpx.Request],
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    stream: bool = False,
) -> httpx.Response:
    """Send a request, retrying dropped connections and retryable statuses.

    ``request_factory`` builds a fresh request per attempt so that streamed bodies
    (file readers) start again from the beginning. The last response is returned as is
    whatever its status; only transport failures raise (NetworkError/TLSError).
    """
    last_exc: httpx.TransportError | None = None
    for attempt in range(policy.attempts):
        request = request_factory()
        try:
            response = client.send(request, stream=stream)
        except httpx.TransportError as exc:
            last_exc = exc
            if _is_tls_failure(exc) or attempt == policy.attempts - 1:
                break
            _sleep_for(policy, attempt, None)
            continue
        if response.status_code in policy.statuses and attempt < policy.attempts - 1:
            response.close()
            _sleep_for(policy, attempt, response)
            continue
        return response
    assert last_exc is not None
    raise describe_transport_error(last_exc, request.url) from None


def _is_tls_failure(exc: httpx.TransportError) -> bool:
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text


@contextmanager
def stream_get(
    client: httpx.Client,
    url: str,
    *,
    what: str,
    headers: dict[str, str] | None = None,
    policy: RetryPolicy = DEFAULT_RETRY,
) -> Iterator[httpx.Response]:
    """GET ``url`` as a stream; the body is never held whole in memory."""
    response = send(
        client,
        lambda: client.build_request("GET", url, headers=headers),
        policy=policy,
        stream=True,
    )
    try:
        if response.status_code >= 400:
            raise status_error(response, what)
        yield response
    finally:
        response.close()


def with_retries(
    action: Callable[[], Any], *, policy: RetryPolicy = DEFAULT_RETRY, what: str = ""
) -> Any:
    """Repeat a whole streamed transfer when the connection drops mid-body."""
    for attempt in range(policy.attempts):
        try:
            return action()
        except (httpx.TransportError, NetworkError) as exc:
            if isinstance(exc, TLSError) or attempt == policy.attempts - 1:
                if isinstance(exc, httpx.TransportError):
                    raise NetworkError(f"{what}: connection failed ({_short(str(exc))})") from None
                raise
            time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")
