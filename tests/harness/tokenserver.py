"""Minimal Docker token-auth server (the "realm" of ``WWW-Authenticate: Bearer``).

distribution's ``auth.token`` mode only accepts JWTs whose signing certificate chains to its
``rootcertbundle``.  We sign ES256 with a key whose self-signed certificate *is* that bundle
and ship the certificate in the JWT ``x5c`` header, exactly as production token servers do,
so airgap's bearer-token flow is exercised end to end against the real registry.

Policy (deliberately simple, so tests can reason about it):

* valid HTTP Basic credentials -> every requested action is granted;
* wrong credentials (or any non-Basic ``Authorization``) -> 401;
* anonymous -> only ``pull`` on ``repository`` scopes (so a push needs credentials);
* OAuth2 ``POST`` with ``grant_type=refresh_token`` (distribution's OAuth2 token spec, how
  docker's ``identitytoken`` is used) -> every action for a refresh token registered with
  ``add_refresh_token``, 401 ``invalid_grant`` for any other.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

__all__ = ["TokenRequest", "TokenServer", "parse_scope"]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def parse_scope(scope: str) -> dict[str, Any] | None:
    """Parse ``type:name:action,action`` (the name may itself contain ``:``)."""
    first = scope.find(":")
    last = scope.rfind(":")
    if first <= 0 or last == first:
        return None
    actions = [a for a in scope[last + 1 :].split(",") if a]
    return {"type": scope[:first], "name": scope[first + 1 : last], "actions": actions}


@dataclass
class TokenRequest:
    """One request the token server saw, so tests can assert on the auth flow."""

    method: str
    path: str
    service: str | None
    scopes: list[str]
    basic_auth: bool
    username: str | None
    status: int
    granted: list[dict[str, Any]] = field(default_factory=list)
    grant_type: str | None = None  # OAuth2 POSTs: "password" or "refresh_token"


class TokenServer:
    """Threaded token endpoint on ``127.0.0.1:<ephemeral>``; ``realm`` is ``{url}/token``."""

    def __init__(
        self,
        directory: Path,
        *,
        username: str,
        password: str,
        service: str = "airgap-test-registry",
        issuer: str = "airgap-test-token-issuer",
        ttl: int = 300,
    ) -> None:
        self.username = username
        self.password = password
        self.service = service
        self.issuer = issuer
        self.ttl = ttl
        self.requests: list[TokenRequest] = []
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> the user it stands for
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._cert = self._self_signed(self._key)
        self.cert_file = directory / "token-signer.crt"
        self.cert_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        self._x5c = [base64.b64encode(self._cert.public_bytes(serialization.Encoding.DER)).decode()]

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self.realm = f"{self.url}/token"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"token-server-{self.port}",
            daemon=True,
        )
        self._thread.start()

    @staticmethod
    def _self_signed(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airgap test token signer")])
        now = dt.datetime.now(dt.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )

    # -- tokens ---------------------------------------------------------------------------

    def issue_token(
        self,
        subject: str,
        access: list[dict[str, Any]],
        *,
        ttl: int | None = None,
        audience: str | None = None,
        issuer: str | None = None,
    ) -> str:
        """Sign a registry JWT; public so tests can craft expired / wrong-audience tokens."""
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": self._x5c}
        claims = {
            "iss": issuer if issuer is not None else self.issuer,
            "sub": subject,
            "aud": audience if audience is not None else self.service,
            "exp": now + (self.ttl if ttl is None else ttl),
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing_input = (
            _b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        der = self._key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        # JWS ES256 wants the raw 64-byte r||s, not the DER the library produces.
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return signing_input + "." + _b64url(signature)

    def add_refresh_token(self, token: str, username: str | None = None) -> None:
        """Accept ``token`` as an OAuth2 refresh token (an ``identitytoken``)."""
        with self._lock:
            self.refresh_tokens[token] = username or self.username

    def grant(self, scopes: list[str], *, authenticated: bool) -> list[dict[str, Any]]:
        """Apply the server's policy to requested scopes."""
        granted: list[dict[str, Any]] = []
        for raw in scopes:
            parsed = parse_scope(raw)
            if parsed is None:
                continue
            if not authenticated:
                if parsed["type"] != "repository":
                    continue
                parsed["actions"] = [a for a in parsed["actions"] if a == "pull"]
                if not parsed["actions"]:
                    continue
            granted.append(parsed)
        return granted

    def clear(self) -> None:
        """Forget recorded requests (tests share the session-scoped server)."""
        with self._lock:
            self.requests.clear()

    def _record(self, request: TokenRequest) -> None:
        with self._lock:
            self.requests.append(request)

    # -- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> TokenServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _make_handler(server: TokenServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "airgap-test-token/1"

        def log_message(self, format: str, *args: Any) -> None:
            """Silence the default stderr access log."""

        def do_GET(self) -> None:
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
            self._answer(split.path, query.get("service", [None])[0], scopes, form=None)

        def do_POST(self) -> None:
            # OAuth2 "password" grant, used by some clients instead of GET + Basic.
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            form = parse_qs(body)
            scopes = [s for value in form.get("scope", []) for s in value.split(" ") if s]
            self._answer(
                urlsplit(self.path).path, form.get("service", [None])[0], scopes, form=form
            )

        def _credentials(
            self, form: dict[str, list[str]] | None
        ) -> tuple[bool, str | None, str | None]:
            """Return (credentials present, username, password)."""
            if form is not None and form.get("grant_type", [""])[0] == "password":
                return True, form.get("username", [""])[0], form.get("password", [""])[0]
            header = self.headers.get("Authorization")
            if header is None:
                return False, None, None
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "basic":
                return True, None, None
            try:
                user, _, password = base64.b64decode(value.strip()).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return True, None, None
            return True, user, password

        def _answer(
            self,
            path: str,
            service: str | None,
            scopes: list[str],
            form: dict[str, list[str]] | None,
        ) -> None:
            grant_type = form.get("grant_type", [None])[0] if form is not None else None
            if grant_type == "refresh_token" and form is not None:
                self._refresh(path, service, scopes, form)
                return
            present, user, password = self._credentials(form)
            record = TokenRequest(
                method=self.command,
                path=path,
                service=service,
                scopes=scopes,
                basic_auth=present,
                username=user,
                status=200,
                grant_type=grant_type,
            )
            if path != "/token":
                record.status = 404
                server._record(record)
                self._json(404, {"errors": [{"code": "NOT_FOUND", "message": "no such path"}]})
                return
            if present and (user != server.username or password != server.password):
                record.status = 401
                server._record(record)
                self._json(
                    401,
                    {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]},
                    {"WWW-Authenticate": 'Basic realm="airgap-test-token"'},
                )
                return
            granted = server.grant(scopes, authenticated=present)
            record.granted = granted
            token = server.issue_token(user or "", granted)
            server._record(record)
            issued = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._json(
                200,
                {
                    "token": token,
                    "access_token": token,
                    "expires_in": server.ttl,
                    "issued_at": issued,
                },
            )

        def _refresh(
            self, path: str, service: str | None, scopes: list[str], form: dict[str, list[str]]
        ) -> None:
            """The OAuth2 refresh-token grant: a registered token gets an access token."""
            token = form.get("refresh_token", [""])[0]
            with server._lock:
                user = server.refresh_tokens.get(token)
            record = TokenRequest(
                method=self.command,
                path=path,
                service=service,
                scopes=scopes,
                basic_auth="Authorization" in self.headers,
                username=user,
                status=200,
                grant_type="refresh_token",
            )
            if path != "/token" or user is None:
                record.status = 401 if path == "/token" else 404
                server._record(record)
                self._json(record.status, {"error": "invalid_grant"})
                return
            granted = server.grant(scopes, authenticated=True)
            record.granted = granted
            server._record(record)
            self._json(
                200,
                {
                    "access_token": server.issue_token(user, granted),
                    "expires_in": server.ttl,
                    "scope": " ".join(scopes),
                    "refresh_token": token,
                },
            )

        def _json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status, HTTPStatus(status).phrase)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler
