"""Every image reference import writes resolves in the target registry.

A bundle collected with ``platforms:`` holds filtered indexes for tag references and
whole ones for digest references (a digest is a promise). After an import into a real
TLS + htpasswd registry, each reference in each output is looked up there (HEAD by
digest, or by tag): rewritten components, the clusterctl repository, the operator
ConfigMaps and CRs, ``mapping.txt``, the clusterctl ``images:`` overrides, and the
original references mapped through every node mirror configuration.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.oci.manifest import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST
from airgap.oci.reference import Reference, parse_reference
from airgap.providers.components import find_images
from tests.harness import tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import OciLayout
from tests.harness.pinned import LABEL, PinnedWorld, build_pinned_world, import_pinned
from tests.harness.pki import Pki
from tests.harness.registry import RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry
from tests.harness.releases import ReleaseServer

pytestmark = pytest.mark.e2e

PREFIX = "mirror/capi"
ACCEPT = ", ".join([OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST])


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    corpus_layout: OciLayout,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    pki: Pki,
) -> Iterator[PinnedWorld]:
    world = build_pinned_world(
        tmp_path_factory.mktemp("pinned"), corpus_layout, release_server, signing_key, pki
    )
    yield world
    world.source.stop()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    registry = start_registry(tmp_path_factory.mktemp("pinned-target"), "basic", pki)
    yield registry
    stop_registry(registry)


def import_into(world: PinnedWorld, target: RegistryServer, out: Path) -> Path:
    return import_pinned(world, target, out, PREFIX)


@pytest.fixture(scope="module")
def out(
    world: PinnedWorld, target: RegistryServer, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return import_into(world, target, tmp_path_factory.mktemp("pinned-out") / "out")


class Resolver:
    """HEADs manifests in the target as a runtime would look them up."""

    def __init__(self, registry: RegistryServer) -> None:
        self.registry = registry
        self.client = httpx.Client(
            verify=registry.ssl_context(), auth=(str(registry.username), str(registry.password))
        )
        self.checked: dict[str, set[str]] = {}

    def resolve(self, output: str, reference: str | Reference) -> str:
        """The digest ``reference`` names in the target; by digest when it has one."""
        ref = parse_reference(str(reference))
        assert ref.registry == self.registry.host, (output, str(ref))
        url = f"{self.registry.url}/v2/{ref.repository}/manifests/{ref.identifier}"
        response = self.client.head(url, headers={"Accept": ACCEPT})
        assert response.status_code == 200, (output, str(ref), response.status_code)
        digest = response.headers["Docker-Content-Digest"]
        if ref.digest:
            assert digest == ref.digest, (output, str(ref))
        self.checked.setdefault(output, set()).add(str(ref))
        return digest


@pytest.fixture
def resolver(target: RegistryServer) -> Iterator[Resolver]:
    resolver = Resolver(target)
    yield resolver
    resolver.client.close()


def test_digest_references_keep_the_whole_index(world: PinnedWorld) -> None:
    records = {image.reference: image for image in world.manifest.images}
    multi, dlist = world.images["multiarch"], world.images["dockerlist"]
    for pinned in (multi.digest_reference, f"{multi.reference}@{multi.digest}"):
        record = records[pinned]
        assert (record.digest, record.kept_whole) == (multi.digest, "pinned by digest")
        assert record.platforms == sorted(multi.platforms) and record.source_digest is None
    assert records[dlist.digest_reference].digest == dlist.digest
    for filtered in (multi, dlist):  # a tag reference keeps being filtered
        record = records[filtered.reference]
        assert record.digest != filtered.digest and record.source_digest == filtered.digest
        assert record.platforms == ["linux/arm64/v8"] and record.kept_whole is None
    inventory = json.loads(run_airgap("inspect", world.bundle, "--format", "json").stdout)
    kept = {i["reference"] for i in inventory["images"] if i.get("keptWhole")}
    assert kept == {
        multi.digest_reference,
        f"{multi.reference}@{multi.digest}",
        dlist.digest_reference,
    }
    assert "(all: pinned by digest)" in run_airgap("inspect", world.bundle).stdout


def _components_texts(out: Path) -> Iterator[tuple[str, str]]:
    """(output file, components text) of every components copy import wrote."""
    for folder in ("components", "clusterctl"):
        for path in sorted((out / folder).rglob("*components*.yaml")):
            yield path.relative_to(out).as_posix(), path.read_text()
    for path in sorted((out / "operator").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "ConfigMap":
                continue
            name = f"{path.relative_to(out).as_posix()}:{document['metadata']['name']}"
            if "components" in document.get("data", {}):
                yield name, document["data"]["components"]
            elif "components" in document.get("binaryData", {}):
                raw = base64.b64decode(document["binaryData"]["components"])
                yield name, gzip.decompress(raw).decode()


def _image_urls(node: Any) -> Iterator[str]:
    """Every ``imageUrl`` in a YAML tree (the CRs' container image overrides)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "imageUrl" and isinstance(value, str):
                yield value
            else:
                yield from _image_urls(value)
    elif isinstance(node, list):
        for item in node:
            yield from _image_urls(item)


def _clusterctl_override(source: Reference, label: str, overrides: dict[str, Any]) -> str:
    """What clusterctl makes of ``source`` with the ``images:`` section (imageMeta.ApplyToImage):
    repository and tag replaced, digest kept."""
    name = source.repository.rsplit("/", 1)[-1]
    entry = overrides[f"{label}/{name}"]
    text = f"{entry['repository'].rstrip('/')}/{name}"
    tag = entry.get("tag") or source.tag
    if tag:
        text += f":{tag}"
    return text + (f"@{source.digest}" if source.digest else "")


def test_every_written_reference_resolves_in_the_target(
    world: PinnedWorld, out: Path, resolver: Resolver
) -> None:
    bundle_digests = {image.reference: image.digest for image in world.manifest.images}
    for name, text in _components_texts(out):
        images = find_images(text, name)
        assert images, name
        for image in images:
            resolver.resolve(name, image)
    for path in sorted((out / "operator").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for url in _image_urls(document):
                resolver.resolve(f"operator/{path.name}: imageUrl", url)
    for line in (out / "mapping.txt").read_text().splitlines():
        source, _, written = line.partition("=")
        assert resolver.resolve("mapping.txt", written) == bundle_digests[source]
    overrides = yaml.safe_load((out / "clusterctl-images.yaml").read_text())["images"]
    for provider in world.manifest.providers:
        for image in provider.images:
            written = _clusterctl_override(parse_reference(image), provider.label, overrides)
            resolver.resolve("clusterctl-images.yaml", written)
    components = {name for name in resolver.checked if name.startswith("components/")}
    assert components and any(n.startswith("operator/") for n in resolver.checked)
    assert any(n.startswith("clusterctl/") for n in resolver.checked)
    assert any(n.endswith(": imageUrl") for n in resolver.checked)  # the CRs' overrides
    assert len(resolver.checked["mapping.txt"]) == len(world.manifest.images)
    assert provider.label == LABEL and "clusterctl-images.yaml" in resolver.checked


def _mirror_targets(out: Path, source: Reference) -> dict[str, str]:
    """Where each node mirror configuration sends a pull of ``source``."""
    found: dict[str, str] = {}
    hosts = tomllib.loads(
        (out / f"mirror/containerd/certs.d/{source.registry}/hosts.toml").read_text()
    )
    ((url, host),) = hosts["host"].items()
    assert "pull" in host["capabilities"] and "resolve" in host["capabilities"]
    location = url.removeprefix("https://")
    if host.get("override_path"):  # containerd appends /REPO/manifests/REF to the path
        location = location.replace("/v2/", "/", 1)
    found["containerd hosts.toml"] = location
    conf = tomllib.loads(
        (out / "mirror/containers/registries.conf.d/50-airgap-capi.conf").read_text()
    )
    (entry,) = [r for r in conf["registry"] if r["prefix"] == source.registry]
    found["registries.conf"] = entry["mirror"][0]["location"]
    idms, itms = yaml.safe_load_all((out / "mirror/openshift/mirror-sets.yaml").read_text())
    mirror_set = (
        idms["spec"]["imageDigestMirrors"] if source.digest else itms["spec"]["imageTagMirrors"]
    )
    (entry,) = [m for m in mirror_set if m["source"] == source.registry]
    found["ImageDigestMirrorSet" if source.digest else "ImageTagMirrorSet"] = entry["mirrors"][0]
    return found


def test_node_mirror_configs_send_every_original_reference_to_the_target(
    world: PinnedWorld, out: Path, resolver: Resolver
) -> None:
    bundle_digests = {image.reference: image.digest for image in world.manifest.images}
    for text in world.references:
        source = parse_reference(text)
        for name, location in _mirror_targets(out, source).items():
            mirrored = dataclasses.replace(
                parse_reference(f"{location}/{source.repository}"),
                tag=source.tag,
                digest=source.digest,
            )
            # a digest pull gets exactly the source's digest, a tag pull the bundle's index
            assert resolver.resolve(name, mirrored) == (source.digest or bundle_digests[text])
    assert {"containerd hosts.toml", "registries.conf"} <= set(resolver.checked)
    assert {"ImageDigestMirrorSet", "ImageTagMirrorSet"} <= set(resolver.checked)


def test_a_tag_stays_with_its_tag_reference_and_reimport_changes_nothing(
    world: PinnedWorld, out: Path, target: RegistryServer, resolver: Resolver, tmp_path: Path
) -> None:
    """``repo:v1@D`` (whole) and ``repo:v1`` (filtered) share a target tag: the tag
    reference owns it, so it never flips between the two on re-import."""
    multi = world.images["multiarch"]
    filtered = next(i.digest for i in world.manifest.images if i.reference == multi.reference)
    tagged = f"{target.host}/{PREFIX}/{multi.repository}:{multi.tag}"
    assert resolver.resolve("tag", tagged) == filtered
    again = import_into(world, target, tmp_path / "again")
    report = json.loads((again / "import-report.json").read_text())
    assert (report["changed"], report["manifests_pushed"]) == (False, 0)
    assert resolver.resolve("tag", tagged) == filtered


def test_a_pinned_reference_whose_index_was_filtered_is_refused(
    world: PinnedWorld, tmp_path: Path
) -> None:
    """A bundle from before digests were kept whole: its filtered index stands where the
    reference promises the source digest, which nothing on the far side could resolve."""
    dlist = world.images["dockerlist"]
    record = next(i for i in world.manifest.images if i.reference == dlist.reference)
    forged = f"{dlist.reference}@{record.source_digest}"
    index = json.loads(
        next(m.data for m in tamper.read_members(world.bundle) if m.name == "images/index.json")
    )
    for entry in index["manifests"]:
        annotations = entry["annotations"]
        if annotations["org.opencontainers.image.ref.name"] == dlist.reference:
            annotations["org.opencontainers.image.ref.name"] = forged

    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [
            dataclasses.replace(i, reference=forged) if i.reference == dlist.reference else i
            for i in manifest.images
        ]
        return dataclasses.replace(manifest, images=images)

    bundle = tmp_path / "old.tar"
    tamper.resign(
        world.bundle,
        bundle,
        world.key.private,
        replace={"images/index.json": json.dumps(index).encode()},
        edit=edit,
    )
    result = run_airgap("verify", bundle, "--key", world.key.public)
    assert result.returncode == 1 and f"{forged}" in result.stdout
    assert "is pinned by digest but the bundle holds" in result.stdout
    imported = run_airgap(
        "import", bundle, "--key", world.key.public, "--registry", "127.0.0.1:9/x"
    )
    assert_clean_failure(imported, 1, "failed verification")
