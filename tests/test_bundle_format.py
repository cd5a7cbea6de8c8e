import dataclasses
import hashlib
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airgap.bundle.format import (
    MANIFEST_NAME,
    SIGNATURE_NAME,
    ArtifactRecord,
    ContentRecord,
    DeltaRecord,
    FileRecord,
    ImageRecord,
    NeedRecord,
    ProviderImageRecord,
    ProviderRecord,
    TrustRecord,
)
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.bundle.writer import PlannedMember, RegionWriter, TarPlan
from airgap.core.errors import BundleError
from airgap.core.fsutil import atomic_writer
from airgap.core.limits import MAX_JSON_DEPTH
from airgap.formats import jsonsafe
from airgap.oci.layout import index_json
from airgap.oci.manifest import Descriptor

pytestmark = pytest.mark.unit


def _manifest() -> BundleManifest:
    return BundleManifest(
        created="2026-11-21T00:00:00Z",
        tool_version="0.1.0",
        providers=[
            ProviderRecord(
                "cluster-api",
                "CoreProvider",
                "v1.9.4",
                "v1beta1",
                "cluster-api",
                "https://x/releases",
                "providers/a/metadata.yaml",
                "providers/a/core-components.yaml",
                ["docker.io/library/a:1"],
            )
        ],
        images=[
            ImageRecord("docker.io/library/a:1", "sha256:" + "1" * 64, "m", ["linux/amd64"], 5)
        ],
        files=[FileRecord("providers/a/metadata.yaml", "2" * 64, 3)],
    )


def test_manifest_round_trips_and_is_deterministic() -> None:
    manifest = _manifest()
    data = manifest.to_bytes()
    assert data == manifest.to_bytes()
    assert BundleManifest.from_bytes(data) == manifest
    assert b'"sourceDigest"' not in data  # absent optional fields are omitted
    assert b'"mediaType": "m"' in data


def test_image_provider_records_before_and_after_profiles_were_carried_apart() -> None:
    """A bundle written before profiles were carried apart (issue 41) has neither
    ``clusterctlProfile`` nor ``profileFiles``: it reads, and writes back, byte for
    byte as before; a new one round-trips with both."""
    old = ProviderImageRecord("q.io/x@sha256:" + "a" * 64, ["default", "aws"], "x", 20)
    base = _manifest()
    provider = dataclasses.replace(base.providers[0], image=old)
    manifest = dataclasses.replace(base, providers=[provider])
    data = manifest.to_bytes()
    assert b"profileFiles" not in data and b"clusterctlProfile" not in data
    document = json.loads(data)
    assert set(document["providers"][0]["image"]) == {
        "reference",
        "profiles",
        "name",
        "installOrder",
    }
    assert BundleManifest.from_bytes(data) == manifest
    assert BundleManifest.from_bytes(data).to_bytes() == data
    files = [
        f"p/profiles/{n}/{f}"
        for n in ("default", "aws")
        for f in ("metadata.yaml", "manifests.yaml")
    ]
    new = dataclasses.replace(old, clusterctl_profile="default", profile_files=files)
    manifest = dataclasses.replace(base, providers=[dataclasses.replace(provider, image=new)])
    data = manifest.to_bytes()
    assert json.loads(data)["providers"][0]["image"]["profileFiles"] == files
    assert BundleManifest.from_bytes(data) == manifest


def test_manifest_bytes_are_json_dumps_indent_2_of_the_document() -> None:
    """to_bytes writes the document a record at a time (issue 12, peak RSS): the bytes
    must stay exactly ``json.dumps(document, indent=2)`` plus a newline, every optional
    section present, empty lists and non-ASCII text included."""
    base = _manifest()
    manifest = BundleManifest(
        created=base.created,
        tool_version=base.tool_version,
        providers=base.providers,
        images=[
            *base.images,
            ImageRecord("r/b:1", "sha256:" + "3" * 64, "m", [], 7, "sha256:" + "4" * 64, "pin"),
        ],
        files=[*base.files, FileRecord("images/blobs/sha256/" + "5" * 64, "5" * 64, 9)],
        contents=[ContentRecord("templates", "t", "v1", "s", ["a"], [], ["bad ${X} \u00e9"])],
        artifacts=[ArtifactRecord("r/b:1", "sha256:" + "3" * 64, "sbom", "tag", "d", "m", 1)],
        trust=[TrustRecord("rekorKeys", "trust/rekor.pem")],
        delta=DeltaRecord([NeedRecord("sha256:" + "6" * 64, 2, "m")], base="ab" * 32),
    )
    data = manifest.to_bytes()
    assert data == json.dumps(json.loads(data), indent=2).encode() + b"\n"
    assert BundleManifest.from_bytes(data) == manifest
    empty = BundleManifest("2026-11-21T00:00:00Z", "0.1.0", [], [], [])
    assert empty.to_bytes() == json.dumps(json.loads(empty.to_bytes()), indent=2).encode() + b"\n"
    assert b'"providers": [],' in empty.to_bytes()


def test_index_json_is_json_dumps_indent_2_of_the_index() -> None:
    """index.json is also written an entry at a time: still json.dumps(indent=2)."""
    entries = [
        (f"r/\u00e9{n}:1", Descriptor("m", "sha256:" + f"{n:064x}", n, "linux/amd64"))
        for n in range(3)
    ]
    for found in (entries, []):
        data = index_json(found)
        assert data == json.dumps(json.loads(data), indent=2).encode() + b"\n"
    assert json.loads(index_json(entries))["manifests"][2]["annotations"] == {
        "org.opencontainers.image.ref.name": "r/\u00e92:1"
    }


def test_malformed_manifest_is_a_bundle_error() -> None:
    with pytest.raises(BundleError, match="malformed"):
        BundleManifest.from_bytes(b'{"formatVersion": 1}')
    with pytest.raises(BundleError, match="format version"):
        BundleManifest.from_bytes(b'{"formatVersion": 99}')


def test_tar_layout_and_head(tmp_path: Path) -> None:
    payload = tmp_path / "data.bin"
    payload.write_bytes(b"x" * 1000)
    long_name = "providers/" + "n" * 120 + "/file.yaml"
    out = tmp_path / "b.tar"
    members = [
        PlannedMember(long_name, 1000, path=payload),
        PlannedMember("images/x", 3, data=b"abc"),
        PlannedMember("images/later", 700),  # filled after the skeleton, like a blob
    ]
    plan = TarPlan.build(b"{}", b"sig\n", members, mtime=1_700_000_000)
    (region,) = plan.regions()
    with atomic_writer(out) as handle:
        plan.write_skeleton(handle.fileno())
        writer = RegionWriter(handle.fileno(), region)
        writer.write(b"y" * 300)
        writer.seek(0)  # a retried download starts again
        writer.write(b"z" * 700)
        with pytest.raises(OSError, match="more bytes"):
            writer.write(b"!")
    assert out.stat().st_size == plan.total_size
    with tarfile.open(out) as tar:
        names = tar.getnames()
        assert names == [MANIFEST_NAME, SIGNATURE_NAME, long_name, "images/x", "images/later"]
        member = tar.getmember("images/x")
        assert member.isfile() and member.mtime == 1_700_000_000 and member.uid == 0
        extracted = tar.extractfile(long_name)
        assert extracted is not None and extracted.read() == b"x" * 1000
        assert tar.extractfile("images/x").read() == b"abc"  # type: ignore[union-attr]
        assert tar.extractfile("images/later").read() == b"z" * 700  # type: ignore[union-attr]
    head = read_head(out)
    assert (head.manifest_bytes, head.signature) == (b"{}", b"sig\n")
    assert not list(tmp_path.glob(".b.tar*"))  # no temporary left behind


def test_read_head_rejects_non_bundles(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"hello")
    with pytest.raises(BundleError, match="junk.tar"):
        read_head(junk)


def test_file_records_decoded_compactly_read_and_refuse_as_before() -> None:
    """Issue 12 (scale RSS): a well-formed ``files`` entry becomes its compact record as
    the manifest is decoded, a blob's digest kept as bytes. The records read back the
    same texts, the bytes written are the same, and an object shaped like an entry
    anywhere else (or a malformed entry) reads and is refused exactly as before."""
    blob = FileRecord("images/blobs/sha256/" + "ab" * 32, "ab" * 32, 9)
    upper = FileRecord("images/blobs/sha256/" + "AB" * 32, "AB" * 32, 1)  # kept as text
    other = FileRecord("images/blobs/sha256/" + "cd" * 32, "ef" * 32, 2)  # name != digest
    assert (blob.path, blob.sha256, blob.blob_named) == (
        "images/blobs/sha256/" + "ab" * 32,
        "ab" * 32,
        True,
    )
    assert (upper.sha256, upper.blob_named, other.path[-64:], other.blob_named) == (
        "AB" * 32,
        False,
        "cd" * 32,
        False,
    )
    base = _manifest()
    manifest = BundleManifest(
        base.created,
        base.tool_version,
        base.providers,
        base.images,
        [*base.files, blob, upper, other],
    )
    data = manifest.to_bytes()
    parsed = BundleManifest.from_bytes(data)
    assert parsed == manifest and parsed.to_bytes() == data
    assert [f.path for f in parsed.files] == [f.path for f in manifest.files]
    with pytest.raises(dataclasses.FrozenInstanceError):
        blob.size = 3

    entry = {"path": "p", "sha256": "s", "size": 1}
    document = json.loads(data)

    def refused(edit: dict[str, object]) -> str:
        with pytest.raises(BundleError) as caught:
            BundleManifest.from_bytes(json.dumps({**document, **edit}).encode())
        return str(caught.value)

    prefix = "malformed bundle manifest: airgap-bundle.json"
    assert refused({"tool": entry}) == f"{prefix}.tool.version: missing (expected a string)"
    assert refused({"providers": [entry]}) == f"{prefix}.providers[0]: unknown key 'path'"
    assert refused({"files": entry}) == f"{prefix}.files: expected a list, got an object"
    assert refused({"files": [entry, {**entry, "size": True}]}) == (
        f"{prefix}.files[1].size: expected a non-negative integer, got true"
    )
    assert refused({"files": [{"sha256": "s", "path": "p", "size": -1}]}) == (
        f"{prefix}.files[0].size: expected a non-negative integer, got the number -1"
    )
    assert refused({"files": [[entry]]}) == f"{prefix}.files[0]: expected an object, got a list"
    with pytest.raises(BundleError, match="format version None"):
        BundleManifest.from_bytes(json.dumps(entry).encode())
    duplicate = data.replace(b'"size": 9', b'"size": 9, "size": 9', 1)
    with pytest.raises(BundleError, match="key 'size' appears twice"):
        BundleManifest.from_bytes(duplicate)
    nested: object = entry  # an entry-shaped object one level past the depth limit
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    assert refused({"x": nested}) == f"{prefix}: nested deeper than {MAX_JSON_DEPTH} levels"
    shallower = json.dumps({**document, "x": nested[0]})  # type: ignore[index]
    assert BundleManifest.from_bytes(shallower.encode()) == manifest  # at the limit: read


def _chunked(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def test_manifest_streamed_in_pieces_reads_and_refuses_as_from_bytes() -> None:
    """Verify parses the signed manifest from pieces of its bytes read again (issue 12,
    scale RSS): any cut between pieces (inside a number, a string, a UTF-8 sequence)
    gives the same manifest; bytes that changed since they were hashed are refused;
    anything else gives from_bytes's value or its very message."""
    base = _manifest()
    images = [
        ImageRecord(f"r/i{n}:1", f"sha256:{n:064x}", "m", ["linux/amd64"], n) for n in range(9)
    ]
    files = [FileRecord(f"images/blobs/sha256/{n:064x}", f"{n:064x}", 10**n) for n in range(9)]
    manifest = BundleManifest(
        base.created, "0.1.0 \u00e9\U0001f600", base.providers, images, [*base.files, *files]
    )
    data = manifest.to_bytes()
    sha = hashlib.sha256(data).hexdigest()
    for size in (1, 2, 3, 5, 64, len(data)):
        assert BundleManifest.from_chunks(lambda size=size: _chunked(data, size), sha) == manifest  # type: ignore[misc]  # mypy#15459: a lambda default that binds the loop variable
        streamed: object = jsonsafe.loads_streamed(_chunked(data, size), max_bytes=len(data))
        assert streamed == json.loads(data)  # streamed indeed, not read again whole

    changed = data.replace(b'"size": 8', b'"size": 9', 1)
    with pytest.raises(BundleError, match="changed after it was verified"):
        BundleManifest.from_chunks(lambda: _chunked(changed, 7), sha)

    def outcome(read: Callable[[], BundleManifest]) -> object:
        try:
            return read()
        except BundleError as exc:
            return str(exc)

    document = json.loads(data)
    variants = [
        data + b"x",
        data[:-3],
        b"\xef\xbb\xbf" + data,
        data.decode().encode("utf-16"),
        data.replace(b'"created"', b'"tool": {}, "created"', 1),
        data.replace(b'"size": 3', b'"size": NaN', 1),
        data.replace(b'"size": 3', b'"size": 3, "size": 3', 1),
        data.replace(b'"size": 5\n', b'"size": 5, "x": ' + b"[" * 70 + b"]" * 70 + b"\n", 1),
        json.dumps({**document, "files": {"path": "p", "sha256": "s", "size": 1}}).encode(),
        json.dumps({**document, "providers": [document["images"][0]]}).encode(),
        json.dumps({**document, "x": [[[[document["images"][0]]]]]}).encode(),
        b"[" + data + b"]",
        b"\xff" + data,
        b"",
    ]
    for variant in variants:
        digest = hashlib.sha256(variant).hexdigest()
        plain = outcome(lambda variant=variant: BundleManifest.from_bytes(variant))  # type: ignore[misc]  # mypy#15459
        for size in (1, 4096):
            streamed = outcome(
                lambda variant=variant, size=size, digest=digest: BundleManifest.from_chunks(  # type: ignore[misc]  # mypy#15459
                    lambda: _chunked(variant, size), digest
                )
            )
            assert streamed == plain, variant[:80]


def test_image_entries_decoded_as_records_refuse_as_before() -> None:
    """Image entries become records as they are decoded too: one shaped like an entry
    elsewhere is read as the object it is, and the depth its platforms list adds is
    still counted."""
    document = json.loads(_manifest().to_bytes())
    image = document["images"][0]
    prefix = "malformed bundle manifest: airgap-bundle.json"

    def refused(edit: dict[str, object]) -> str:
        with pytest.raises(BundleError) as caught:
            BundleManifest.from_bytes(json.dumps({**document, **edit}).encode())
        return str(caught.value)

    assert refused({"files": [image]}) == f"{prefix}.files[0]: unknown key 'reference'"
    assert refused({"images": [{**image, "size": -1}]}) == (
        f"{prefix}.images[0].size: expected a non-negative integer, got the number -1"
    )
    assert refused({"images": [{**image, "platforms": [1]}]}) == (
        f"{prefix}.images[0].platforms[0]: expected a string, got the number 1"
    )
    nested: object = image  # its platforms list one level past the limit
    for _ in range(MAX_JSON_DEPTH - 2):
        nested = [nested]
    assert refused({"x": nested}) == f"{prefix}: nested deeper than {MAX_JSON_DEPTH} levels"
