"""Kubernetes versions as bundle content: the images each version's kubeadm pulls.

The constants come from trimmed excerpts of the real ``cmd/kubeadm/app/constants/
constants.go`` (tests/kubeadm/), served by a loopback server laid out like GitHub's raw
file server (``BASE/TAG/cmd/kubeadm/app/constants/constants.go``). The expected lists
are what ``kubeadm config images list --kubernetes-version TAG`` prints for each
release.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import ContentKind, ContentSpec
from airgap.content.kubeadm import (
    BUILTIN,
    BUILTIN_SOURCE,
    CONSTANTS_PATH,
    IMAGES_FILE,
    KubeadmConstants,
    builtin_constants,
    etcd_version,
    kubeadm_images,
    parse_constants,
)
from airgap.content.kubesource import KubeadmSource, fetch_kubeadm_images
from airgap.core.errors import InputError, NotFoundError
from tests.harness import tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import OciLayout, push_image
from tests.harness.registry import RegistryFactory
from tests.harness.releases import ReleaseServer
from tests.harness.specs import assert_spec_error, spec_of

FIXTURES = Path(__file__).parent / "kubeadm"

# `kubeadm config images list --kubernetes-version TAG`, as each release prints it
KUBEADM_LISTS = {
    "v1.31.0": [
        "registry.k8s.io/kube-apiserver:v1.31.0",
        "registry.k8s.io/kube-controller-manager:v1.31.0",
        "registry.k8s.io/kube-scheduler:v1.31.0",
        "registry.k8s.io/kube-proxy:v1.31.0",
        "registry.k8s.io/coredns/coredns:v1.11.3",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/etcd:3.5.15-0",
    ],
    "v1.32.10": [
        "registry.k8s.io/kube-apiserver:v1.32.10",
        "registry.k8s.io/kube-controller-manager:v1.32.10",
        "registry.k8s.io/kube-scheduler:v1.32.10",
        "registry.k8s.io/kube-proxy:v1.32.10",
        "registry.k8s.io/coredns/coredns:v1.11.3",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/etcd:3.5.24-0",  # SupportedEtcdVersion[32], not the default
    ],
    "v1.33.0": [
        "registry.k8s.io/kube-apiserver:v1.33.0",
        "registry.k8s.io/kube-controller-manager:v1.33.0",
        "registry.k8s.io/kube-scheduler:v1.33.0",
        "registry.k8s.io/kube-proxy:v1.33.0",
        "registry.k8s.io/coredns/coredns:v1.12.0",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/etcd:3.5.21-0",
    ],
    "v1.34.0": [
        "registry.k8s.io/kube-apiserver:v1.34.0",
        "registry.k8s.io/kube-controller-manager:v1.34.0",
        "registry.k8s.io/kube-scheduler:v1.34.0",
        "registry.k8s.io/kube-proxy:v1.34.0",
        "registry.k8s.io/coredns/coredns:v1.12.1",
        "registry.k8s.io/pause:3.10.1",
        "registry.k8s.io/etcd:3.6.4-0",
    ],
}


def constants_text(tag: str) -> str:
    return (FIXTURES / f"constants-{tag}.go").read_text()


def publish(server: ReleaseServer, prefix: str, tags: list[str]) -> str:
    """The fixtures at ``/plain/PREFIX/TAG/cmd/kubeadm/...``, as raw.githubusercontent.com
    serves the repository; returns the base URL a spec gives as ``kubernetes.url``."""
    for tag in tags:
        server.add_plain(f"{prefix}/{tag}/{CONSTANTS_PATH}", constants_text(tag).encode())
    return server.plain_url(prefix)


@pytest.mark.integration
@pytest.mark.parametrize("tag", sorted(KUBEADM_LISTS))
def test_image_list_is_what_the_release_kubeadm_prints(
    tag: str, release_server: ReleaseServer, tmp_path: Path
) -> None:
    base = publish(release_server, f"k8s-{tag}", [tag])
    with httpx.Client() as client:
        files, images, source = fetch_kubeadm_images(KubeadmSource(base, client), tag, tmp_path)
    assert images == KUBEADM_LISTS[tag]
    assert source == base
    listing = tmp_path / "content/kubernetes" / tag / IMAGES_FILE
    assert files == [listing, tmp_path / "content/kubernetes" / tag / "constants.go"]
    assert listing.read_text().splitlines() == KUBEADM_LISTS[tag]
    assert files[1].read_text() == constants_text(tag)  # the evidence travels as served


@pytest.mark.unit
def test_builtin_table_is_the_fixtures_constants() -> None:
    """The offline fallback says what the releases' own files say (one row per minor)."""
    for tag in KUBEADM_LISTS:
        parsed = parse_constants(constants_text(tag), tag)
        assert builtin_constants(tag) == parsed, tag
        assert kubeadm_images(tag, BUILTIN[int(tag.split(".")[1])]) == KUBEADM_LISTS[tag]


# run with no network at all (a network namespace of its own, loopback down): the
# source's URL is a live-looking one, so any request would fail the run
_OFFLINE = """
import sys
from pathlib import Path
import httpx
from airgap.content.kubesource import KubeadmSource, fetch_kubeadm_images
with httpx.Client(timeout=5) as client:
    source = KubeadmSource("https://127.0.0.1:9/k8s", client, offline=True)
    files, images, origin = fetch_kubeadm_images(source, "v1.33.4", Path(sys.argv[1]))
print(origin)
print(",".join(f.name for f in files))
print("\\n".join(images))
"""


@pytest.mark.integration
def test_offline_source_reads_nothing_and_says_so(tmp_path: Path) -> None:
    if not _network_namespaces():
        pytest.skip("needs unshare -n (root or user namespaces)")
    result = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", _OFFLINE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    origin, names, *images = result.stdout.splitlines()
    assert origin == BUILTIN_SOURCE
    assert names == IMAGES_FILE
    assert images[0] == "registry.k8s.io/kube-apiserver:v1.33.4"
    assert images[-1] == "registry.k8s.io/etcd:3.5.21-0"
    with pytest.raises(InputError, match="built-in table .* knows v1.31, v1.32, v1.33, v1.34"):
        builtin_constants("v1.29.3")


def _network_namespaces() -> bool:
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


@pytest.mark.unit
def test_etcd_follows_kubeadm_fallbacks() -> None:
    """kubeadm's EtcdSupportedVersion: nearest end of the map outside it, the default
    for a gap inside it; a custom repository moves CoreDNS to REPO/coredns."""
    constants = KubeadmConstants("3.5.0-0", "v1.11.1", "3.9", ((28, "3.5.9-0"), (30, "3.5.12-0")))
    assert etcd_version(constants, "v1.27.1") == "3.5.9-0"
    assert etcd_version(constants, "v1.31.0") == "3.5.12-0"
    assert etcd_version(constants, "v1.29.0") == "3.5.0-0"
    images = kubeadm_images("v1.30.2", constants, "mirror.example:5000/k8s")
    assert "mirror.example:5000/k8s/coredns:v1.11.1" in images


@pytest.mark.unit
def test_newer_layout_with_a_top_level_var_is_read() -> None:
    """Later release branches declare the map as its own ``var`` (seen on release-1.34)."""
    text = constants_text("v1.34.0").replace(
        "\tSupportedEtcdVersion = map", "var SupportedEtcdVersion = map"
    )
    assert parse_constants(text, "x").supported_etcd[-1] == (34, "3.6.4-0")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t.replace("PauseVersion", "Pause_Version"), "PauseVersion not found"),
        (lambda t: t.replace("SupportedEtcdVersion =", "Other ="), "map not found"),
        (lambda t: t.replace('34: "3.6.4-0"', "34: etcd"), "cannot read"),
        (lambda t: t.replace('"v1.12.1"', '"v1.12.1 ; rm"'), "is not an image tag"),
        (lambda t: t + "x" * (1 << 20), "larger than"),
    ],
)
def test_hostile_constants_are_one_clear_error(mutate: object, needle: str) -> None:
    assert callable(mutate)
    with pytest.raises(InputError, match=needle):
        parse_constants(mutate(constants_text("v1.34.0")), "constants.go of v1.34.0")


@pytest.mark.integration
def test_missing_tag_names_the_url(release_server: ReleaseServer, tmp_path: Path) -> None:
    base = publish(release_server, "k8s-missing", [])
    with httpx.Client() as client, pytest.raises(NotFoundError) as caught:
        fetch_kubeadm_images(KubeadmSource(base, client), "v1.33.0", tmp_path)
    assert "Kubernetes v1.33.0" in str(caught.value) and "404" in str(caught.value)


@pytest.mark.unit
def test_spec_reads_kubernetes_versions(tmp_path: Path) -> None:
    spec = spec_of("kubernetes: {versions: [v1.33.4, v1.34.1]}\n", tmp_path)
    assert spec.kubernetes == (
        ContentSpec(ContentKind.KUBERNETES, "v1.33.4"),
        ContentSpec(ContentKind.KUBERNETES, "v1.34.1"),
    )
    offline = spec_of("kubernetes: {versions: [v1.33.4], offline: true}\n", tmp_path)
    assert offline.kubernetes[0].offline


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("kubernetes: {versions: [1.33.4]}\n", 1, "not a Kubernetes release version"),
        ("kubernetes:\n  versions:\n  - v1.33.4\n  - v1.33.4\n", 4, "listed twice"),
        ("kubernetes: {versions: []}\n", 1, "empty list"),
        ("kubernetes: {version: v1.33.4}\n", 1, "unknown key"),
        ("kubernetes: {versions: [v1.33.4], offline: true, url: 'https://x'}\n", 1, "offline"),
    ],
)
def test_spec_refuses_bad_kubernetes_entries(
    text: str, line: int, needle: str, tmp_path: Path
) -> None:
    assert_spec_error(text, tmp_path, line, needle)


@pytest.mark.e2e
def test_collect_carries_each_version_as_its_own_content(
    tmp_path: Path,
    release_server: ReleaseServer,
    corpus_layout: OciLayout,
    registry_factory: RegistryFactory,
    signing_key: SigningKey,
) -> None:
    """Collect with registry.k8s.io mirrored to a loopback registry holding small
    images under kubeadm's names: one ``kubernetes`` record per version, verify and
    inspect know the kind, and verify refuses a list that is not the release's."""
    source = registry_factory("plain")
    tags = ["v1.33.0", "v1.34.0"]
    for tag in tags:
        for image in KUBEADM_LISTS[tag]:
            repository, _, image_tag = image.removeprefix("registry.k8s.io/").rpartition(":")
            push_image(corpus_layout, "multiarch", source, repository, image_tag)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "kubernetes": {"versions": tags, "url": publish(release_server, "k8s-c", tags)},
            "registries": {"registry.k8s.io": {"mirror": source.host}},
            "platforms": ["linux/amd64"],
        },
    )
    bundle = tmp_path / "k8s.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert result.returncode == 0, result.stderr
    verified = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    inventory = json.loads(run_airgap("inspect", bundle, "--format", "json").stdout)
    records = [c for c in inventory["contents"] if c["kind"] == "kubernetes"]
    assert [(r["name"], r["version"]) for r in records] == [("kubernetes", t) for t in tags]
    for record, tag in zip(records, tags, strict=True):
        assert record["images"] == KUBEADM_LISTS[tag]
    carried = {i["reference"]: i["platforms"] for i in inventory["images"]}
    assert set(carried) == {i for t in tags for i in KUBEADM_LISTS[t]}
    assert all(platforms == ["linux/amd64"] for platforms in carried.values())
    policy = tmp_path / "policy.yaml"
    policy.write_text("requiredContent: [kubernetes]\nrequiredPlatforms: [linux/amd64]\n")
    checked = run_airgap("verify", bundle, "--key", signing_key.public, "--policy", policy)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert_forgeries_refused(bundle, tmp_path)
    assert_diff_and_delta_know_the_kind(bundle, spec, tmp_path, signing_key)


def assert_diff_and_delta_know_the_kind(
    bundle: Path, spec: Path, tmp_path: Path, signing_key: SigningKey
) -> None:
    """A bundle of v1.33.0 alone: diff names the version the first one adds; a delta
    collected against it relies on what it holds and verifies."""
    document = yaml.safe_load(spec.read_text())
    document["kubernetes"]["versions"] = ["v1.33.0"]
    older_spec = write_spec(tmp_path / "older.yaml", document)
    older = tmp_path / "older.tar"
    result = run_airgap("collect", older_spec, "--sign-key", signing_key.private, "-o", older, "-q")
    assert result.returncode == 0, result.stderr
    diff = run_airgap("diff", older, bundle, "--format", "json")
    assert diff.returncode == 0, diff.stderr
    (change,) = json.loads(diff.stdout)["contents"]
    assert (change["kind"], change["name"], change["change"]) == (
        "kubernetes",
        "kubernetes",
        "added",
    )
    assert change["new"] == {"version": "v1.34.0"}
    delta = tmp_path / "delta.tar"
    args: list[str | Path] = ["--sign-key", signing_key.private, "--base", older, "-o", delta, "-q"]
    result = run_airgap("collect", spec, *args)
    assert result.returncode == 0, result.stderr
    carried = tamper.manifest_of(delta)
    assert carried.delta is not None and carried.delta.needs
    assert [c.version for c in carried.contents] == ["v1.33.0", "v1.34.0"]


@pytest.mark.e2e
def test_collect_names_an_unreachable_source(
    tmp_path: Path, signing_key: SigningKey, release_server: ReleaseServer
) -> None:
    spec = write_spec(
        tmp_path / "spec.yaml",
        {"kubernetes": {"versions": ["v1.33.0"], "url": publish(release_server, "k8s-e", [])}},
    )
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "b")
    assert_clean_failure(result, 1, "Kubernetes v1.33.0", "404")


def assert_forgeries_refused(bundle: Path, tmp_path: Path) -> None:
    """A re-signed bundle whose constants.go says another etcd, or whose record drops
    an image, fails verify with the reason (the list must follow from the file)."""
    private, public = tamper.new_key(tmp_path)
    path = "content/kubernetes/v1.34.0/constants.go"
    members = {m.name: m.data for m in tamper.read_members(bundle)}
    edited = members[path].replace(b'34: "3.6.4-0"', b'34: "3.6.5-0"')
    forged = tamper.resign(bundle, tmp_path / "forged.tar", private, replace={path: edited})
    result = run_airgap("verify", forged, "--key", public)
    assert result.returncode == 1
    assert "kubeadm pulls" in result.stdout + result.stderr, result.stdout + result.stderr

    def drop_etcd(manifest: BundleManifest) -> BundleManifest:
        contents = [
            replace(c, images=c.images[:-1]) if c.kind == "kubernetes" else c
            for c in manifest.contents
        ]
        return replace(manifest, contents=contents)

    shorter = tamper.resign(bundle, tmp_path / "short.tar", private, edit=drop_etcd)
    result = run_airgap("verify", shorter, "--key", public)
    assert result.returncode == 1
    assert "is not the record's image list" in result.stdout + result.stderr
