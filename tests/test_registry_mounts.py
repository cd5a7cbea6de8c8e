"""Mount-or-start and "is it there?" in one request, against the real registry.

distribution answers ``POST blobs/uploads/?mount=DIGEST&from=SOURCE`` with 201 when it
linked the blob and with 202 and an upload session when it could not, as the
distribution spec says; a mount from the target repository itself asks whether that
repository holds the blob. A fault proxy plays a registry that refuses the form.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator

import httpx
import pytest

from airgap.net import httpclient as airgap_http
from airgap.registry.client import Registry
from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.registry import RegistryFactory, RegistryServer

pytestmark = pytest.mark.integration


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def bytes_body(data: bytes, chunk: int = 16 * 1024) -> Callable[[int], Iterator[bytes]]:
    def body(offset: int) -> Iterator[bytes]:
        for start in range(offset, len(data), chunk):
            yield data[start : start + chunk]

    return body


@pytest.fixture
def through_proxy(
    registry_factory: RegistryFactory, fault_proxy_factory: FaultProxyFactory
) -> Iterator[tuple[RegistryServer, FaultProxy, Registry]]:
    """A fresh registry, a recording proxy in front of it, and a client of the proxy
    that has already pinged (the log starts empty)."""
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    client = airgap_http.build_client(verify=airgap_http.ssl_context(None), timeout=30)
    registry = Registry(proxy.host, client=client, plain_http=True)
    yield server, proxy, registry
    client.close()


def _log(proxy: FaultProxy) -> list[tuple[str, int | str]]:
    """What was asked of the registry, leaving out pings of ``/v2/``."""
    return [(r.method, r.status) for r in proxy.requests if r.path != "/v2/"]


def test_a_failed_mount_uploads_into_the_session_it_opened(
    through_proxy: tuple[RegistryServer, FaultProxy, Registry],
) -> None:
    """Mount-or-start: distribution answers a mount it cannot make with 202 and an
    upload session, and the bytes go into that session (no DELETE, no second POST)."""
    server, proxy, registry = through_proxy
    data = os.urandom(50_000)
    digest = _digest(data)

    session = registry.mount_or_start("mos/target", digest, "mos/nowhere", what="test")
    assert session is not None and session.repository == "mos/target"
    registry.upload_blob(
        "mos/target", digest, len(data), bytes_body(data), what="t", session=session
    )
    assert _log(proxy) == [("POST", 202), ("PUT", 201)]
    assert [r for r in proxy.requests if r.path != "/v2/"][1].path.startswith(
        "/v2/mos/target/blobs/uploads/"
    )
    served = httpx.get(f"{server.url}/v2/mos/target/blobs/{digest}")
    assert served.status_code == 200 and _digest(served.content) == digest
    proxy.clear()

    # from a repository that holds it: linked (201), nothing else is sent
    assert registry.mount_or_start("mos/other", digest, "mos/target", what="test") is None
    assert _log(proxy) == [("POST", 201)]
    assert registry.blob_size("mos/other", digest, what="test") == len(data)


def test_find_or_start_asks_and_opens_a_session_in_one_request(
    through_proxy: tuple[RegistryServer, FaultProxy, Registry],
) -> None:
    """distribution 2.8 answers a mount whose source is the target repository itself
    with 201 when the repository holds the blob, else 202 with a session: one POST
    where HEAD + POST would ask the same."""
    _, proxy, registry = through_proxy
    data = os.urandom(40_000)
    digest = _digest(data)

    session = registry.find_or_start("self/repo", digest, what="test")
    assert session is not None
    registry.upload_blob(
        "self/repo", digest, len(data), bytes_body(data), what="t", session=session
    )
    assert registry.find_or_start("self/repo", digest, what="test") is None
    assert _log(proxy) == [
        ("POST", 202),
        ("PUT", 201),
        ("POST", 201),
    ]
    # held by another repository only: this one does not hold it, so a session
    assert registry.find_or_start("self/elsewhere", digest, what="test") is not None


def test_a_registry_refusing_a_same_repository_mount_is_asked_with_head_after_once(
    through_proxy: tuple[RegistryServer, FaultProxy, Registry],
) -> None:
    """A registry that answers an error to the combined form (one answers 400 to a
    mount from the target itself): HEAD + POST + PUT, and the form is not tried again."""
    _, proxy, registry = through_proxy
    proxy.inject("POST", r"/blobs/uploads/$", query_regex="mount=", status=400, times=100)
    blobs = [os.urandom(20_000 + n) for n in range(3)]
    for data in blobs:
        digest = _digest(data)
        session = registry.find_or_start("refuse/repo", digest, what="test")
        assert session is not None
        registry.upload_blob(
            "refuse/repo", digest, len(data), bytes_body(data), what="t", session=session
        )
    present = _digest(blobs[0])
    assert registry.find_or_start("refuse/repo", present, what="test") is None
    assert _log(proxy) == [
        ("POST", 400),
        *[("HEAD", 404), ("POST", 202), ("PUT", 201)] * 3,
        ("HEAD", 200),
    ]
    for data in blobs:
        digest = _digest(data)
        assert registry.blob_size("refuse/repo", digest, what="test") == len(data)
