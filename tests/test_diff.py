"""``airgap diff OLD NEW`` on realistic bundle pairs, through the real CLI.

The pairs come from ``delta_fixtures``: a provider upgrade with a contract change (core
v1.9.0 on v1beta1 to v1.11.0 on v1beta2) with one image added, one removed and one at
a new digest; and a one-image change, whole and as a delta. The expected differences
are worked out independently, from the tars' members and the source registry.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from pathlib import Path
from typing import Any, cast

import pytest

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.reader import read_head
from tests.harness import tamper
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.delta_fixtures import DeltaBundles
from tests.harness.management_fixtures import ManagementBundle
from tests.harness.tarextract import extract
from tests.test_delta import carried_blobs, changed_pieces

pytestmark = pytest.mark.e2e


def diff_json(old: Path, new: Path, *extra: str | Path) -> dict[str, Any]:
    result = run_airgap("diff", old, new, "--format", "json", *extra)
    assert result.returncode == 0, result.stderr
    return cast(dict[str, Any], json.loads(result.stdout))


def test_a_provider_upgrade_with_a_contract_change(delta_bundles: DeltaBundles) -> None:
    document = diff_json(delta_bundles.old, delta_bundles.new)
    assert document["providers"] == [
        {
            "change": "upgraded",
            "kind": "CoreProvider",
            "name": "cluster-api",
            "old": {"version": "v1.9.0", "contract": "v1beta1"},
            "new": {"version": "v1.11.0", "contract": "v1beta2"},
            "contractChanged": True,
        }
    ]
    images = delta_bundles.images
    assert document["images"] == [
        {
            "change": "added",
            "reference": images["extra"].reference,
            "oldDigest": None,
            "newDigest": images["extra"].digest,
        },
        {
            "change": "removed",
            "reference": images["gone"].reference,
            "oldDigest": images["gone"].digest,
            "newDigest": None,
        },
        {
            "change": "changed",
            "reference": images["app_v2"].reference,
            "oldDigest": images["app_v1"].digest,
            "newDigest": images["app_v2"].digest,
        },
    ]
    assert document["unchangedImages"] == 2
    assert document["relation"] is None
    old, new = carried_blobs(delta_bundles.old), carried_blobs(delta_bundles.new)
    added, gone = new.keys() - old.keys(), old.keys() - new.keys()
    assert document["blobs"] == {
        "new": len(added),
        "newBytes": sum(new[d] for d in added),
        "newCarried": len(added),
        "newCarriedBytes": sum(new[d] for d in added),
        "newRelied": 0,
        "newReliedBytes": 0,
        "removed": len(gone),
        "removedBytes": sum(old[d] for d in gone),
        "common": len(old.keys() & new.keys()),
    }
    head = read_head(delta_bundles.new).manifest_bytes
    assert document["new"]["manifest"] == "sha256:" + hashlib.sha256(head).hexdigest()
    assert document["new"]["signer"] is None

    text = run_airgap("diff", delta_bundles.old, delta_bundles.new)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert re.search(
        r"^\^\s+cluster-api\s+CoreProvider\s+v1\.9\.0\s+v1\.11\.0\s+"
        r"v1beta1 -> v1beta2 \(changed\)$",
        out,
        re.M,
    )
    assert "Images: 1 added, 1 removed, 1 changed digest, 2 unchanged" in out
    assert re.search(rf"^\+\s+{re.escape(images['extra'].reference)}\s+-\s+sha256:", out, re.M)
    assert re.search(rf"^-\s+{re.escape(images['gone'].reference)}\s+sha256:\S+\s+-$", out, re.M)
    short_old, short_new = images["app_v1"].digest[:19], images["app_v2"].digest[:19]
    assert re.search(
        rf"^~\s+{re.escape(images['app_v2'].reference)}\s+{short_old}\s+{short_new}$", out, re.M
    )
    assert f"Blobs: {len(added)} new" in out
    assert all(len(line) <= 100 for line in out.splitlines()[2:])  # tables fit 100 columns


def test_a_delta_against_its_base_and_against_its_whole_twin(delta_bundles: DeltaBundles) -> None:
    key = delta_bundles.key.public
    document = diff_json(delta_bundles.old, delta_bundles.one_delta, "--key", key)
    assert document["relation"] == "new is a delta of old"
    assert document["new"]["delta"] is True
    assert document["old"]["signer"] == document["new"]["signer"] is not None
    assert document["providers"] == []
    assert [(i["change"], i["newDigest"]) for i in document["images"]] == [
        ("changed", delta_bundles.images["app_v2"].digest)
    ]
    changed = changed_pieces(delta_bundles)
    sizes = carried_blobs(delta_bundles.one_delta)
    assert set(sizes) == changed
    blobs = document["blobs"]
    assert (blobs["new"], blobs["newBytes"]) == (len(changed), sum(sizes.values()))
    assert blobs["newCarried"] == blobs["new"] and blobs["newRelied"] == 0
    # the delta and the whole bundle of the same spec name the same blobs
    twin = diff_json(delta_bundles.one, delta_bundles.one_delta)
    assert twin["images"] == [] and twin["providers"] == []
    assert (twin["blobs"]["new"], twin["blobs"]["removed"]) == (0, 0)
    # the other way round: a whole bundle against a delta of something else relies on
    # nothing; a delta against another bundle says what it relies on that is new
    reverse = diff_json(delta_bundles.new, delta_bundles.one_delta)
    assert reverse["relation"] is None
    assert reverse["blobs"]["newRelied"] >= 1  # gone:v1's pieces, which new lacks
    text = run_airgap("diff", delta_bundles.new, delta_bundles.one_delta)
    assert "relies on its target for" in text.stdout


def test_diff_reads_only_the_manifests(delta_bundles: DeltaBundles, tmp_path: Path) -> None:
    """A damaged blob does not change a diff (no blob is read), and a manifest
    extracted with its signature stands for its bundle."""
    layer = sorted(changed_pieces(delta_bundles) - {delta_bundles.images["app_v2"].digest})[0]
    damaged = tamper.flip_byte(
        delta_bundles.one, tmp_path / "damaged.tar", "images/blobs/sha256/" + layer[7:]
    )
    assert run_airgap("verify", damaged, "--key", delta_bundles.key.public).returncode == 1
    key = delta_bundles.key.public
    expected = diff_json(delta_bundles.old, delta_bundles.one)
    got = diff_json(delta_bundles.old, damaged, "--key", key)
    assert got["images"] == expected["images"] and got["blobs"] == expected["blobs"]
    with tarfile.open(delta_bundles.old) as tar:
        extract(tar, tmp_path, [tar.getmember(MANIFEST_NAME), tar.getmember(SIGNATURE_NAME)])
    from_manifest = diff_json(tmp_path / MANIFEST_NAME, delta_bundles.one, "--key", key)
    assert from_manifest["images"] == expected["images"]
    assert from_manifest["blobs"] == expected["blobs"]


def test_a_signature_that_does_not_verify_is_one_line(
    delta_bundles: DeltaBundles, tmp_path: Path
) -> None:
    _, other = tamper.new_key(tmp_path)
    result = run_airgap("diff", delta_bundles.old, delta_bundles.new, "--key", other)
    assert_clean_failure(result, 1, "old bundle", str(delta_bundles.old), "trusted key")
    resigned = tamper.resign_as_is(
        delta_bundles.new, tmp_path / "resigned.tar", tmp_path / "untrusted.key"
    )
    key = delta_bundles.key.public
    result = run_airgap("diff", delta_bundles.old, resigned, "--key", key)
    assert_clean_failure(result, 1, "new bundle", str(resigned))
    result = run_airgap("diff", delta_bundles.old, tmp_path / "missing.tar")
    assert_clean_failure(result, 2, "missing.tar")


def test_content_sets_and_providers_added_and_removed(
    delta_bundles: DeltaBundles, management_bundle: ManagementBundle
) -> None:
    """Against a management bundle (cert-manager, the operator, templates, other
    providers): every content set is added, providers are added and removed."""
    document = diff_json(delta_bundles.old, management_bundle.path)
    manifest = management_bundle.manifest
    assert document["contents"] == [
        {
            "change": "added",
            "kind": c.kind,
            "name": c.name,
            "old": None,
            "new": {"version": c.version},
        }
        for c in sorted(manifest.contents, key=lambda c: (c.kind, c.name))
    ]
    changes = {(p["kind"], p["name"]): p["change"] for p in document["providers"]}
    old = delta_bundles.manifest(delta_bundles.old)
    for provider in manifest.providers:
        if (provider.type, provider.name) not in {(p.type, p.name) for p in old.providers}:
            assert changes[(provider.type, provider.name)] == "added"
    assert changes[("InfrastructureProvider", "odd")] == "removed"
    text = run_airgap("diff", delta_bundles.old, management_bundle.path).stdout
    assert re.search(r"^\+\s+certManager\s+cert-manager\s+-\s+v", text, re.M)
