"""One registry endpoint's session: the scheme it speaks, its auth, and every request
sent with retries, credentials for its own origin only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from urllib.parse import urljoin

import httpx

from airgap.core.errors import (
    AirgapError,
    HTTPStatusError,
    NetworkError,
    TLSError,
)
from airgap.core.limits import (
    MAX_SMALL_BODY_BYTES,
)
from airgap.net import httpclient
from airgap.oci.reference import is_loopback_host
from airgap.registry.auth import NO_AUTH, Authenticator, parse_challenge
from airgap.registry.credentials import Credentials, CredentialSource

BodyFactory = Callable[[], Iterable[bytes]]


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host.lower(), url.port or default


class RegistrySession:
    """The plumbing every registry call goes through: ping, auth, send."""

    def __init__(
        self,
        host: str,
        *,
        client: httpx.Client,
        credentials: CredentialSource | None = None,
        plain_http: bool | None = None,
        policy: httpclient.RetryPolicy = httpclient.DEFAULT_RETRY,
        display_name: str | None = None,
    ) -> None:
        self.host = host
        self.display_name = display_name or host
        # Loopback registries without an explicit setting: HTTPS first, then plain HTTP,
        # as docker does (but never skipping certificate verification).
        self._probe_scheme = plain_http is None and is_loopback_host(host)
        self.base_url = f"{'http' if plain_http else 'https'}://{host}"
        self._client = client
        self._policy = policy
        self._auth = Authenticator(host, client, credentials, policy)
        self._ping_lock = threading.Lock()
        self._ping_error: AirgapError | None = None
        self._self_mount = True  # False once the registry refused a same-repository mount

    @property
    def plain_http(self) -> bool:
        """Whether this endpoint speaks plain HTTP (settled by the first request)."""
        return self.base_url.startswith("http://")

    def presented_credentials(self) -> Credentials | None:
        """The credentials this registry asks for and gets, so that others who read
        from it (the operator's OCI source) can be handed the same."""
        self.ping()
        return self._auth.presented

    def _url(self, path: str) -> str:
        return f"{self.base_url}/v2/{path}"

    def ping(self) -> None:
        """Learn which auth scheme the registry wants (once per endpoint).

        A failure is remembered: the threads queued behind the first one fail at once
        instead of each retrying an unreachable registry in turn."""
        with self._ping_lock:
            if self._auth.known:
                return
            if self._ping_error is not None:
                raise self._ping_error
            try:
                response = self._ping_response()
            except AirgapError as exc:
                self._ping_error = exc
                raise
            if response.status_code == 401 and self._is_own(response.url):
                # a challenge from where a redirect led is not believed (as in _send):
                # its realm would be handed this registry's credentials
                header = response.headers.get("WWW-Authenticate", "")
                self._auth.learn(parse_challenge(header) if header else NO_AUTH)
            elif response.status_code < 400 or response.status_code == 404:
                self._auth.learn(NO_AUTH)
            else:
                raise httpclient.status_error(response, f"registry {self.display_name}")

    def _ping_response(self) -> httpx.Response:
        if self._probe_scheme:
            self._probe_scheme = False
            try:
                return self._get_base(httpclient.RetryPolicy(attempts=1))
            except TLSError:
                raise
            except NetworkError:
                self.base_url = f"http://{self.host}"
        return self._get_base(self._policy)

    def _get_base(self, policy: httpclient.RetryPolicy) -> httpx.Response:
        url = self._url("")
        response = httpclient.send(
            self._client, lambda: self._client.build_request("GET", url), policy=policy
        )
        response.close()
        return response

    def _send(
        self,
        method: str,
        url: str,
        scopes: tuple[str, ...],
        *,
        what: str,
        headers: dict[str, str] | None = None,
        body: BodyFactory | None = None,
        stream: bool = False,
        ok: tuple[int, ...] = (200,),
        missing_ok: bool = False,
        body_limit: int = MAX_SMALL_BODY_BYTES,
    ) -> httpx.Response | None:
        """Send with auth and retries; raise a typed error for any status not in ``ok``.

        ``url`` is a path below ``/v2/`` or an absolute upload location."""
        self.ping()
        # credentials belong to this registry's origin: an upload Location on another
        # host (or scheme, or port) gets none, and its challenges are not believed; a
        # path below /v2/ is on it by construction (no URL parsed twice per request)
        own = True
        if url.startswith(("http://", "https://")):
            own = self._is_own(url)
        else:
            url = self._url(url)
        refresh = False
        for _ in range(2):
            request_headers = dict(headers or {})
            try:
                authorization = self._auth.header(scopes, refresh=refresh) if own else None
            except HTTPStatusError as exc:  # the token service refused: say what we were doing
                raise type(exc)(f"{what}: {exc}", exc.status) from None
            if authorization:
                request_headers["Authorization"] = authorization

            def build(h: dict[str, str] = request_headers) -> httpx.Request:
                content = body() if body else None
                if isinstance(content, httpx.SyncByteStream):
                    # a stream the transport may send its own way (a FileBody, by
                    # sendfile): given as the request's stream, not wrapped by httpx
                    request = self._client.build_request(method, url, headers=h)
                    request.stream = content
                    return request
                return self._client.build_request(method, url, headers=h, content=content)

            response = httpclient.send(
                self._client, build, policy=self._policy, stream=stream, body_limit=body_limit
            )
            if response.status_code in ok:
                return response
            answered_by_us = own and self._is_own(response.url)  # not a redirect target
            if response.status_code == 401 and not refresh and answered_by_us:
                header = response.headers.get("WWW-Authenticate")
                if header:
                    self._auth.learn(parse_challenge(header))
                response.close()
                refresh = True
                continue
            if response.status_code == 404 and missing_ok:
                response.close()
                return None
            try:
                if response.status_code in (401, 403) and answered_by_us:
                    raise self._auth.denied(response.status_code, what, scopes)
                raise httpclient.status_error(response, what)
            finally:
                response.close()
        raise AssertionError("unreachable")

    def _is_own(self, url: str | httpx.URL) -> bool:
        """Whether ``url`` is on this registry's origin (scheme, host and port): the only
        place its credentials are sent."""
        try:
            return _origin(httpx.URL(str(url))) == _origin(httpx.URL(self.base_url))
        except httpx.InvalidURL:
            return False

    def _location(self, location: str) -> str:
        try:
            return urljoin(self.base_url + "/", location)
        except ValueError:  # e.g. a malformed IPv6 host
            raise AirgapError(
                f"registry {self.display_name} gave an invalid Location header"
            ) from None
