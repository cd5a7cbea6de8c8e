"""What ``airgap serve`` answers, without a socket: repository names, tags, ranges."""

from __future__ import annotations

import hashlib
import json

import pytest

from airgap.bundle.format import ImageRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import InputError
from airgap.oci.manifest import OCI_INDEX, OCI_MANIFEST
from airgap.serve.catalog import AmbiguousName, build_catalog
from airgap.serve.ranges import Unsatisfiable, parse_range
from airgap.serve.run import parse_listen

pytestmark = pytest.mark.unit


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _image(layer: bytes) -> tuple[bytes, dict[str, bytes]]:
    config = b'{"architecture": "amd64", "os": "linux"}'
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _digest(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    return manifest, {_digest(m): m for m in (manifest, config, layer)}


def _world() -> tuple[BundleManifest, dict[str, bytes], dict[str, str]]:
    one, blobs_one = _image(b"layer one")
    two, blobs_two = _image(b"layer two")
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": _digest(two),
                    "size": len(two),
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
    ).encode()
    members = {blob_member(d): data for d, data in {**blobs_one, **blobs_two}.items()}
    members[blob_member(_digest(index))] = index
    images = [
        ImageRecord("quay.io/test/app:v1", _digest(one), OCI_MANIFEST, [], 1),
        ImageRecord("registry.k8s.io/test/app:v1", _digest(index), OCI_INDEX, [], 1),
        # the same tag pinned to another digest: the tag-only reference keeps the tag
        ImageRecord(f"quay.io/test/app:v1@{_digest(index)}", _digest(index), OCI_INDEX, [], 1),
        ImageRecord("mirror.corp:5000/tools/x:v2", _digest(one), OCI_MANIFEST, [], 1),
    ]
    manifest = BundleManifest("2024-01-01T00:00:00Z", "0", [], images, [])
    digests = {"one": _digest(one), "two": _digest(two), "index": _digest(index)}
    return manifest, members, digests


def test_two_names_per_repository_and_ns_to_choose() -> None:
    manifest, members, digests = _world()
    catalog = build_catalog(manifest, members.__getitem__, set(members))
    assert catalog.names() == [
        "mirror.corp-5000/tools/x",
        "quay.io/test/app",
        "registry.k8s.io/test/app",
    ]
    with pytest.raises(AmbiguousName) as caught:
        catalog.repository("test/app")
    assert caught.value.choices == ["quay.io/test/app", "registry.k8s.io/test/app"]
    quay = catalog.repository("test/app", "quay.io")
    k8s = catalog.repository("test/app", "registry.k8s.io")
    assert quay is catalog.repository("quay.io/test/app")
    assert k8s is catalog.repository("registry.k8s.io/test/app")
    assert catalog.repository("tools/x") is catalog.repository("mirror.corp-5000/tools/x")
    assert catalog.repository("nothing") is None
    assert quay is not None and k8s is not None
    assert quay.tags == {"v1": digests["one"]}  # the tag-only reference owns v1
    assert k8s.tags == {"v1": digests["index"]}
    # a repository serves its own images only: manifests, children and blobs
    assert k8s.manifests == {digests["index"], digests["two"]}
    assert quay.manifests == {digests["one"], digests["index"], digests["two"]}
    assert _digest(b"layer two") in k8s.blobs and _digest(b"layer one") not in k8s.blobs
    assert catalog.manifests[digests["index"]].media_type == OCI_INDEX


def test_a_delta_serves_what_it_carries() -> None:
    manifest, members, digests = _world()
    carried = set(members) - {blob_member(digests["two"])}
    catalog = build_catalog(manifest, members.__getitem__, carried)
    k8s = catalog.repository("registry.k8s.io/test/app")
    assert k8s is not None and k8s.manifests == {digests["index"]}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=90-", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-1000", (0, 99)),
        ("bytes=5-500", (5, 99)),
        ("bytes=9-3", None),  # invalid: ignored
        ("bytes=0-1,4-5", None),  # several ranges: the whole blob
        ("items=0-1", None),
        ("bytes=-", None),
        ("bytes=99999999999999999999-", None),  # more digits than any size: not a range
    ],
)
def test_ranges(header: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=100-200", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(Unsatisfiable):
        parse_range(header, 100)


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:5050") == ("127.0.0.1", 5050)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":5050") == ("0.0.0.0", 5050)  # noqa: S104 (every interface)
    for bad in ("5050", "host:", "host:99999", "host:x", "host:\u0661\u0662", "host:" + "9" * 5000):
        with pytest.raises(InputError, match="--listen"):
            parse_listen(bad)
