"""Issue 12 (collect's peak RSS per image): collect writes ``index.json`` to its staging
directory a piece at a time and spills the small blobs it holds (image manifests and
configs) into one staging file, members of the tar then copied from their offsets.
These check that what lands in the bundle is byte for byte what was held before."""

import json
import os
import tarfile
from pathlib import Path

import pytest

from airgap.bundle.writer import PlannedMember, Sink, TarPlan
from airgap.oci.layout import index_json, write_index_json
from airgap.oci.manifest import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, Descriptor

pytestmark = pytest.mark.unit


def test_staged_index_json_is_the_index_collect_held_before(tmp_path: Path) -> None:
    entries = [
        ("reg.example/a/b:v1", Descriptor(OCI_INDEX, "sha256:" + "1" * 64, 1234)),
        ("reg.example/c@sha256:" + "2" * 64, Descriptor(OCI_MANIFEST, "sha256:" + "2" * 64, 5)),
        ("reg.example/\u00e9:x", Descriptor(DOCKER_MANIFEST, "sha256:" + "3" * 64, 0)),
    ]
    expected = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": d.media_type,
                "digest": d.digest,
                "size": d.size,
                "annotations": {"org.opencontainers.image.ref.name": ref},
            }
            for ref, d in entries
        ],
    }
    for found, document in ((entries, expected), ([], {**expected, "manifests": []})):
        staged = tmp_path / "index.json"
        with staged.open("wb") as out:
            write_index_json(iter(found), out)
        assert staged.read_bytes() == json.dumps(document, indent=2).encode() + b"\n"
        assert staged.read_bytes() == index_json(found)


def _plan(tmp_path: Path) -> tuple[TarPlan, dict[str, bytes]]:
    """Members copied from offsets of one spill file, between others of every kind."""
    blobs = {f"images/blobs/sha256/{n:064x}": os.urandom(300 + 97 * n) for n in range(5)}
    spill = tmp_path / ".inline-blobs"
    other = tmp_path / "components.yaml"
    other.write_bytes(b"kind: List\n" * 50)
    members = [PlannedMember("providers/c/components.yaml", other.stat().st_size, path=other)]
    offset = 0
    with spill.open("wb") as out:
        for number, (name, data) in enumerate(reversed(blobs.items())):
            out.write(data)
            members.append(PlannedMember(name, len(data), path=spill, offset=offset))
            offset += len(data)
            if number == 1:
                members.append(PlannedMember("images/blobs/sha256/" + "f" * 64, 10))  # deferred
                members.append(PlannedMember("images/x", 3, data=b"abc"))
    plan = TarPlan.build(b"{}", b"sig\n", members, mtime=1_700_000_000)
    expected = {**blobs, "providers/c/components.yaml": other.read_bytes(), "images/x": b"abc"}
    return plan, expected


def _check(tar_path: Path, expected: dict[str, bytes]) -> None:
    with tarfile.open(tar_path) as tar:
        for name, data in expected.items():
            extracted = tar.extractfile(name)
            assert extracted is not None and extracted.read() == data, name


def test_spilled_blobs_are_copied_from_their_offsets(tmp_path: Path) -> None:
    plan, expected = _plan(tmp_path)
    assert [r.size for r in plan.regions()] == [10]
    out = tmp_path / "b.tar"
    with out.open("wb") as handle:
        plan.write_skeleton(handle.fileno())
    _check(out, expected)


def test_spilled_blobs_crossing_into_the_next_part_are_copied_whole(tmp_path: Path) -> None:
    plan, expected = _plan(tmp_path)
    paths = [tmp_path / "p.000", tmp_path / "p.001", tmp_path / "p.002"]
    sizes = [2048 + 100, 1700, plan.total_size - 3848]  # cuts inside members
    handles = [path.open("wb+") for path in paths]
    try:
        plan.write_skeleton(Sink([h.fileno() for h in handles], sizes, paths))
    finally:
        for handle in handles:
            handle.close()
    whole = tmp_path / "whole.tar"
    whole.write_bytes(b"".join(path.read_bytes() for path in paths))
    _check(whole, expected)
