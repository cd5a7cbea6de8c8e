"""Registry fixtures: real registries (plain, TLS + basic auth, token), a token server,
a fault proxy and the standard image corpus pushed into them.

Everything listens on 127.0.0.1 ephemeral ports and lives under pytest's tmp_path_factory;
every process and thread started here is stopped at teardown, also when tests fail.
Registered as a plugin from tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.images import (
    CORPUS,
    CorpusEntry,
    OciLayout,
    TestImage,
    build_corpus,
    push_corpus,
)
from tests.harness.pki import Pki, make_pki
from tests.harness.registry import RegistryFactory, RegistryMode, RegistryServer
from tests.harness.tokenserver import TokenServer

USERNAME = "airgap"
PASSWORD = "s3cret-pass"


def start_registry(directory: Path, mode: RegistryMode | str, pki: Pki) -> RegistryServer:
    """Start a registry of ``mode``; token mode also starts (and owns) a TokenServer."""
    mode = RegistryMode(mode)
    if mode is RegistryMode.TOKEN:
        token_server = TokenServer(directory / "token", username=USERNAME, password=PASSWORD)
        try:
            return RegistryServer(directory, mode, token_server=token_server)
        except BaseException:
            token_server.stop()
            raise
    return RegistryServer(directory, mode, pki=pki, username=USERNAME, password=PASSWORD)


def stop_registry(registry: RegistryServer) -> None:
    """Stop a registry and the token server it owns, if any."""
    try:
        registry.stop()
    finally:
        if registry.token_server is not None:
            registry.token_server.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Test CA, loopback server certificate and an unrelated CA."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def plain_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    """HTTP registry without auth."""
    registry = start_registry(tmp_path_factory.mktemp("plain-registry"), RegistryMode.PLAIN, pki)
    yield registry
    stop_registry(registry)


@pytest.fixture(scope="session")
def secure_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    """HTTPS (test CA) registry with htpasswd basic auth (USERNAME / PASSWORD)."""
    registry = start_registry(tmp_path_factory.mktemp("secure-registry"), RegistryMode.BASIC, pki)
    yield registry
    stop_registry(registry)


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    """HTTP registry with bearer-token auth; ``.token_server`` is the realm (USERNAME/PASSWORD)."""
    registry = start_registry(tmp_path_factory.mktemp("token-registry"), RegistryMode.TOKEN, pki)
    yield registry
    stop_registry(registry)


@pytest.fixture
def registry_factory(tmp_path: Path, pki: Pki) -> Iterator[RegistryFactory]:
    """``factory(mode="plain")`` -> a fresh, empty registry, stopped at test teardown.

    Modes: "plain" (HTTP), "tls" (HTTPS), "basic" (HTTPS + htpasswd), "token" (HTTP + token).
    """
    started: list[RegistryServer] = []
    counter = itertools.count()

    def factory(mode: RegistryMode | str = RegistryMode.PLAIN) -> RegistryServer:
        registry = start_registry(tmp_path / f"registry-{next(counter)}-{mode}", mode, pki)
        started.append(registry)
        return registry

    yield factory
    for registry in reversed(started):
        stop_registry(registry)


@pytest.fixture
def fault_proxy_factory() -> Iterator[FaultProxyFactory]:
    """``factory(upstream)`` -> a FaultProxy in front of a RegistryServer or URL."""
    started: list[FaultProxy] = []

    def factory(upstream: RegistryServer | str, *, ca_file: Path | None = None) -> FaultProxy:
        if isinstance(upstream, RegistryServer):
            ca_file = ca_file or upstream.ca_file
            upstream = upstream.url
        proxy = FaultProxy(upstream, ca_file=ca_file)
        started.append(proxy)
        return proxy

    yield factory
    for proxy in reversed(started):
        proxy.stop()


@pytest.fixture(scope="session")
def corpus_layout(tmp_path_factory: pytest.TempPathFactory) -> OciLayout:
    """OCI layout holding the standard corpus (names as in ``CORPUS``)."""
    layout = OciLayout(tmp_path_factory.mktemp("corpus") / "layout")
    build_corpus(layout)
    return layout


@pytest.fixture(scope="session")
def source_images(
    corpus_layout: OciLayout,
    plain_registry: RegistryServer,
    secure_registry: RegistryServer,
) -> dict[str, TestImage]:
    """The standard corpus pushed to ``plain_registry`` (+ two images in ``secure_registry``).

    Keys: app, sidecar, multiarch, dockerv2, dockerlist (plain registry) and
    secure_app (``secure/app:v1``), secure_multiarch (``secure/multi:v1``).
    """
    images = push_corpus(corpus_layout, plain_registry, CORPUS)
    secure = {
        "secure_app": CorpusEntry("app", "secure/app", "v1"),
        "secure_multiarch": CorpusEntry("multiarch", "secure/multi", "v1"),
    }
    images.update(push_corpus(corpus_layout, secure_registry, secure))
    return images


@pytest.fixture(scope="session")
def token_images(corpus_layout: OciLayout, token_registry: RegistryServer) -> dict[str, TestImage]:
    """``app`` (``token/app:v1``) and ``multiarch`` (``token/multi:v1``) in ``token_registry``.

    The token server's request log is cleared afterwards.
    """
    entries = {
        "app": CorpusEntry("app", "token/app", "v1"),
        "multiarch": CorpusEntry("multiarch", "token/multi", "v1"),
    }
    images = push_corpus(corpus_layout, token_registry, entries)
    assert token_registry.token_server is not None
    token_registry.token_server.clear()
    return images
