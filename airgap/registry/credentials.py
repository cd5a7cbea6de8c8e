"""Registry credentials from the places docker, podman and skopeo keep them.

Order: explicit credentials, ``$REGISTRY_AUTH_FILE`` (containers auth.json), then
docker's ``config.json`` (``credHelpers``, ``auths``, ``credsStore``). Credentials are
only ever handed to the auth layer; they never appear in messages or logs.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airgap.errors import InputError

DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never leak the secret through a repr
        return f"Credentials(username={self.username!r}, password=<redacted>)"


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
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read credentials file {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _from_auths(config: dict[str, Any], keys: tuple[str, ...], path: Path) -> Credentials | None:
    auths = config.get("auths") or {}
    for raw_key, entry in auths.items():
        if _normalise_key(raw_key) not in keys or not isinstance(entry, dict):
            continue
        if entry.get("username") and entry.get("password"):
            return Credentials(str(entry["username"]), str(entry["password"]))
        encoded = entry.get("auth")
        if encoded:
            try:
                user, _, password = base64.b64decode(encoded).decode().partition(":")
            except (ValueError, UnicodeDecodeError) as exc:
                raise InputError(f"{path}: malformed auth entry for {raw_key}") from exc
            return Credentials(user, password)
    return None


def _from_helper(helper: str, host: str) -> Credentials | None:
    """Ask ``docker-credential-HELPER get``; a helper that knows nothing is not an error."""
    try:
        result = subprocess.run(
            [f"docker-credential-{helper}", "get"],
            input=host,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except FileNotFoundError as exc:
        raise InputError(
            f"credential helper docker-credential-{helper} (configured for {host}) not found"
        ) from exc
    if result.returncode != 0:
        return None
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return None
    user, secret = data.get("Username"), data.get("Secret")
    if not secret:
        return None
    return Credentials(str(user or "<token>"), str(secret))


def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def lookup(host: str) -> Credentials | None:
    """Stored credentials for ``host`` (``registry.example:5000``), or None."""
    keys = _host_keys(host)
    auth_file = os.environ.get("REGISTRY_AUTH_FILE")
    if auth_file:
        path = Path(auth_file)
        found = _from_auths(_read_json(path), keys, path)
        if found:
            return found
    path = docker_config_path()
    config = _read_json(path)
    helpers = config.get("credHelpers") or {}
    for raw_key, helper in helpers.items():
        if _normalise_key(raw_key) in keys:
            return _from_helper(str(helper), raw_key)
    found = _from_auths(config, keys, path)
    if found:
        return found
    store = config.get("credsStore")
    if store:
        return _from_helper(str(store), host)
    return None
