"""Sanity checks that the test harness is real: servers answer, digests are true, faults fire."""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.harness import skopeo
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.images import (
    DOCKER_LAYER,
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    OciLayout,
    TestImage,
    make_big_image,
    push_image,
)
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import PASSWORD, USERNAME

pytestmark = pytest.mark.integration


def _client(registry: RegistryServer) -> httpx.Client:
    return httpx.Client(verify=registry.ssl_context(), timeout=10)


# -- registries -------------------------------------------------------------------------------


def test_plain_registry_answers_v2(plain_registry: RegistryServer) -> None:
    assert plain_registry.host.startswith("127.0.0.1:")
    with _client(plain_registry) as client:
        response = client.get(f"{plain_registry.url}/v2/")
    assert response.status_code == 200
    assert response.headers["Docker-Distribution-API-Version"] == "registry/2.0"


def test_secure_registry_needs_tls_trust_and_basic_auth(
    secure_registry: RegistryServer, pki: Pki
) -> None:
    assert secure_registry.scheme == "https"
    assert secure_registry.username == USERNAME
    with _client(secure_registry) as client:
        anonymous = client.get(f"{secure_registry.url}/v2/")
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic ")
        wrong = client.get(f"{secure_registry.url}/v2/", auth=(USERNAME, "nope"))
        assert wrong.status_code == 401
        ok = client.get(f"{secure_registry.url}/v2/", auth=(USERNAME, PASSWORD))
        assert ok.status_code == 200
    untrusted = ssl.create_default_context(cafile=str(pki.other_ca_cert))
    with (
        httpx.Client(verify=untrusted, timeout=10) as client,
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get(f"{secure_registry.url}/v2/")


@pytest.mark.parametrize(("mode", "status"), [("plain", 200), ("tls", 200), ("basic", 401)])
def test_registry_factory_modes(registry_factory: RegistryFactory, mode: str, status: int) -> None:
    registry = registry_factory(mode)
    with _client(registry) as client:
        assert client.get(f"{registry.url}/v2/").status_code == status
    registry.stop()
    assert not registry.running


# -- token auth -------------------------------------------------------------------------------


def test_token_registry_challenge_and_token_policy(token_registry: RegistryServer) -> None:
    token_server = token_registry.token_server
    assert token_server is not None
    token_server.clear()
    with _client(token_registry) as client:
        challenge = client.get(f"{token_registry.url}/v2/nothere/manifests/latest")
        assert challenge.status_code == 401
        header = challenge.headers["WWW-Authenticate"]
        assert header.startswith("Bearer ")
        assert f'realm="{token_server.realm}"' in header
        assert f'service="{token_server.service}"' in header
        assert 'scope="repository:nothere:pull"' in header

        params = {"service": token_server.service, "scope": "repository:nothere:pull,push"}
        anonymous = client.get(token_server.realm, params=params)
        assert anonymous.status_code == 200
        body = anonymous.json()
        assert body["token"] == body["access_token"]
        assert body["expires_in"] == 300
        claims = json.loads(_b64(body["token"].split(".")[1]))
        assert claims["access"] == [{"type": "repository", "name": "nothere", "actions": ["pull"]}]
        assert claims["aud"] == token_server.service

        # The registry accepts our JWT: the repo is now merely unknown, not unauthorized.
        pulled = client.get(
            f"{token_registry.url}/v2/nothere/manifests/latest",
            headers={"Authorization": f"Bearer {body['token']}"},
        )
        assert pulled.status_code == 404

        wrong = client.get(token_server.realm, params=params, auth=(USERNAME, "nope"))
        assert wrong.status_code == 401
        granted = client.get(token_server.realm, params=params, auth=(USERNAME, PASSWORD))
        claims = json.loads(_b64(granted.json()["token"].split(".")[1]))
        assert claims["access"][0]["actions"] == ["pull", "push"]

    assert [(r.basic_auth, r.status) for r in token_server.requests] == [
        (False, 200),
        (True, 401),
        (True, 200),
    ]


def test_token_registry_push_needs_credentials(
    token_registry: RegistryServer, corpus_layout: OciLayout
) -> None:
    token_server = token_registry.token_server
    assert token_server is not None
    token_server.clear()
    dest = skopeo.docker_ref("pushed/app:v1", token_registry)
    with pytest.raises(skopeo.SkopeoError):
        skopeo.copy(corpus_layout.ref("app"), dest, dest_registry=None)
    assert token_server.requests and not any(r.basic_auth for r in token_server.requests)

    token_server.clear()
    skopeo.copy(corpus_layout.ref("app"), dest, dest_registry=token_registry)
    assert any(
        r.basic_auth and r.status == 200 and "push" in r.granted[0]["actions"]
        for r in token_server.requests
        if r.granted
    )
    served = skopeo.raw_manifest("pushed/app:v1", registry=token_registry)
    assert served == skopeo.raw_manifest_oci(corpus_layout.root, "app")


def test_token_images(
    token_images: dict[str, TestImage], source_images: dict[str, TestImage]
) -> None:
    assert token_images["app"].digest == source_images["app"].digest
    assert token_images["multiarch"].digest == source_images["multiarch"].digest


# -- corpus -----------------------------------------------------------------------------------


def test_corpus_digests_are_what_registries_serve(
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    secure_registry: RegistryServer,
) -> None:
    assert set(source_images) == {
        "app",
        "sidecar",
        "multiarch",
        "dockerv2",
        "dockerlist",
        "secure_app",
        "secure_multiarch",
    }
    for image in source_images.values():
        registry = secure_registry if image.repository.startswith("secure/") else plain_registry
        raw = skopeo.raw_manifest(image.reference, registry=registry)
        assert skopeo.digest_of(raw) == image.digest == skopeo.digest_of(image.raw_manifest)
        assert json.loads(raw).get("mediaType") == image.media_type
    # Pushed as-is, the OCI images keep the layout's exact bytes (and digests).
    for name in ("app", "sidecar", "multiarch"):
        image = source_images[name]
        assert image.layout_ref is not None
        layout_dir = image.layout_ref.split(":")[1]
        local = skopeo.raw_manifest_oci(Path(layout_dir), name)
        assert skopeo.digest_of(local) == image.digest
    assert source_images["secure_app"].digest == source_images["app"].digest
    assert source_images["secure_multiarch"].digest == source_images["multiarch"].digest


def test_corpus_shape(source_images: dict[str, TestImage]) -> None:
    app, sidecar = source_images["app"], source_images["sidecar"]
    assert app.media_type == sidecar.media_type == OCI_MANIFEST
    assert (app.repository, app.tag) == ("test/app", "v1")
    assert (sidecar.repository, sidecar.tag) == ("test/sidecar", "v2")
    assert len(app.layer_digests) == len(sidecar.layer_digests) == 3
    app_layers = [layer["digest"] for layer in json.loads(app.raw_manifest)["layers"]]
    sidecar_layers = [layer["digest"] for layer in json.loads(sidecar.raw_manifest)["layers"]]
    assert app_layers[:2] == sidecar_layers[:2]  # shared base layers, byte-identical
    assert app_layers[2] != sidecar_layers[2]

    multi = source_images["multiarch"]
    assert multi.media_type == OCI_INDEX
    assert multi.platforms == ["linux/amd64", "linux/arm64/v8"]
    assert len(multi.child_digests) == 2
    assert len(multi.config_digests) == 2
    assert len(multi.layer_digests) == 3  # one shared base layer + one per platform
    assert multi.blob_digests == multi.config_digests | multi.layer_digests


def test_docker_media_types(
    source_images: dict[str, TestImage], plain_registry: RegistryServer
) -> None:
    single = source_images["dockerv2"]
    assert single.media_type == DOCKER_MANIFEST
    assert {layer["mediaType"] for layer in json.loads(single.raw_manifest)["layers"]} == {
        DOCKER_LAYER
    }
    listed = source_images["dockerlist"]
    assert listed.media_type == DOCKER_LIST
    assert listed.platforms == ["linux/amd64", "linux/arm64/v8"]
    for child in listed.child_digests:
        raw = skopeo.raw_manifest(f"{listed.repository}@{child}", registry=plain_registry)
        assert json.loads(raw)["mediaType"] == DOCKER_MANIFEST


def test_every_blob_is_served(
    source_images: dict[str, TestImage], plain_registry: RegistryServer
) -> None:
    with _client(plain_registry) as client:
        for name in ("app", "sidecar", "multiarch", "dockerv2", "dockerlist"):
            image = source_images[name]
            for digest in image.blob_digests:
                url = f"{plain_registry.url}/v2/{image.repository}/blobs/{digest}"
                response = client.head(url)
                assert response.status_code == 200, (name, digest)
                assert response.headers["Docker-Content-Digest"] == digest


def test_big_image_is_streamed_and_pushable(
    tmp_path: Path, registry_factory: RegistryFactory
) -> None:
    layout = OciLayout(tmp_path / "big")
    size = 3 * 1024 * 1024 + 17
    manifest = make_big_image(layout, "big", size, seed=7, chunk_size=256 * 1024)
    doc = json.loads(layout.blob_path(manifest.digest).read_bytes())
    (layer,) = doc["layers"]
    blob = layout.blob_path(layer["digest"])
    assert blob.stat().st_size == layer["size"] > size
    hasher = hashlib.sha256()
    with blob.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            hasher.update(chunk)
    assert "sha256:" + hasher.hexdigest() == layer["digest"]
    config = json.loads(layout.blob_path(doc["config"]["digest"]).read_bytes())
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    again = make_big_image(OciLayout(tmp_path / "big2"), "big", size, seed=7)
    assert again.digest == manifest.digest  # deterministic

    registry = registry_factory("plain")
    image = push_image(layout, "big", registry, "big/image", "v1")
    assert image.digest == manifest.digest
    assert image.layer_digests == {layer["digest"]}


# -- fault proxy ------------------------------------------------------------------------------


def test_fault_proxy_injects_503_once_then_forwards(
    plain_registry: RegistryServer, fault_proxy_factory: FaultProxyFactory
) -> None:
    proxy = fault_proxy_factory(plain_registry)
    proxy.inject("GET", r"^/v2/$", status=503, headers={"Retry-After": "1"})
    with httpx.Client(timeout=10) as client:
        first = client.get(f"{proxy.url}/v2/")
        assert first.status_code == 503
        assert first.headers["Retry-After"] == "1"
        second = client.get(f"{proxy.url}/v2/")
        assert second.status_code == 200
        assert second.headers["Docker-Distribution-API-Version"] == "registry/2.0"
    assert proxy.requests == [("GET", "/v2/", 503), ("GET", "/v2/", 200)]
    assert proxy.connections_accepted == 1  # the 503 did not break keep-alive
    assert proxy.pending_faults == []


def test_fault_proxy_reset_drops_the_connection(
    plain_registry: RegistryServer, fault_proxy_factory: FaultProxyFactory
) -> None:
    proxy = fault_proxy_factory(plain_registry)
    proxy.inject(None, r"/v2/", reset=True, times=2)
    with httpx.Client(timeout=10) as client:
        for _ in range(2):
            with pytest.raises(httpx.TransportError):
                client.get(f"{proxy.url}/v2/")
        assert client.get(f"{proxy.url}/v2/").status_code == 200
    assert [r.status for r in proxy.requests] == ["reset", "reset", 200]


def test_fault_proxy_streams_chunked_uploads_and_keeps_location_on_proxy(
    registry_factory: RegistryFactory, fault_proxy_factory: FaultProxyFactory
) -> None:
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    data = bytes(range(256)) * 4096  # 1 MiB
    digest = skopeo.digest_of(data)

    def body() -> Iterator[bytes]:  # a generator makes httpx send Transfer-Encoding: chunked
        for offset in range(0, len(data), 100_000):
            yield data[offset : offset + 100_000]

    with httpx.Client(timeout=10) as client:
        start = client.post(f"{proxy.url}/v2/up/load/blobs/uploads/")
        assert start.status_code == 202
        location = start.headers["Location"]
        assert location.startswith(proxy.url)  # Host header preserved end to end
        patched = client.patch(location, content=body())
        assert patched.status_code == 202, patched.text
        # httpx's params= would *replace* the query and lose the registry's _state token.
        done = client.put(
            httpx.URL(patched.headers["Location"]).copy_merge_params({"digest": digest})
        )
        assert done.status_code == 201, done.text
        fetched = client.get(f"{proxy.url}/v2/up/load/blobs/{digest}")
        assert fetched.content == data
        head = client.head(f"{proxy.url}/v2/up/load/blobs/{digest}")
        assert head.headers["Content-Length"] == str(len(data))
    assert [r.method for r in proxy.requests] == ["POST", "PATCH", "PUT", "GET", "HEAD"]


def test_fault_proxy_with_skopeo_and_tls_upstream(
    secure_registry: RegistryServer,
    source_images: dict[str, TestImage],
    fault_proxy_factory: FaultProxyFactory,
) -> None:
    proxy = fault_proxy_factory(secure_registry)
    image = source_images["secure_app"]
    with httpx.Client(timeout=10) as client:
        response = client.get(
            f"{proxy.url}/v2/{image.repository}/manifests/{image.tag}",
            headers={"Accept": image.media_type},
            auth=(USERNAME, PASSWORD),
        )
        assert response.status_code == 200
        assert skopeo.digest_of(response.content) == image.digest
        # The registry answers 401 before reading a big unauthenticated body and hangs up;
        # the proxy must relay that answer rather than turn it into a 502.
        early = client.patch(
            f"{proxy.url}/v2/{image.repository}/blobs/uploads/x", content=b"\0" * (4 << 20)
        )
        assert early.status_code == 401

    proxy.inject("GET", r"/manifests/", status=503, headers={"Retry-After": "1"})
    with pytest.raises(skopeo.SkopeoError):
        skopeo.run(
            [
                "inspect",
                "--raw",
                "--retry-times=0",
                "--tls-verify=false",
                "--creds",
                f"{USERNAME}:{PASSWORD}",
                f"docker://{proxy.host}/{image.repository}:{image.tag}",
            ]
        )
    assert (
        skopeo.raw_manifest(
            f"{proxy.host}/{image.repository}:{image.tag}", registry=_PlainEndpoint(proxy.host)
        )
        == image.raw_manifest
    )


@dataclass
class _PlainEndpoint:
    """A skopeo.RegistryLike for an HTTP endpoint (the proxy) with the test credentials."""

    host: str
    scheme: str = "http"
    cert_dir: Path | None = None
    username: str | None = USERNAME
    password: str | None = PASSWORD


def _b64(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
