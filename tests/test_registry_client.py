"""The registry client against real registries: pull, push, auth, TLS, retries, memory.

Every registry here is a genuine ``docker-registry`` on loopback (plain, TLS + htpasswd,
bearer token); faults come from a real proxy in front of it. Expected bytes and digests come
from skopeo, an independent client, never from airgap itself.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import hashlib
import http.client
import json
import os
import socket
import struct
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from airgap.core.errors import (
    AuthError,
    DigestMismatchError,
    HTTPStatusError,
    NetworkError,
    NotFoundError,
    TLSError,
)
from airgap.net import http1frames
from airgap.net import httpclient as airgap_http
from airgap.oci.manifest import OCI_MANIFEST, Descriptor, Manifest
from airgap.oci.reference import parse_reference
from airgap.registry.client import Registry
from airgap.registry.credentials import Credentials
from airgap.registry.pool import EndpointOptions, RegistryPool
from tests.harness import skopeo
from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.images import OciLayout, TestImage, make_big_image, push_image
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import PASSWORD, USERNAME

pytestmark = pytest.mark.integration

FAST = airgap_http.RetryPolicy(attempts=3, base_delay=0.01)


@dataclasses.dataclass(frozen=True)
class RecordingPolicy(airgap_http.RetryPolicy):
    """A retry policy that remembers each wait it chose, so tests check the decision
    instead of timing the sleep (the client still sleeps for real)."""

    delays: list[float] = dataclasses.field(default_factory=list, compare=False, hash=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        chosen = super().delay(attempt, retry_after)
        self.delays.append(chosen)
        return chosen


WRONG_PASSWORD = "n0t-the-Real-pw"
MISSING_DIGEST = "sha256:" + "0" * 64
SECRETS = tuple(
    {
        PASSWORD,
        WRONG_PASSWORD,
        base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode(),
        base64.b64encode(f"{USERNAME}:{WRONG_PASSWORD}".encode()).decode(),
    }
)
MIB = 1 << 20


# -- helpers ----------------------------------------------------------------------------------


def message(exc: BaseException) -> str:
    """``str(exc)``, after checking no credential leaks through it or its chain."""
    seen: BaseException | None = exc
    while seen is not None:
        for text in (str(seen), repr(seen), *map(str, seen.args)):
            for secret in SECRETS:
                assert secret not in text, f"credential leaked in error: {type(seen).__name__}"
        seen = seen.__cause__ or seen.__context__
    return str(exc)


class Connect(Protocol):
    def __call__(
        self,
        target: RegistryServer | FaultProxy | CuttingProxy,
        *,
        credentials: Credentials | None = ...,
        policy: airgap_http.RetryPolicy = ...,
        plain_http: bool | None = ...,
        ca_file: Path | None = ...,
    ) -> Registry: ...


@pytest.fixture
def connect() -> Iterator[Connect]:
    """``connect(server)`` -> a Registry with its own httpx client, closed at teardown."""
    clients: list[httpx.Client] = []

    def factory(
        target: RegistryServer | FaultProxy | CuttingProxy,
        *,
        credentials: Credentials | None = None,
        policy: airgap_http.RetryPolicy = FAST,
        plain_http: bool | None = True,
        ca_file: Path | None = None,
    ) -> Registry:
        client = airgap_http.build_client(
            verify=airgap_http.ssl_context(str(ca_file) if ca_file else None),
            timeout=30,
            fast=True,  # the transport RegistryPool gives registries
        )
        clients.append(client)
        return Registry(
            target.host,
            client=client,
            credentials=credentials,
            plain_http=plain_http,
            policy=policy,
        )

    yield factory
    for client in clients:
        client.close()


@pytest.fixture
def hermetic_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No host auth.json / docker config can feed RegistryPool's credential lookup."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))


def sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(MIB), b""):
            hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()


def file_body(path: Path, chunk: int = MIB) -> Callable[[int], Iterator[bytes]]:
    """An upload body: ``body(offset)`` yields the file from ``offset`` in ``chunk`` pieces."""

    def body(offset: int) -> Iterator[bytes]:
        with path.open("rb") as fh:
            fh.seek(offset)
            while data := fh.read(chunk):
                yield data

    return body


def bytes_body(data: bytes, chunk: int = 64 * 1024) -> Callable[[int], Iterator[bytes]]:
    def body(offset: int) -> Iterator[bytes]:
        for start in range(offset, len(data), chunk):
            yield data[start : start + chunk]

    return body


def download(
    registry: Registry,
    repository: str,
    blob: Descriptor,
    dest: Path,
    on_bytes: Callable[[int], None] | None = None,
) -> Path:
    with dest.open("w+b") as sink:
        registry.download_blob(
            repository, blob.digest, blob.size, sink, what="test", on_bytes=on_bytes
        )
    return dest


def all_manifests(registry: Registry, repository: str, reference: str) -> list[Manifest]:
    """The manifest at ``reference`` and, for an index, its children (fetched by digest)."""
    top = registry.get_manifest(repository, reference, what="test")
    found = [top]
    for child in top.children():
        found.extend(all_manifests(registry, repository, child.digest))
    return found


def all_blobs(registry: Registry, repository: str, reference: str) -> dict[str, Descriptor]:
    return {
        blob.digest: blob
        for manifest in all_manifests(registry, repository, reference)
        for blob in manifest.blobs()
    }


def copy_image(
    source: Registry,
    source_repo: str,
    target: Registry,
    target_repo: str,
    reference: str,
    workdir: Path,
) -> Manifest:
    """Copy an image (children first) with nothing but the client under test."""
    manifest = source.get_manifest(source_repo, reference, what="copy")
    for child in manifest.children():
        copy_image(source, source_repo, target, target_repo, child.digest, workdir)
    for blob in manifest.blobs():
        path = download(source, source_repo, blob, workdir / blob.digest.replace(":", "-"))
        target.upload_blob(target_repo, blob.digest, blob.size, file_body(path), what="copy")
    target.put_manifest(target_repo, reference, manifest, what="copy")
    return manifest


def push_random_image(registry: Registry, repository: str, tag: str) -> Manifest:
    """Upload a config and a layer of fresh random bytes plus an OCI manifest for them."""
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode()
    layer = os.urandom(20_000)
    descriptors = []
    for data, media_type in (
        (config, "application/vnd.oci.image.config.v1+json"),
        (layer, "application/vnd.oci.image.layer.v1.tar"),
    ):
        digest = skopeo.digest_of(data)
        registry.upload_blob(repository, digest, len(data), bytes_body(data), what="push")
        descriptors.append({"mediaType": media_type, "digest": digest, "size": len(data)})
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptors[0],
        "layers": descriptors[1:],
    }
    manifest = Manifest.from_bytes(json.dumps(doc).encode())
    registry.put_manifest(repository, tag, manifest, what="push")
    return manifest


def storage_blob(registry: RegistryServer, digest: str) -> Path:
    hexpart = digest.removeprefix("sha256:")
    return registry.storage_dir / "docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


class CuttingProxy:
    """Relays GET/HEAD to a plain-HTTP registry, cutting the first ``times`` blob GETs
    after ``cut`` body bytes (Content-Length promises more): a connection dropped
    mid-stream, with a TCP reset (``rst=True``) or an orderly close."""

    def __init__(
        self, upstream: RegistryServer, *, cut: int, times: int = 1, rst: bool = True
    ) -> None:
        assert upstream.scheme == "http"
        self.cuts_left = times
        self.log: list[tuple[str, str, int | str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_HEAD(self) -> None:
                self._relay()

            def do_GET(self) -> None:
                self._relay()

            def _relay(self) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=30)
                try:
                    headers = {
                        k: v
                        for k, v in self.headers.items()
                        if k.lower() not in ("connection", "keep-alive")
                    }
                    conn.request(self.command, self.path, headers=headers)
                    response = conn.getresponse()
                    length = response.getheader("Content-Length")
                    cutting = (
                        self.command == "GET"
                        and "/blobs/" in self.path
                        and response.status == 200
                        and length is not None
                        and proxy._take_cut()
                    )
                    self.send_response_only(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                            self.send_header(key, value)
                    if length is None and self.command != "HEAD":
                        self.send_header("Connection", "close")
                        self.close_connection = True
                    self.end_headers()
                    if self.command == "HEAD":
                        proxy._record(self.command, self.path, response.status)
                        return
                    # log before the body leaves, so a client never outruns the log
                    proxy._record(self.command, self.path, "cut" if cutting else response.status)
                    if cutting:
                        left = cut
                        while left and (data := response.read(left)):
                            self.wfile.write(data)
                            left -= len(data)
                        self.wfile.flush()
                        self.close_connection = True
                        if rst:
                            self.connection.setsockopt(
                                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                            )
                        else:
                            self.connection.shutdown(socket.SHUT_WR)
                        return
                    while data := response.read(64 * 1024):
                        self.wfile.write(data)
                finally:
                    conn.close()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts_left <= 0:
                return False
            self.cuts_left -= 1
            return True

    def _record(self, method: str, path: str, status: int | str) -> None:
        with self._lock:
            self.log.append((method, path.split("?")[0], status))

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def cutting_proxy_factory() -> Iterator[Callable[..., CuttingProxy]]:
    started: list[CuttingProxy] = []

    def factory(upstream: RegistryServer, **kwargs: Any) -> CuttingProxy:
        proxy = CuttingProxy(upstream, **kwargs)
        started.append(proxy)
        return proxy

    yield factory
    for proxy in started:
        proxy.stop()


# -- 1. pull flow -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["app", "multiarch", "dockerv2", "dockerlist"])
def test_get_manifest_returns_the_bytes_skopeo_sees(
    name: str,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    connect: Connect,
) -> None:
    image = source_images[name]
    registry = connect(plain_registry)

    by_tag = registry.get_manifest(image.repository, image.tag, what="test")
    assert by_tag.data == image.raw_manifest
    assert by_tag.digest == image.digest
    assert by_tag.media_type == image.media_type

    by_digest = registry.get_manifest(image.repository, image.digest, what="test")
    assert by_digest.data == image.raw_manifest
    assert by_digest.digest == image.digest

    assert registry.manifest_digest(image.repository, image.tag, what="test") == image.digest
    assert registry.manifest_digest(image.repository, image.digest, what="test") == image.digest

    assert [child.digest for child in by_tag.children()] == image.child_digests
    for child in image.child_digests:
        fetched = registry.get_manifest(image.repository, child, what="test")
        expected = skopeo.raw_manifest(
            f"{image.registry_host}/{image.repository}@{child}", registry=plain_registry
        )
        assert fetched.data == expected
        assert fetched.digest == child
        assert not fetched.is_index


def test_missing_manifest(
    source_images: dict[str, TestImage], plain_registry: RegistryServer, connect: Connect
) -> None:
    image = source_images["app"]
    registry = connect(plain_registry)
    assert registry.manifest_digest(image.repository, "no-such-tag", what="test") is None
    assert registry.manifest_digest(image.repository, MISSING_DIGEST, what="test") is None
    with pytest.raises(NotFoundError) as caught:
        registry.get_manifest(image.repository, "no-such-tag", what="image test/app:no-such-tag")
    text = message(caught.value)
    assert caught.value.status == 404
    assert "image test/app:no-such-tag" in text
    assert f"/v2/{image.repository}/manifests/no-such-tag" in text


def test_blob_size_present_and_missing(
    source_images: dict[str, TestImage], plain_registry: RegistryServer, connect: Connect
) -> None:
    image = source_images["app"]
    registry = connect(plain_registry)
    blobs = all_blobs(registry, image.repository, image.tag)
    assert set(blobs) == image.blob_digests
    for blob in blobs.values():
        assert registry.blob_size(image.repository, blob.digest, what="test") == blob.size
    assert registry.blob_size(image.repository, MISSING_DIGEST, what="test") is None
    # A blob that exists in the registry, but not linked into this repository.
    other = source_images["dockerv2"]
    foreign = next(iter(other.layer_digests - image.blob_digests))
    assert registry.blob_size(image.repository, foreign, what="test") is None


@pytest.mark.parametrize("name", ["app", "dockerv2", "multiarch", "dockerlist"])
def test_download_blob_writes_exactly_the_blob(
    name: str,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images[name]
    registry = connect(plain_registry)
    blobs = all_blobs(registry, image.repository, image.tag)
    assert set(blobs) == image.blob_digests  # for indexes: every child's config and layers
    for blob in blobs.values():
        counted: list[int] = []
        path = download(
            registry, image.repository, blob, tmp_path / blob.digest[7:], counted.append
        )
        assert path.stat().st_size == blob.size
        assert sha256_file(path) == blob.digest
        assert sum(counted) == blob.size


class _WriteSizes:
    """A blob sink that keeps only the size of each write it gets."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def seek(self, position: int, whence: int = 0, /) -> int:
        self.sizes.clear()
        return 0

    def truncate(self, size: int | None = None, /) -> int:
        return 0

    def write(self, data: bytes, /) -> int:
        self.sizes.append(len(data))
        return len(data)


def test_download_reads_responses_in_pieces_bigger_than_httpcores_default(
    plain_registry: RegistryServer, connect: Connect
) -> None:
    """Per-read Python work dominated collect's CPU at httpcore's 64 KiB reads; a blob
    streamed over loopback must arrive in bigger reads (airgap.net.http1frames.READ_BYTES, the
    registry transport's; airgap.net.pacedcore.RESPONSE_READ_BYTES for httpcore elsewhere)."""
    registry = connect(plain_registry)
    data = os.urandom(4 * MIB)
    digest = skopeo.digest_of(data)
    registry.upload_blob("read/size", digest, len(data), bytes_body(data, MIB), what="test")
    sink = _WriteSizes()
    registry.download_blob("read/size", digest, len(data), sink, what="test")
    assert sum(sink.sizes) == len(data)
    assert max(sink.sizes) > 64 * 1024
    assert max(sink.sizes) <= http1frames.READ_BYTES


def test_download_missing_blob_is_not_found(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    connect: Connect,
    tmp_path: Path,
) -> None:
    registry = connect(plain_registry)
    with pytest.raises(NotFoundError) as caught:
        download(
            registry,
            source_images["app"].repository,
            Descriptor("x", MISSING_DIGEST, 10),
            tmp_path / "missing",
        )
    assert MISSING_DIGEST in message(caught.value)
    assert caught.value.status == 404


# -- 2. bearer tokens ---------------------------------------------------------------------------


def test_token_pull_with_credentials_uses_scoped_cached_tokens(
    token_registry: RegistryServer,
    token_images: dict[str, TestImage],
    connect: Connect,
    tmp_path: Path,
) -> None:
    server = token_registry.token_server
    assert server is not None
    server.clear()
    image = token_images["app"]
    registry = connect(token_registry, credentials=Credentials(USERNAME, PASSWORD))

    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    assert manifest.data == image.raw_manifest
    scope = f"repository:{image.repository}:pull"
    assert [(r.scopes, r.basic_auth, r.username, r.status) for r in server.requests] == [
        ([scope], True, USERNAME, 200)
    ]
    assert server.requests[0].service == server.service
    assert server.requests[0].granted == [
        {"type": "repository", "name": image.repository, "actions": ["pull"]}
    ]

    # Same repository and scope: the cached token serves everything else.
    again = registry.get_manifest(image.repository, image.digest, what="test")
    assert again.digest == image.digest
    assert registry.manifest_digest(image.repository, image.tag, what="test") == image.digest
    for blob in manifest.blobs():
        assert registry.blob_size(image.repository, blob.digest, what="test") == blob.size
        assert sha256_file(download(registry, image.repository, blob, tmp_path / "b")) == (
            blob.digest
        )
    assert len(server.requests) == 1

    # Another repository needs (and gets) its own token.
    multi = token_images["multiarch"]
    assert registry.manifest_digest(multi.repository, multi.tag, what="test") == multi.digest
    assert len(server.requests) == 2
    assert server.requests[1].scopes == [f"repository:{multi.repository}:pull"]


def test_token_push_requests_pull_and_push(
    token_registry: RegistryServer, connect: Connect
) -> None:
    server = token_registry.token_server
    assert server is not None
    server.clear()
    repository = f"token/pushed-{uuid.uuid4().hex[:8]}"
    registry = connect(token_registry, credentials=Credentials(USERNAME, PASSWORD))

    manifest = push_random_image(registry, repository, "v1")
    requests = list(server.requests)

    push_scope = f"repository:{repository}:pull,push"
    # One pull,push token (with Basic auth) served both uploads and the manifest PUT.
    assert [(r.scopes, r.basic_auth, r.username, r.status) for r in requests] == [
        ([push_scope], True, USERNAME, 200)
    ]
    served = skopeo.raw_manifest(f"{repository}:v1", registry=token_registry)
    assert served == manifest.data


def test_token_wrong_password_is_a_clean_auth_error(
    token_registry: RegistryServer, token_images: dict[str, TestImage], connect: Connect
) -> None:
    image = token_images["app"]
    registry = connect(token_registry, credentials=Credentials(USERNAME, WRONG_PASSWORD))
    with pytest.raises(AuthError) as caught:
        registry.get_manifest(image.repository, image.tag, what="image token/app:v1")
    text = message(caught.value)
    assert caught.value.status == 401
    assert token_registry.host in text
    assert "credentials were tried" in text
    assert "image token/app:v1" in text


def test_token_anonymous_pull_works_but_push_is_refused(
    token_registry: RegistryServer, token_images: dict[str, TestImage], connect: Connect
) -> None:
    server = token_registry.token_server
    assert server is not None
    image = token_images["app"]
    registry = connect(token_registry)
    assert registry.get_manifest(image.repository, image.tag, what="test").digest == image.digest

    server.clear()
    data = b"anonymous push attempt"
    digest = skopeo.digest_of(data)
    with pytest.raises(AuthError) as caught:
        registry.upload_blob(
            "token/anon", digest, len(data), bytes_body(data), what="push token/anon:v1"
        )
    text = message(caught.value)
    assert caught.value.status in (401, 403)
    assert token_registry.host in text
    assert "push token/anon:v1" in text
    assert "no credentials were found" in text
    assert server.requests and not any(r.basic_auth for r in server.requests)


def test_token_mount_between_repositories(
    token_registry: RegistryServer, token_images: dict[str, TestImage], connect: Connect
) -> None:
    server = token_registry.token_server
    assert server is not None
    image = token_images["app"]
    registry = connect(token_registry, credentials=Credentials(USERNAME, PASSWORD))
    target = f"token/mounted-{uuid.uuid4().hex[:8]}"
    layer = sorted(image.layer_digests)[0]
    server.clear()
    assert registry.mount_blob(target, layer, image.repository, what="test")
    assert registry.blob_size(target, layer, what="test") is not None
    assert sorted(server.requests[0].scopes) == sorted(
        [f"repository:{target}:pull,push", f"repository:{image.repository}:pull"]
    )


def test_token_concurrent_downloads_through_one_registry(
    token_registry: RegistryServer,
    token_images: dict[str, TestImage],
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = token_images["multiarch"]
    registry = connect(token_registry, credentials=Credentials(USERNAME, PASSWORD))
    blobs = list(all_blobs(registry, image.repository, image.tag).values())
    assert len(blobs) >= 4
    errors: list[BaseException] = []

    def fetch(index: int, blob: Descriptor) -> None:
        try:
            path = download(registry, image.repository, blob, tmp_path / f"{index}")
            assert sha256_file(path) == blob.digest
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=fetch, args=(i, blob)) for i, blob in enumerate(blobs * 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# -- 3. basic auth + TLS -------------------------------------------------------------------------


@pytest.mark.usefixtures("hermetic_credentials")
def test_basic_tls_through_pool_with_ca_file(
    secure_registry: RegistryServer, source_images: dict[str, TestImage], tmp_path: Path
) -> None:
    assert secure_registry.ca_file is not None
    image = source_images["secure_multiarch"]
    settings = {secure_registry.host: EndpointOptions(ca_file=str(secure_registry.ca_file))}
    with RegistryPool(
        settings, credentials={secure_registry.host: Credentials(USERNAME, PASSWORD)}, policy=FAST
    ) as pool:
        registry = pool.registry(secure_registry.host)
        assert pool.registry(secure_registry.host) is registry
        manifest = registry.get_manifest(image.repository, image.tag, what="test")
        assert registry.base_url == f"https://{secure_registry.host}"
        assert manifest.data == image.raw_manifest
        blobs = all_blobs(registry, image.repository, image.tag)
        assert set(blobs) == image.blob_digests
        for blob in blobs.values():
            path = download(registry, image.repository, blob, tmp_path / blob.digest[7:])
            assert sha256_file(path) == blob.digest
        # Push works too with the same credentials.
        repository = f"secure/pushed-{uuid.uuid4().hex[:8]}"
        pushed = push_random_image(registry, repository, "v1")
        assert registry.manifest_digest(repository, "v1", what="test") == pushed.digest


@pytest.mark.usefixtures("hermetic_credentials")
def test_tls_without_ca_file_tells_user_to_pass_it(
    secure_registry: RegistryServer, source_images: dict[str, TestImage]
) -> None:
    image = source_images["secure_app"]
    with RegistryPool(
        credentials={secure_registry.host: Credentials(USERNAME, PASSWORD)}, policy=FAST
    ) as pool:
        registry = pool.registry(secure_registry.host)
        with pytest.raises(TLSError) as caught:
            registry.get_manifest(image.repository, image.tag, what="test")
    text = message(caught.value)
    assert "--ca-file" in text
    assert secure_registry.host in text


@pytest.mark.usefixtures("hermetic_credentials")
def test_tls_with_the_wrong_ca_is_refused(
    secure_registry: RegistryServer, source_images: dict[str, TestImage], tmp_path: Path
) -> None:
    assert secure_registry.pki is not None
    image = source_images["secure_app"]
    settings = {
        secure_registry.host: EndpointOptions(ca_file=str(secure_registry.pki.other_ca_cert))
    }
    with (
        RegistryPool(
            settings, credentials={secure_registry.host: Credentials(USERNAME, PASSWORD)}
        ) as pool,
        pytest.raises(TLSError) as caught,
    ):
        pool.registry(secure_registry.host).get_manifest(image.repository, image.tag, what="test")
    assert "--ca-file" in message(caught.value)


@pytest.mark.usefixtures("hermetic_credentials")
def test_basic_wrong_password_is_a_clean_auth_error(
    secure_registry: RegistryServer, source_images: dict[str, TestImage]
) -> None:
    assert secure_registry.ca_file is not None
    image = source_images["secure_app"]
    settings = {secure_registry.host: EndpointOptions(ca_file=str(secure_registry.ca_file))}
    with (
        RegistryPool(
            settings,
            credentials={secure_registry.host: Credentials(USERNAME, WRONG_PASSWORD)},
            policy=FAST,
        ) as pool,
        pytest.raises(AuthError) as caught,
    ):
        pool.registry(secure_registry.host).get_manifest(
            image.repository, image.tag, what="image secure/app:v1"
        )
    text = message(caught.value)
    assert caught.value.status == 401
    assert secure_registry.host in text
    assert "credentials were tried" in text
    assert "image secure/app:v1" in text


@pytest.mark.usefixtures("hermetic_credentials")
def test_basic_without_credentials_says_none_were_found(
    secure_registry: RegistryServer, source_images: dict[str, TestImage]
) -> None:
    assert secure_registry.ca_file is not None
    image = source_images["secure_app"]
    settings = {secure_registry.host: EndpointOptions(ca_file=str(secure_registry.ca_file))}
    with RegistryPool(settings, policy=FAST) as pool, pytest.raises(AuthError) as caught:
        pool.registry(secure_registry.host).get_manifest(image.repository, image.tag, what="test")
    text = message(caught.value)
    assert caught.value.status == 401
    assert "no credentials were found" in text


@pytest.mark.parametrize("fast", [True, False], ids=["fasthttp", "httpcore"])
def test_clients_keep_no_cookies(fast: bool) -> None:
    """As Go's clients (containerd, skopeo, crane): a cookie a server sets (a load
    balancer's sticky session, say) is not sent back, on the registry transport or on
    httpx's own (release servers, charts)."""
    seen: list[str | None] = []

    class CookieSetter(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            seen.append(self.headers.get("Cookie"))
            self.send_response(200)
            self.send_header("Set-Cookie", "AWSALB=sticky-session; Path=/")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), CookieSetter)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with airgap_http.build_client(fast=fast) as client:
            url = f"http://127.0.0.1:{server.server_address[1]}/v2/"
            for _ in range(3):
                response = client.get(url)
                assert response.status_code == 200
                assert response.headers["Set-Cookie"].startswith("AWSALB=")
            assert len(client.cookies) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [None, None, None]


@pytest.mark.usefixtures("hermetic_credentials")
def test_pool_skip_tls_verify_and_plain_http_settings(
    secure_registry: RegistryServer,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
) -> None:
    secure = source_images["secure_app"]
    plain = source_images["app"]
    settings = {
        secure_registry.host: EndpointOptions(skip_tls_verify=True),
        plain_registry.host: EndpointOptions(plain_http=True),
    }
    with RegistryPool(
        settings, credentials={secure_registry.host: Credentials(USERNAME, PASSWORD)}, policy=FAST
    ) as pool:
        registry = pool.registry(secure_registry.host)
        assert registry.get_manifest(secure.repository, secure.tag, what="t").digest == (
            secure.digest
        )
        assert registry.base_url.startswith("https://")
        registry = pool.registry(plain_registry.host)
        assert registry.get_manifest(plain.repository, plain.tag, what="t").digest == plain.digest
        assert registry.base_url == f"http://{plain_registry.host}"


@pytest.mark.usefixtures("hermetic_credentials")
def test_pool_pulls_through_a_mirror(
    plain_registry: RegistryServer, source_images: dict[str, TestImage]
) -> None:
    image = source_images["app"]  # test/app:v1 in the plain registry
    settings = {"upstream.example": EndpointOptions(mirror=f"{plain_registry.host}/test")}
    with RegistryPool(settings, policy=FAST) as pool:
        reference = parse_reference("upstream.example/app:v1")
        registry, repository = pool.pull_location(reference)
        assert registry.host == plain_registry.host
        assert repository == image.repository
        manifest = registry.get_manifest(repository, reference.identifier, what="t")
        assert manifest.data == image.raw_manifest


# -- 4. retries ---------------------------------------------------------------------------------


def test_retry_after_is_honoured(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    policy = RecordingPolicy(attempts=3, base_delay=0.01)
    registry = connect(proxy, policy=policy)
    registry.ping()
    proxy.inject("GET", "/manifests/", status=429, headers={"Retry-After": "1"})
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    assert manifest.data == image.raw_manifest
    path = f"/v2/{image.repository}/manifests/{image.tag}"
    assert [r for r in proxy.requests if r.path == path] == [
        ("GET", path, 429),
        ("GET", path, 200),
    ]
    # the server's 1 s (plus jitter, never less), not the 10 ms backoff (what was chosen,
    # not how long it took)
    assert len(policy.delays) == 1 and 1.0 <= policy.delays[0] <= 1.0 + policy.jitter


def test_retry_after_as_http_date_is_honoured(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    # An hour away, capped at 1 s: however slow the machine, the wait the client chose is
    # the cap (from the date), never the 10 ms backoff. A date a second or two away would
    # have passed by the time a loaded machine parsed it.
    policy = RecordingPolicy(attempts=3, base_delay=0.01, max_delay=1.0)
    registry = connect(proxy, policy=policy)
    registry.ping()
    when = email.utils.formatdate(time.time() + 3600, usegmt=True)
    proxy.inject("GET", "/manifests/", status=503, headers={"Retry-After": when})
    assert registry.get_manifest(image.repository, image.tag, what="test").digest == image.digest
    assert [r.status for r in proxy.requests if "/manifests/" in r.path] == [503, 200]
    assert policy.delays == [1.0]


def test_malformed_retry_after_falls_back_to_backoff(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    policy = RecordingPolicy(attempts=3, base_delay=0.01, max_delay=1.0)
    registry = connect(proxy, policy=policy)
    # "nan" once reached time.sleep, whose ValueError ended the command in a traceback;
    # a year past 9999 is no date either
    malformed = ("soon", "nan", "-inf", "Fri, 31 Dec 99999 23:59:59 GMT")
    for value in malformed:
        proxy.inject("GET", "/manifests/", status=429, headers={"Retry-After": value})
        manifest = registry.get_manifest(image.repository, image.tag, what="test")
        assert manifest.digest == image.digest
    statuses = [r.status for r in proxy.requests if "/manifests/" in r.path]
    assert statuses == [429, 200] * len(malformed)
    assert len(policy.delays) == len(malformed)
    assert all(0 < delay <= 0.01 for delay in policy.delays)  # the backoff, not the header


def test_503_twice_then_success(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    registry = connect(proxy)
    proxy.inject("GET", "/manifests/", status=503, times=2)
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    assert manifest.digest == image.digest
    assert [r.status for r in proxy.requests if "/manifests/" in r.path] == [503, 503, 200]

    layer = next(b for b in manifest.blobs() if b.digest in image.layer_digests)
    proxy.inject("GET", "/blobs/", status=503, times=2)
    path = download(registry, image.repository, layer, tmp_path / "layer")
    assert sha256_file(path) == layer.digest
    assert [r.status for r in proxy.requests if "/blobs/" in r.path] == [503, 503, 200]


def test_reset_on_connect_to_blob_is_retried(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    registry = connect(proxy)
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    layer = next(b for b in manifest.blobs() if b.digest in image.layer_digests)
    proxy.inject("GET", f"/blobs/{layer.digest}$", reset=True, times=2)
    path = download(registry, image.repository, layer, tmp_path / "layer")
    assert sha256_file(path) == layer.digest
    assert [r.status for r in proxy.requests if "/blobs/" in r.path] == ["reset", "reset", 200]


@pytest.mark.parametrize("rst", [True, False], ids=["reset", "close"])
def test_blob_cut_mid_stream_is_downloaded_again(
    rst: bool,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    cutting_proxy_factory: Callable[..., CuttingProxy],
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    proxy = cutting_proxy_factory(plain_registry, cut=5000, times=2, rst=rst)
    registry = connect(proxy)
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    layer = max(manifest.blobs(), key=lambda b: b.size)
    assert layer.size > 5000
    counted: list[int] = []
    path = download(registry, image.repository, layer, tmp_path / "layer", counted.append)
    assert path.stat().st_size == layer.size
    assert sha256_file(path) == layer.digest
    blob_gets = [status for method, p, status in proxy.log if method == "GET" and "/blobs/" in p]
    assert blob_gets == ["cut", "cut", 200]
    # Progress is reported net of the bytes thrown away with a broken attempt.
    assert sum(counted) == layer.size


def test_persistent_503_gives_up_naming_url_and_status(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    registry = connect(proxy, policy=airgap_http.RetryPolicy(attempts=4, base_delay=0.01))
    proxy.inject("GET", "/manifests/", status=503, times=100)
    with pytest.raises(HTTPStatusError) as caught:
        registry.get_manifest(image.repository, image.tag, what="image test/app:v1")
    text = message(caught.value)
    assert caught.value.status == 503
    assert f"{proxy.url}/v2/{image.repository}/manifests/{image.tag}" in text
    assert "503" in text
    assert "image test/app:v1" in text
    assert [r.status for r in proxy.requests if "/manifests/" in r.path] == [503] * 4


def test_persistent_blob_reset_gives_up_after_the_policy_attempts(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    proxy = fault_proxy_factory(plain_registry)
    registry = connect(proxy, policy=airgap_http.RetryPolicy(attempts=3, base_delay=0.01))
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    layer = max(manifest.blobs(), key=lambda b: b.size)
    proxy.inject("GET", "/blobs/", reset=True, times=100)
    with pytest.raises(NetworkError) as caught:
        download(registry, image.repository, layer, tmp_path / "layer")
    text = message(caught.value)
    assert proxy.host in text
    # Connection failures are retried by the policy's attempts, not attempts squared;
    # the first attempt went out on the connection kept alive from the manifest GET,
    # and a GET closed on without an answer there is sent once more on a new one (the
    # peer may have closed it as it was taken), as Go's transport does
    assert [r.status for r in proxy.requests if "/blobs/" in r.path] == ["reset"] * 4


def test_persistent_mid_stream_cut_gives_up_after_the_policy_attempts(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    cutting_proxy_factory: Callable[..., CuttingProxy],
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    proxy = cutting_proxy_factory(plain_registry, cut=1000, times=100, rst=False)
    registry = connect(proxy, policy=airgap_http.RetryPolicy(attempts=3, base_delay=0.01))
    manifest = registry.get_manifest(image.repository, image.tag, what="test")
    layer = max(manifest.blobs(), key=lambda b: b.size)
    with pytest.raises(NetworkError) as caught:
        download(registry, image.repository, layer, tmp_path / "layer")
    text = message(caught.value)
    assert layer.digest in text
    assert proxy.host in text
    assert [s for m, p, s in proxy.log if "/blobs/" in p] == ["cut"] * 3


# -- 5. corrupted content -----------------------------------------------------------------------


def test_corrupted_blob_is_a_digest_mismatch(
    corpus_layout: OciLayout,
    registry_factory: RegistryFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    server = registry_factory("plain")
    image = push_image(corpus_layout, "app", server, "corrupt/app", "v1")
    layer = sorted(image.layer_digests)[0]
    flip_byte(storage_blob(server, layer), 100)
    registry = connect(server)
    blob = all_blobs(registry, image.repository, image.tag)[layer]
    with pytest.raises(DigestMismatchError) as caught:
        download(registry, image.repository, blob, tmp_path / "layer")
    text = message(caught.value)
    assert layer in text
    assert server.host in text


def test_corrupted_manifest_is_a_digest_mismatch(
    corpus_layout: OciLayout, registry_factory: RegistryFactory, connect: Connect
) -> None:
    server = registry_factory("plain")
    image = push_image(corpus_layout, "app", server, "corrupt/app", "v1")
    path = storage_blob(server, image.digest)
    doc = json.loads(path.read_bytes())
    # Still valid JSON the registry can parse and serve, but not the bytes of the digest.
    old = doc["config"]["digest"]
    path.write_bytes(path.read_bytes().replace(old.encode(), (old[:-1] + "0").encode()))
    assert old[-1] != "0"
    registry = connect(server)
    for reference in (image.tag, image.digest):
        with pytest.raises(DigestMismatchError) as caught:
            registry.get_manifest(image.repository, reference, what="image corrupt/app")
        text = message(caught.value)
        assert image.digest in text
        assert "image corrupt/app" in text


# -- 6. memory ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[OciLayout, Descriptor]:
    """A layout with a single-layer image whose layer is ~64 MiB; returns (layout, layer)."""
    layout = OciLayout(tmp_path_factory.mktemp("big") / "layout")
    manifest = make_big_image(layout, "big", 64 * MIB, seed=3)
    doc = json.loads(layout.blob_path(manifest.digest).read_bytes())
    (layer,) = doc["layers"]
    return layout, Descriptor(layer["mediaType"], layer["digest"], layer["size"])


def test_download_big_blob_keeps_memory_low(
    big_layout: tuple[OciLayout, Descriptor],
    registry_factory: RegistryFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    layout, layer = big_layout
    server = registry_factory("plain")
    push_image(layout, "big", server, "big/image", "v1")
    registry = connect(server)
    registry.ping()
    dest = tmp_path / "big-layer"
    tracemalloc.start()
    try:
        download(registry, "big/image", layer, dest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sha256_file(dest) == layer.digest
    assert peak < 8 * MIB, f"peak Python heap {peak / MIB:.1f} MiB"


@pytest.mark.parametrize("chunk_size", [None, 16 * MIB], ids=["monolithic", "chunked"])
def test_upload_big_blob_keeps_memory_low(
    chunk_size: int | None,
    big_layout: tuple[OciLayout, Descriptor],
    registry_factory: RegistryFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    layout, layer = big_layout
    server = registry_factory("plain")
    registry = connect(server)
    registry.ping()
    source = layout.blob_path(layer.digest)
    tracemalloc.start()
    try:
        registry.upload_blob(
            "big/upload",
            layer.digest,
            layer.size,
            file_body(source),
            what="test",
            chunk_size=chunk_size,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MIB, f"peak Python heap {peak / MIB:.1f} MiB"
    assert registry.blob_size("big/upload", layer.digest, what="test") == layer.size
    stored = storage_blob(server, layer.digest)
    assert stored.stat().st_size == layer.size
    assert sha256_file(stored) == layer.digest


# -- 7. uploads ---------------------------------------------------------------------------------


def test_monolithic_upload_then_head(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(150_000)
    digest = skopeo.digest_of(data)
    assert registry.blob_size("up/mono", digest, what="test") is None
    registry.upload_blob("up/mono", digest, len(data), bytes_body(data), what="test")
    assert registry.blob_size("up/mono", digest, what="test") == len(data)
    uploads = [(r.method, r.status) for r in proxy.requests if "/blobs/uploads/" in r.path]
    assert uploads == [("POST", 202), ("PUT", 201)]
    path = download(registry, "up/mono", Descriptor("x", digest, len(data)), tmp_path / "b")
    assert path.read_bytes() == data


def test_chunked_upload_with_small_chunks(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(300 * 1024 + 123)
    digest = skopeo.digest_of(data)
    registry.upload_blob(
        "up/chunked", digest, len(data), bytes_body(data, 50_000), what="test", chunk_size=64 * 1024
    )
    uploads = [(r.method, r.status) for r in proxy.requests if "/blobs/uploads/" in r.path]
    assert uploads == [("POST", 202)] + [("PATCH", 202)] * 5 + [("PUT", 201)]
    assert registry.blob_size("up/chunked", digest, what="test") == len(data)
    assert sha256_file(storage_blob(server, digest)) == digest
    path = download(registry, "up/chunked", Descriptor("x", digest, len(data)), tmp_path / "b")
    assert path.read_bytes() == data


def test_chunked_upload_survives_a_503_on_a_patch(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(200 * 1024)
    digest = skopeo.digest_of(data)
    proxy.inject("PATCH", "/blobs/uploads/", status=503, times=1)
    registry.upload_blob(
        "up/retry", digest, len(data), bytes_body(data), what="test", chunk_size=64 * 1024
    )
    assert registry.blob_size("up/retry", digest, what="test") == len(data)
    assert sha256_file(storage_blob(server, digest)) == digest


@pytest.mark.parametrize("chunk_size", [None, 64 * 1024], ids=["monolithic", "chunked"])
def test_upload_retries_a_reset_and_a_503(
    chunk_size: int | None,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(200 * 1024)
    digest = skopeo.digest_of(data)
    method = "PUT" if chunk_size is None else "PATCH"
    proxy.inject(method, "/blobs/uploads/", reset=True, times=1)
    proxy.inject(method, "/blobs/uploads/", status=503, times=1)
    proxy.inject("POST", "/blobs/uploads/", status=502, times=1)
    registry.upload_blob(
        "up/retry", digest, len(data), bytes_body(data), what="test", chunk_size=chunk_size
    )
    statuses = [r.status for r in proxy.requests if r.method == method]
    assert statuses[:3] == ["reset", 503, 201 if chunk_size is None else 202]
    assert [r.status for r in proxy.requests if r.method == "POST"] == [502, 202]
    assert registry.blob_size("up/retry", digest, what="test") == len(data)
    assert sha256_file(storage_blob(server, digest)) == digest


def test_refused_monolithic_upload_falls_back_to_chunks(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(100_000)
    digest = skopeo.digest_of(data)
    proxy.inject("PUT", "/blobs/uploads/", status=413, times=1)
    registry.upload_blob("up/fallback", digest, len(data), bytes_body(data), what="test")
    uploads = [(r.method, r.status) for r in proxy.requests if "/blobs/uploads/" in r.path]
    assert uploads[:5] == [
        ("POST", 202),
        ("PUT", 413),
        ("DELETE", 204),  # the refused session is cancelled, not left to expire
        ("POST", 202),
        ("PATCH", 202),
    ]
    paths = [r.path.split("?")[0] for r in proxy.requests if "/blobs/uploads/" in r.path]
    assert paths[2] == paths[1] != paths[4]  # the refused session, not the new one (PATCH)
    assert uploads[-1] == ("PUT", 201)
    assert registry.blob_size("up/fallback", digest, what="test") == len(data)
    assert sha256_file(storage_blob(server, digest)) == digest


def test_mount_from_another_repository(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(40_000)
    digest = skopeo.digest_of(data)
    registry.upload_blob("mount/source", digest, len(data), bytes_body(data), what="test")
    assert registry.blob_size("mount/target", digest, what="test") is None
    proxy.clear()

    assert registry.mount_blob("mount/target", digest, "mount/source", what="test") is True

    assert registry.blob_size("mount/target", digest, what="test") == len(data)
    target_uploads = [
        (r.method, r.status) for r in proxy.requests if r.path.startswith("/v2/mount/target/")
    ]
    assert target_uploads == [("POST", 201), ("HEAD", 200)]  # no bytes were sent again


def test_mount_of_a_missing_blob_returns_false_and_cancels_the_session(
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    connect: Connect,
) -> None:
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    registry = connect(proxy)
    data = os.urandom(30_000)
    digest = skopeo.digest_of(data)
    registry.ping()
    proxy.clear()

    assert registry.mount_blob("mount/target", digest, "mount/source", what="test") is False

    assert [(r.method, r.status) for r in proxy.requests] == [("POST", 202), ("DELETE", 204)]
    assert proxy.requests[1].path.startswith("/v2/mount/target/blobs/uploads/")
    # The caller falls back to uploading.
    registry.upload_blob("mount/target", digest, len(data), bytes_body(data), what="test")
    assert registry.blob_size("mount/target", digest, what="test") == len(data)


@pytest.mark.parametrize("name", ["app", "multiarch", "dockerv2", "dockerlist"])
def test_put_manifest_pushes_bytes_unchanged(
    name: str,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    registry_factory: RegistryFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images[name]
    target_server = registry_factory("plain")
    source = connect(plain_registry)
    target = connect(target_server)
    copied = copy_image(source, image.repository, target, "copied/image", image.tag, tmp_path)
    assert copied.digest == image.digest
    served = skopeo.raw_manifest("copied/image:v1", registry=target_server)
    assert served == image.raw_manifest
    assert skopeo.digest_of(served) == image.digest
    for child in image.child_digests:
        raw = skopeo.raw_manifest(f"copied/image@{child}", registry=target_server)
        assert skopeo.digest_of(raw) == child
    assert target.manifest_digest("copied/image", image.tag, what="test") == image.digest


def test_put_manifest_by_digest(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    registry_factory: RegistryFactory,
    connect: Connect,
    tmp_path: Path,
) -> None:
    image = source_images["app"]
    target_server = registry_factory("plain")
    source = connect(plain_registry)
    target = connect(target_server)
    copy_image(source, image.repository, target, "bydigest/app", image.digest, tmp_path)
    served = skopeo.raw_manifest(f"bydigest/app@{image.digest}", registry=target_server)
    assert served == image.raw_manifest


# -- 8. plain HTTP auto-detection ----------------------------------------------------------------


def test_auto_detects_plain_http_on_loopback(
    source_images: dict[str, TestImage], plain_registry: RegistryServer, connect: Connect
) -> None:
    image = source_images["app"]
    registry = connect(plain_registry, plain_http=None)
    assert registry.get_manifest(image.repository, image.tag, what="test").digest == image.digest
    assert registry.base_url == f"http://{plain_registry.host}"


def test_auto_detects_https_on_loopback(
    source_images: dict[str, TestImage],
    secure_registry: RegistryServer,
    connect: Connect,
) -> None:
    image = source_images["secure_app"]
    registry = connect(
        secure_registry,
        plain_http=None,
        ca_file=secure_registry.ca_file,
        credentials=Credentials(USERNAME, PASSWORD),
    )
    assert registry.get_manifest(image.repository, image.tag, what="test").digest == image.digest
    assert registry.base_url == f"https://{secure_registry.host}"


def test_auto_detection_never_falls_back_from_an_untrusted_certificate(
    registry_factory: RegistryFactory,
    connect: Connect,
) -> None:
    server = registry_factory("tls")
    registry = connect(server, plain_http=None)
    with pytest.raises(TLSError) as caught:
        registry.manifest_digest("any/thing", "v1", what="test")
    assert "--ca-file" in message(caught.value)
    assert registry.base_url == f"https://{server.host}"


def test_explicit_plain_http_false_does_not_fall_back(
    plain_registry: RegistryServer, connect: Connect
) -> None:
    registry = connect(plain_registry, plain_http=False)
    with pytest.raises(NetworkError) as caught:
        registry.manifest_digest("any/thing", "v1", what="test")
    assert plain_registry.host in message(caught.value)
    assert registry.base_url == f"https://{plain_registry.host}"


class _ViewSink(_WriteSizes):
    """A sink that takes views (``BlobSink.takes_views``): keeps a copy of the bytes and
    the type each write came as."""

    takes_views = True

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.kinds: set[type] = set()

    def seek(self, position: int, whence: int = 0, /) -> int:
        self.data.clear()
        return super().seek(position, whence)

    def write(self, data: bytes, /) -> int:
        self.kinds.add(type(data))
        self.data += data
        return super().write(data)


@pytest.mark.parametrize("mode", ["plain", "tls+basic"])
def test_a_sink_taking_views_gets_one_reused_buffer_over_http_and_tls(
    mode: str, plain_registry: RegistryServer, secure_registry: RegistryServer, connect: Connect
) -> None:
    """Collect's bundle regions take views of one buffer per thread (no bytes object per
    read, issue 12's peak RSS); the blob is whole and checked as before, and over TLS the
    records already arrived fill the buffer as ``recv`` did."""
    if mode == "plain":
        registry = connect(plain_registry)
    else:
        registry = connect(
            secure_registry,
            credentials=Credentials(USERNAME, PASSWORD),
            plain_http=False,
            ca_file=secure_registry.ca_file,
        )
    data = os.urandom(3 * MIB + 12345)
    digest = skopeo.digest_of(data)
    registry.upload_blob("read/views", digest, len(data), bytes_body(data, MIB), what="test")
    sink, plain = _ViewSink(), _WriteSizes()
    registry.download_blob("read/views", digest, len(data), sink, what="test")
    registry.download_blob("read/views", digest, len(data), plain, what="test")
    assert bytes(sink.data) == data
    assert sink.kinds == {memoryview}
    assert max(sink.sizes) <= http1frames.READ_BYTES
    assert len(sink.sizes) < len(data) // (64 * 1024)  # big reads, over TLS too
    assert sum(plain.sizes) == len(data)


def test_a_view_download_cut_mid_stream_is_downloaded_again(
    plain_registry: RegistryServer,
    cutting_proxy_factory: Callable[..., CuttingProxy],
    connect: Connect,
) -> None:
    registry = connect(plain_registry)
    data = os.urandom(2 * MIB)
    digest = skopeo.digest_of(data)
    registry.upload_blob("read/cut", digest, len(data), bytes_body(data, MIB), what="test")
    proxy = cutting_proxy_factory(plain_registry, cut=5000, times=1, rst=False)
    sink = _ViewSink()
    connect(proxy).download_blob("read/cut", digest, len(data), sink, what="test")
    assert bytes(sink.data) == data
    blob_gets = [status for method, p, status in proxy.log if method == "GET" and "/blobs/" in p]
    assert blob_gets == ["cut", 200]
