"""Contract compatibility as clusterctl applies it, at collect and at verify/import.

clusterctl's ``internal/contract.GetCompatibleVersions``: a provider is compatible with
the core provider if it declares the same contract, and a v1beta2 core (CAPI 1.11 and
later) also accepts v1beta1 providers. The shape of ``bundles/capi-vsphere-corp.yaml``
(core ``latest``, now v1beta2, next to CAPV and in-cluster IPAM on v1beta1) must collect,
verify and import; a v1alpha4 provider next to a v1beta2 core is refused on the
connected side, before any image is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.providers.contract import (
    ContractMember,
    compatible_contracts,
    contract_problems,
)
from airgap.providers.types import ProviderType
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

ROOT = Path(__file__).resolve().parent.parent
CORE = ProviderType.CORE
# kubernetes-sigs/cluster-api's metadata.yaml: 1.10 is the last v1beta1 series
CAPI_SERIES = [(1, 9, "v1beta1"), (1, 10, "v1beta1"), (1, 11, "v1beta2"), (1, 12, "v1beta2")]


# -- the table ----------------------------------------------------------------------------


def member(name: str, contract: str, core: bool = False) -> ContractMember:
    return ContractMember(name, contract, core)


@pytest.mark.unit
def test_the_table_is_clusterctls() -> None:
    assert compatible_contracts("v1beta2") == ("v1beta2", "v1beta1")
    assert compatible_contracts("v1beta1") == ("v1beta1",)
    assert compatible_contracts("v1alpha4") == ("v1alpha4",)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("core", "provider", "compatible"),
    [
        ("v1beta1", "v1beta1", True),
        ("v1beta2", "v1beta2", True),
        ("v1beta2", "v1beta1", True),  # until v1beta1 is retired
        ("v1beta1", "v1beta2", False),  # an older core never accepts a newer contract
        ("v1beta2", "v1alpha4", False),
        ("v1beta1", "v1alpha4", False),
        ("v1alpha4", "v1alpha4", True),
    ],
)
def test_compatibility(core: str, provider: str, compatible: bool) -> None:
    problems = contract_problems([member("core", core, True), member("infra", provider)])
    assert (problems == []) is compatible
    if not compatible:
        (problem,) = problems
        assert problem.subject == "infra"
        assert problem.message == (
            f"contract {provider} is not compatible with the core provider's {core} "
            f"(a {core} core accepts {', '.join(compatible_contracts(core))})"
        )


@pytest.mark.unit
def test_core_versions_must_agree_and_no_core_means_nothing_to_check() -> None:
    problems = contract_problems(
        [member("a", "v1beta1", True), member("b", "v1beta2", True), member("x", "v1beta2")]
    )
    assert [str(p) for p in problems] == [
        "CoreProvider: core provider versions disagree on contract: v1beta1, v1beta2",
        # compatible with the v1beta2 core, not with the v1beta1 one
        "x: contract v1beta2 is not compatible with the core provider's v1beta1 "
        "(a v1beta1 core accepts v1beta1)",
    ]
    assert contract_problems([member("x", "v1alpha4"), member("y", "v1beta2")]) == []


# -- collect, verify and import against the fake GitHub -----------------------------------


@pytest.fixture(scope="module")
def github() -> Iterator[ReleaseServer]:
    """A private fake GitHub: kubernetes-sigs/cluster-api here is at 1.11 (v1beta2),
    unlike the session server's 1.9 corpus."""
    with ReleaseServer() as server:
        yield server


def _publish(
    server: ReleaseServer,
    owner: str,
    repo: str,
    tag: str,
    series: list[tuple[int, int, str]],
    components: dict[ProviderType, list[str]],
) -> None:
    files = {"metadata.yaml": make_metadata(series).encode()}
    for ptype, images in components.items():
        files[ptype.components_file] = make_components(
            ptype, f"{repo}-{ptype.file_prefix}-system", images
        ).encode()
    server.add_release(owner, repo, tag, files)


@pytest.fixture(scope="module")
def vsphere_world(github: ReleaseServer, source_images: dict[str, TestImage]) -> ReleaseServer:
    """The releases bundles/capi-vsphere-corp.yaml names, as they are upstream: CAPI's
    latest is v1.11 (v1beta2), CAPV v1.12.0 and in-cluster IPAM v1.0.0 declare v1beta1."""
    app, sidecar = source_images["app"].reference, source_images["sidecar"].reference
    multi, docker = source_images["multiarch"].reference, source_images["dockerv2"].reference
    capi = {
        ProviderType.CORE: [app],
        ProviderType.BOOTSTRAP: [sidecar],
        ProviderType.CONTROL_PLANE: [docker],
    }
    for tag in ("v1.10.5", "v1.11.1"):
        _publish(github, "kubernetes-sigs", "cluster-api", tag, CAPI_SERIES, capi)
    _publish(
        github,
        "kubernetes-sigs",
        "cluster-api-provider-vsphere",
        "v1.12.0",
        [(1, 11, "v1beta1"), (1, 12, "v1beta1")],
        {ProviderType.INFRASTRUCTURE: [multi]},
    )
    _publish(
        github,
        "kubernetes-sigs",
        "cluster-api-ipam-provider-in-cluster",
        "v1.0.0",
        [(0, 1, "v1alpha2"), (1, 0, "v1beta1")],
        {ProviderType.IPAM: [app]},
    )
    return github


def vsphere_corp_spec(path: Path, image: str) -> Path:
    """bundles/capi-vsphere-corp.yaml's providers exactly as written (built-in names,
    core ``latest``); its images and registry settings name hosts this test cannot
    reach, so one loopback image stands in for them."""
    example = yaml.safe_load((ROOT / "bundles" / "capi-vsphere-corp.yaml").read_text())
    return write_spec(path, {"providers": example["providers"], "images": [image]})


@pytest.mark.e2e
def test_vsphere_corp_shape_collects_verifies_and_imports(
    vsphere_world: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    env = {"GITHUB_API_URL": vsphere_world.api_url}
    spec = vsphere_corp_spec(tmp_path / "capi-vsphere-corp.yaml", source_images["app"].reference)
    bundle = tmp_path / "vsphere.tar"
    collected = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q", env=env
    )
    assert collected.returncode == 0, collected.stderr

    verified = run_airgap("verify", bundle, "--key", signing_key.public, "--format", "json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["verified"] is True and report["failures"] == []
    contracts = {(p["type"], p["name"]): (p["version"], p["contract"]) for p in report["providers"]}
    assert contracts == {
        ("CoreProvider", "cluster-api"): ("v1.11.1", "v1beta2"),
        ("BootstrapProvider", "kubeadm"): ("v1.11.1", "v1beta2"),
        ("ControlPlaneProvider", "kubeadm"): ("v1.11.1", "v1beta2"),
        ("InfrastructureProvider", "vsphere"): ("v1.12.0", "v1beta1"),
        ("IPAMProvider", "in-cluster"): ("v1.0.0", "v1beta1"),
    }

    registry = registry_factory("plain")
    imported = run_airgap(
        "import",
        bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{registry.host}/capi",
        "--output-dir",
        tmp_path / "capi-out",
        "-q",
    )
    assert imported.returncode == 0, imported.stderr
    kinds = {
        doc["kind"]
        for path in (tmp_path / "capi-out" / "operator").rglob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    }
    assert {"CoreProvider", "InfrastructureProvider", "IPAMProvider"} <= kinds


def _collect(
    spec: dict[str, object], tmp_path: Path, signing_key: SigningKey, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = write_spec(tmp_path / "spec.yaml", spec)
    output = tmp_path / "x.tar"
    result = run_airgap(*collect_args(path, signing_key.private, output), env=env)
    return result, output


@pytest.mark.e2e
def test_incompatible_provider_fails_at_collect_before_any_image(
    vsphere_world: ReleaseServer,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    fault_proxy_factory: FaultProxyFactory,
    signing_key: SigningKey,
    tmp_path: Path,
) -> None:
    """A v1alpha4 provider next to a v1beta2 core: refused on the connected side, with
    both contracts named, and not one request to the image registry."""
    proxy = fault_proxy_factory(plain_registry)  # every image request would show here
    app = source_images["app"]
    old_image = f"{proxy.host}/{app.repository}:{app.tag}"
    owner, repo = vsphere_world.new_repo("cluster-api-provider-old")
    _publish(
        vsphere_world,
        owner,
        repo,
        "v0.4.2",
        [(0, 4, "v1alpha4")],
        {ProviderType.INFRASTRUCTURE: [old_image]},
    )
    spec = {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": "latest"},
            {
                "name": "old",
                "type": "InfrastructureProvider",
                "version": "v0.4.2",
                "url": vsphere_world.repo_url(owner, repo),
            },
        ],
        "images": [old_image],
    }
    result, output = _collect(
        spec, tmp_path, signing_key, {"GITHUB_API_URL": vsphere_world.api_url}
    )
    line = assert_clean_failure(result, 2)
    assert line == (
        f"airgap: error: {tmp_path / 'spec.yaml'}: providers that cannot be installed "
        "together (core provider cluster-api v1.11.1 (v1beta2)): "
        "InfrastructureProvider/old v0.4.2: contract v1alpha4 is not compatible with the "
        "core provider's v1beta2 (a v1beta2 core accepts v1beta2, v1beta1)"
    )
    assert proxy.requests == []
    assert not output.exists()
    assert not list(tmp_path.glob(".airgap-collect-*"))


@pytest.mark.e2e
def test_core_versions_disagreeing_fail_at_collect(
    vsphere_world: ReleaseServer, signing_key: SigningKey, tmp_path: Path
) -> None:
    spec: dict[str, object] = {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": "v1.10.5"},
            {"name": "cluster-api", "type": "CoreProvider", "version": "v1.11.1"},
        ]
    }
    result, _ = _collect(spec, tmp_path, signing_key, {"GITHUB_API_URL": vsphere_world.api_url})
    assert_clean_failure(
        result,
        2,
        "core provider versions disagree on contract: v1beta1, v1beta2",
        "cluster-api v1.10.5 (v1beta1), cluster-api v1.11.1 (v1beta2)",
    )


# -- verify on what was signed ------------------------------------------------------------


def _with_contracts(
    bundle: CollectedBundle, out: Path, contracts: dict[str, tuple[int, int, str]]
) -> Path:
    """The test bundle re-signed by its trusted key with providers' metadata and manifest
    contracts changed (by provider name): only the contract check can object."""
    replace: dict[str, bytes] = {}
    changed: dict[str, str] = {}
    for provider in bundle.manifest.providers:
        if provider.name in contracts:
            major, minor, contract = contracts[provider.name]
            replace[provider.metadata] = make_metadata([(major, minor, contract)]).encode()
            changed[provider.name] = contract

    def edit(manifest: BundleManifest) -> BundleManifest:
        providers = [
            dataclasses.replace(p, contract=changed[p.name]) if p.name in changed else p
            for p in manifest.providers
        ]
        return dataclasses.replace(manifest, providers=providers)

    return tamper.resign(bundle.path, out, bundle.key.private, replace=replace, edit=edit)


@pytest.mark.e2e
def test_verify_accepts_v1beta1_providers_next_to_a_v1beta2_core(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    # the core (and kubeadm, released with it) move to v1beta2; docker and odd stay v1beta1
    bundle = _with_contracts(
        capi_bundle,
        tmp_path / "b.tar",
        {
            "cluster-api": (1, 9, "v1beta2"),
            "kubeadm": (1, 9, "v1beta2"),
            "docker": (1, 9, "v1beta2"),
        },
    )
    result = run_airgap("verify", bundle, "--key", capi_bundle.key.public, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert {p["name"]: p["contract"] for p in report["providers"]}["odd"] == "v1beta1"


@pytest.mark.e2e
def test_verify_refuses_a_v1alpha4_provider_next_to_a_v1beta2_core(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    bundle = _with_contracts(
        capi_bundle,
        tmp_path / "b.tar",
        {
            "cluster-api": (1, 9, "v1beta2"),
            "kubeadm": (1, 9, "v1beta2"),
            "docker": (1, 9, "v1beta2"),
            "odd": (0, 3, "v1alpha4"),
        },
    )
    result = run_airgap("verify", bundle, "--key", capi_bundle.key.public, "--format", "json")
    assert result.returncode == 1 and result.stderr.count("\n") == 1  # the verdict line
    report = json.loads(result.stdout)
    assert report["verified"] is False
    assert report["failures"] == [
        {
            "kind": "provider",
            "subject": "InfrastructureProvider/odd v0.3.1",
            "message": "contract v1alpha4 is not compatible with the core provider's v1beta2 "
            "(a v1beta2 core accepts v1beta2, v1beta1)",
        }
    ]
    text = run_airgap("verify", bundle, "--key", capi_bundle.key.public)
    assert text.returncode == 1
    assert "contract v1alpha4 is not compatible with the core provider's v1beta2" in text.stdout
