"""``airgap prune`` (issue 46) against the real registry, with deletes enabled, and its
own garbage collection (``docker-registry garbage-collect``, the registry stopped).

Bundle A carries a provider at v1.10.0, bundle B the same provider at v1.11.0; they
share one image. Both are imported under one prefix, next to a foreign repository
beside it. A plan that keeps B lists exactly what A has and B does not; applied and
collected, B still pulls byte for byte, A's dropped tags are gone, the storage shrank by
what the plan said, and the foreign repository is untouched. A tag re-pushed between
plan and apply is skipped and reported.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airgap.oci.manifest import sha256_digest
from airgap.providers.types import ProviderType
from tests.harness import skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

pytestmark = pytest.mark.e2e

PREFIX = "capi"
FOREIGN = "capi-foreign/app"  # beside the prefix: shares its first characters, not its path
LABEL = "infrastructure-monthly"


@dataclass(frozen=True)
class Bundles:
    a: Path
    b: Path
    key: SigningKey
    a_images: list[str]  # source references
    b_images: list[str]


@pytest.fixture(scope="module")
def bundles(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> Bundles:
    directory = tmp_path_factory.mktemp("prune-bundles")
    owner, repo = release_server.new_repo("cluster-api-provider-monthly")
    shared, a_only = source_images["app"].reference, source_images["sidecar"].reference
    multi, b_only = source_images["multiarch"].reference, source_images["dockerv2"].reference
    versions = {"v1.10.0": [shared, a_only, multi], "v1.11.0": [shared, b_only]}
    paths = []
    for version, images in versions.items():
        components = make_components(ProviderType.INFRASTRUCTURE, "monthly-system", images)
        release_server.add_release(
            owner,
            repo,
            version,
            {
                "metadata.yaml": make_metadata([(1, 10, "v1beta1"), (1, 11, "v1beta1")]).encode(),
                "infrastructure-components.yaml": components.encode(),
            },
        )
        provider = {
            "name": "monthly",
            "type": "InfrastructureProvider",
            "version": version,
            "url": release_server.repo_url(owner, repo),
        }
        spec = write_spec(directory / f"{version}.yaml", {"providers": [provider]})
        bundle = directory / f"{version}.tar"
        result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle)
        assert result.returncode == 0, result.stderr
        paths.append(bundle)
    return Bundles(paths[0], paths[1], signing_key, versions["v1.10.0"], versions["v1.11.0"])


def _target(source: str, registry: RegistryServer) -> str:
    return f"{registry.host}/{PREFIX}/{source.split('/', 1)[1]}"


@pytest.fixture
def imported(
    bundles: Bundles, registry_factory: RegistryFactory, source_images: dict[str, TestImage]
) -> Iterator[RegistryServer]:
    """A then B imported under the prefix, and a foreign repository beside it."""
    registry = registry_factory("plain")
    for bundle in (bundles.a, bundles.b):
        result = run_airgap(
            "import", bundle, "--key", bundles.key.public, "--registry", f"{registry.host}/{PREFIX}"
        )
        assert result.returncode == 0, result.stderr
    skopeo.copy(
        skopeo.docker_ref(source_images["dockerlist"].reference),
        skopeo.docker_ref(f"{FOREIGN}:v1", registry),
        src_registry=None,
        dest_registry=registry,
    )
    yield registry


def _plan(
    bundles: Bundles, registry: RegistryServer, plan: Path, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    return run_airgap(
        "prune",
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--keep",
        bundles.b,
        "--key",
        bundles.key.public,
        "-o",
        plan,
        *extra,
    )


def _apply(registry: RegistryServer, plan: Path) -> subprocess.CompletedProcess[str]:
    return run_airgap("prune", "--apply", plan, "--registry", f"{registry.host}/{PREFIX}")


def _blob_bytes(registry: RegistryServer) -> int:
    blobs = registry.storage_dir / "docker/registry/v2/blobs"
    return sum(path.stat().st_size for path in blobs.rglob("data"))


def _garbage_collect(registry: RegistryServer) -> None:
    """distribution's own collection, with the registry stopped (its documented way)."""
    registry.stop()
    subprocess.run(
        ["docker-registry", "garbage-collect", str(registry.config_file)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    registry.start()


def _dropped(document: dict[str, Any]) -> set[str]:
    return {f"{d['repository']}:{tag}" for d in document["drop"] for tag in d["tags"]}


def test_plan_lists_what_no_kept_bundle_needs_and_apply_and_gc_free_it(
    bundles: Bundles, imported: RegistryServer, tmp_path: Path
) -> None:
    registry = imported
    plan = tmp_path / "plan.json"
    before_catalog = set(skopeo.list_tags(FOREIGN, registry=registry))
    result = _plan(bundles, registry, plan)
    assert result.returncode == 0, result.stderr
    document = json.loads(plan.read_text())
    a_only = [s for s in bundles.a_images if s not in bundles.b_images]
    expected = {f"{PREFIX}/{s.split('/', 1)[1]}" for s in a_only}
    expected.add(f"{PREFIX}/capi-manifests/{LABEL}:v1.10.0")
    assert _dropped(document) == expected
    assert "total:" in result.stdout and str(document["totalBytes"]) in result.stdout
    for name in expected:
        assert name in result.stdout
    multi = next(d for d in document["drop"] if d["repository"].endswith("/test/multi"))
    assert len(multi["manifests"]) > 1  # the index and its children
    stored = _blob_bytes(registry)

    applied = _apply(registry, plan)
    assert applied.returncode == 0, applied.stderr
    assert "0 skipped" in applied.stdout
    _garbage_collect(registry)

    for source in bundles.b_images:  # every image of B still there, byte for byte
        target = _target(source, registry)
        raw = skopeo.raw_manifest(target, registry=registry)
        assert sha256_digest(raw) == skopeo.digest_of(skopeo.raw_manifest(source, registry=None))
        pulled = tmp_path / "pulled" / source.rsplit("/", 1)[1].replace(":", "-")
        pulled.parent.mkdir(exist_ok=True)
        skopeo.copy(skopeo.docker_ref(target), f"dir:{pulled}", src_registry=registry)
        blobs = [p for p in pulled.iterdir() if len(p.name) == 64]
        assert blobs  # every blob came, and hashes to the name it was asked by
        for blob in blobs:
            assert sha256_digest(blob.read_bytes()) == f"sha256:{blob.name}"
        assert (pulled / "manifest.json").read_bytes() == raw
    for name in expected:  # A's dropped tags are gone
        repository, tag = name.rsplit(":", 1)
        assert tag not in skopeo.list_tags(repository, registry=registry), name
    assert skopeo.list_tags(f"{PREFIX}/capi-manifests/{LABEL}", registry=registry) == ["v1.11.0"]
    assert set(skopeo.list_tags(FOREIGN, registry=registry)) == before_catalog == {"v1"}
    shrank = stored - _blob_bytes(registry)
    planned = document["totalBytes"]
    assert planned > 0 and abs(shrank - planned) <= planned * 0.1, (shrank, planned)


def test_a_tag_repushed_between_plan_and_apply_is_skipped(
    bundles: Bundles,
    imported: RegistryServer,
    source_images: dict[str, TestImage],
    tmp_path: Path,
) -> None:
    registry = imported
    plan = tmp_path / "plan.json"
    assert _plan(bundles, registry, plan).returncode == 0
    moved = f"{PREFIX}/test/sidecar:v2"
    skopeo.copy(
        skopeo.docker_ref(source_images["dockerlist"].reference),
        skopeo.docker_ref(moved, registry),
        dest_registry=registry,
    )
    now = sha256_digest(skopeo.raw_manifest(moved, registry=registry))
    applied = _apply(registry, plan)
    assert applied.returncode == 0, applied.stderr
    warning = [line for line in applied.stderr.splitlines() if "test/sidecar@" in line]
    assert warning and "moved" in warning[0] and now in warning[0], applied.stderr
    assert sha256_digest(skopeo.raw_manifest(moved, registry=registry)) == now
    assert "v1" not in skopeo.list_tags(f"{PREFIX}/test/multi", registry=registry)


def test_a_plan_is_refused_for_a_bundle_whose_signature_does_not_verify(
    bundles: Bundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    other = tmp_path / "other.key"
    assert run_airgap("keygen", other).returncode == 0
    result = run_airgap(
        "prune",
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--keep",
        bundles.b,
        "--key",
        tmp_path / "other.pub",
        "-o",
        tmp_path / "plan.json",
    )
    assert_clean_failure(result, 1, "signature")
    assert not (tmp_path / "plan.json").exists()
    unsigned = run_airgap(
        "prune",
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--keep",
        bundles.b,
        "--no-signature",
        "-o",
        tmp_path / "plan.json",
    )
    assert_clean_failure(unsigned, 2, "--key")


def test_a_plan_for_another_registry_or_outside_the_prefix_is_refused(
    bundles: Bundles, imported: RegistryServer, tmp_path: Path
) -> None:
    registry = imported
    plan = tmp_path / "plan.json"
    assert _plan(bundles, registry, plan).returncode == 0
    other = run_airgap("prune", "--apply", plan, "--registry", f"{registry.host}/elsewhere")
    assert_clean_failure(other, 2, "not for --registry")
    document = json.loads(plan.read_text())
    document["drop"][0]["repository"] = FOREIGN
    plan.write_text(json.dumps(document))
    edited = _apply(registry, plan)
    assert_clean_failure(edited, 2, "not below the plan's prefix")
    assert skopeo.list_tags(FOREIGN, registry=registry) == ["v1"]
    whole = run_airgap(
        "prune",
        "--registry",
        registry.host,
        "--keep",
        bundles.b,
        "--key",
        bundles.key.public,
        "-o",
        tmp_path / "p.json",
    )
    assert_clean_failure(whole, 2, "HOST/PREFIX")


def test_a_have_list_keeps_its_digests_too(
    bundles: Bundles, imported: RegistryServer, tmp_path: Path
) -> None:
    """A's have-list (``status --export-have``) keeps A's images; A's manifests image,
    which a have-list does not name, is still planned."""
    registry = imported
    have = tmp_path / "have.json"
    status = run_airgap(
        "status",
        bundles.a,
        "--key",
        bundles.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--export-have",
        have,
    )
    assert status.returncode == 0, status.stderr
    plan = tmp_path / "plan.json"
    result = _plan(bundles, registry, plan, "--keep-have", have)
    assert result.returncode == 0, result.stderr
    assert _dropped(json.loads(plan.read_text())) == {f"{PREFIX}/capi-manifests/{LABEL}:v1.10.0"}
