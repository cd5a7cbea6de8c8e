"""Fetching whole provider releases: naming, sources, layout, contract check, images."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airgap.core.errors import AirgapError, InputError, NotFoundError
from airgap.core.limits import MAX_RELEASE_FILE_BYTES
from airgap.net.httpclient import build_client
from airgap.providers.fetch import FetchedProvider, fetch_provider
from airgap.providers.specs import ProviderSpec
from airgap.providers.types import ProviderType
from airgap.providers.wellknown import (
    WELL_KNOWN,
    closest_names,
    lookup,
    split_url,
    unknown_provider_message,
)
from tests.harness.releases import ReleaseServer, make_components, make_metadata, make_release_files

INFRA = ProviderType.INFRASTRUCTURE
SERIES = [(0, 2, "v1beta1"), (0, 3, "v1beta1")]
ODD_IMAGES = ["ghcr.io/acme/odd-controller:v0.3.1", "busybox:1.36"]


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with build_client(timeout=10) as http_client:
        yield http_client


@pytest.fixture(autouse=True)
def _no_github_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_API_URL", raising=False)


# --- provider naming ------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("ptype", "operator", "prefix", "label"),
    [
        (ProviderType.CORE, "core", "core", "cluster-api"),
        (ProviderType.BOOTSTRAP, "bootstrap", "bootstrap", "bootstrap-x"),
        (ProviderType.CONTROL_PLANE, "control-plane", "control-plane", "control-plane-x"),
        (ProviderType.INFRASTRUCTURE, "infrastructure", "infrastructure", "infrastructure-x"),
        (ProviderType.IPAM, "ipam", "ipam", "ipam-x"),
        (
            ProviderType.RUNTIME_EXTENSION,
            "runtimeextension",
            "runtime-extension",
            "runtime-extension-x",
        ),
        (ProviderType.ADDON, "addon", "addon", "addon-x"),
    ],
)
def test_provider_type_spellings(
    ptype: ProviderType, operator: str, prefix: str, label: str
) -> None:
    assert ptype.operator_type == operator
    assert ptype.file_prefix == prefix
    assert ptype.components_file == f"{prefix}-components.yaml"
    assert ptype.label("x") == label
    assert ProviderType.parse(ptype.kind) is ptype
    assert ProviderType.parse(ptype.kind.lower()) is ptype
    assert ProviderType.parse(operator) is ptype
    assert ProviderType.parse(prefix) is ptype


@pytest.mark.unit
def test_provider_type_parse_error_lists_types() -> None:
    with pytest.raises(InputError) as caught:
        ProviderType.parse("Infra")
    assert str(caught.value) == (
        "unknown provider type 'Infra': valid types are CoreProvider, BootstrapProvider, "
        "ControlPlaneProvider, InfrastructureProvider, IPAMProvider, RuntimeExtensionProvider, "
        "AddonProvider"
    )


# clusterctl's defaults() (cmd/clusterctl/client/config/providers_client.go), per type
CLUSTERCTL_COUNTS = {
    ProviderType.CORE: 1,
    ProviderType.BOOTSTRAP: 8,
    ProviderType.CONTROL_PLANE: 11,
    INFRA: 39,
    ProviderType.IPAM: 3,
    ProviderType.RUNTIME_EXTENSION: 1,
    ProviderType.ADDON: 3,
}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "ptype", "repository", "components_file"),
    [
        ("cluster-api", ProviderType.CORE, "kubernetes-sigs/cluster-api", "core-components.yaml"),
        ("kubeadm", ProviderType.BOOTSTRAP, "kubernetes-sigs/cluster-api", "bootstrap-components.yaml"),
        ("docker", INFRA, "kubernetes-sigs/cluster-api", "infrastructure-components-development.yaml"),
        ("talos", ProviderType.BOOTSTRAP, "siderolabs/cluster-api-bootstrap-provider-talos", "bootstrap-components.yaml"),
        ("talos", ProviderType.CONTROL_PLANE, "siderolabs/cluster-api-control-plane-provider-talos", "control-plane-components.yaml"),
        ("rke2", ProviderType.BOOTSTRAP, "rancher/cluster-api-provider-rke2", "bootstrap-components.yaml"),
        ("rke2", ProviderType.CONTROL_PLANE, "rancher/cluster-api-provider-rke2", "control-plane-components.yaml"),
        ("k0sproject-k0smotron", INFRA, "k0sproject/k0smotron", "infrastructure-components.yaml"),
        ("k0sproject-k0smotron", ProviderType.BOOTSTRAP, "k0sproject/k0smotron", "bootstrap-components.yaml"),
        ("k0sproject-k0smotron", ProviderType.CONTROL_PLANE, "k0sproject/k0smotron", "control-plane-components.yaml"),
        ("kamaji", ProviderType.CONTROL_PLANE, "clastix/cluster-api-control-plane-provider-kamaji", "control-plane-components.yaml"),
        ("microk8s", ProviderType.BOOTSTRAP, "canonical/cluster-api-bootstrap-provider-microk8s", "bootstrap-components.yaml"),
        ("microk8s", ProviderType.CONTROL_PLANE, "canonical/cluster-api-control-plane-provider-microk8s", "control-plane-components.yaml"),
        ("nutanix", INFRA, "nutanix-cloud-native/cluster-api-provider-nutanix", "infrastructure-components.yaml"),
        ("nutanix", ProviderType.IPAM, "nutanix-cloud-native/cluster-api-ipam-provider-nutanix", "ipam-components.yaml"),
        ("nutanix", ProviderType.RUNTIME_EXTENSION, "nutanix-cloud-native/cluster-api-runtime-extensions-nutanix", "runtime-extensions-components.yaml"),
        ("hetzner", INFRA, "syself/cluster-api-provider-hetzner", "infrastructure-components.yaml"),
        ("proxmox", INFRA, "ionos-cloud/cluster-api-provider-proxmox", "infrastructure-components.yaml"),
        ("metal3", INFRA, "metal3-io/cluster-api-provider-metal3", "infrastructure-components.yaml"),
        ("metal3", ProviderType.IPAM, "metal3-io/ip-address-manager", "ipam-components.yaml"),
        ("in-cluster", ProviderType.IPAM, "kubernetes-sigs/cluster-api-ipam-provider-in-cluster", "ipam-components.yaml"),
        ("rancher-fleet", ProviderType.ADDON, "rancher/cluster-api-addon-provider-fleet", "addon-components.yaml"),
        ("helm", ProviderType.ADDON, "kubernetes-sigs/cluster-api-addon-provider-helm", "addon-components.yaml"),
    ],
)  # fmt: skip
def test_built_in_provider(
    name: str, ptype: ProviderType, repository: str, components_file: str
) -> None:
    known = lookup(name, ptype)
    assert known is not None
    assert (known.name, known.type) == (name, ptype)
    assert known.url == f"https://github.com/{repository}/releases"
    assert known.components_file == components_file
    assert known.clusterctl_url == (
        f"https://github.com/{repository}/releases/latest/{components_file}"
    )


@pytest.mark.unit
def test_built_in_table_is_clusterctls_66() -> None:
    assert len(WELL_KNOWN) == 66
    counts = {ptype: sum(1 for _, t in WELL_KNOWN if t is ptype) for ptype in ProviderType}
    assert counts == CLUSTERCTL_COUNTS
    for (name, ptype), known in WELL_KNOWN.items():
        # every clusterctl URL today is a GitHub "latest" release file, read as its repository
        assert known.clusterctl_url == f"{known.url}/latest/{known.components_file}", name
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/releases", known.url), name
        assert (name == "cluster-api") == (ptype is ProviderType.CORE)  # clusterctl's rule
    special = {
        (n, t.kind): p.components_file
        for (n, t), p in WELL_KNOWN.items()
        if p.components_file != t.components_file
    }
    assert special == {
        ("docker", "InfrastructureProvider"): "infrastructure-components-development.yaml",
        ("nutanix", "RuntimeExtensionProvider"): "runtime-extensions-components.yaml",
    }
    # clusterctl's spelling only: no airgap-made names
    assert lookup("fleet", ProviderType.ADDON) is None
    assert lookup("aws", ProviderType.BOOTSTRAP) is None


@pytest.mark.unit
def test_readme_lists_exactly_the_built_in_names() -> None:
    """The spec reference claims the table, the whole table and nothing but the table."""
    readme = (Path(__file__).resolve().parent.parent / "docs" / "spec.md").read_text()
    listed: dict[ProviderType, set[str]] = {}
    for match in re.finditer(r"^  - (\w+Provider): ((?:.|\n    )+)$", readme, re.M):
        listed[ProviderType.parse(match.group(1))] = set(re.findall(r"`([^`]+)`", match.group(2)))
    assert listed == {
        ptype: {name for name, t in WELL_KNOWN if t is ptype} for ptype in ProviderType
    }
    assert "clusterctl's 66 built-in providers" in readme


@pytest.mark.unit
def test_split_url_maps_clusterctl_urls_to_release_sources() -> None:
    assert split_url(
        "https://github.com/rancher/cluster-api-provider-rke2/releases/latest/bootstrap-components.yaml"
    ) == (
        "https://github.com/rancher/cluster-api-provider-rke2/releases",
        "bootstrap-components.yaml",
    )
    # anything else goes to the release sources as is, which read clusterctl-style URLs
    other = "https://example.com/mirror/infrastructure-x/v1.0.0/infrastructure-components.yaml"
    assert split_url(other) == (other, "infrastructure-components.yaml")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "ptype", "hint"),
    [
        ("fleet", ProviderType.ADDON, "closest built-in names: rancher-fleet;"),
        ("vsphre", INFRA, "closest built-in names: vsphere;"),
        ("k0smotron", ProviderType.CONTROL_PLANE, "closest built-in names: k0sproject-k0smotron;"),
        ("metal3", ProviderType.BOOTSTRAP, "'metal3' is built in as InfrastructureProvider, IPAMProvider only"),
    ],
)  # fmt: skip
def test_unknown_name_suggests_known_ones(name: str, ptype: ProviderType, hint: str) -> None:
    message = unknown_provider_message(name, ptype)
    assert message.startswith(f"unknown provider {name!r} of type {ptype.kind}: ")
    assert hint in message, message
    assert message.endswith("or give url (e.g. https://github.com/OWNER/REPO/releases)")
    assert closest_names("zzzz", ProviderType.CORE) == []


# --- fetching -------------------------------------------------------------------------


def publish_odd(server: ReleaseServer, tags: list[str], **files: bytes) -> str:
    owner, repo = server.new_repo("cluster-api-provider-odd")
    for tag in tags:
        release = make_release_files(INFRA, "odd-system", ODD_IMAGES, SERIES)
        release.update({name.replace("_", "-") + ".yaml": data for name, data in files.items()})
        server.add_release(owner, repo, tag, release)
    return server.repo_url(owner, repo)


@pytest.mark.integration
def test_fetch_from_github(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    url = publish_odd(release_server, ["v0.2.0", "v0.3.1", "v0.4.0-rc.0"])
    spec = ProviderSpec("odd", INFRA, "latest", url=url)
    fetched = fetch_provider(spec, tmp_path / "staging", client)
    directory = (tmp_path / "staging" / "providers" / "infrastructure-odd" / "v0.3.1").absolute()
    assert fetched == FetchedProvider(
        name="odd",
        type=INFRA,
        version="v0.3.1",
        contract="v1beta1",
        label="infrastructure-odd",
        source=url,
        metadata_path=directory / "metadata.yaml",
        components_path=directory / "infrastructure-components.yaml",
        images=["ghcr.io/acme/odd-controller:v0.3.1", "docker.io/library/busybox:1.36"],
    )
    assert fetched.metadata_path.read_text() == make_metadata(SERIES)
    assert sorted(p.name for p in directory.iterdir()) == [
        "infrastructure-components.yaml",
        "metadata.yaml",
    ]


@pytest.mark.integration
def test_fetch_exact_version_and_components_override(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    dev = make_components(INFRA, "odd-system", ["ghcr.io/acme/odd-dev:v0.2.0"]).encode()
    url = publish_odd(
        release_server, ["v0.2.0", "v0.3.1"], infrastructure_components_development=dev
    )
    spec = ProviderSpec(
        "odd",
        INFRA,
        "v0.2.0",
        url=url,
        components_file="infrastructure-components-development.yaml",
    )
    fetched = fetch_provider(spec, tmp_path, client)
    assert fetched.version == "v0.2.0"
    assert fetched.components_path.name == "infrastructure-components-development.yaml"
    assert fetched.images == ["ghcr.io/acme/odd-dev:v0.2.0"]


@pytest.mark.integration
def test_well_known_providers_need_no_url(
    client: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # github.com URLs from the built-in table, answered by a fake server via GITHUB_API_URL.
    # A private server: kubernetes-sigs/cluster-api on the shared one belongs to other tests.
    with ReleaseServer() as server:
        _check_well_known(server, client, tmp_path, monkeypatch)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "ptype", "owner", "repo"),
    [
        ("talos", ProviderType.BOOTSTRAP, "siderolabs", "cluster-api-bootstrap-provider-talos"),
        ("metal3", ProviderType.IPAM, "metal3-io", "ip-address-manager"),
        ("rancher-fleet", ProviderType.ADDON, "rancher", "cluster-api-addon-provider-fleet"),
        (
            "nutanix",
            ProviderType.RUNTIME_EXTENSION,
            "nutanix-cloud-native",
            "cluster-api-runtime-extensions-nutanix",
        ),
    ],
)
def test_built_in_names_fetch_from_clusterctls_repositories(
    client: httpx.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    ptype: ProviderType,
    owner: str,
    repo: str,
) -> None:
    """No url: the name alone finds clusterctl's repository and components file (the
    nutanix runtime extension's is ``runtime-extensions-components.yaml``)."""
    known = lookup(name, ptype)
    assert known is not None
    image = f"ghcr.io/{owner}/{name}-controller:v0.6.1"
    files = {
        "metadata.yaml": make_metadata([(0, 6, "v1beta1")]).encode(),
        known.components_file: make_components(ptype, f"{name}-system", [image]).encode(),
    }
    with ReleaseServer() as server:
        server.add_release(owner, repo, "v0.6.1", files)
        monkeypatch.setenv("GITHUB_API_URL", server.api_url)
        fetched = fetch_provider(ProviderSpec(name, ptype, "latest"), tmp_path, client)
        asked = {r.path for r in server.requests("/api/v3/repos/")}
    assert f"/api/v3/repos/{owner}/{repo}/releases/tags/v0.6.1" in asked
    assert fetched.source == f"https://github.com/{owner}/{repo}/releases"
    assert (fetched.version, fetched.label, fetched.images) == (
        "v0.6.1",
        ptype.label(name),
        [image],
    )
    assert fetched.components_path.name == known.components_file


def _check_well_known(
    release_server: ReleaseServer,
    client: httpx.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_API_URL", release_server.api_url)
    core = make_release_files(
        ProviderType.CORE,
        "capi-system",
        ["registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4"],
        [(1, 8, "v1beta1"), (1, 9, "v1beta1")],
    )
    core["infrastructure-components-development.yaml"] = make_components(
        INFRA, "capd-system", ["gcr.io/k8s-staging-cluster-api/capd-manager:v1.9.4"]
    ).encode()
    release_server.add_release("kubernetes-sigs", "cluster-api", "v1.9.4", core)

    fetched = fetch_provider(
        ProviderSpec("cluster-api", ProviderType.CORE, "latest"), tmp_path, client
    )
    assert (fetched.label, fetched.version, fetched.contract) == (
        "cluster-api",
        "v1.9.4",
        "v1beta1",
    )
    assert fetched.source == "https://github.com/kubernetes-sigs/cluster-api/releases"
    assert fetched.components_path.name == "core-components.yaml"
    assert fetched.images == ["registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4"]

    docker = fetch_provider(ProviderSpec("docker", INFRA, "v1.9.4"), tmp_path, client)
    assert docker.label == "infrastructure-docker"
    assert (
        docker.components_path
        == (
            tmp_path
            / "providers/infrastructure-docker/v1.9.4/infrastructure-components-development.yaml"
        ).absolute()
    )
    assert docker.images == ["gcr.io/k8s-staging-cluster-api/capd-manager:v1.9.4"]


@pytest.mark.unit
def test_unknown_provider_needs_url(client: httpx.Client, tmp_path: Path) -> None:
    with pytest.raises(
        InputError, match="^unknown provider 'odd' of type InfrastructureProvider: give url"
    ):
        fetch_provider(ProviderSpec("odd", INFRA, "v1.0.0"), tmp_path, client)


@pytest.mark.integration
def test_missing_contract_names_provider_version_and_file(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    url = publish_odd(release_server, ["v0.5.0"])
    with pytest.raises(AirgapError) as caught:
        fetch_provider(ProviderSpec("odd", INFRA, "v0.5.0", url=url), tmp_path, client)
    message = str(caught.value)
    assert message.startswith("provider odd (InfrastructureProvider) v0.5.0: metadata.yaml from ")
    assert url in message
    assert "no contract for release series 0.5 (it lists 0.2 (v1beta1), 0.3 (v1beta1))" in message


@pytest.mark.integration
def test_missing_release_file(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    url = publish_odd(release_server, ["v0.3.1"])
    spec = ProviderSpec("odd", INFRA, "v0.3.1", url=url, components_file="nope.yaml")
    with pytest.raises(NotFoundError, match="has no file nope.yaml"):
        fetch_provider(spec, tmp_path, client)


@pytest.mark.integration
def test_image_needing_a_variable_names_the_components_file(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = release_server.new_repo()
    files = make_release_files(INFRA, "odd-system", ["${ODD_IMAGE}"], SERIES)
    release_server.add_release(owner, repo, "v0.3.0", files)
    with pytest.raises(InputError) as caught:
        fetch_provider(
            ProviderSpec("odd", INFRA, "v0.3.0", url=release_server.repo_url(owner, repo)),
            tmp_path,
            client,
        )
    message = str(caught.value)
    assert (
        "infrastructure-components.yaml of provider odd (InfrastructureProvider) v0.3.0" in message
    )
    assert "ODD_IMAGE" in message and "Deployment odd-system-controller-manager" in message


def write_local_release(
    base: Path, label: str, version: str, ptype: ProviderType, image: str
) -> None:
    directory = base / label / version
    directory.mkdir(parents=True)
    (directory / "metadata.yaml").write_text(make_metadata([(1, 0, "v1beta1"), (1, 1, "v1beta1")]))
    (directory / ptype.components_file).write_text(make_components(ptype, "ipam-system", [image]))


@pytest.mark.unit
def test_fetch_from_local_repository_both_url_forms(client: httpx.Client, tmp_path: Path) -> None:
    base = tmp_path / "repo"
    for version in ("v1.0.0", "v1.1.0"):
        write_local_release(
            base, "ipam-in-cluster", version, ProviderType.IPAM, f"quay.io/ipam/ctl:{version}"
        )
    out = tmp_path / "out"
    latest = fetch_provider(
        ProviderSpec(
            "in-cluster", ProviderType.IPAM, "latest", url=(base / "ipam-in-cluster").as_uri()
        ),
        out,
        client,
    )
    assert (latest.version, latest.images) == ("v1.1.0", ["quay.io/ipam/ctl:v1.1.0"])
    assert latest.source == (base / "ipam-in-cluster").as_uri()

    pinned_url = (base / "ipam-in-cluster" / "v1.0.0" / "ipam-components.yaml").as_uri()
    pinned = fetch_provider(
        ProviderSpec("in-cluster", ProviderType.IPAM, "latest", url=pinned_url), out, client
    )
    assert (pinned.version, pinned.images) == ("v1.0.0", ["quay.io/ipam/ctl:v1.0.0"])
    assert (
        pinned.components_path
        == (out / "providers/ipam-in-cluster/v1.0.0/ipam-components.yaml").absolute()
    )

    same = fetch_provider(
        ProviderSpec("in-cluster", ProviderType.IPAM, "v1.0.0", url=pinned_url), out, client
    )
    assert same.version == "v1.0.0"
    with pytest.raises(InputError, match="version v1.1.0 conflicts with version v1.0.0 in url"):
        fetch_provider(
            ProviderSpec("in-cluster", ProviderType.IPAM, "v1.1.0", url=pinned_url), out, client
        )


@pytest.mark.unit
def test_a_local_repositorys_file_must_be_a_bounded_regular_file(
    client: httpx.Client, tmp_path: Path
) -> None:
    """A FIFO where metadata.yaml should be blocked collect for ever; /dev/zero (a link
    to it) or a file past the release-file bound would have been copied without end."""
    base = tmp_path / "repo"
    write_local_release(base, "ipam-x", "v1.0.0", ProviderType.IPAM, "quay.io/ipam/ctl:v1")
    metadata = base / "ipam-x" / "v1.0.0" / "metadata.yaml"
    spec = ProviderSpec("x", ProviderType.IPAM, "v1.0.0", url=(base / "ipam-x").as_uri())
    metadata.unlink()
    os.mkfifo(metadata)
    with pytest.raises(InputError, match=f"release file {metadata} is a FIFO, not a regular"):
        fetch_provider(spec, tmp_path / "out", client)
    metadata.unlink()
    metadata.symlink_to("/dev/zero")
    with pytest.raises(InputError, match=f"release file {metadata} is a device"):
        fetch_provider(spec, tmp_path / "out", client)
    metadata.unlink()
    with metadata.open("wb") as handle:
        handle.truncate(MAX_RELEASE_FILE_BYTES + 1)  # sparse
    with pytest.raises(InputError, match="is larger than the 64 MiB limit"):
        fetch_provider(spec, tmp_path / "out", client)
    assert not list((tmp_path / "out").rglob("metadata.yaml"))  # nothing half-copied


@pytest.mark.integration
def test_fetch_from_plain_directory(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    for name, data in make_release_files(
        ProviderType.ADDON, "helm-system", ["ghcr.io/x/helm:v0.2.0"], [(0, 2, "v1beta1")]
    ).items():
        release_server.add_plain(f"mirror/addon-helm/v0.2.0/{name}", data)
    url = release_server.plain_url("mirror/addon-helm")
    fetched = fetch_provider(
        ProviderSpec("helm", ProviderType.ADDON, "v0.2.0", url=url), tmp_path, client
    )
    assert (fetched.label, fetched.contract, fetched.source) == ("addon-helm", "v1beta1", url)
    with pytest.raises(InputError, match="cannot resolve version 'latest'"):
        fetch_provider(
            ProviderSpec("helm", ProviderType.ADDON, "latest", url=url), tmp_path, client
        )
