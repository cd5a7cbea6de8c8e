"""Real CNCF distribution registries (``docker-registry serve``) on loopback ports.

Tests talk to the genuine registry binary so airgap is checked against real protocol
behaviour (upload sessions, Location headers, auth challenges), not our idea of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import yaml

from tests.harness.pki import Pki
from tests.harness.tiers import need_tool
from tests.harness.tokenserver import TokenServer

__all__ = ["RegistryFactory", "RegistryMode", "RegistryServer", "RegistryStartError", "free_port"]

# Debian's package puts it in /usr/bin; found on PATH so that a run without it skips clearly
REGISTRY_BINARY = (
    os.environ.get("AIRGAP_TEST_REGISTRY_BIN")
    or shutil.which("docker-registry")
    or "docker-registry"
)
START_TIMEOUT = 15.0
_BIND_ATTEMPTS = 5


class RegistryMode(StrEnum):
    """Supported registry flavours."""

    PLAIN = "plain"  # HTTP, no auth
    TLS = "tls"  # HTTPS, no auth
    BASIC = "basic"  # HTTPS + htpasswd basic auth
    TOKEN = "token"  # HTTP + bearer token auth (our TokenServer is the realm)


class RegistryStartError(RuntimeError):
    """The registry did not come up; message carries the tail of its log."""


def free_port(address: str = "127.0.0.1") -> int:
    """Pick a currently free loopback port (racy by nature; callers retry on bind failure)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM the registry if the test process dies without cleaning up."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _htpasswd_line(user: str, password: str) -> str:
    """bcrypt entry via Apache's htpasswd: distribution only accepts bcrypt hashes."""
    out = subprocess.run(
        [need_tool("htpasswd"), "-Bbn", user, password],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.strip() + "\n"


class RegistryServer:
    """One ``docker-registry`` process with its own storage, config and log under ``directory``.

    Attributes: ``host`` ("127.0.0.1:PORT"), ``url``, ``scheme``, ``port``, ``mode``,
    ``ca_file`` (CA to trust, TLS only), ``cert_dir`` (skopeo ``--cert-dir`` layout, TLS
    only), ``username``/``password`` (auth modes), ``storage_dir``, ``log_file``,
    ``config_file`` and ``token_server`` (token mode).
    """

    def __init__(
        self,
        directory: Path,
        mode: RegistryMode | str = RegistryMode.PLAIN,
        *,
        pki: Pki | None = None,
        username: str | None = None,
        password: str | None = None,
        token_server: TokenServer | None = None,
        extra_config: dict[str, Any] | None = None,
        start: bool = True,
        client_cert: tuple[Path, Path] | None = None,
        address: str = "127.0.0.1",  # "::1": an IPv6 registry, host "[::1]:PORT"
    ) -> None:
        self.mode = RegistryMode(mode)
        self.address = address
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.storage_dir = directory / "storage"
        self.storage_dir.mkdir(exist_ok=True)
        self.log_file = directory / "registry.log"
        self.config_file = directory / "config.yml"
        self.scheme = "https" if self.mode in (RegistryMode.TLS, RegistryMode.BASIC) else "http"
        self.pki = pki
        self.token_server = token_server
        self.username: str | None = None
        self.password: str | None = None
        self.ca_file: Path | None = None
        self.cert_dir: Path | None = None
        self._extra_config = extra_config or {}
        # what the readiness probe presents to a registry that requires a client
        # certificate (``http.tls.clientcas`` in extra_config)
        self.client_cert = client_cert
        self._instance_id = secrets.token_hex(8)
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.host = ""
        self.url = ""

        if self.scheme == "https":
            if pki is None:
                raise ValueError(f"{self.mode} registry needs a Pki")
            self.ca_file = pki.ca_cert
            # containers/image reads CAs from "*.crt" files in a directory.
            self.cert_dir = directory / "certs.d"
            self.cert_dir.mkdir(exist_ok=True)
            shutil.copyfile(pki.ca_cert, self.cert_dir / "ca.crt")
        if self.mode is RegistryMode.BASIC:
            if not (username and password):
                raise ValueError("basic-auth registry needs username and password")
            self.username, self.password = username, password
            self.htpasswd_file = directory / "htpasswd"
            self.htpasswd_file.write_text(_htpasswd_line(username, password))
        if self.mode is RegistryMode.TOKEN:
            if token_server is None:
                raise ValueError("token registry needs a TokenServer")
            self.username, self.password = token_server.username, token_server.password
        if start:
            self.start()

    @property
    def _host_part(self) -> str:
        return f"[{self.address}]" if ":" in self.address else self.address

    # -- config ---------------------------------------------------------------------------

    def _config(self, port: int) -> dict[str, Any]:
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "warn", "formatter": "text", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.storage_dir)},
                "delete": {"enabled": True},
                # No background upload purging racing with tests.
                "maintenance": {"uploadpurging": {"enabled": False}},
            },
            "http": {
                "addr": f"{self._host_part}:{port}",
                # Without a fixed secret each process invents one and logs a warning.
                "secret": secrets.token_hex(16),
                # A per-instance marker lets the readiness probe tell *our* process from
                # whatever else may have grabbed the port in the meantime.
                "headers": {
                    "X-Content-Type-Options": ["nosniff"],
                    "X-Airgap-Test-Registry": [self._instance_id],
                },
            },
        }
        if self.scheme == "https":
            assert self.pki is not None
            config["http"]["tls"] = {
                "certificate": str(self.pki.server_cert),
                "key": str(self.pki.server_key),
            }
        if self.mode is RegistryMode.BASIC:
            config["auth"] = {"htpasswd": {"realm": "airgap-test", "path": str(self.htpasswd_file)}}
        if self.mode is RegistryMode.TOKEN:
            assert self.token_server is not None
            config["auth"] = {
                "token": {
                    "realm": self.token_server.realm,
                    "service": self.token_server.service,
                    "issuer": self.token_server.issuer,
                    "rootcertbundle": str(self.token_server.cert_file),
                }
            }
        _deep_merge(config, self._extra_config)
        return config

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the registry on a fresh ephemeral port, retrying if the port got taken."""
        need_tool("docker-registry", REGISTRY_BINARY)
        last_error: RegistryStartError | None = None
        for _ in range(_BIND_ATTEMPTS):
            port = free_port(self.address)
            self.config_file.write_text(yaml.safe_dump(self._config(port), sort_keys=False))
            self.port = port
            self.host = f"{self._host_part}:{port}"
            self.url = f"{self.scheme}://{self.host}"
            # Drop REGISTRY_* variables: distribution lets them override config.yml.
            env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
            with self.log_file.open("ab") as log:
                self._process = subprocess.Popen(
                    [REGISTRY_BINARY, "serve", str(self.config_file)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.directory,
                    # PDEATHSIG fires when the *thread* that forked exits: main thread only.
                    preexec_fn=_die_with_parent
                    if threading.current_thread() is threading.main_thread()
                    else None,
                )
            try:
                self._wait_ready()
                return
            except RegistryStartError as exc:
                last_error = exc
                self._terminate()
                if "address already in use" not in self.log_tail():
                    raise
        assert last_error is not None
        raise last_error

    def _probe(self) -> int | None:
        conn: http.client.HTTPConnection
        if self.scheme == "https":
            context = ssl.create_default_context(cafile=str(self.ca_file))
            if self.client_cert is not None:
                context.load_cert_chain(*map(str, self.client_cert))
            conn = http.client.HTTPSConnection(self.address, self.port, timeout=2, context=context)
        else:
            conn = http.client.HTTPConnection(self.address, self.port, timeout=2)
        try:
            conn.request("GET", "/v2/")
            response = conn.getresponse()
            if response.getheader("X-Airgap-Test-Registry") != self._instance_id:
                return None
            return response.status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RegistryStartError(
                    f"registry exited with {self._process.returncode}; log tail:\n"
                    + self.log_tail()
                )
            status = self._probe()
            if status in (200, 401):
                return
            time.sleep(0.05)
        raise RegistryStartError(
            f"registry on {self.host} not ready after {START_TIMEOUT}s; log tail:\n"
            + self.log_tail()
        )

    def blob_path(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's (or a manifest's) bytes: deleting
        the file is what a garbage collection or a failing disk does."""
        hexpart = digest.split(":", 1)[1]
        return self.storage_dir / f"docker/registry/v2/blobs/sha256/{hexpart[:2]}/{hexpart}/data"

    def log_tail(self, lines: int = 30) -> str:
        """Last lines of the registry log, for error messages."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self) -> None:
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def stop(self) -> None:
        """Terminate the registry (SIGTERM, then SIGKILL after 5 s). Idempotent."""
        self._terminate()

    @property
    def running(self) -> bool:
        """Whether the registry process is still alive."""
        return self._process is not None and self._process.poll() is None

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What to pass as httpx ``verify=``: a context trusting the test CA, or True."""
        if self.ca_file is None:
            return True
        return ssl.create_default_context(cafile=str(self.ca_file))

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RegistryServer(mode={self.mode.value}, url={self.url!r})"


class RegistryFactory(Protocol):
    """Type of the ``registry_factory`` fixture."""

    def __call__(self, mode: RegistryMode | str = ...) -> RegistryServer: ...


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
