"""Mounting from what the target already holds, remembered across imports (the blob index).

Against the real registry: the same bundle imported under a second prefix uploads no blob
(every one is mounted from the first prefix's repositories), and a stale, forged or
corrupt index only costs failed mounts and uploads, never a wrong image.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from airgap.mirror.blobindex import MAX_HOLDERS, BlobIndex, index_path
from airgap.oci.manifest import sha256_digest
from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.images import OciLayout, push_image
from tests.harness.importing import import_report
from tests.harness.registry import RegistryFactory, RegistryServer

pytestmark = pytest.mark.e2e


def _import(
    bundle: CollectedBundle, host: str, prefix: str, cache: Path, out: Path
) -> dict[str, Any]:
    """import_report with a cache directory of the test's own: the blob index it builds
    is what is tested."""
    env = {"AIRGAP_CACHE_DIR": str(cache)}
    return import_report(bundle.path, bundle.key.public, f"{host}/{prefix}", out, env=env)


def _assert_images_intact(bundle: CollectedBundle, registry: RegistryServer, prefix: str) -> None:
    """Every image under ``prefix`` has the source digest, children included (the
    registry serves a manifest only with everything it references)."""
    for source, image in bundle.providers.images.items():
        ref = f"{registry.host}/{prefix}/{source.split('/', 1)[1]}"
        assert sha256_digest(skopeo.raw_manifest(ref, registry=registry)) == image.digest
        for child in image.child_digests:
            child_ref = f"{ref.rsplit(':', 1)[0]}@{child}"
            assert sha256_digest(skopeo.raw_manifest(child_ref, registry=registry)) == child
        repository = f"{prefix}/{image.repository}"
        for blob in image.blob_digests:  # each blob's bytes, as served, hash to its digest
            response = httpx.get(f"{registry.url}/v2/{repository}/blobs/{blob}")
            assert response.status_code == 200, (repository, blob)
            assert sha256_digest(response.content) == blob


def _blob_requests(proxy: FaultProxy) -> list[tuple[str, int | str]]:
    """Blob uploads of the bundle's images. The manifests images of capi-manifests/
    (issue 18) are left out: they hold the components rewritten for this prefix, so
    each prefix has new blobs of its own to upload."""
    return [
        (r.method, r.status)
        for r in proxy.requests
        if "/blobs/uploads/" in r.path and "/capi-manifests/" not in r.path
    ]


def test_a_second_prefix_mounts_every_blob_and_uploads_none(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    cache = tmp_path / "cache"
    first = _import(capi_bundle, proxy.host, "one", cache, tmp_path / "one")
    assert first["blobs_uploaded"] > 0
    index_file = index_path(proxy.host, cache)
    assert index_file.is_file() and (index_file.stat().st_mode & 0o777) == 0o600
    remembered = json.loads(index_file.read_text())
    assert remembered["registry"] == proxy.host and remembered["blobs"]
    assert all(r.startswith("one/") for h in remembered["blobs"].values() for r in h)

    proxy.clear()
    second = _import(capi_bundle, proxy.host, "two", cache, tmp_path / "two")
    assert (second["blobs_uploaded"], second["bytes_uploaded"]) == (0, 0)
    assert second["blobs_mounted"] == first["blobs_uploaded"] + first["blobs_mounted"]
    requests = _blob_requests(proxy)
    assert requests and all(request == ("POST", 201) for request in requests), requests
    _assert_images_intact(capi_bundle, registry, "two")


def test_a_stale_or_forged_index_costs_an_upload_never_a_wrong_image(
    capi_bundle: CollectedBundle,
    corpus_layout: OciLayout,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    cache = tmp_path / "cache"
    # a decoy repository holding some real blobs (the app image), none of the others
    decoy = push_image(corpus_layout, "app", registry, "decoy/app", "v1")
    digests = {d for image in capi_bundle.providers.images.values() for d in image.blob_digests}
    forged: dict[str, list[str]] = {
        digest: ["ghost/never-pushed", "decoy/app", "../../etc", "UPPER/case"][:MAX_HOLDERS]
        for digest in digests
    }
    forged["sha256:" + "0" * 64] = ["decoy/app"]  # a digest the bundle does not have
    index_file = index_path(proxy.host, cache)
    index_file.parent.mkdir(parents=True)
    index_file.write_text(json.dumps({"formatVersion": 1, "registry": proxy.host, "blobs": forged}))

    report = _import(capi_bundle, proxy.host, "capi", cache, tmp_path / "out")
    _assert_images_intact(capi_bundle, registry, "capi")
    reused = digests & decoy.blob_digests  # in decoy/app: mounted from there, correctly
    assert reused and report["blobs_uploaded"] > 0
    uploads = [r for r in proxy.requests if r.method in ("PUT", "PATCH") and "/uploads/" in r.path]
    assert uploads  # the failed mounts fell back to uploads
    learned = BlobIndex.load(proxy.host, cache)
    assert learned is not None
    for digest in digests:  # the failed hints are forgotten, the truth is learned
        holders = learned.holders(digest)
        assert "ghost/never-pushed" not in holders and holders[0].startswith("capi/")
    again = _import(capi_bundle, proxy.host, "again", cache, tmp_path / "again")
    assert again["blobs_uploaded"] == 0  # and the corrected index mounts everything


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xffnot json",
        b"[" * 100_000,
        b'{"formatVersion": 1, "registry": "elsewhere:5000", "blobs": {}}',
        b'{"formatVersion": 1, "registry": "%s", "blobs": {"sha256:x": "not a list"}}',
        b'{"formatVersion": 2}',
    ],
    ids=["binary", "deep", "other-registry", "wrong-types", "future-format"],
)
def test_a_corrupt_index_is_ignored_and_replaced(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path, content: bytes
) -> None:
    registry = registry_factory("plain")
    cache = tmp_path / "cache"
    index_file = index_path(registry.host, cache)
    index_file.parent.mkdir(parents=True)
    index_file.write_bytes(content.replace(b"%s", registry.host.encode()))
    report = _import(capi_bundle, registry.host, "capi", cache, tmp_path / "out")
    assert report["blobs_uploaded"] > 0
    _assert_images_intact(capi_bundle, registry, "capi")
    assert json.loads(index_file.read_text())["registry"] == registry.host


def test_an_unwritable_cache_only_costs_the_hint(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache directory should be\n")
    report = _import(capi_bundle, registry.host, "capi", cache, tmp_path / "out")
    assert report["blobs_uploaded"] > 0 and os.path.isfile(cache)
