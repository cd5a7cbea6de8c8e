"""Shared HTTP plumbing: clients, retry with backoff, and status-to-error mapping.

Release sources and the registry client both talk HTTP; they share one retry policy
(429 and 5xx with Retry-After honoured, dropped connections) and one way of turning a
failed response into a typed, credential-free, one-line error.
"""

from __future__ import annotations

import dataclasses
import email.utils
import http.cookiejar
import math
import os
import random
import socket
import ssl
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from airgap import __version__
from airgap.core.errors import (
    AirgapError,
    AuthError,
    HTTPStatusError,
    InputError,
    NetworkError,
    NotFoundError,
    TLSError,
)
from airgap.core.inputfile import check_small
from airgap.core.limits import (
    MAX_ERROR_BODY_BYTES,
    MAX_SMALL_BODY_BYTES,
    MAX_TLS_FILE_BYTES,
    describe_size,
)
from airgap.core.names import shown
from airgap.core.redact import redact_url as redact_url  # re-exported: the one helper
from airgap.formats import jsonsafe
from airgap.net import fasthttp, httplog, proxies
from airgap.net.pacing import Pacing

USER_AGENT = f"airgap/{__version__}"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
CONNECT_TIMEOUT = 15.0
INFLATE_STEP = 256 * 1024  # most bytes one decompression step may produce

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures."""

    attempts: int = 5
    base_delay: float = 0.25
    max_delay: float = 20.0
    statuses: frozenset[int] = field(default=RETRY_STATUSES)
    # Parallel workers refused together (a 429) must not come back together: each wait
    # is spread over this fraction of itself (backoff: shortened by up to it; a server's
    # Retry-After, a minimum, lengthened by up to it).
    jitter: float = 0.5

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Jittered exponential backoff, or the server's Retry-After (plus jitter) when
        it gave one; never more than ``max_delay``."""
        spread = self.jitter * random.random()
        if retry_after is not None:
            wait = max(retry_after, 0.0)
            return float(min(wait + spread * max(wait, self.base_delay), self.max_delay))
        backoff = min(self.base_delay * 2.0**attempt, self.max_delay)
        return float(backoff * (1.0 - spread))


DEFAULT_RETRY = RetryPolicy()


def ssl_context(
    ca_file: str | None = None,
    skip_verify: bool = False,
    *,
    extra_cas: Sequence[Path] = (),
    client_cert: tuple[Path, Path] | None = None,
) -> ssl.SSLContext | bool:
    """TLS settings for httpx: system trust plus optional extra CA files (``--ca-file``,
    a certs.d directory's ``*.crt``) and a client certificate and key to present."""
    if skip_verify and client_cert is None:
        return False
    check_tls_environment()
    context = ssl.create_default_context()
    if skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    for path in [*([Path(ca_file)] if ca_file else []), *extra_cas]:
        check_small(path, MAX_TLS_FILE_BYTES, "CA file")
        try:
            context.load_verify_locations(cafile=str(path))
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"cannot load CA file {path}: {exc}") from None
    if client_cert is not None:
        certificate, key = client_cert
        check_small(certificate, MAX_TLS_FILE_BYTES, "client certificate")
        check_small(key, MAX_TLS_FILE_BYTES, "client key")
        try:
            context.load_cert_chain(str(certificate), str(key), password=_no_passphrase)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(
                f"cannot load client certificate {certificate} with key {key}: {exc}"
            ) from None
    return context


def check_tls_environment() -> None:
    """``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are opened by OpenSSL by their paths when a
    default context is made: a FIFO there blocked the first TLS connection for ever (as
    it does curl's), and a huge file was read whole. Checked as ``--ca-file`` is."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        check_small(Path(cafile), MAX_TLS_FILE_BYTES, "SSL_CERT_FILE")
    for directory in filter(None, os.environ.get("SSL_CERT_DIR", "").split(os.pathsep)):
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise InputError(f"SSL_CERT_DIR {shown(directory)} is not a directory")


def _no_passphrase() -> str:
    """An encrypted client key fails at once instead of prompting on the terminal."""
    raise ssl.SSLError("the key is encrypted; airgap reads unencrypted keys only")


def build_client(
    *,
    verify: ssl.SSLContext | bool = True,
    pacing: Pacing | None = None,
    timeout: float | None = None,
    max_connections: int = 32,
    follow_redirects: bool = True,
    fast: bool = False,
) -> httpx.Client:
    """An httpx client sized for concurrent transfers; redirects drop cross-host auth.

    Every connection is paced (``airgap.net.pacing``: an idle timeout per read and a
    progress deadline, from the environment unless ``pacing`` is given), and bodies are
    asked for uncompressed: layers are compressed already, and a compressed JSON body
    could inflate a thousandfold in one read (``iter_body`` still copes with one).
    ``timeout`` overrides the idle timeout. With ``fast``, direct connections use
    ``airgap.net.fasthttp`` (the registry's bulk traffic) instead of httpcore; proxied ones
    go through a paced httpcore proxy pool (``airgap.net.pacedcore.PacedTransport``)."""
    pacing = pacing or Pacing.from_env()
    if timeout is not None:
        pacing = dataclasses.replace(pacing, idle=timeout)
    connect = min(CONNECT_TIMEOUT, pacing.idle)
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    proxies.check_environment()
    if not isinstance(verify, ssl.SSLContext):  # ssl_context checked the one it made
        check_tls_environment()  # a default context made later reads SSL_CERT_*
    if fast:
        direct: httpx.BaseTransport = fasthttp.FastTransport(
            verify=verify, pacing=pacing, connect_timeout=connect
        )
    else:
        direct = _paced_transport(verify, pacing, limits)
    # the proxies the environment names; loopback never goes through them
    mounts = {
        **proxies.environment_mounts(lambda proxy: _paced_transport(verify, pacing, limits, proxy)),
        **proxies.LOOPBACK,
    }
    return httpx.Client(
        transport=direct,
        verify=verify,
        timeout=httpx.Timeout(pacing.idle, connect=connect),
        limits=limits,
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"},
        follow_redirects=follow_redirects,
        mounts=mounts,
        event_hooks={"request": [httplog.on_request], "response": [httplog.on_response]},
        cookies=_NoCookies(),
    )


def _paced_transport(
    verify: ssl.SSLContext | bool,
    pacing: Pacing,
    limits: httpx.Limits,
    proxy: httpx.Proxy | None = None,
) -> httpx.BaseTransport:
    """An httpcore pool whose connections are paced (``airgap.net.pacedcore``, loaded only
    here: a client of the fast transport alone never imports httpcore); a SOCKS proxy
    goes through httpx's own transport."""
    if proxy is not None and proxy.url.scheme not in ("http", "https"):
        return httpx.HTTPTransport(verify=verify, limits=limits, proxy=proxy)
    from airgap.net.pacedcore import PacedTransport

    context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
    return PacedTransport(ssl_context=context, pacing=pacing, limits=limits, proxy=proxy)


class _NoCookies(http.cookiejar.CookieJar):
    """A jar that keeps nothing. Registries, release servers and chart repositories
    speak protocols without cookies, and Go's clients (containerd, skopeo, crane) keep
    none; a cookie one of them set (a load balancer's) is not sent back, as with those
    clients. Parsing nothing also spares each response the cookie work httpx does by
    default (every header copied into an ``email.message``), on every request of an
    import."""

    def extract_cookies(self, response: object, request: object) -> None:
        return None

    def set_cookie(self, cookie: http.cookiejar.Cookie) -> None:
        return None


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Parse Retry-After as seconds or an HTTP date."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass  # an HTTP date, or nothing usable
    else:
        # only a finite number: a hostile server's "nan" reached time.sleep, whose
        # ValueError ended the command in a traceback ("inf" is capped by the policy)
        return seconds if math.isfinite(seconds) else None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):  # malformed: our own backoff then
        return None


def is_transient(exc: httpx.TransportError) -> bool:
    """Whether trying again might help: a dropped connection or a timeout might, a name
    that does not resolve, a certificate or a protocol mismatch will not (failing at
    once instead of after seconds of retries)."""
    if _is_tls_failure(exc) or _wants_client_certificate(exc):
        return False
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.ProxyError):
        return False
    for cause in _causes(exc):
        if isinstance(cause, socket.gaierror | ssl.SSLCertVerificationError):
            return False
        dropped = isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError)
        if isinstance(exc, httpx.ConnectError) and isinstance(cause, ssl.SSLError) and not dropped:
            return False  # the handshake failed: TLS spoken to plain HTTP, no common cipher
    return True


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from (httpx wraps httpcore wraps OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def describe_transport_error(
    exc: httpx.TransportError, url: str | httpx.URL, asked: str | httpx.URL | None = None
) -> NetworkError:
    """Turn an httpx transport failure into a one-line NetworkError or TLSError; ``url``
    is where it failed, ``asked`` the URL requested when a redirect led elsewhere."""
    proxy = proxies.proxy_for(url)  # whatever went wrong went wrong through it: name it
    target = f"{redact_url(url)} through proxy {proxy}" if proxy else redact_url(url)
    if asked is not None and str(asked) != str(url):
        target += f" (redirected from {redact_url(asked)})"
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ProxyError):
        return NetworkError(f"{target}: the proxy refused ({_short(text)}); see NO_PROXY")
    unresolved = next((c for c in _causes(exc) if isinstance(c, socket.gaierror)), None)
    if unresolved is not None:
        return NetworkError(
            f"{target}: cannot resolve the host name ({unresolved.strerror or unresolved})"
        )
    if _is_tls_failure(exc):
        return TLSError(
            f"{target}: TLS certificate not trusted ({_short(text)}); "
            "give the registry's CA with --ca-file (import, configmaps, status) or the "
            "spec's caFile (collect), or put it in /etc/containers/certs.d/HOST:PORT/ca.crt"
        )
    if _wants_client_certificate(exc):
        return TLSError(
            f"{target}: the registry wants a client certificate ({_short(text)}); put "
            "NAME.cert and NAME.key in /etc/containers/certs.d/HOST:PORT/ or pass --cert-dir"
        )
    if isinstance(exc, httpx.ConnectError):
        return NetworkError(f"{target}: cannot connect ({_short(text)})")
    if isinstance(exc, httpx.TimeoutException):
        detail = f": {_short(str(exc))}" if str(exc) and str(exc) != "timed out" else ""
        return NetworkError(f"{target}: timed out ({type(exc).__name__}{detail})")
    return NetworkError(f"{target}: connection failed ({_short(text)})")


def _short(text: str) -> str:
    return text.splitlines()[0][:200] if text else "unknown error"


def status_error(response: httpx.Response, what: str) -> HTTPStatusError:
    """A typed error for a failed response; ``what`` says what we were doing."""
    status = response.status_code
    reason = response.reason_phrase or ""
    where = f"{response.request.method} {redact_url(response.request.url)}"
    proxy = proxies.proxy_for(response.request.url)
    if proxy:
        where += f" (through proxy {proxy})"
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
    """The first error message of a distribution-spec error body, if any; at most
    ``MAX_ERROR_BODY_BYTES`` of it are read."""
    try:
        try:
            data = response.content
        except httpx.ResponseNotRead:
            data = read_body(response, MAX_ERROR_BODY_BYTES, what="error body")
        body = jsonsafe.loads(data, "error body", max_bytes=MAX_ERROR_BODY_BYTES)
    except (AirgapError, httpx.HTTPError, httpx.StreamError):  # only decoration
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
    body_limit: int = MAX_SMALL_BODY_BYTES,
) -> httpx.Response:
    """Send a request, retrying dropped connections and retryable statuses.

    ``request_factory`` builds a fresh request per attempt so that streamed bodies
    (file readers) start again from the beginning. The last response is returned as is
    whatever its status; only transport failures raise (NetworkError/TLSError), and a
    redirect loop or an undecodable answer raises NetworkError naming the URL.

    Unless ``stream``, the body is read here, at most ``body_limit`` bytes of it (a
    larger one raises ResponseTooLarge; an error body is cut short instead).
    """
    last_exc: httpx.TransportError | None = None
    for attempt in range(policy.attempts):
        request = request_factory()
        try:
            response = client.send(request, stream=True)
            if response.status_code in policy.statuses and attempt < policy.attempts - 1:
                response.close()
                _sleep_for(policy, attempt, response)
                continue
            return response if stream else _buffered(response, body_limit)
        except httpx.TransportError as exc:
            last_exc = exc
            if not is_transient(exc) or attempt == policy.attempts - 1:
                break
            _sleep_for(policy, attempt, None)
        except httpx.TooManyRedirects:
            raise NetworkError(
                f"{request.method} {redact_url(request.url)}: too many redirects (a redirect loop?)"
            ) from None
        except httpx.HTTPError as exc:  # a malformed answer: bad Location, bad encoding
            raise NetworkError(
                f"{request.method} {redact_url(request.url)}: unusable answer "
                f"({_short(str(exc) or type(exc).__name__)})"
            ) from None
    assert last_exc is not None
    raise describe_transport_error(last_exc, _failed_url(last_exc, request), request.url) from None


def _failed_url(exc: httpx.TransportError, sent: httpx.Request) -> httpx.URL:
    """The URL a transport failure happened on: after a redirect (a release asset's
    CDN, a blob's storage) not the one asked for."""
    try:
        return exc.request.url
    except RuntimeError:  # raised without its request
        return sent.url


def _buffered(response: httpx.Response, limit: int) -> httpx.Response:
    """The response with its body read (bounded) and the connection released."""
    try:
        if response.status_code >= 400:
            body = read_body(response, MAX_ERROR_BODY_BYTES, what="", truncate=True)
        else:
            body = read_body(response, limit, what="")
    finally:
        response.close()
    headers = [  # as received: a byte past ASCII is a registry's choice, not an error
        (name, value)
        for name, value in response.headers.raw
        if name.lower() != b"content-encoding"  # the body is decoded already
    ]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=body,
        request=response.request,
        extensions=response.extensions,
        history=response.history,
    )


class ResponseTooLarge(AirgapError):
    """A response body is larger than what it is read for can ever need."""


def iter_body(
    response: httpx.Response, limit: int, *, what: str, truncate: bool = False
) -> Iterator[bytes]:
    """The decoded body in chunks, never more than ``limit`` bytes of it: beyond that,
    ResponseTooLarge naming the URL (or, with ``truncate``, just the end).

    Bodies are read raw and decoded here, gzip and deflate in bounded steps, so a small
    compressed body cannot inflate into memory in one piece."""
    declared = response.headers.get("Content-Length", "")
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    bodiless = response.request.method == "HEAD"  # its Content-Length is the GET's
    if not (truncate or encoding or bodiless) and declared.isdigit() and int(declared) > limit:
        raise _too_large(response, limit, what)
    decode = _decoder(encoding, response, what)
    total = 0
    for raw in response.iter_raw():
        for chunk in decode(raw):
            if total + len(chunk) > limit:
                if truncate:
                    yield chunk[: limit - total]
                    return
                raise _too_large(response, limit, what)
            total += len(chunk)
            yield chunk


def read_body(response: httpx.Response, limit: int, *, what: str, truncate: bool = False) -> bytes:
    """The whole decoded body, at most ``limit`` bytes (see ``iter_body``)."""
    return b"".join(iter_body(response, limit, what=what, truncate=truncate))


def _too_large(response: httpx.Response, limit: int, what: str) -> ResponseTooLarge:
    request = response.request
    prefix = f"{what}: " if what else ""
    return ResponseTooLarge(
        f"{prefix}{request.method} {redact_url(request.url)}: response body over the "
        f"{describe_size(limit)} limit"
    )


def _decoder(
    encoding: str, response: httpx.Response, what: str
) -> Callable[[bytes], Iterator[bytes]]:
    if encoding in ("", "identity"):
        return lambda data: iter((data,))
    if encoding not in ("gzip", "x-gzip", "deflate"):
        request = response.request
        prefix = f"{what}: " if what else ""
        raise NetworkError(
            f"{prefix}{request.method} {redact_url(request.url)}: unsupported "
            f"Content-Encoding {encoding[:40]!r}"
        )
    inflater = zlib.decompressobj(47 if encoding != "deflate" else 15)
    request = response.request

    def decode(data: bytes) -> Iterator[bytes]:
        try:
            while data:
                out = inflater.decompress(data, INFLATE_STEP)
                data = inflater.unconsumed_tail
                if out:
                    yield out
        except zlib.error as exc:
            prefix = f"{what}: " if what else ""
            raise AirgapError(
                f"{prefix}{request.method} {redact_url(request.url)}: the {encoding} "
                f"body does not decode ({exc})"
            ) from None

    return decode


def _is_tls_failure(exc: httpx.TransportError) -> bool:
    text = str(exc)
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text


def _wants_client_certificate(exc: httpx.TransportError) -> bool:
    """The server ended the handshake for want of an (acceptable) client certificate:
    TLS 1.3's certificate_required alert, or bad_certificate."""
    text = str(exc).upper()
    return "CERTIFICATE_REQUIRED" in text or "ALERT_BAD_CERTIFICATE" in text


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


def transfer(
    opened: Callable[[], AbstractContextManager[R]],
    consume: Callable[[R], T],
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    what: str = "",
) -> T:
    """A streamed transfer, started again from the beginning when the connection drops
    mid-body: the one place a whole transfer is retried.

    ``opened`` sends the request (``send`` has already retried a connection that
    failed and a retryable status: its errors are final here) and is closed after each
    attempt; ``consume`` reads the body. A TLS failure, or a transport error that is not
    transient, is not retried."""
    for attempt in range(policy.attempts):
        with opened() as response:
            try:
                return consume(response)
            except (httpx.TransportError, NetworkError) as exc:
                final = isinstance(exc, TLSError) or (
                    isinstance(exc, httpx.TransportError) and not is_transient(exc)
                )
                if final or attempt == policy.attempts - 1:
                    if isinstance(exc, httpx.TransportError):
                        raise NetworkError(
                            f"{what}: connection failed ({_short(str(exc))})"
                        ) from None
                    raise
        time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")
