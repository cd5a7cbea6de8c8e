"""Registry credentials from the places docker, podman and skopeo keep them.

Order, as containers/image reads them (``pkg/docker/config``): explicit credentials
(``--username``/``--password-stdin``); ``--authfile PATH`` if given, alone, as podman's
``--authfile`` is; otherwise ``$REGISTRY_AUTH_FILE``, podman's
``$XDG_RUNTIME_DIR/containers/auth.json`` (``/run/containers/UID/auth.json`` without
it), ``$XDG_CONFIG_HOME/containers/auth.json`` (``~/.config/...``), then docker's
``config.json`` (``credHelpers``, ``auths``, ``credsStore``). The first file that knows
the image's repository answers; within it a key ``host/repo/path`` beats ``host/repo``
beats ``host``. An ``identitytoken`` is an OAuth2 refresh token, never a password.
Credentials are only ever handed to the auth layer; they never appear in messages or
logs.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from airgap.core.errors import InputError
from airgap.core.inputfile import read_small
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import JSONShapeError

DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io")
MAX_AUTH_FILE_BYTES = 4 << 20  # a credentials file, not a disk image
HELPER_TIMEOUT = 30.0  # seconds for a credential helper's answer
MAX_HELPER_OUTPUT = 64 * 1024  # a helper's answer: one small JSON object
TOKEN_USERNAME = "<token>"  # noqa: S105 (docker's username for an identity token)


@dataclass(frozen=True)
class Credentials:
    """A username and password (or identity token) for one registry host; the repr never
    shows the secret."""

    username: str
    password: str
    identity_token: str | None = None  # an OAuth2 refresh token (docker's identitytoken)

    def __repr__(self) -> str:  # never leak the secret through a repr
        token = ", identity_token=<redacted>" if self.identity_token else ""
        return f"Credentials(username={self.username!r}, password=<redacted>{token})"

    def for_repository(self, repository: str | None) -> Credentials:
        """The same for every repository: given explicitly for the whole registry."""
        return self


class CredentialSource(Protocol):
    """Where an Authenticator gets the credentials for one repository of its registry."""

    def for_repository(self, repository: str | None) -> Credentials | None: ...


def _normalise_key(key: str) -> str:
    for prefix in ("https://", "http://"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key.split("/", 1)[0]


def _host_keys(host: str) -> tuple[str, ...]:
    if host in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        return tuple(_normalise_key(k) for k in DOCKER_HUB_KEYS)
    return (host,)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists() and not path.is_symlink():
        return {}
    raw = read_small(path, MAX_AUTH_FILE_BYTES, "credentials file")
    where = f"cannot read credentials file {path}"
    try:
        data = jsonsafe.loads(raw, where, max_bytes=MAX_AUTH_FILE_BYTES, unique_keys=False)
    except JSONShapeError as exc:
        raise InputError(str(exc)) from None
    return data if isinstance(data, dict) else {}


def _decode_entry(entry: dict[str, Any], raw_key: str, path: Path) -> Credentials | None:
    token = entry.get("identitytoken")
    token = str(token) if token else None
    if entry.get("username") and entry.get("password"):
        return Credentials(str(entry["username"]), str(entry["password"]), token)
    encoded = entry.get("auth")
    if encoded:
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise InputError(f"{path}: malformed auth entry for {raw_key}") from None
        return Credentials(user, password, token)
    if token:
        return Credentials(str(entry.get("username") or TOKEN_USERNAME), "", token)
    return None


def repository_keys(host: str, repository: str | None) -> list[str]:
    """``host/a/b/c``, ``host/a/b``, ``host/a``: the repository-scoped keys to try, most
    specific first (containers/image's ``authKeysForKey``; pure)."""
    if not repository:
        return []
    keys = []
    key = f"{host}/{repository}"
    while "/" in key:
        keys.append(key)
        key = key.rsplit("/", 1)[0]
    return keys


def _from_auths(
    config: dict[str, Any], host: str, repository: str | None, path: Path
) -> Credentials | None:
    auths = config.get("auths") or {}
    if not isinstance(auths, dict):
        return None
    for key in repository_keys(host, repository):  # exact matches only, as containers/image
        entry = auths.get(key)
        if isinstance(entry, dict):
            found = _decode_entry(entry, key, path)
            if found:
                return found
    keys = _host_keys(host)
    for raw_key, entry in auths.items():
        if _auth_key_registry(str(raw_key)) in keys and isinstance(entry, dict):
            found = _decode_entry(entry, str(raw_key), path)
            if found:
                return found
    return None


def _auth_key_registry(key: str) -> str:
    """The registry an ``auths`` key stands for, as containers/image normalises it: a
    URL (``https://host/v1/``, docker login's old keys) is its host; a key without a
    scheme is taken whole, so ``host/repo`` is a repository's key, not the host's."""
    stripped = key.removeprefix("http://").removeprefix("https://")
    return stripped.split("/", 1)[0] if stripped != key else stripped


def _from_helper(helper: str, host: str) -> Credentials | None:
    """Ask ``docker-credential-HELPER get``; a helper that knows nothing is not an error.
    One that hangs, cannot run or answers more than ``MAX_HELPER_OUTPUT`` is, in one
    line that names it (never its output: that holds the secret)."""
    program = f"docker-credential-{helper}"
    who = f"credential helper {program} (configured for {host})"
    try:
        returncode, stdout = _run_helper([program, "get"], host.encode())
    except FileNotFoundError as exc:
        raise InputError(f"{who} not found") from exc
    except TimeoutError:
        raise InputError(f"{who} did not answer within {HELPER_TIMEOUT:g} s") from None
    except _TooLong:
        raise InputError(f"{who} answered more than {MAX_HELPER_OUTPUT // 1024} KiB") from None
    except OSError as exc:
        raise InputError(f"{who} cannot run: {exc.strerror or type(exc).__name__}") from None
    if returncode != 0:
        return None
    try:
        data = jsonsafe.loads(stdout, "answer", max_bytes=MAX_HELPER_OUTPUT, unique_keys=False)
    except JSONShapeError:
        return None
    if not isinstance(data, dict):
        return None
    user, secret = data.get("Username"), data.get("Secret")
    if not secret:
        return None
    if user == TOKEN_USERNAME:  # docker's convention: the secret is an identity token
        return Credentials(TOKEN_USERNAME, "", str(secret))
    return Credentials(str(user or TOKEN_USERNAME), str(secret))


class _TooLong(Exception):
    """A helper's answer went past ``MAX_HELPER_OUTPUT``."""


def _run_helper(argv: list[str], request: bytes) -> tuple[int, bytes]:
    """Run a credential helper with ``request`` on stdin: its exit status and stdout,
    read with a bound on both time and size (the helper is killed past either)."""
    import select
    import subprocess  # only with a helper configured, not on every start-up

    deadline = time.monotonic() + HELPER_TIMEOUT
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            try:
                process.stdin.write(request)
                process.stdin.close()
            except BrokenPipeError:
                pass  # it did not read the request: its answer (or status) says why
            output = bytearray()
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
                    raise TimeoutError
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                output += chunk
                if len(output) > MAX_HELPER_OUTPUT:
                    raise _TooLong
            return process.wait(max(0.0, deadline - time.monotonic())), bytes(output)
        except subprocess.TimeoutExpired:
            process.kill()
            raise TimeoutError from None
        except BaseException:
            process.kill()
            raise


def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def auth_file_paths(authfile: Path | None = None) -> list[Path]:
    """The credentials files consulted, in order (see the module docstring)."""
    if authfile is not None:
        return [authfile]
    paths = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        paths.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    paths.append(
        Path(runtime, "containers", "auth.json")
        if runtime
        else Path(f"/run/containers/{os.getuid()}/auth.json")
    )
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    paths.append(Path(config_home, "containers", "auth.json"))
    paths.append(docker_config_path())
    return paths


def lookup(
    host: str, repository: str | None = None, *, authfile: Path | None = None
) -> Credentials | None:
    """Stored credentials for ``repository`` on ``host`` (``registry.example:5000``), or
    for the host itself; None when no file knows either."""
    keys = _host_keys(host)
    for path in auth_file_paths(authfile):
        config = _read_json(path)
        helpers = config.get("credHelpers") or {}
        if isinstance(helpers, dict):
            for raw_key, helper in helpers.items():
                if _normalise_key(str(raw_key)) in keys:
                    return _from_helper(str(helper), str(raw_key))
        found = _from_auths(config, host, repository, path)
        if found:
            return found
        store = config.get("credsStore")
        if store:
            return _from_helper(str(store), host)
    return None


class CredentialStore:
    """The stored credentials of one registry host, per repository, each looked up once
    (a credential helper runs once, not per request)."""

    def __init__(self, host: str, *, authfile: Path | None = None) -> None:
        self.host = host
        self._authfile = authfile
        self._found: dict[str | None, Credentials | None] = {}
        self._lock = threading.Lock()

    def for_repository(self, repository: str | None) -> Credentials | None:
        with self._lock:
            if repository not in self._found:
                self._found[repository] = lookup(self.host, repository, authfile=self._authfile)
            return self._found[repository]
