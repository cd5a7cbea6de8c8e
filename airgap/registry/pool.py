"""One place that turns a registry host into a configured ``Registry`` endpoint.

It applies per-registry settings (pull mirror, CA file, plain HTTP, skip TLS verify,
the certs.d directory or ``--cert-dir``), looks up stored credentials once per host and
repository (``--authfile`` or the usual files), and shares one HTTP connection pool per
endpoint between all threads.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from airgap.net import httpclient
from airgap.oci.reference import Reference, api_host
from airgap.registry import certs
from airgap.registry import credentials as creds
from airgap.registry.client import Registry
from airgap.registry.credentials import Credentials


class RegistryOptions(Protocol):
    """Settings for one source or target registry (see the bundle spec's ``registries``)."""

    @property
    def mirror(self) -> str | None: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def plain_http(self) -> bool: ...
    @property
    def skip_tls_verify(self) -> bool: ...


@dataclass(frozen=True)
class EndpointOptions:
    """How to reach one registry host: the settings a spec's ``registries`` or import's
    flags give it."""

    mirror: str | None = None
    ca_file: str | None = None
    plain_http: bool = False
    skip_tls_verify: bool = False
    cert_dir: Path | None = None  # replaces the host's certs.d directory (--cert-dir)


class RegistryPool:
    """Caches a ``Registry`` per host; thread-safe."""

    def __init__(
        self,
        settings: Mapping[str, RegistryOptions] | None = None,
        *,
        credentials: Mapping[str, Credentials] | None = None,
        max_connections: int = 16,
        policy: httpclient.RetryPolicy = httpclient.DEFAULT_RETRY,
        authfile: Path | None = None,
    ) -> None:
        self._settings = dict(settings or {})
        self._credentials = dict(credentials or {})
        self._authfile = authfile
        self._max_connections = max_connections
        self._policy = policy
        self._registries: dict[str, Registry] = {}
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()

    def __enter__(self) -> RegistryPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        self._registries.clear()

    def registry(self, host: str) -> Registry:
        """The endpoint for ``host`` (a registry name such as ``docker.io`` or ``h:5000``)."""
        with self._lock:
            found = self._registries.get(host)
            if found:
                return found
            options = self._settings.get(host) or EndpointOptions()
            plain = options.plain_http  # no TLS: do not load the system CA store
            client = httpclient.build_client(
                verify=False if plain else _tls(host, options),
                max_connections=self._max_connections,
                fast=True,
            )
            self._clients.append(client)
            endpoint = api_host(host)
            registry = Registry(
                endpoint,
                client=client,
                credentials=self._credentials.get(host)
                or creds.CredentialStore(host, authfile=self._authfile),
                plain_http=True if options.plain_http else None,
                policy=self._policy,
                display_name=host,
            )
            self._registries[host] = registry
            return registry

    def pull_location(self, reference: Reference) -> tuple[Registry, str]:
        """Where to pull ``reference`` from: its registry, or the configured mirror."""
        options = self._settings.get(reference.registry)
        if options and options.mirror:
            host, _, prefix = options.mirror.partition("/")
            repository = (
                f"{prefix.strip('/')}/{reference.repository}" if prefix else (reference.repository)
            )
            return self.registry(host), repository
        return self.registry(reference.registry), reference.repository


def _tls(host: str, options: RegistryOptions) -> ssl.SSLContext | bool:
    """The TLS settings for ``host``: its options plus its certs.d directory (or the
    ``--cert-dir`` that replaces it): extra CAs and a client certificate."""
    found = certs.for_host(host, cert_dir=getattr(options, "cert_dir", None))
    return httpclient.ssl_context(
        options.ca_file,
        options.skip_tls_verify,
        extra_cas=found.cas,
        client_cert=found.client,
    )
