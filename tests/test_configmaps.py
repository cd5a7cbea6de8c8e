"""``airgap configmaps`` and the ``operator/`` + ``clusterctl/`` output of ``airgap import``.

Real bundles collected through the CLI from the fake GitHub and loopback registries;
every emitted object is judged by schemas (Kubernetes' own for core objects,
``tests/schemas/operator-v1alpha2-provider.json`` and the operator's own CRD schema for
provider CRs), selectors are evaluated against every emitted ConfigMap, and ``kubectl
kustomize`` builds the tree the way ``kubectl apply -k`` would. OCI provider artifacts
are pulled with the PyPI ``oras`` client, reference and credentials read as the
operator's OCI source reads them.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import pytest
import yaml

from airgap.configmaps.emit import CONFIG_STEP, CORE_STEP, PROVIDER_STEPS
from airgap.oci.manifest import OCI_MANIFEST, sha256_digest
from airgap.providers.components import find_images, find_variables
from airgap.providers.types import ProviderType
from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import publish_capi, write_spec
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata
from tests.schemas import (
    CONFIGMAP_LIMIT,
    configmap_size,
    selector_matches,
    validate_kubernetes,
    validate_object,
    validate_provider,
)

TARGET = "registry.local:5000/capi"
NAME_LABEL = "provider.cluster.x-k8s.io/name"
TYPE_LABEL = "provider.cluster.x-k8s.io/type"
VERSION_LABEL = "provider.cluster.x-k8s.io/version"
COMPRESSED = "provider.cluster.x-k8s.io/compressed"
MIB = 1024 * 1024


# --- helpers ---------------------------------------------------------------------------


def configmaps_args(
    bundle: Path, key: Path, out: Path | None, *extra: str | Path
) -> list[str | Path]:
    args: list[str | Path] = ["configmaps", bundle, "--key", key, "--registry", TARGET]
    if out is not None:
        args += ["--output-dir", out]
    return [*args, *extra]


def run_configmaps(
    bundle: CollectedBundle | Path, key: Path, out: Path, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    path = bundle.path if isinstance(bundle, CollectedBundle) else bundle
    return run_airgap(*configmaps_args(path, key, out, *extra))


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@dataclass(frozen=True)
class Operator:
    """The ``operator/`` tree: objects by resource file, in kustomization order (the
    top kustomization names the step directories, each a kustomization of files)."""

    root: Path
    resources: list[str]  # files, relative to root: 02-provider-configmaps/namespaces.yaml
    objects: dict[str, list[dict[str, Any]]]
    kustomizations: list[str]  # kustomization.yaml, 02-provider-configmaps/kustomization.yaml

    @classmethod
    def load(cls, out: Path) -> Operator:
        root = out / "operator"
        resources: list[str] = []
        kustomizations: list[str] = []

        def expand(directory: str) -> None:
            path = f"{directory}/kustomization.yaml" if directory else "kustomization.yaml"
            kustomizations.append(path)
            kustomization = yaml.safe_load((root / path).read_text())
            assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
            assert kustomization["kind"] == "Kustomization"
            for resource in kustomization["resources"]:
                full = f"{directory}/{resource}" if directory else resource
                if (root / full).is_dir():
                    expand(full)
                else:
                    resources.append(full)

        expand("")
        objects = {
            path: [d for d in yaml.safe_load_all((root / path).read_text()) if d is not None]
            for path in resources
        }
        return cls(root, resources, objects, kustomizations)

    def all(self) -> list[dict[str, Any]]:
        return [obj for objs in self.objects.values() for obj in objs]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.all() if obj["kind"] == kind]

    @property
    def configmaps(self) -> list[dict[str, Any]]:
        return self.kind("ConfigMap")

    @property
    def providers(self) -> list[dict[str, Any]]:
        return [obj for obj in self.all() if obj["kind"].endswith("Provider")]

    def configmap(self, name: str) -> dict[str, Any]:
        (found,) = [cm for cm in self.configmaps if cm["metadata"]["name"] == name]
        return found

    def cr(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [
            p for p in self.providers if p["kind"] == kind and p["metadata"]["name"] == name
        ]
        return found


def components_of(cm: dict[str, Any]) -> bytes:
    """What the operator reads as components (gunzipped when marked compressed)."""
    if (cm["metadata"].get("annotations") or {}).get(COMPRESSED) == "true":
        return gzip.decompress(base64.b64decode(str(cm["binaryData"]["components"])))
    assert "binaryData" not in cm
    return str(cm["data"]["components"]).encode()


def selected(cr: dict[str, Any], configmaps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the operator lists: matching ConfigMaps in the provider's namespace."""
    selector = cr["spec"]["fetchConfig"]["selector"]
    return [
        cm
        for cm in configmaps
        if cm["metadata"]["namespace"] == cr["metadata"]["namespace"]
        and selector_matches(selector, cm["metadata"]["labels"])
    ]


def bundle_files(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.startswith("providers/")
        }


def type_of(kind: str) -> ProviderType:
    return ProviderType.parse(kind)


def check_operator_tree(out: Path) -> Operator:
    """Everything the operator/ output must satisfy whatever the bundle."""
    op = Operator.load(out)
    files = {p.relative_to(op.root).as_posix() for p in op.root.rglob("*.yaml")}
    assert files == {*op.resources, *op.kustomizations}  # nothing unlisted, nothing missing
    # the install steps: ConfigMaps and Secrets, the CoreProvider, the other providers
    steps = [path.split("/", 1)[0] for path in op.kustomizations[1:]]
    assert steps == sorted(steps) and set(steps) <= set(PROVIDER_STEPS), steps
    for path in op.resources:
        kinds = {obj["kind"] for obj in op.objects[path]}
        step = path.split("/", 1)[0]
        if step == CONFIG_STEP:
            assert kinds <= {"Namespace", "ConfigMap", "Secret"}, path
        elif step == CORE_STEP:
            assert kinds == {"CoreProvider"}, path
        else:
            assert all(k.endswith("Provider") and k != "CoreProvider" for k in kinds), path
    assert (op.root / "variables.md").is_file()
    for obj in op.all():
        validate_object(obj)
    # Namespaces, then ConfigMaps and Secrets, then the CoreProvider, then the others
    rank = {"Namespace": 0, "ConfigMap": 1, "Secret": 1, "CoreProvider": 2}
    ranks = [rank.get(obj["kind"], 3) for obj in op.all()]
    assert ranks == sorted(ranks), [obj["kind"] for obj in op.all()]
    assert len(op.kind("CoreProvider")) <= 1
    namespaces = {ns["metadata"]["name"] for ns in op.kind("Namespace")}
    for obj in op.all():
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] in namespaces, obj["metadata"]
    identities = [(cr["kind"], cr["metadata"]["name"]) for cr in op.providers]
    assert len(identities) == len(set(identities))  # one provider per name and type
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in op.kind("Secret")}
    for cr in op.providers:
        assert len(cr["spec"]["fetchConfig"]) == 1
        if cr["kind"] == "CoreProvider":
            assert cr["metadata"]["name"] == "cluster-api"
        if "configSecret" in cr["spec"]:
            ref = cr["spec"]["configSecret"]
            assert ref["namespace"] == cr["metadata"]["namespace"]
            assert (ref["namespace"], ref["name"]) in secrets
        if "selector" in cr["spec"]["fetchConfig"]:
            picked = selected(cr, op.configmaps)
            everywhere = [
                cm
                for cm in op.configmaps
                if selector_matches(cr["spec"]["fetchConfig"]["selector"], cm["metadata"]["labels"])
            ]
            assert picked == everywhere  # no ConfigMap of it lives in another namespace
            assert picked, cr
            for cm in picked:  # its own ConfigMaps and no other provider's
                labels = cm["metadata"]["labels"]
                assert labels[TYPE_LABEL] == type_of(cr["kind"]).operator_type
                name = labels[NAME_LABEL]
                assert cr["metadata"]["name"] == (
                    "cluster-api" if cr["kind"] == "CoreProvider" else name
                )
            versions = [cm["metadata"]["labels"][VERSION_LABEL] for cm in picked]
            assert len(versions) == len(set(versions))
            assert cr["spec"]["version"] in versions  # versions agree
    # every ConfigMap is selected by exactly one CR (or the OCI source emits none)
    if op.configmaps:
        for cm in op.configmaps:
            owners = [cr for cr in op.providers if cm in selected(cr, op.configmaps)]
            assert len(owners) == 1, cm["metadata"]["name"]
    assert b"github-token" not in b"".join(read_tree(out).values())
    return op


def operator_customize(components: bytes, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The components' Deployments after the operator applied a CR's image overrides
    (component_customizer.go: with several Deployments, ``spec.deployment`` only for
    ``ca*-controller-manager``, the others by ``additionalDeployments[name]``;
    ``customizeContainer`` sets ``image`` from ``imageUrl`` by container name)."""
    documents = [d for d in yaml.safe_load_all(components) if isinstance(d, dict)]
    deployments = [d for d in documents if d.get("kind") == "Deployment"]
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        customization = spec.get("deployment")
        if len(deployments) > 1 and not (
            name.startswith("ca") and name.endswith("-controller-manager")
        ):
            extra = (spec.get("additionalDeployments") or {}).get(name) or {}
            customization = extra.get("deployment")
        for override in (customization or {}).get("containers", []):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                if container["name"] == override["name"] and "imageUrl" in override:
                    container["image"] = override["imageUrl"]
    return deployments


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize``: the build ``kubectl apply -k`` does before sending anything."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


# --- the standard CAPI bundle ---------------------------------------------------------


@pytest.fixture(scope="module")
def capi_out(capi_bundle: CollectedBundle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("configmaps") / "capi-out"
    result = run_configmaps(capi_bundle, capi_bundle.key.public, out)
    assert result.returncode == 0, result.stderr
    assert "operator files" in result.stdout
    return out


@pytest.fixture(scope="module")
def capi_op(capi_out: Path) -> Operator:
    return check_operator_tree(capi_out)


EXPECTED_NAMESPACES = {
    ("CoreProvider", "cluster-api"): "capi-system",
    ("BootstrapProvider", "kubeadm"): "capi-kubeadm-bootstrap-system",
    ("ControlPlaneProvider", "kubeadm"): "capi-kubeadm-control-plane-system",
    ("InfrastructureProvider", "docker"): "capd-system",
    ("InfrastructureProvider", "odd"): "odd-system",
}


@pytest.mark.e2e
def test_one_configmap_per_provider_version_with_rewritten_components(
    capi_bundle: CollectedBundle, capi_op: Operator, capi_out: Path
) -> None:
    originals = bundle_files(capi_bundle.path)
    records = capi_bundle.manifest.providers
    assert len(capi_op.configmaps) == len(records)
    for record in records:
        ptype = type_of(record.type)
        cm = capi_op.configmap(f"{ptype.operator_type}-{record.name}-{record.version}")
        assert cm["metadata"]["namespace"] == EXPECTED_NAMESPACES[(record.type, record.name)]
        labels = cm["metadata"]["labels"]
        assert labels[NAME_LABEL] == record.name
        assert labels[TYPE_LABEL] == ptype.operator_type
        assert labels[VERSION_LABEL] == record.version
        assert len(labels) == 4  # the operator's three plus our selector label
        assert cm["data"]["metadata"].encode() == originals[record.metadata]
        components = components_of(cm)
        file_name = record.components.rsplit("/", 1)[1]
        assert (
            components
            == (capi_out / "clusterctl" / record.label / record.version / file_name).read_bytes()
        )
        text = components.decode()
        images = find_images(text, record.components)
        assert images and all(i.startswith(TARGET + "/") and "@sha256:" in i for i in images)
        assert text != originals[record.components].decode()  # rewritten


@pytest.mark.e2e
def test_provider_crs_select_exactly_their_configmaps_and_agree_on_versions(
    capi_bundle: CollectedBundle, capi_op: Operator
) -> None:
    crs = {(cr["kind"], cr["metadata"]["name"]): cr for cr in capi_op.providers}
    assert set(crs) == {
        ("CoreProvider", "cluster-api"),
        ("BootstrapProvider", "kubeadm"),
        ("ControlPlaneProvider", "kubeadm"),
        ("InfrastructureProvider", "docker"),
        ("InfrastructureProvider", "odd"),
    }
    for record in capi_bundle.manifest.providers:
        cr = crs[(record.type, record.name)]
        assert cr["apiVersion"] == "operator.cluster.x-k8s.io/v1alpha2"
        assert cr["metadata"]["namespace"] == EXPECTED_NAMESPACES[(record.type, record.name)]
        assert cr["spec"]["version"] == record.version
        (cm,) = selected(cr, capi_op.configmaps)
        assert cm["metadata"]["labels"][VERSION_LABEL] == cr["spec"]["version"]
        assert set(cr["spec"]["fetchConfig"]) == {"selector"}
        assert cr["spec"]["configSecret"] == {
            "name": f"{type_of(record.type).operator_type}-{record.name}-variables",
            "namespace": cr["metadata"]["namespace"],
        }
    # kubeadm bootstrap and kubeadm control plane: same name, never each other's ConfigMaps
    boot = crs[("BootstrapProvider", "kubeadm")]
    cp = crs[("ControlPlaneProvider", "kubeadm")]
    assert selected(boot, capi_op.configmaps) != selected(cp, capi_op.configmaps)


@pytest.mark.e2e
def test_kustomization_lists_namespaces_configmaps_secrets_core_then_others(
    capi_op: Operator,
) -> None:
    resources = capi_op.resources
    assert resources[0] == f"{CONFIG_STEP}/namespaces.yaml"
    kinds = [capi_op.objects[path][0]["kind"] for path in resources]
    assert kinds[0] == "Namespace"
    first_secret = kinds.index("Secret")
    assert set(kinds[1:first_secret]) == {"ConfigMap"}
    core = kinds.index("CoreProvider")
    assert set(kinds[first_secret:core]) == {"Secret"}
    assert all(k.endswith("Provider") and k != "CoreProvider" for k in kinds[core + 1 :])
    assert [ns["metadata"]["name"] for ns in capi_op.kind("Namespace")] == sorted(
        set(EXPECTED_NAMESPACES.values())
    )


@pytest.mark.e2e
def test_kubectl_kustomize_builds_the_tree(capi_op: Operator) -> None:
    built = kustomize(capi_op.root)
    assert len(built) == len(capi_op.all())
    ours = {(o["kind"], o["metadata"]["name"]): o for o in capi_op.all()}
    for obj in built:
        original = ours[(obj["kind"], obj["metadata"]["name"])]
        for field in ("data", "binaryData", "stringData", "spec"):
            assert obj.get(field) == original.get(field), (obj["kind"], field)


@pytest.mark.e2e
def test_variables_secrets_and_table(
    capi_bundle: CollectedBundle, capi_op: Operator, capi_out: Path
) -> None:
    table = (capi_out / "operator/variables.md").read_text()
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|"))
        for line in table.splitlines()
        if line.startswith("| `")
    }
    secrets = {s["metadata"]["name"]: s for s in capi_op.kind("Secret")}
    for record in capi_bundle.manifest.providers:
        cm = capi_op.configmap(
            f"{type_of(record.type).operator_type}-{record.name}-{record.version}"
        )
        variables = find_variables(components_of(cm).decode())
        assert variables
        secret = secrets[f"{type_of(record.type).operator_type}-{record.name}-variables"]
        assert secret["metadata"]["namespace"] == cm["metadata"]["namespace"]
        data = secret["stringData"]
        # a required variable nobody set is commented out, so the operator refuses to
        # install instead of substituting an empty string
        assert set(data) == {v.name for v in variables if not v.required}
        secrets_dir = capi_out / f"operator/{CONFIG_STEP}/secrets"
        text = (secrets_dir / f"{secret['metadata']['name']}.yaml").read_text()
        for variable in variables:
            if variable.required:
                assert f"# required, not set: {variable.name}" in text
            else:
                assert data[variable.name] == variable.default
            default = "" if variable.default is None else f"`{variable.default}`"
            required = "yes" if variable.required else "no"
            row = (f"`{variable.name}`", f"{record.type} {record.name}", required, default)
            assert row in rows, row
    assert {v.name for v in find_variables(table)} == set()  # names only, never ${...}
    required_names = {r[0] for r in rows if r[2] == "yes"}
    assert required_names == {"`PROVIDER_CREDENTIALS`"}


@pytest.mark.e2e
def test_clusterctl_repository_with_file_urls(
    capi_bundle: CollectedBundle, capi_op: Operator, capi_out: Path
) -> None:
    config_path = capi_out / "clusterctl/clusterctl.yaml"
    config = yaml.safe_load(config_path.read_text())
    entries = config["providers"]
    assert len(entries) == len(capi_bundle.manifest.providers)
    by_identity = {(e["type"], e["name"]): e for e in entries}
    for record in capi_bundle.manifest.providers:
        entry = by_identity[(record.type, record.name)]
        url = urlsplit(entry["url"])
        assert url.scheme == "file" and url.netloc == ""
        path = Path(unquote(url.path))
        assert path.is_absolute() and path.is_file()
        # BASE/LABEL/VERSION/FILE with the base beside clusterctl.yaml
        assert path.parent.parent.parent == config_path.parent.absolute()
        assert path.parent.parent.name == record.label
        assert path.parent.name == record.version
        assert path.name == record.components.rsplit("/", 1)[1]
        assert (path.parent / "metadata.yaml").is_file()
        cm = capi_op.configmap(
            f"{type_of(record.type).operator_type}-{record.name}-{record.version}"
        )
        assert path.read_bytes() == components_of(cm)


@pytest.mark.e2e
def test_no_github_token_anywhere(capi_out: Path) -> None:
    for name, data in read_tree(capi_out).items():
        assert b"github-token" not in data.lower(), name
        assert b"GITHUB_TOKEN" not in data, name


@pytest.mark.e2e
def test_output_is_deterministic(
    capi_bundle: CollectedBundle, capi_out: Path, tmp_path: Path
) -> None:
    out = tmp_path / "capi-out"
    trees = []
    for _ in range(2):
        result = run_configmaps(capi_bundle, capi_bundle.key.public, out)
        assert result.returncode == 0, result.stderr
        trees.append(read_tree(out))
        shutil.rmtree(out)
    assert trees[0] == trees[1]  # the whole tree, byte for byte
    # another directory: only clusterctl.yaml differs, by the absolute path it names
    other = read_tree(capi_out)
    config = other.pop("clusterctl/clusterctl.yaml")
    assert config.replace(str(capi_out.absolute()).encode(), str(out.absolute()).encode()) == (
        trees[0].pop("clusterctl/clusterctl.yaml")
    )
    assert other == trees[0]


@pytest.mark.e2e
def test_namespace_option_puts_everything_in_one(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_configmaps(capi_bundle, capi_bundle.key.public, out, "--namespace", "capi-all")
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    assert op.kind("Namespace") == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-all"}}
    ]
    for obj in op.all():
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "capi-all"
        if "configSecret" in obj.get("spec", {}):
            assert obj["spec"]["configSecret"]["namespace"] == "capi-all"
    assert len(op.configmaps) == len(capi_bundle.manifest.providers)


@pytest.mark.e2e
def test_configmaps_needs_output_dir(capi_bundle: CollectedBundle) -> None:
    result = run_airgap(*configmaps_args(capi_bundle.path, capi_bundle.key.public, None))
    assert_clean_failure(result, 2, "--output-dir")
    # a device or FIFO where the directory should be: a usage error naming it
    result = run_configmaps(capi_bundle, capi_bundle.key.public, Path("/dev/null"))
    assert_clean_failure(result, 2, "output directory /dev/null is not a directory")


@pytest.mark.e2e
def test_wrong_key_writes_nothing(
    capi_bundle: CollectedBundle, tmp_path: Path, signing_key: SigningKey
) -> None:
    other = tmp_path / "other.key"
    assert run_airgap("keygen", other).returncode == 0
    out = tmp_path / "out"
    result = run_configmaps(capi_bundle, tmp_path / "other.pub", out)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.e2e
def test_import_writes_the_same_operator_tree_as_configmaps(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    target = f"{registry.host}/capi"
    imported = tmp_path / "imported"
    result = run_airgap(
        *capi_bundle.import_args(target),
        "--output-dir",
        imported,
        "-q",
    )
    assert result.returncode == 0, result.stderr
    generated = tmp_path / "generated"
    result = run_airgap(
        *capi_bundle.import_args(target, command="configmaps"),
        "--output-dir",
        generated,
    )
    assert result.returncode == 0, result.stderr
    a = {k: v for k, v in read_tree(imported).items() if k.startswith("operator/")}
    b = {k: v for k, v in read_tree(generated).items() if k.startswith("operator/")}
    assert a and a == b
    op = check_operator_tree(imported)
    # the references in the ConfigMaps resolve in the registry import pushed to
    for cm in op.configmaps:
        for image in find_images(components_of(cm).decode(), cm["metadata"]["name"]):
            assert image.startswith(target + "/")
            name, digest = image.rsplit("@", 1)
            if ":" in name.rsplit("/", 1)[1]:
                name = name.rsplit(":", 1)[0]  # skopeo takes a tag or a digest, not both
            raw = skopeo.raw_manifest(f"{name}@{digest}", registry=registry)
            assert sha256_digest(raw) == digest
    # the image overrides of every CR, applied by the operator to the components as
    # released (fetched unmodified), make every Deployment container pull from the
    # target, pinned by digest; each resolves there to the bundle's digest
    originals = bundle_files(capi_bundle.path)
    digests = {image.reference: image.digest for image in capi_bundle.manifest.images}
    pairs = (line.split("=", 1) for line in (imported / "mapping.txt").read_text().split())
    sources = {target: source for source, target in pairs}
    for record in capi_bundle.manifest.providers:
        ptype = type_of(record.type)
        cr = op.cr(record.type, "cluster-api" if ptype is ProviderType.CORE else record.name)
        assert "manager" not in cr["spec"]  # spec.manager untouched
        assert cr["spec"]["deployment"]["containers"]
        original = originals[record.components]
        assert target.encode() not in original  # as released: upstream references
        for deployment in operator_customize(original, cr["spec"]):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                name, digest = container["image"].rsplit("@", 1)
                assert name.startswith(target + "/"), (record.name, container)
                assert digest == digests[sources[name]]  # pinned to the bundle's digest
                raw = skopeo.raw_manifest(f"{name.rsplit(':', 1)[0]}@{digest}", registry=registry)
                assert sha256_digest(raw) == digest
    # import's clusterctl/ repository is there too, and its components match components/
    for record in capi_bundle.manifest.providers:
        name = record.components.rsplit("/", 1)[1]
        repo = imported / "clusterctl" / record.label / record.version / name
        assert (
            repo.read_bytes()
            == (imported / "components" / record.label / record.version / name).read_bytes()
        )
    config = yaml.safe_load((imported / "clusterctl/clusterctl.yaml").read_text())
    for entry in config["providers"]:
        assert Path(unquote(urlsplit(entry["url"]).path)).is_file()


# --- bundles built for one purpose ----------------------------------------------------


def collect(
    tmp: Path,
    signing_key: SigningKey,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    providers: list[dict[str, str]],
) -> Path:
    """A bundle of the core provider (v1.9.4) plus ``providers``, collected via the CLI."""
    capi = publish_capi(release_server, source_images)
    spec: dict[str, object] = {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": "v1.9.4"},
            *providers,
        ]
    }
    path = write_spec(tmp / "spec.yaml", spec)
    output = tmp / "bundle.tar"
    result = run_airgap(
        "collect", path, "--sign-key", signing_key.private, "-o", output, env=capi.env
    )
    assert result.returncode == 0, result.stderr
    return output


def publish(
    release_server: ReleaseServer,
    owner_repo: tuple[str, str],
    version: str,
    components: str,
    series: list[tuple[int, int, str]],
) -> None:
    owner, repo = owner_repo
    release_server.add_release(
        owner,
        repo,
        version,
        {
            "metadata.yaml": make_metadata(series).encode(),
            "infrastructure-components.yaml": components.encode(),
        },
    )


def blob_document(namespace: str, payload: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "large-payload", "namespace": namespace},
            "data": {"payload": payload},
        },
        width=1 << 30,
    )


@pytest.fixture(scope="module")
def multi_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    signing_key: SigningKey,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
) -> Path:
    """Infrastructure ``multi`` in v0.1.0 (listed first) and v0.2.0 (newer, extra variable)."""
    repo = release_server.new_repo("cluster-api-provider-multi")
    series = [(0, 1, "v1beta1"), (0, 2, "v1beta1")]
    app = source_images["app"].reference
    publish(
        release_server,
        repo,
        "v0.1.0",
        make_components(ProviderType.INFRASTRUCTURE, "multi-system", [app]),
        series,
    )
    extra = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: multi-system}\ndata: {zone: '${MULTI_ZONE:=eu-1}'}\n"
    publish(
        release_server,
        repo,
        "v0.2.0",
        make_components(
            ProviderType.INFRASTRUCTURE,
            "multi-system",
            [source_images["sidecar"].reference],
            extra_docs=[extra],
        ),
        series,
    )
    url = release_server.repo_url(*repo)
    return collect(
        tmp_path_factory.mktemp("multi"),
        signing_key,
        release_server,
        source_images,
        [
            {"name": "multi", "type": "InfrastructureProvider", "version": "v0.1.0", "url": url},
            {"name": "multi", "type": "InfrastructureProvider", "version": "v0.2.0", "url": url},
        ],
    )


@pytest.mark.e2e
def test_several_versions_one_cr_installing_the_first_listed(
    multi_bundle: Path, signing_key: SigningKey, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_configmaps(multi_bundle, signing_key.public, out)
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    cr = op.cr("InfrastructureProvider", "multi")
    assert cr["spec"]["version"] == "v0.1.0"  # the first entry, not the highest
    picked = selected(cr, op.configmaps)
    assert sorted(cm["metadata"]["name"] for cm in picked) == [
        "infrastructure-multi-v0.1.0",
        "infrastructure-multi-v0.2.0",
    ]
    assert {cm["metadata"]["labels"][VERSION_LABEL] for cm in picked} == {"v0.1.0", "v0.2.0"}
    assert all(cm["metadata"]["namespace"] == "multi-system" for cm in picked)
    core = op.cr("CoreProvider", "cluster-api")
    assert not set(map(id, selected(core, op.configmaps))) & set(map(id, picked))
    # the variables of every carried version are collected
    secret = next(
        s for s in op.kind("Secret") if s["metadata"]["name"] == cr["spec"]["configSecret"]["name"]
    )
    assert secret["stringData"]["MULTI_ZONE"] == "eu-1"
    assert "PROVIDER_CREDENTIALS" not in secret["stringData"]  # required, unset: commented out
    secret_file = out / f"operator/{CONFIG_STEP}/secrets/{secret['metadata']['name']}.yaml"
    assert "# required, not set: PROVIDER_CREDENTIALS" in secret_file.read_text()
    # clusterctl repository: both versions on disk, the first listed in clusterctl.yaml
    config = yaml.safe_load((out / "clusterctl/clusterctl.yaml").read_text())
    (entry,) = [e for e in config["providers"] if e["name"] == "multi"]
    assert "/infrastructure-multi/v0.1.0/" in entry["url"]
    for version in ("v0.1.0", "v0.2.0"):
        folder = out / "clusterctl/infrastructure-multi" / version
        assert (folder / "metadata.yaml").is_file()
        assert (folder / "infrastructure-components.yaml").read_bytes() == components_of(
            op.configmap(f"infrastructure-multi-{version}")
        )


@pytest.fixture(scope="module")
def big_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    signing_key: SigningKey,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
) -> Path:
    """Infrastructure ``big``: 1.5 MiB of components that gzip well."""
    repo = release_server.new_repo("cluster-api-provider-big")
    line = "spec:\n  replicas: 3   # the quick brown fox jumps over the lazy dog 0123456789\n"
    payload = (line * (3 * MIB // 2 // len(line) + 1))[: 3 * MIB // 2]
    components = make_components(
        ProviderType.INFRASTRUCTURE,
        "big-system",
        [source_images["app"].reference],
        extra_docs=[blob_document("big-system", payload)],
    )
    assert len(components.encode()) > 3 * MIB // 2
    publish(release_server, repo, "v1.0.0", components, [(1, 0, "v1beta1")])
    url = release_server.repo_url(*repo)
    return collect(
        tmp_path_factory.mktemp("big"),
        signing_key,
        release_server,
        source_images,
        [{"name": "big", "type": "InfrastructureProvider", "version": "v1.0.0", "url": url}],
    )


@pytest.mark.e2e
def test_big_components_are_compressed_into_binary_data(
    big_bundle: Path, signing_key: SigningKey, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_configmaps(big_bundle, signing_key.public, out)
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    cm = op.configmap("infrastructure-big-v1.0.0")
    validate_kubernetes(cm)
    assert cm["metadata"]["annotations"] == {COMPRESSED: "true"}
    assert set(cm["data"]) == {"metadata"} and set(cm["binaryData"]) == {"components"}
    raw = base64.b64decode(cm["binaryData"]["components"], validate=True)
    rewritten = (
        out / "clusterctl/infrastructure-big/v1.0.0/infrastructure-components.yaml"
    ).read_bytes()
    assert len(rewritten) > MIB
    assert gzip.decompress(raw) == rewritten  # byte for byte
    size = sum(len(v.encode()) for v in cm["data"].values()) + len(raw)
    assert size == configmap_size(cm) <= CONFIGMAP_LIMIT
    assert find_images(rewritten.decode(), "big")[0].startswith(TARGET + "/")
    # the small providers beside it stay plain text
    core = op.configmap("core-cluster-api-v1.9.4")
    assert "binaryData" not in core and "annotations" not in core["metadata"]
    # and the tree still builds the way kubectl apply -k does
    built = kustomize(op.root)
    (built_cm,) = [o for o in built if o["metadata"]["name"] == "infrastructure-big-v1.0.0"]
    assert gzip.decompress(base64.b64decode(built_cm["binaryData"]["components"])) == rewritten


@pytest.fixture(scope="module")
def huge_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    signing_key: SigningKey,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
) -> Path:
    """Infrastructure ``huge``: 1.6 MiB of random base64, over 1 MiB even gzipped."""
    repo = release_server.new_repo("cluster-api-provider-huge")
    payload = base64.b64encode(random.Random(1234).randbytes(1_260_000)).decode()
    assert len(payload) > 1.5 * MIB
    components = make_components(
        ProviderType.INFRASTRUCTURE,
        "huge-system",
        [source_images["sidecar"].reference],
        extra_docs=[blob_document("huge-system", payload)],
    )
    assert len(gzip.compress(components.encode())) > MIB
    publish(release_server, repo, "v2.0.0", components, [(2, 0, "v1beta1")])
    url = release_server.repo_url(*repo)
    return collect(
        tmp_path_factory.mktemp("huge"),
        signing_key,
        release_server,
        source_images,
        [{"name": "huge", "type": "InfrastructureProvider", "version": "v2.0.0", "url": url}],
    )


@pytest.mark.e2e
def test_too_large_even_compressed_fails_pointing_to_oci(
    huge_bundle: Path, signing_key: SigningKey, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = run_configmaps(huge_bundle, signing_key.public, out)
    line = assert_clean_failure(result, 1, "--provider-source oci", "huge")
    assert "v2.0.0" in line
    assert not out.exists()  # nothing written
    assert not list(tmp_path.iterdir())  # no staging directory left behind either


@pytest.mark.e2e
def test_import_of_a_too_large_provider_fails_without_writing(
    huge_bundle: Path, signing_key: SigningKey, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "import",
        huge_bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{registry.host}/capi",
        "--output-dir",
        out,
        "-q",
    )
    assert_clean_failure(result, 1, "--provider-source oci", "InfrastructureProvider huge v2.0.0")
    assert not out.exists()
    # the objects are built before pushing: nothing reached the registry either
    catalog = httpx.get(f"{registry.url}/v2/_catalog").json()
    assert catalog["repositories"] == []


@pytest.mark.e2e
def test_too_large_provider_travels_by_the_oci_source(
    huge_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    tmp_path: Path,
    no_docker_config: None,
) -> None:
    registry = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "configmaps",
        huge_bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{registry.host}/capi",
        "--output-dir",
        out,
        "--provider-source",
        "oci",
    )
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    assert not op.configmaps
    cr = op.cr("InfrastructureProvider", "huge")
    stem = "infrastructure-huge-v2.0.0"
    files = artifact_files(registry, cr)
    assert (
        files[f"{stem}-components.yaml"]
        == (
            out / "clusterctl/infrastructure-huge/v2.0.0/infrastructure-components.yaml"
        ).read_bytes()
    )


# --- the OCI source -------------------------------------------------------------------


def parse_oci_source(url: str, version: str) -> tuple[str, str, bool]:
    """The operator's ``parseOCISource`` (internal/controller/oci_source.go), line for
    line: the ``http://`` prefix is the only plain-HTTP switch; the tag after the last
    colon that is not part of a port, else the provider version."""
    plain_http = url.startswith("http://")
    url = url.removeprefix("http://")
    parts = url.split(":", 2)
    if len(parts) == 2 and "/" not in parts[1]:
        url, version = parts
    elif len(parts) == 3:
        version = parts[2]
        url = f"{parts[0]}:{parts[1]}"
    return url, version, plain_http


def oci_credentials(secret: dict[str, Any] | None) -> tuple[str, str] | None:
    """``OCIAuthentication``: OCI_USERNAME/OCI_PASSWORD from the provider's config Secret."""
    data = (secret or {}).get("stringData") or {}
    username, password = data.get("OCI_USERNAME", ""), data.get("OCI_PASSWORD", "")
    return (username, password) if username or password else None


def artifact_files(
    registry: RegistryServer,
    cr: dict[str, Any],
    secret: dict[str, Any] | None = None,
) -> dict[str, bytes]:
    """Layer title -> bytes, pulled by the PyPI ``oras`` client the way the operator's
    OCI source pulls: reference and scheme from ``parseOCISource``, credentials from
    the config Secret."""
    import oras.provider

    fetch = cr["spec"]["fetchConfig"]["oci"]
    repository, tag, plain_http = parse_oci_source(fetch, cr["spec"]["version"])
    assert repository.startswith(registry.host + "/"), fetch
    assert plain_http == (registry.scheme == "http"), fetch
    login = oci_credentials(secret)
    client = oras.provider.Registry(
        hostname=registry.host,
        insecure=plain_http,
        tls_verify=str(registry.ca_file) if registry.ca_file else True,
        auth_backend="token" if registry.mode == "token" else "basic",
    )
    if login:
        client.auth.set_basic_auth(*login)
    with tempfile.TemporaryDirectory() as outdir:
        paths = client.pull(target=f"{repository}:{tag}", outdir=outdir)
        files = {Path(path).name: Path(path).read_bytes() for path in paths}
    # the bytes are the ones the manifest promises
    raw = skopeo.raw_manifest(f"{repository}:{tag}", registry=registry)
    manifest = json.loads(raw)
    assert manifest["mediaType"] == OCI_MANIFEST
    titles = {
        layer["annotations"]["org.opencontainers.image.title"]: layer["digest"]
        for layer in manifest["layers"]
    }
    assert {name: sha256_digest(data) for name, data in files.items()} == titles
    return files


@pytest.fixture
def no_docker_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oras reads ``~/.docker/config.json``: the tests give it nothing to find there."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


@pytest.mark.e2e
def test_oci_source_publishes_artifacts_and_points_crs_at_them(
    capi_bundle: CollectedBundle,
    capi_op: Operator,
    registry_factory: RegistryFactory,
    tmp_path: Path,
    no_docker_config: None,
) -> None:
    registry = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/capi"),
        "--output-dir",
        out,
        "--provider-source",
        "oci",
        "-q",
    )
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    assert not op.configmaps
    assert not (out / f"operator/{CONFIG_STEP}/configmaps").exists()
    originals = bundle_files(capi_bundle.path)
    for record in capi_bundle.manifest.providers:
        ptype = type_of(record.type)
        cr = op.cr(record.type, "cluster-api" if ptype is ProviderType.CORE else record.name)
        validate_provider(cr)
        fetch = cr["spec"]["fetchConfig"]
        assert set(fetch) == {"oci"}  # exactly one source, no selector
        reference = fetch["oci"]
        # a plain-HTTP registry: the operator needs the http:// prefix to speak HTTP
        assert re.fullmatch(
            rf"http://{re.escape(registry.host)}/capi/[a-z0-9/._-]+:[A-Za-z0-9._-]+", reference
        )
        assert parse_oci_source(reference, "")[1] == cr["spec"]["version"] == record.version
        stem = f"{ptype.operator_type}-{record.name}-{record.version}"
        files = artifact_files(registry, cr)  # no Secret credentials: none needed
        assert set(files) == {f"{stem}-metadata.yaml", f"{stem}-components.yaml"}
        assert files[f"{stem}-metadata.yaml"] == originals[record.metadata]
        name = record.components.rsplit("/", 1)[1]
        rewritten = (out / "components" / record.label / record.version / name).read_bytes()
        assert files[f"{stem}-components.yaml"] == rewritten
        # the same rewritten components the selector source carries
        assert rewritten == components_of(capi_op.configmap(stem)).replace(
            TARGET.encode(), f"{registry.host}/capi".encode()
        )
    # the other objects are those of the selector source: no registry credentials in
    # the Secrets of a registry that asks for none
    assert [s["stringData"] for s in op.kind("Secret")] == [
        s["stringData"] for s in capi_op.kind("Secret")
    ]
    assert op.kind("Namespace") == capi_op.kind("Namespace")
    # publishing again changes nothing and gives the same files
    first = read_tree(out / "operator")
    again = tmp_path / "again"
    result = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/capi", command="configmaps"),
        "--output-dir",
        again,
        "--provider-source",
        "oci",
    )
    assert result.returncode == 0, result.stderr
    assert read_tree(again / "operator") == first


@pytest.mark.unit
def test_parse_oci_source_as_the_operator_does() -> None:
    """The cases of the operator's oci_source_parse_test.go."""
    assert parse_oci_source("registry.io/provider:v1.0.0", "v0.0.1") == (
        "registry.io/provider",
        "v1.0.0",
        False,
    )
    assert parse_oci_source("registry.io:5000/provider", "v0.0.1") == (
        "registry.io:5000/provider",
        "v0.0.1",
        False,
    )
    assert parse_oci_source("http://registry.io:5000/org/provider:v1.2.3", "v0") == (
        "registry.io:5000/org/provider",
        "v1.2.3",
        True,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["basic", "token"])
def test_oci_source_from_a_registry_with_a_password(
    mode: str,
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    tmp_path: Path,
    no_docker_config: None,
) -> None:
    """TLS + htpasswd (no prefix) and plain HTTP + bearer tokens (``http://``): the
    import credentials land in each provider's config Secret as OCI_USERNAME and
    OCI_PASSWORD, in files mode 0600 (under umask 000 too), and nowhere else."""
    registry = registry_factory(mode)
    assert registry.username and registry.password
    out = tmp_path / "out"
    args: list[str | Path] = [
        *capi_bundle.import_args(f"{registry.host}/capi"),
        "--output-dir",
        out,
        "--provider-source",
        "oci",
        "--username",
        registry.username,
        "--password-stdin",
    ]
    if registry.ca_file:
        args += ["--ca-file", registry.ca_file]
    old_umask = os.umask(0)
    try:
        result = run_airgap(*args, input=registry.password + "\n")
    finally:
        os.umask(old_umask)
    assert result.returncode == 0, result.stderr
    op = check_operator_tree(out)
    secrets = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in op.kind("Secret")}
    assert len(op.providers) == len(capi_bundle.manifest.providers)
    for cr in op.providers:
        ref = cr["spec"]["configSecret"]
        secret = secrets[(ref["namespace"], ref["name"])]
        assert oci_credentials(secret) == (registry.username, registry.password)
        assert cr["spec"]["fetchConfig"]["oci"].startswith(
            "http://" if registry.scheme == "http" else registry.host
        )
        files = artifact_files(registry, cr, secret)
        assert len(files) == 2
        # and the credentials are needed: anonymous, the registry refuses
        repository, tag, _ = parse_oci_source(cr["spec"]["fetchConfig"]["oci"], "")
        anonymous = httpx.get(
            f"{registry.url}/v2/{repository.removeprefix(registry.host + '/')}/manifests/{tag}",
            verify=registry.ssl_context(),
        )
        assert anonymous.status_code == 401
    secret_files = sorted((out / f"operator/{CONFIG_STEP}/secrets").iterdir())
    assert len(secret_files) == len(op.providers)
    for path in secret_files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # the password is in the Secrets and nowhere else: not in any other file written,
    # not on stdout or stderr
    elsewhere = [
        path
        for path in out.rglob("*")
        if path.is_file()
        and path not in secret_files
        and registry.password.encode() in path.read_bytes()
    ]
    assert not elsewhere
    assert registry.password not in result.stdout + result.stderr
