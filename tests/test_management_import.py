"""Import of a management-cluster bundle: what lands in clusterctl/ and operator/ for
cert-manager, the operator (manifest and Helm chart) and cluster templates.

One import into a real TLS + htpasswd registry; skopeo resolves every rewritten
reference there; ``kubectl kustomize`` builds every install step as ``kubectl apply -k``
would; the operator chart's image line is rendered the way its template renders it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from airgap.content.chartrender import RenderSettings, chart_images
from airgap.oci.manifest import sha256_digest
from airgap.oci.reference import parse_reference
from airgap.providers.components import VARIABLE_RE, lenient_images, parse_components
from tests.harness import skopeo, tamper
from tests.harness.cli import run_airgap
from tests.harness.importing import run_import
from tests.harness.management import OPERATOR_VERSION
from tests.harness.management_fixtures import ManagementBundle
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry
from tests.schemas import validate_object
from tests.test_content import operator_images

pytestmark = pytest.mark.e2e

PREFIX = "mgmt"


@dataclass(frozen=True)
class Imported:
    registry: RegistryServer
    out: Path
    bundle: ManagementBundle

    def text(self, relative: str) -> str:
        return (self.out / relative).read_text()

    def target(self, source: str) -> str:
        return f"{self.registry.host}/{PREFIX}/{source.split('/', 1)[1]}"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    registry = start_registry(tmp_path_factory.mktemp("mgmt-target"), "basic", pki)
    yield registry
    stop_registry(registry)


@pytest.fixture(scope="module")
def imported(
    management_bundle: ManagementBundle,
    target: RegistryServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Imported:
    out = tmp_path_factory.mktemp("mgmt-import") / "capi-out"
    result = run_import(management_bundle, target, PREFIX, out, "-q")
    assert result.returncode == 0, result.stderr
    return Imported(target, out, management_bundle)


def resolves(imported: Imported, reference: str) -> None:
    """``reference`` (pinned) is in the target registry with exactly that digest."""
    ref = parse_reference(reference)
    assert ref.registry == imported.registry.host, reference
    assert ref.digest, f"{reference} is not pinned by digest"
    # skopeo takes a tag or a digest, not both: ask by digest, as a runtime resolves it
    raw = skopeo.raw_manifest(f"{ref.name}@{ref.digest}", registry=imported.registry)
    assert sha256_digest(raw) == ref.digest


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


# --- clusterctl/ -----------------------------------------------------------------------------


def test_clusterctl_config_installs_cert_manager_from_the_tree(imported: Imported) -> None:
    config_path = imported.out / "clusterctl/clusterctl.yaml"
    config = yaml.safe_load(config_path.read_text())
    cert_manager = config["cert-manager"]
    assert cert_manager["version"] == "v1.16.1"
    url = urlsplit(cert_manager["url"])
    path = Path(unquote(url.path))
    assert url.scheme == "file" and path.is_absolute() and path.is_file()
    # clusterctl reads cert-manager as a local repository of a provider named
    # cert-manager: {base}/cert-manager/{version}/cert-manager.yaml
    assert path.relative_to(config_path.parent).parts == (
        "cert-manager",
        "v1.16.1",
        "cert-manager.yaml",
    )
    images = parse_components(path.read_text(), "cert-manager.yaml").images
    assert len(images) == 3
    for image in images:
        resolves(imported, image)
    # everything else is as released: only image lines changed
    released = tamper.read_members(imported.bundle.path)
    original = next(m.data for m in released if m.name.endswith("/cert-manager.yaml")).decode()
    changed = [
        (a, b)
        for a, b in zip(original.splitlines(), path.read_text().splitlines(), strict=True)
        if a != b
    ]
    assert len(changed) == 3 and all("image:" in a for a, _ in changed)
    assert "--acme-http01-solver-image=" in path.read_text()  # a flag, left as released


def test_templates_sit_beside_the_infrastructure_components(imported: Imported) -> None:
    folder = imported.out / "clusterctl/infrastructure-docker/v1.9.4"
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "cluster-template-addon.yaml",
        "cluster-template.yaml",
        "clusterclass-quick-start.yaml",
        "infrastructure-components-development.yaml",
        "metadata.yaml",
    ]
    addon = (folder / "cluster-template-addon.yaml").read_text()
    images, unresolved = lenient_images(addon, "addon")
    assert len(images) == 1 and len(unresolved) == 1  # ${CUSTOM_IMAGE} stays the user's
    resolves(imported, images[0])
    # the Job keeps its variable, with a new default; the ConfigMap's nested DaemonSet
    # runs a bundle image and is rewritten too (line by line)
    job = next(m for m in VARIABLE_RE.finditer(addon) if m.group(1) == "PREPARE_IMAGE")
    assert job.group(3) == images[0]
    nested = [line.split("image:", 1)[1].strip() for line in addon.splitlines() if "image:" in line]
    assert nested[0].startswith(f"{imported.registry.host}/{PREFIX}/test/app:v1@sha256:")
    resolves(imported, nested[0])
    assert (folder / "cluster-template.yaml").read_text().count("${CLUSTER_NAME}") >= 2
    # no templates for the providers of the same release that are not infrastructure
    assert not list((imported.out / "clusterctl/cluster-api/v1.9.4").glob("cluster-template*"))


# --- operator/ -------------------------------------------------------------------------------


def test_install_steps_build_and_run_only_mirror_images(imported: Imported) -> None:
    for step, file in (
        ("00-cert-manager", "cert-manager.yaml"),
        ("01-capi-operator", "operator-components.yaml"),
    ):
        directory = imported.out / "operator" / step
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert kustomization["resources"] == [file]
        built = kustomize(directory)
        released = [d for d in yaml.safe_load_all((directory / file).read_text()) if d]
        assert len(built) == len(released)
        for image in parse_components((directory / file).read_text(), file).images:
            resolves(imported, image)
    operator = parse_components(
        imported.text("operator/01-capi-operator/operator-components.yaml"), "op"
    )
    assert operator.images[0].startswith(
        f"{imported.registry.host}/{PREFIX}/capi-operator/cluster-api-operator:{OPERATOR_VERSION}@sha256:"
    )


STEPS = (
    "00-cert-manager",
    "01-capi-operator",
    "02-provider-configmaps",
    "03-core-provider",
    "04-providers",
)


def test_provider_steps_build_and_hold_what_their_names_say(imported: Imported) -> None:
    """02: Namespaces, ConfigMaps and Secrets; 03: the CoreProvider; 04: the others, each
    a kustomization kubectl builds, every object valid against the operator's CRD
    schemas; the top kustomization names the three in order."""
    root = imported.out / "operator"
    top = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert top["resources"] == list(STEPS[2:])
    kinds: dict[str, set[str]] = {}
    for step in STEPS[2:]:
        built = kustomize(root / step)
        assert built, step
        for obj in built:
            validate_object(obj)
        kinds[step] = {obj["kind"] for obj in built}
    assert kinds["02-provider-configmaps"] == {"Namespace", "ConfigMap", "Secret"}
    assert kinds["03-core-provider"] == {"CoreProvider"}
    assert kinds["04-providers"] == {
        "BootstrapProvider",
        "ControlPlaneProvider",
        "InfrastructureProvider",
    }
    assert len(kustomize(root)) == sum(len(kustomize(root / step)) for step in STEPS[2:])


def test_readme_gives_the_order_and_the_waits(imported: Imported) -> None:
    readme = imported.text("operator/README.md")
    applies = [line for line in readme.splitlines() if line.startswith("kubectl apply")]
    assert applies == [
        "kubectl apply --server-side -k capi-out/operator/00-cert-manager",
        "kubectl apply --server-side -k capi-out/operator/01-capi-operator",
        "kubectl apply --server-side -k capi-out/operator/02-provider-configmaps",
        "kubectl apply --server-side -k capi-out/operator/03-core-provider",
        "kubectl apply --server-side -k capi-out/operator/04-providers",
        "kubectl apply --server-side -k capi-out/operator",  # steps 3 to 5 at once
    ]
    waits = [line for line in readme.splitlines() if line.startswith("kubectl wait")]
    # cert-manager: its CRDs, then its Deployments (the webhook among them)
    assert "crd/certificates.cert-manager.io" in waits[0]
    assert "-n cert-manager" in waits[1] and "deployment/cert-manager-webhook" in waits[1]
    # the operator: its seven CRDs established, its Deployment (webhook) available
    assert waits[2].count("crd/") == 7 and "crd/coreproviders.operator.cluster.x-k8s.io" in waits[2]
    assert "-n capi-operator-system deployment/capi-operator-controller-manager" in waits[3]
    # the providers: the CoreProvider Ready (step 4) before the others are applied (5)
    assert waits[4].endswith("-n capi-system coreprovider/cluster-api")
    assert readme.index(waits[4]) < readme.index("-k capi-out/operator/04-providers")
    assert waits[5:] and all("--for=condition=Ready" in wait for wait in waits[4:])
    assert not any("coreprovider" in wait for wait in waits[5:])
    assert (
        "helm install capi-operator capi-out/operator/helm/cluster-api-operator-0.24.0.tgz"
        in readme
    )
    # the step order is also the README's section order
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    assert len(headings) == len(STEPS)
    for number, (heading, step) in enumerate(zip(headings, STEPS, strict=True), 1):
        assert heading.startswith(f"## {number}.") and f"(`operator/{step}/`)" in heading


def test_helm_values_point_the_chart_at_the_mirror(imported: Imported) -> None:
    helm = imported.out / "operator/helm"
    chart = helm / "cluster-api-operator-0.24.0.tgz"
    released = tamper.read_members(imported.bundle.path)
    assert chart.read_bytes() == next(m.data for m in released if m.name.endswith(".tgz"))
    values = yaml.safe_load((helm / "values-airgap.yaml").read_text())
    (image,) = chart_images([(chart.read_bytes(), "chart")], RenderSettings(values), "operator")
    assert "@sha256:" in image
    resolves(imported, image)


def test_no_pin_leaves_tags(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "configmaps",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--output-dir",
        out,
        "--no-pin",
    )
    assert result.returncode == 0, result.stderr
    values = yaml.safe_load((out / "operator/helm/values-airgap.yaml").read_text())
    assert "digest" not in values["image"]["manager"]
    assert operator_images(values) == [
        f"{registry.host}/{PREFIX}/capi-operator/cluster-api-operator:{OPERATOR_VERSION}"
    ]
    text = (out / "operator/00-cert-manager/cert-manager.yaml").read_text()
    assert "@sha256:" not in text and f"{registry.host}/{PREFIX}/jetstack/" in text


def test_configmaps_writes_what_import_writes(imported: Imported, tmp_path: Path) -> None:
    out = tmp_path / "capi-out"
    result = run_airgap(
        "configmaps",
        imported.bundle.path,
        "--key",
        imported.bundle.key.public,
        "--registry",
        f"{imported.registry.host}/{PREFIX}",
        "--output-dir",
        out,
    )
    assert result.returncode == 0, result.stderr
    for relative in (
        "operator/README.md",
        "operator/00-cert-manager/cert-manager.yaml",
        "operator/01-capi-operator/operator-components.yaml",
        "operator/helm/values-airgap.yaml",
        "clusterctl/infrastructure-docker/v1.9.4/cluster-template-addon.yaml",
        "clusterctl/cert-manager/v1.16.1/cert-manager.yaml",
    ):
        assert (out / relative).read_bytes() == (imported.out / relative).read_bytes(), relative


def test_output_location_makes_the_tree_movable(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    written, moved = tmp_path / "staging" / "capi-out", tmp_path / "usb" / "capi-out"
    result = run_airgap(
        "configmaps",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--output-dir",
        written,
        "--output-location",
        moved,
    )
    assert result.returncode == 0, result.stderr
    config_text = (written / "clusterctl/clusterctl.yaml").read_text()
    assert str(written) not in config_text
    moved.parent.mkdir(parents=True)
    shutil.move(str(written), str(moved))
    config = yaml.safe_load((moved / "clusterctl/clusterctl.yaml").read_text())
    urls = [entry["url"] for entry in config["providers"]] + [config["cert-manager"]["url"]]
    for url in urls:
        path = Path(unquote(urlsplit(url).path))
        assert path.is_file(), url
        assert path.is_relative_to(moved / "clusterctl")
