import json

import pytest

from airgap.core.errors import AirgapError
from airgap.oci.manifest import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Manifest,
    filter_index,
    platform_matches,
    sha256_digest,
)

pytestmark = pytest.mark.unit


def _index(media_type: str = OCI_INDEX) -> bytes:
    entries = [
        {
            "mediaType": OCI_MANIFEST,
            "digest": "sha256:" + "a" * 64,
            "size": 10,
            "platform": {"os": "linux", "architecture": "amd64"},
        },
        {
            "mediaType": OCI_MANIFEST,
            "digest": "sha256:" + "b" * 64,
            "size": 11,
            "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
        },
        {
            "mediaType": OCI_MANIFEST,
            "digest": "sha256:" + "c" * 64,
            "size": 12,
            "platform": {"os": "unknown", "architecture": "unknown"},
        },
    ]
    return json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries}).encode()


def test_manifest_digest_is_hash_of_exact_bytes() -> None:
    data = (
        b'{"schemaVersion":2,  "mediaType":"%s","config":{"mediaType":"x","digest":"sha256:%s","size":3},"layers":[]}'
        % (OCI_MANIFEST.encode(), b"d" * 64)
    )
    manifest = Manifest.from_bytes(data)
    assert manifest.digest == sha256_digest(data)
    assert manifest.data is data
    assert [b.digest for b in manifest.blobs()] == ["sha256:" + "d" * 64]
    assert not manifest.is_index


def test_media_type_from_header_when_body_has_none() -> None:
    data = json.dumps(
        {
            "schemaVersion": 2,
            "config": {"digest": "sha256:" + "e" * 64, "size": 1},
            "layers": [{"digest": "sha256:" + "f" * 64, "size": 2}],
        }
    ).encode()
    assert (
        Manifest.from_bytes(data, DOCKER_MANIFEST + "; charset=utf-8").media_type == DOCKER_MANIFEST
    )


def test_index_children_and_platforms() -> None:
    index = Manifest.from_bytes(_index(DOCKER_LIST))
    assert index.is_index
    assert [c.platform for c in index.children()] == [
        "linux/amd64",
        "linux/arm64/v8",
        "unknown/unknown",
    ]


def test_filter_index_keeps_only_wanted_platforms() -> None:
    index = Manifest.from_bytes(_index())
    filtered = filter_index(index, ("linux/arm64",))
    assert [c.platform for c in filtered.children()] == ["linux/arm64/v8"]
    assert filtered.digest != index.digest
    assert filtered.digest == sha256_digest(filtered.data)


@pytest.mark.parametrize(
    ("platform", "wanted", "expected"),
    [
        ("linux/arm64/v8", ("linux/arm64",), True),
        ("linux/arm64", ("linux/arm64/v8",), False),
        ("linux/amd64", ("linux/arm64", "linux/amd64"), True),
        (None, ("linux/amd64",), False),
    ],
)
def test_platform_matches(platform: str | None, wanted: tuple[str, ...], expected: bool) -> None:
    assert platform_matches(platform, wanted) is expected


def test_unsupported_media_type_is_refused() -> None:
    with pytest.raises(AirgapError, match="unsupported manifest media type"):
        Manifest.from_bytes(
            b'{"mediaType": "application/vnd.docker.distribution.manifest.v1+json"}'
        )


def test_invalid_json_is_refused() -> None:
    with pytest.raises(AirgapError, match="not valid JSON"):
        Manifest.from_bytes(b"{nope")
