"""``import --max-path-depth N`` (issue 46): registries that refuse deep paths.

The pinned world's bundle is imported into a TLS + htpasswd registry with a prefix and
``--max-path-depth 2``; then its source registry is stopped. Every repository import
pushed has at most two path components, every image is there by its digest, and the
node configuration written for it makes podman pull every original reference from the
flattened repositories. containerd's ``hosts.toml`` has no per-repository form (it can
only put a prefix before a registry's paths), so containerd pulls every image by the
references import rewrote, which name the flattened repositories.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from airgap.core.errors import InputError
from airgap.oci.manifest import sha256_digest
from airgap.oci.reference import parse_reference
from airgap.rewrite.mapping import Target, flatten_path, map_images
from tests.harness import skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import CorpusEntry, OciLayout, push_corpus
from tests.harness.pinned import PinnedWorld, build_pinned_world, import_pinned
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry
from tests.harness.releases import ReleaseServer
from tests.harness.runtimes import Containerd, Podman, missing_runtime

PREFIX = "mirror"


@pytest.mark.unit
def test_flattening_keeps_the_first_components_and_joins_the_rest() -> None:
    assert flatten_path(["k8s", "cluster-api-controller"], 1) == "k8s-cluster-api-controller"
    assert flatten_path(["capi", "k8s", "cluster-api-controller"], 2) == (
        "capi/k8s-cluster-api-controller"
    )
    assert flatten_path(["capi", "a", "b", "c"], 3) == "capi/a/b-c"
    assert flatten_path(["capi", "a", "b"], 3) == "capi/a/b"  # fits: unchanged
    assert flatten_path(["capi", "a", "b"], None) == "capi/a/b"
    target = Target("r.local:5000", "capi", 2)
    (mapping,) = map_images(["registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4"], target)
    assert str(mapping.target) == "r.local:5000/capi/cluster-api-cluster-api-controller:v1.9.4"


@pytest.mark.unit
def test_two_sources_flattened_onto_one_target_are_refused_naming_both() -> None:
    target = Target("r.local:5000", "capi", 2)
    with pytest.raises(InputError) as caught:
        map_images(["src.io/a/b-c:v1", "src.io/a-b/c:v1"], target)
    message = str(caught.value)
    assert "src.io/a/b-c and src.io/a-b/c" in message
    assert "r.local:5000/capi/a-b-c" in message and "--max-path-depth 2" in message


@pytest.mark.e2e
def test_a_depth_the_prefix_already_fills_is_a_usage_error(tmp_path: Path) -> None:
    result = run_airgap(
        "import", tmp_path / "none.tar", "--registry", "r.local:5000/a/b", "--max-path-depth", "2"
    )
    assert_clean_failure(result, 2, "--max-path-depth 2", "2 path components")


@dataclass(frozen=True)
class Flat:
    world: PinnedWorld
    target: RegistryServer
    out: Path
    colliding: Path  # a bundle of test/app and test-app: one target at depth 2

    @property
    def user(self) -> str:
        return f"{self.target.username}:{self.target.password}"


@pytest.fixture(scope="module")
def flat(
    tmp_path_factory: pytest.TempPathFactory,
    corpus_layout: OciLayout,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    pki: Pki,
) -> Iterator[Flat]:
    directory = tmp_path_factory.mktemp("flat")
    world = build_pinned_world(directory, corpus_layout, release_server, signing_key, pki)
    target = start_registry(directory / "target", "basic", pki)
    try:
        (other,) = push_corpus(
            corpus_layout, world.source, {"x": CorpusEntry("app", "test-app", "v1")}
        ).values()
        spec = write_spec(
            directory / "colliding.yaml",
            {"images": [world.images["app"].reference, other.reference]},
        )
        colliding = directory / "colliding.tar"
        result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", colliding)
        assert result.returncode == 0, result.stderr
        out = import_pinned(world, target, directory / "out", PREFIX, "--max-path-depth", "2")
        world.source.stop()
        yield Flat(world, target, out, colliding)
    finally:
        world.source.stop()
        stop_registry(target)


def _catalog(registry: RegistryServer) -> list[str]:
    auth = (str(registry.username), str(registry.password)) if registry.username else None
    response = httpx.get(f"{registry.url}/v2/_catalog", auth=auth, verify=registry.ssl_context())
    return list(response.json()["repositories"])


def _mapping(flat: Flat) -> dict[str, str]:
    lines = (flat.out / "mapping.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.e2e
def test_every_repository_is_at_most_two_deep_and_holds_its_image(flat: Flat) -> None:
    repositories = _catalog(flat.target)
    assert repositories and all(len(r.split("/")) <= 2 for r in repositories), repositories
    assert f"{PREFIX}/test-app" in repositories
    assert f"{PREFIX}/capi-manifests-infrastructure-pinned" in repositories
    mapping = _mapping(flat)
    assert set(mapping) == set(flat.world.references)
    for record in flat.world.manifest.images:
        target = mapping[record.reference]
        assert parse_reference(target).repository.count("/") == 1, target
        pinned = parse_reference(target)
        asked = f"{pinned.name}@{pinned.digest}" if pinned.digest else target
        raw = skopeo.raw_manifest(asked, registry=flat.target)
        assert sha256_digest(raw) == record.digest


@pytest.mark.e2e
def test_every_written_reference_names_a_flattened_repository(flat: Flat) -> None:
    """Components, values, node configs: the one mapping everywhere."""
    host = flat.target.host
    for path in flat.out.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".toml", ".conf", ".txt"):
            text = path.read_text()
            for deep in ("/test/app", "/test/multi", "/test/dockerlist"):
                assert f"{host}/{PREFIX}{deep}" not in text, path
    drop_in = next((flat.out / "mirror/containers").rglob("*.conf")).read_text()
    sets = list(yaml.safe_load_all((flat.out / "mirror/openshift/mirror-sets.yaml").read_text()))
    source = flat.world.images["app"].reference.rsplit(":", 1)[0]
    assert f'prefix = "{source}"' in drop_in
    assert f'location = "{host}/{PREFIX}/test-app"' in drop_in
    mirrors = {e["source"]: e["mirrors"] for e in sets[0]["spec"]["imageDigestMirrors"]}
    assert mirrors[source] == [f"{host}/{PREFIX}/test-app"]
    assert "Flattened repositories" in (flat.out / "mirror/README.md").read_text()


@pytest.mark.e2e
def test_colliding_sources_are_refused_before_anything_is_pushed(
    flat: Flat, registry_factory: RegistryFactory
) -> None:
    registry = registry_factory("plain")
    result = run_airgap(
        "import",
        flat.colliding,
        "--key",
        flat.world.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--max-path-depth",
        "2",
    )
    app = parse_reference(flat.world.images["app"].reference).name
    line = assert_clean_failure(result, 2, app, app.replace("/test/app", "/test-app"))
    assert f"{registry.host}/{PREFIX}/test-app" in line
    assert _catalog(registry) == []


runtimes = pytest.mark.skipif(missing_runtime() is not None, reason=str(missing_runtime()))


@pytest.mark.e2e
@runtimes
def test_podman_pulls_every_original_reference_from_the_flattened_repositories(
    flat: Flat,
) -> None:
    assert not flat.world.source.running
    podman = Podman()
    try:
        podman.install(flat.out / "mirror" / "containers")
        auth = base64.b64encode(flat.user.encode()).decode()
        podman.auth_file.write_text(json.dumps({"auths": {flat.target.host: {"auth": auth}}}))
        podman.auth_file.chmod(0o600)
        for record in flat.world.manifest.images:
            platform = record.platforms[0]
            podman.podman("pull", "-q", "--platform", platform, record.reference)
            inspected = json.loads(podman.podman("image", "inspect", record.reference).stdout)[0]
            name = parse_reference(record.reference).name
            assert f"{name}@{record.digest}" in inspected["RepoDigests"], record.reference
    finally:
        podman.close()


@pytest.mark.e2e
@runtimes
def test_containerd_pulls_every_image_through_the_node_config_written(flat: Flat) -> None:
    """By the references import wrote (``mapping.txt``, the components): containerd's
    hosts.toml for the target carries its CA; an original reference of a flattened
    repository is not something a hosts.toml can map."""
    assert not flat.world.source.running
    hosts_dir = flat.out / "mirror" / "containerd" / "certs.d"
    assert (hosts_dir / flat.target.host / "hosts.toml").is_file()
    mapping = _mapping(flat)
    containerd = Containerd()
    try:
        for record in flat.world.manifest.images:
            containerd.ctr(
                "images",
                "pull",
                "--hosts-dir",
                str(hosts_dir),
                "--user",
                flat.user,
                "--platform",
                record.platforms[0],
                "--snapshotter",
                "native",
                mapping[record.reference],
            )
        digests = containerd.image_digests()
    finally:
        containerd.stop()
    for record in flat.world.manifest.images:
        assert digests[mapping[record.reference]] == record.digest, record.reference
