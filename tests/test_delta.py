"""Delta bundles and have-lists, against real registries, skopeo and the real CLI.

The trip every month: a base bundle was imported; the next one carries only what
changed (``collect --base``) or only what the far side lacks (``collect --have`` with
the have-list ``status --export-have`` wrote there). A delta relies on the target for
the rest: verify lists what it needs, and import checks the target holds all of it
(HEAD only) before pushing anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import httpx
import pytest

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from tests.harness import skopeo, tamper
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.delta_fixtures import DeltaBundles
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.tarextract import extract

PREFIX = "mirror"
BLOBS = "images/blobs/sha256/"


def carried_blobs(bundle: Path) -> dict[str, int]:
    """sha256 digest -> size of every blob member (read from the tar, not the manifest)."""
    with tarfile.open(bundle) as tar:
        return {
            "sha256:" + m.name.removeprefix(BLOBS): m.size
            for m in tar.getmembers()
            if m.name.startswith(BLOBS)
        }


def changed_pieces(bundles: DeltaBundles) -> set[str]:
    """What the one-image change made new: app v2's manifest, config and top layer."""
    old, new = bundles.images["app_v1"], bundles.images["app_v2"]
    return {new.digest} | (new.blob_digests - old.blob_digests)


def import_(
    bundle: Path, registry: RegistryServer, key: Path, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    return run_airgap(
        "import",
        bundle,
        "--key",
        key,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "-q",
        *extra,
    )


def catalog(registry: RegistryServer) -> list[str]:
    return httpx.get(f"{registry.url}/v2/_catalog").json()["repositories"] or []


def target_of(image: TestImage, registry: RegistryServer) -> str:
    return f"{registry.host}/{PREFIX}/{image.repository}:{image.tag}"


@pytest.mark.integration
def test_a_one_image_change_carries_only_the_changed_blobs(delta_bundles: DeltaBundles) -> None:
    delta = carried_blobs(delta_bundles.one_delta)
    whole = carried_blobs(delta_bundles.one)
    changed = changed_pieces(delta_bundles)
    assert set(delta) == changed  # the manifest, the config, the new layer: nothing else
    assert sum(delta.values()) == sum(whole[d] for d in changed)
    assert len(whole) > 3 * len(delta)
    manifest = delta_bundles.manifest(delta_bundles.one_delta)
    old = read_head(delta_bundles.old)
    assert manifest.delta is not None
    assert manifest.delta.base == "sha256:" + hashlib.sha256(old.manifest_bytes).hexdigest()
    assert manifest.delta.have_list is None
    # every digest it relies on is listed once, with the size a whole bundle carries
    assert {n.digest: n.size for n in manifest.needs} == {
        d: s for d, s in whole.items() if d not in changed
    }
    # providers and images are listed whole: the delta describes everything it relies on
    whole_manifest = delta_bundles.manifest(delta_bundles.one)
    assert [(i.reference, i.digest) for i in manifest.images] == [
        (i.reference, i.digest) for i in whole_manifest.images
    ]
    app = next(i for i in manifest.images if "/app:" in i.reference)
    assert set(app.needs) == delta_bundles.images["app_v2"].blob_digests - changed


@pytest.mark.e2e
def test_verify_checks_what_it_carries_and_lists_what_it_needs(
    delta_bundles: DeltaBundles,
) -> None:
    key = delta_bundles.key.public
    result = run_airgap("verify", delta_bundles.one_delta, "--key", key, "--format", "json")
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    assert report["verified"] is True
    delta = report["delta"]
    old = read_head(delta_bundles.old).manifest_bytes
    assert delta["base"] == "sha256:" + hashlib.sha256(old).hexdigest()
    needs = {n["digest"]: n for n in delta["needs"]}
    side = delta_bundles.images["side"]
    assert side.reference in needs[side.digest]["images"]  # an unchanged image: all of it
    assert needs[side.digest]["mediaType"] == side.media_type
    base_layer = sorted(side.layer_digests & delta_bundles.images["app_v2"].layer_digests)[0]
    assert {side.reference, delta_bundles.images["app_v2"].reference} <= set(
        needs[base_layer]["images"]
    )
    assert not changed_pieces(delta_bundles) & set(needs)
    assert delta["needsSize"] == sum(n["size"] for n in delta["needs"])
    text = run_airgap("verify", delta_bundles.one_delta, "--key", key)
    assert text.returncode == 0, text.stdout
    assert "a delta relying on" in text.stdout.splitlines()[0]
    assert f"relies on {len(needs)} manifests and blobs" in text.stdout
    assert "RELIES ON" in text.stdout


@pytest.mark.e2e
def test_verify_refuses_a_delta_that_hides_a_missing_blob(
    delta_bundles: DeltaBundles, tmp_path: Path
) -> None:
    """A carried blob dropped (and the manifest re-signed): the layout check still
    finds it missing, since it is not among the image's needs."""
    new_layer = sorted(changed_pieces(delta_bundles) - {delta_bundles.images["app_v2"].digest})
    member = BLOBS + new_layer[0].split(":", 1)[1]
    forged = tamper.resign(
        delta_bundles.one_delta,
        tmp_path / "forged.tar",
        delta_bundles.key.private,
        drop=[member],
    )
    result = run_airgap("verify", forged, "--key", delta_bundles.key.public)
    assert result.returncode == 1
    assert f"{new_layer[0]} is not in the bundle" in result.stdout

    def unlisted(manifest: BundleManifest) -> BundleManifest:
        assert manifest.delta is not None
        needs = manifest.delta.needs[1:]
        return dataclasses.replace(manifest, delta=dataclasses.replace(manifest.delta, needs=needs))

    dropped = delta_bundles.manifest(delta_bundles.one_delta).needs[0].digest
    forged = tamper.resign(
        delta_bundles.one_delta, tmp_path / "unlisted.tar", delta_bundles.key.private, edit=unlisted
    )
    result = run_airgap("verify", forged, "--key", delta_bundles.key.public)
    assert result.returncode == 1
    assert f"relies on '{dropped}', which delta.needs does not list" in result.stdout


@pytest.mark.e2e
def test_a_delta_into_a_registry_without_its_base_fails_and_pushes_nothing(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory
) -> None:
    registry: RegistryServer = registry_factory("plain")
    result = import_(delta_bundles.one_delta, registry, delta_bundles.key.public)
    line = assert_clean_failure(result, 1, "is a delta bundle", "nothing was pushed")
    manifest = delta_bundles.manifest(delta_bundles.one_delta)
    for image in manifest.images:  # every image relies on the base here
        assert image.reference in line
    assert catalog(registry) == []
    app = delta_bundles.images["app_v2"]
    for digest in changed_pieces(delta_bundles) - {app.digest}:
        head = httpx.head(f"{registry.url}/v2/{PREFIX}/{app.repository}/blobs/{digest}")
        assert head.status_code == 404
    # status says the same, image by image
    status = run_airgap(
        "status",
        delta_bundles.one_delta,
        "--key",
        delta_bundles.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--format",
        "json",
    )
    assert status.returncode == 1
    states = json.loads(status.stdout)["images"]
    assert {s["source"] for s in states} == {i.reference for i in manifest.images}
    assert all(s["state"] == "absent" and "import its base first" in s["detail"] for s in states)


@pytest.mark.e2e
def test_base_then_delta_resolves_every_image_with_source_digests(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry: RegistryServer = registry_factory("plain")
    key = delta_bundles.key.public
    assert import_(delta_bundles.old, registry, key).returncode == 0
    result = import_(delta_bundles.one_delta, registry, key, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    app_v1, app_v2 = delta_bundles.images["app_v1"], delta_bundles.images["app_v2"]
    uploaded = app_v2.blob_digests - app_v1.blob_digests  # the config and the new layer
    assert report["blobs_uploaded"] == len(uploaded)
    sizes = carried_blobs(delta_bundles.one_delta)
    assert report["bytes_uploaded"] == sum(sizes[d] for d in uploaded)
    assert report["manifests_pushed"] == 1
    current = {k: v for k, v in delta_bundles.images.items() if k not in ("app_v1", "extra")}
    for image in current.values():
        served = skopeo.raw_manifest(target_of(image, registry), registry=registry)
        assert skopeo.digest_of(served) == image.digest, image.reference
    # every blob of the changed image and an unchanged one can be pulled
    for image in (app_v2, delta_bundles.images["multi"]):
        skopeo.copy(
            f"docker://{target_of(image, registry)}",
            f"oci:{tmp_path / image.repository.replace('/', '-')}:x",
            src_registry=registry,
            all_images=True,
        )
    status = run_airgap(
        "status", delta_bundles.one_delta, "--key", key, "--registry", f"{registry.host}/{PREFIX}"
    )
    assert status.returncode == 0, status.stdout


@pytest.mark.e2e
def test_a_base_given_as_its_manifest_alone(delta_bundles: DeltaBundles, tmp_path: Path) -> None:
    with tarfile.open(delta_bundles.old) as tar:
        extract(tar, tmp_path, [tar.getmember(MANIFEST_NAME), tar.getmember(SIGNATURE_NAME)])
    manifest = tmp_path / MANIFEST_NAME
    output = tmp_path / "from-manifest.tar"
    key = delta_bundles.key
    args = collect_args(delta_bundles.one_spec, key.private, output)
    result = run_airgap(*args, "--base", manifest, "--base-key", key.public, env=delta_bundles.env)
    assert result.returncode == 0, result.stderr
    assert set(carried_blobs(output)) == changed_pieces(delta_bundles)
    # a base signed by another key is refused before anything is fetched
    _, other_public = tamper.new_key(tmp_path)
    result = run_airgap(
        *args, "--force", "--base", manifest, "--base-key", other_public, env=delta_bundles.env
    )
    assert_clean_failure(result, 1, "base", str(manifest))
    missing = tmp_path / "nothing.tar"
    result = run_airgap(*args, "--force", "--base", missing, env=delta_bundles.env)
    assert_clean_failure(result, 2, "--base:", str(missing))


@pytest.mark.e2e
def test_an_upgrade_delta_mounts_what_a_new_repository_shares(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """The upgrade adds ``delta/extra``, whose base layer the target holds only in
    other repositories: the delta relies on it, and import mounts it across."""
    key = delta_bundles.key
    new_spec = delta_bundles.directory / "new.yaml"
    delta = tmp_path / "upgrade-delta.tar"
    args: list[str | Path] = [
        *collect_args(new_spec, key.private, delta),
        "--base",
        delta_bundles.old,
    ]
    result = run_airgap(*args, env=delta_bundles.env)
    assert result.returncode == 0, result.stderr
    extra = delta_bundles.images["extra"]
    record = next(i for i in read_head(delta).manifest.images if i.reference == extra.reference)
    shared = extra.layer_digests & delta_bundles.images["side"].layer_digests
    assert shared and shared <= set(record.needs)
    assert not shared & set(carried_blobs(delta))
    registry: RegistryServer = registry_factory("plain")
    assert import_(delta_bundles.old, registry, key.public).returncode == 0
    result = import_(delta, registry, key.public, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["blobs_mounted"] >= len(shared)
    served = skopeo.raw_manifest(target_of(extra, registry), registry=registry)
    assert skopeo.digest_of(served) == extra.digest
    skopeo.copy(
        f"docker://{target_of(extra, registry)}",
        f"oci:{tmp_path / 'extra'}:x",
        src_registry=registry,
    )


@pytest.mark.e2e
def test_a_split_delta_of_a_split_base(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """Parts everywhere: the base is read from its parts, the delta written as parts,
    and verify, diff and import read the delta's parts directly."""
    key = delta_bundles.key
    base = tmp_path / "base.tar"
    args = collect_args(delta_bundles.one_spec, key.private, base)
    collected = run_airgap(*args, "--part-size", "16KiB", env=delta_bundles.env)
    assert collected.returncode == 0, collected.stderr
    assert not base.exists() and (tmp_path / "base.tar.001").exists()
    new_spec = delta_bundles.directory / "new.yaml"
    delta = tmp_path / "delta.tar"
    result = run_airgap(
        *collect_args(new_spec, key.private, delta),
        "--part-size",
        "16KiB",
        "--base",
        base,
        "--base-key",
        key.public,
        env=delta_bundles.env,
    )
    assert result.returncode == 0, result.stderr
    assert not delta.exists() and (tmp_path / "delta.tar.000").exists()
    verified = run_airgap("verify", delta, "--key", key.public, "--format", "json")
    assert verified.returncode == 0, verified.stdout
    report = json.loads(verified.stdout)
    assert report["delta"]["needs"]
    compared = run_airgap("diff", base, delta, "--key", key.public, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    assert document["relation"] == "new is a delta of old"
    assert [i["change"] for i in document["images"]] == ["added", "removed"]
    registry: RegistryServer = registry_factory("plain")
    assert import_(base, registry, key.public).returncode == 0
    imported = import_(delta, registry, key.public)
    assert imported.returncode == 0, imported.stderr
    extra = delta_bundles.images["extra"]
    served = skopeo.raw_manifest(target_of(extra, registry), registry=registry)
    assert skopeo.digest_of(served) == extra.digest
