"""Node mirror configuration works as written, checked with real containerd and podman.

The pinned world's bundle is imported into a TLS + htpasswd registry with ``--ca-file``;
then the source registry is stopped. A private containerd reads
``mirror/containerd/certs.d`` as its hosts directory, and podman reads
``mirror/containers/`` copied where it reads ``/etc/containers/``: both must pull every
bundled image by its ORIGINAL reference, from the target, with the digests the bundle
holds (the source's own digest wherever no platform filter applied).
"""

from __future__ import annotations

import base64
import json
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from airgap.bundle.format import ImageRecord
from airgap.oci.reference import parse_reference
from airgap.providers.components import find_images
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import run_airgap
from tests.harness.images import OciLayout
from tests.harness.pinned import PinnedWorld, build_pinned_world, import_pinned
from tests.harness.pki import Pki
from tests.harness.registry import RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry
from tests.harness.releases import ReleaseServer
from tests.harness.runtimes import Containerd, Podman, missing_runtime

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(missing_runtime() is not None, reason=str(missing_runtime())),
]


@dataclass(frozen=True)
class Node:
    world: PinnedWorld
    target: RegistryServer  # TLS + htpasswd
    out: Path
    plain_out: Path  # the same bundle imported into a plain-HTTP registry

    @property
    def user(self) -> str:
        return f"{self.target.username}:{self.target.password}"

    def source_digest(self, record: ImageRecord) -> str:
        """What the (now stopped) source registry served for this reference."""
        return record.source_digest or record.digest


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
    corpus_layout: OciLayout,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    pki: Pki,
) -> Iterator[Node]:
    directory = tmp_path_factory.mktemp("node")
    world = build_pinned_world(directory, corpus_layout, release_server, signing_key, pki)
    target = start_registry(directory / "target", "basic", pki)
    plain = start_registry(directory / "plain", "plain", pki)
    try:
        out = import_pinned(world, target, directory / "out", "mirror")
        plain_out = directory / "plain-out"
        args = ["--registry", f"{plain.host}/mirror", "--output-dir", str(plain_out), "-q"]
        result = run_airgap("--debug", "import", world.bundle, "--key", world.key.public, *args)
        assert result.returncode == 0, result.stderr
        # a manifest several images share (a child of an index, also pinned by digest)
        # is PUT once: two PUTs of it at once race in distribution, and an index PUT
        # between them finds the child unknown
        puts = re.findall(r"PUT \S+/v2/(\S+)/manifests/(sha256:[0-9a-f]{64}) 201", result.stderr)
        assert puts and len(puts) == len(set(puts)), sorted(puts)
        served = {i.reference: i.digest for i in world.images.values()}
        for record in world.manifest.images:  # the source served what the bundle says
            if record.reference in served:
                assert served[record.reference] == (record.source_digest or record.digest)
        world.source.stop()  # from now on only the target can answer
        yield Node(world, target, out, plain_out)
    finally:
        world.source.stop()
        stop_registry(target)
        stop_registry(plain)


def _platform(record: ImageRecord) -> str:
    """A platform the image holds (the filtered indexes hold only linux/arm64)."""
    return record.platforms[0]


def test_containerd_pulls_every_original_reference_through_hosts_toml(node: Node) -> None:
    assert not node.world.source.running
    hosts_dir = node.out / "mirror" / "containerd" / "certs.d"
    containerd = Containerd()
    try:
        first = node.world.manifest.images[0].reference
        without = containerd.ctr("images", "pull", "--user", node.user, first, check=False)
        assert without.returncode != 0  # the source is gone: only the mirror config helps
        for record in node.world.manifest.images:
            containerd.ctr(
                "images",
                "pull",
                "--hosts-dir",
                str(hosts_dir),
                "--user",
                node.user,
                "--platform",
                _platform(record),
                "--snapshotter",
                "native",
                record.reference,
            )
        # a rewritten reference names the target itself: its own hosts.toml carries the CA
        components = next((node.out / "components").rglob("*components.yaml"))
        rewritten = find_images(components.read_text(), str(components))[0]
        containerd.ctr(
            "images",
            "pull",
            "--hosts-dir",
            str(hosts_dir),
            "--user",
            node.user,
            "--platform",
            "linux/arm64",
            "--snapshotter",
            "native",
            rewritten,
        )
        digests = containerd.image_digests()
    finally:
        containerd.stop()
    for record in node.world.manifest.images:
        assert digests[record.reference] == record.digest, record.reference
        if record.source_digest is None:  # no platform filter: the source's own digest
            assert digests[record.reference] == node.source_digest(record)
    assert digests[rewritten] == rewritten.rsplit("@", 1)[1]


@pytest.fixture
def podman() -> Iterator[Podman]:
    podman = Podman()
    yield podman
    podman.close()


def test_podman_pulls_every_original_reference_through_the_drop_in(
    node: Node, podman: Podman
) -> None:
    assert not node.world.source.running
    first = node.world.manifest.images[0]
    without = podman.podman(
        "pull", "-q", "--platform", _platform(first), first.reference, check=False
    )
    assert without.returncode != 0  # the source is gone: only the mirror config helps
    podman.install(node.out / "mirror" / "containers")
    auth = base64.b64encode(node.user.encode()).decode()
    podman.auth_file.write_text(json.dumps({"auths": {node.target.host: {"auth": auth}}}))
    podman.auth_file.chmod(0o600)
    for record in node.world.manifest.images:
        podman.podman("pull", "-q", "--platform", _platform(record), record.reference)
        inspected = json.loads(podman.podman("image", "inspect", record.reference).stdout)[0]
        repository = parse_reference(record.reference).name
        assert f"{repository}@{record.digest}" in inspected["RepoDigests"], (
            record.reference,
            inspected["RepoDigests"],
        )
        if record.source_digest is None:
            assert record.digest == node.source_digest(record)


def test_a_plain_http_target_works_as_written(node: Node, podman: Podman) -> None:
    """Without TLS the node files say http:// (containerd) and insecure (podman)."""
    assert not node.world.source.running
    assert not list((node.plain_out / "mirror").rglob("*.crt"))
    pinned = next(r for r in node.world.manifest.images if r.kept_whole)
    containerd = Containerd()
    try:
        hosts_dir = node.plain_out / "mirror" / "containerd" / "certs.d"
        pull = ["images", "pull", "--hosts-dir", str(hosts_dir), "--snapshotter", "native"]
        containerd.ctr(*pull, "--platform", _platform(pinned), pinned.reference)
        assert containerd.image_digests()[pinned.reference] == pinned.digest
    finally:
        containerd.stop()
    podman.install(node.plain_out / "mirror" / "containers")
    podman.podman("pull", "-q", "--platform", _platform(pinned), pinned.reference)
    inspected = json.loads(podman.podman("image", "inspect", pinned.reference).stdout)[0]
    assert f"{parse_reference(pinned.reference).name}@{pinned.digest}" in inspected["RepoDigests"]


def test_an_ipv6_target_works_as_written(
    node: Node, podman: Podman, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A registry at ``[::1]:PORT``: ``image: [::1]:PORT/x`` unquoted is a YAML flow
    sequence, so import wrote components that did not parse (and then blamed the
    bundle for them). Every YAML output reads back, the rewritten references are the
    target's, and containerd and podman pull through the node files as written."""
    directory = tmp_path_factory.mktemp("ipv6")
    target = RegistryServer(directory / "registry", "plain", address="::1")
    try:
        out = directory / "out"
        args = ["--registry", f"{target.host}/mirror", "--output-dir", str(out), "-q"]
        result = run_airgap("import", node.world.bundle, "--key", node.world.key.public, *args)
        assert result.returncode == 0, result.stderr
        assert target.host.startswith("[::1]:")
        for path in out.rglob("*.yaml"):
            list(yaml.safe_load_all(path.read_text()))  # raises on what does not parse
        components = next((out / "components").rglob("*components.yaml"))
        rewritten = find_images(components.read_text(), str(components))
        assert rewritten and all(r.startswith(f"{target.host}/mirror/") for r in rewritten)
        pinned = next(r for r in node.world.manifest.images if r.kept_whole)
        containerd = Containerd()
        try:
            hosts_dir = out / "mirror" / "containerd" / "certs.d"
            pull = ["images", "pull", "--hosts-dir", str(hosts_dir), "--snapshotter", "native"]
            containerd.ctr(*pull, "--platform", _platform(pinned), pinned.reference)
            containerd.ctr(*pull, "--platform", "linux/arm64", rewritten[0])
            digests = containerd.image_digests()
        finally:
            containerd.stop()
        assert digests[pinned.reference] == pinned.digest
        assert digests[rewritten[0]] == rewritten[0].rsplit("@", 1)[1]
        drop_in = tomllib.loads(
            (out / "mirror/containers/registries.conf.d/50-airgap-capi.conf").read_text()
        )
        locations = {m["location"] for r in drop_in["registry"] for m in r.get("mirror", [])}
        assert locations == {f"{target.host}/mirror"}
        podman.install(out / "mirror" / "containers")
        parsed = podman.podman(
            "pull", "-q", "--platform", _platform(pinned), rewritten[0], check=False
        )
        if "invalid reference format" in parsed.stderr:
            # containers/image before IPv6 references (podman 4.3, Debian 12): no IPv6
            # mirror can work there, and the node README says so
            assert "cannot parse such a reference" in (out / "mirror/README.md").read_text()
            return
        podman.podman("pull", "-q", "--platform", _platform(pinned), pinned.reference)
        inspected = json.loads(podman.podman("image", "inspect", pinned.reference).stdout)[0]
        name = parse_reference(pinned.reference).name
        assert f"{name}@{pinned.digest}" in inspected["RepoDigests"]
    finally:
        target.stop()
