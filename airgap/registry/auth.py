"""Registry authentication: WWW-Authenticate challenges, bearer tokens and basic auth.

The client pings ``/v2/`` once per host to learn the scheme, then attaches the right
``Authorization`` before each request, so a streamed upload body is never wasted on a
401. Bearer tokens are cached per scope set, as registries issue them per scope.
Credentials may differ per repository (``host/repo`` keys in auth files): each request
presents those of the repository it names (the first of its scopes). An identity token
(docker's ``identitytoken``) is an OAuth2 refresh token: it is exchanged at the token
service with ``grant_type=refresh_token`` (POST, as the distribution token spec's OAuth2
flow has it), never sent as a password.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from airgap.core.errors import AuthError
from airgap.core.limits import MAX_SMALL_BODY_BYTES
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError
from airgap.net import httpclient
from airgap.oci.reference import is_loopback_host
from airgap.registry.credentials import Credentials, CredentialSource

CLIENT_ID = "airgap"  # the OAuth2 client_id sent with a refresh-token grant
QueryParams = list[tuple[str, str | int | float | bool | None]]  # a token request's query
# auth-param = token "=" ( token / quoted-string ). Linear in the header's length: a
# parameter starts only where a word does, and nothing gives back what it matched (without
# both, a 64 KiB header of one word took ~30 s: every start rescanned the rest of it)
_PARAM_RE = re.compile(r'(?<!\w)(\w++)\s*+=\s*+(?:"((?:[^"\\]++|\\.)*+)"|([^\s,]++))')


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header."""

    scheme: str  # "bearer", "basic" or "" when the registry needs no auth
    params: dict[str, str] = field(default_factory=dict)


NO_AUTH = Challenge("")


def parse_challenge(header: str) -> Challenge:
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): m.group(2) or m.group(3) or "" for m in _PARAM_RE.finditer(rest)}
    return Challenge(scheme.lower(), params)


def repository_scope(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"


def may_carry_credentials(realm: str, registry_host: str) -> bool:
    """Whether the registry's credentials may go to its token service ``realm``: the
    registry names it (as docker's protocol has it), but never in clear text to another
    host; plain HTTP is for the registry's own host or loopback."""
    try:
        url = httpx.URL(realm)
    except httpx.InvalidURL:
        return False
    if url.scheme == "https":
        return True
    own = httpx.URL(f"http://{registry_host}").host
    loopback = url.host == "::1" or is_loopback_host(url.host)
    return url.scheme == "http" and (url.host == own or loopback)


def scope_repository(scopes: tuple[str, ...]) -> str | None:
    """The repository a request is for: that of its first ``repository:NAME:ACTIONS``
    scope (a mount's second scope is its source, which the target's credentials must
    reach too)."""
    for scope in scopes:
        kind, _, rest = scope.partition(":")
        if kind == "repository" and ":" in rest:
            return rest.rsplit(":", 1)[0]
    return None


def basic_header(credentials: Credentials) -> str:
    raw = f"{credentials.username}:{credentials.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()


class Authenticator:
    """Hands out ``Authorization`` header values for one registry host."""

    def __init__(
        self,
        host: str,
        client: httpx.Client,
        credentials: CredentialSource | None,
        policy: httpclient.RetryPolicy = httpclient.DEFAULT_RETRY,
    ) -> None:
        self.host = host
        self._client = client
        self._source = credentials
        self._policy = policy
        self._challenge: Challenge | None = None
        self._tokens: dict[tuple[str, ...], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def learn(self, challenge: Challenge) -> None:
        self._challenge = challenge

    @property
    def known(self) -> bool:
        return self._challenge is not None

    def credentials(self, repository: str | None) -> Credentials | None:
        """What this registry is sent for ``repository`` (None: the host's own)."""
        return self._source.for_repository(repository) if self._source else None

    @property
    def presented(self) -> Credentials | None:
        """The credentials this host is sent: ours, if its challenge asks for any."""
        challenge = self._challenge or NO_AUTH
        return self.credentials(None) if challenge.scheme in ("basic", "bearer") else None

    def header(self, scopes: tuple[str, ...], *, refresh: bool = False) -> str | None:
        """The Authorization value for a request needing ``scopes``, if any is needed."""
        challenge = self._challenge or NO_AUTH
        if challenge.scheme == "basic":
            found = self.credentials(scope_repository(scopes))
            return basic_header(found) if found and not _token_only(found) else None
        if challenge.scheme != "bearer":
            return None
        key = tuple(sorted(scopes))
        with self._lock:
            cached = self._tokens.get(key)
            if cached and not refresh and cached[1] > time.monotonic():
                return f"Bearer {cached[0]}"
        token, lifetime = self._fetch_token(challenge, key)
        with self._lock:
            self._tokens[key] = (token, time.monotonic() + max(lifetime - 30, 10))
        return f"Bearer {token}"

    def _fetch_token(self, challenge: Challenge, scopes: tuple[str, ...]) -> tuple[str, float]:
        realm = challenge.params.get("realm")
        if not realm:
            raise AuthError(f"registry {self.host}: bearer challenge without realm", 401)
        found = self.credentials(scope_repository(scopes))
        if found and found.identity_token:
            return self._refresh_token(realm, challenge, scopes, found.identity_token)
        params: QueryParams = []
        if challenge.params.get("service"):
            params.append(("service", challenge.params["service"]))
        params.extend(("scope", scope) for scope in scopes)
        headers = {"Authorization": basic_header(found)} if found else {}
        if headers:
            self._only_over_https(realm, "credentials are")
        url = self._realm_url(realm, params)
        tried = "credentials were tried" if found else "no credentials were found"
        return self._ask_token_service(
            lambda: self._client.build_request("GET", url, headers=headers),
            (401, 403),
            lambda status: f"access (HTTP {status}; {tried})",
        )

    def _refresh_token(
        self, realm: str, challenge: Challenge, scopes: tuple[str, ...], refresh_token: str
    ) -> tuple[str, float]:
        """An access token for ``scopes`` in exchange for an identity (refresh) token:
        ``POST realm`` with ``grant_type=refresh_token`` (distribution's OAuth2 token
        spec, as docker and containers/image do)."""
        self._only_over_https(realm, "an identity token is")
        form = {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "service": challenge.params.get("service", ""),
            "scope": " ".join(scopes),
            "client_id": CLIENT_ID,
        }
        url = self._realm_url(realm)
        return self._ask_token_service(
            lambda: self._client.build_request("POST", url, data=form),
            (400, 401, 403),
            lambda status: (
                f"the identity token (HTTP {status}); log in again (podman login, docker login)"
            ),
        )

    def _only_over_https(self, realm: str, secret_is: str) -> None:
        """A secret goes to a token service on another host only over HTTPS."""
        if not may_carry_credentials(realm, self.host):
            raise AuthError(
                f"registry {self.host}: its token service {httpclient.redact_url(realm)} is plain "
                f"HTTP on another host; {secret_is} only sent there over HTTPS",
                401,
            )

    def _realm_url(self, realm: str, params: QueryParams | None = None) -> httpx.URL:
        """The challenge's realm as a URL (with ``params`` merged into its query); one
        httpx cannot parse is the registry's error, not a traceback."""
        try:
            url = httpx.URL(realm)
            return url.copy_merge_params(params) if params is not None else url
        except httpx.InvalidURL:
            raise AuthError(
                f"registry {self.host}: bearer challenge with an invalid realm", 401
            ) from None

    def _ask_token_service(
        self,
        build: Callable[[], httpx.Request],
        refusals: tuple[int, ...],
        refused: Callable[[int], str],
    ) -> tuple[str, float]:
        """Send a token request (GET with Basic, or the refresh-token POST): a refusal
        status is an AuthError saying what was refused, another error the usual one."""
        response = httpclient.send(self._client, build, policy=self._policy)
        if response.status_code in refusals:
            raise AuthError(
                f"registry {self.host}: token service refused {refused(response.status_code)}",
                response.status_code,
            )
        if response.status_code >= 400:
            raise httpclient.status_error(response, f"registry {self.host}: token request")
        return _token_reply(response, self.host)

    def denied(self, status: int, what: str, scopes: tuple[str, ...] = ()) -> AuthError:
        """The user-facing error for a 401/403 after we presented what we had."""
        found = self.credentials(scope_repository(scopes))
        tried = "credentials were tried" if found else "no credentials were found"
        verb = "authentication failed" if status == 401 else "access denied"
        return AuthError(f"{what}: registry {self.host}: {verb} (HTTP {status}; {tried})", status)


def _token_only(credentials: Credentials) -> bool:
    """An identity token with no password: nothing a Basic challenge could use."""
    return bool(credentials.identity_token) and not credentials.password


def _token_reply(response: httpx.Response, host: str) -> tuple[str, float]:
    """The token and its lifetime from a token service's JSON answer (``token`` or
    ``access_token``, ``expires_in``); anything else is one AuthError naming both."""
    where = f"registry {host}: token service {httpclient.redact_url(response.request.url)}"
    try:
        body = Fields(
            jsonsafe.loads(response.content, "reply", max_bytes=MAX_SMALL_BODY_BYTES),
            "reply",
        )
        token = body.optional_text("token") or body.optional_text("access_token")
    except JSONShapeError as exc:
        raise AuthError(f"{where}: unusable answer ({exc})", 401) from None
    if not token:
        raise AuthError(f"{where}: answered without a token", 401)
    expires = body.raw("expires_in")
    valid = isinstance(expires, int | float) and not isinstance(expires, bool) and expires > 0
    return token, float(expires) if valid else 60.0
