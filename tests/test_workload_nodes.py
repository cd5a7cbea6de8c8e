"""Workload clusters' nodes pull through the mirror: the Component import writes, applied
by ``kubectl kustomize`` to Cluster API's own CAPD templates (v1.11.3, tests/capd/),
written into a node root as cloud-init writes ``files:``, lets a real containerd pull
every kubeadm image of the carried version and the CAPD node image by their ORIGINAL
references with the source registry stopped; the patched objects validate against the
real Cluster API CRD schemas (tests/schemas/capi-v1beta2-*.json)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.mirror.nodeconfig import CONTAINERD_DIR
from airgap.mirror.workload import (
    COMPONENT_DIR,
    CONFIG_PATH_COMMAND,
    PATCH_PREFIX,
    component_files,
)
from airgap.providers.components import VARIABLE_RE
from airgap.providers.types import ProviderType
from tests.harness import tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import run_airgap
from tests.harness.images import OciLayout, push_image
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory
from tests.harness.registry_fixtures import start_registry, stop_registry
from tests.harness.releases import ReleaseServer, make_release_files
from tests.harness.runtimes import Containerd, missing_runtime
from tests.test_kubernetes_images import KUBEADM_LISTS, publish

CAPD = Path(__file__).parent / "capd"
SCHEMAS = Path(__file__).parent / "schemas"
VERSION = "v1.34.0"
NODE_IMAGE = f"docker.io/kindest/node:{VERSION}"
MANAGER = "registry.k8s.io/cluster-api/capd-manager:v1.11.3"
VARIABLES = {
    "CLUSTER_NAME": "edge-1",
    "NAMESPACE": "default",
    "CONTROL_PLANE_MACHINE_COUNT": "1",
    "WORKER_MACHINE_COUNT": "1",
    "KUBERNETES_VERSION": VERSION,
}

PSS_ENABLED = "{{ .podSecurityStandard.enabled }}"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(missing_runtime() is not None, reason=str(missing_runtime())),
]


def render(text: str, values: dict[str, str]) -> str:
    """``clusterctl generate cluster``: each variable its value, else its default."""

    def substitute(match: re.Match[str]) -> str:
        name, operator, default = match.group(1), match.group(2), match.group(3)
        if name in values:
            return values[name]
        assert operator is not None, f"{name} has no value and no default"
        return str(default)

    return VARIABLE_RE.sub(substitute, text)


def add_operation(template: dict[str, Any], path: str, value: Any) -> None:
    parts = path.strip("/").split("/")
    node: Any = template
    for part in parts[:-1]:
        node = node[part]
    if parts[-1] == "-":
        node.append(value)  # a JSON patch add to a missing list fails: so must this
    else:
        node[parts[-1]] = value


def topology(
    cluster_class: dict[str, Any], template: dict[str, Any], kind: str, enabled: bool
) -> dict[str, Any]:
    """The topology controller on a control-plane template: each patch of the class
    that is enabled for the development template's variables (the image and tag
    patches are off: their variables are empty; podSecurityStandard as ``enabled``
    says, and so the patch import appended after it) and selects ``kind``, in turn."""
    for patch in cluster_class["spec"]["patches"]:
        condition = patch.get("enabledIf")
        if condition is not None and not (condition == PSS_ENABLED and enabled):
            continue
        for definition in patch["definitions"]:
            if definition["selector"]["kind"] != kind:
                continue
            for operation in definition["jsonPatches"]:
                value = operation.get("value")
                if value is None:
                    text = re.sub(r"\{\{[^{}]*\}\}", "x", operation["valueFrom"]["template"])
                    value = yaml.safe_load(text)
                add_operation(template, operation["path"], value)
    return template


def write_node_root(root: Path, files: list[dict[str, Any]]) -> None:
    """As cloud-init's write_files: each path under ``root`` with its permissions."""
    for entry in files:
        path = root / entry["path"].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(entry["content"])
        path.chmod(int(entry.get("permissions", "0644"), 8))


def files_under(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def validate(document: dict[str, Any]) -> None:
    schema = json.loads((SCHEMAS / f"capi-v1beta2-{document['kind'].lower()}.json").read_text())
    jsonschema.validate(document, schema)


@pytest.fixture
def imported(
    tmp_path: Path,
    release_server: ReleaseServer,
    corpus_layout: OciLayout,
    registry_factory: RegistryFactory,
    signing_key: SigningKey,
    pki: Pki,
) -> Any:
    source = registry_factory("plain")
    for image in [*KUBEADM_LISTS[VERSION], NODE_IMAGE, MANAGER]:
        repository, _, tag = image.split("/", 1)[1].rpartition(":")
        push_image(corpus_layout, "multiarch", source, repository, tag)
    owner, repo = release_server.new_repo("capd")
    files = make_release_files(
        ProviderType.INFRASTRUCTURE,
        "capd-system",
        [MANAGER],
        [(1, 11, "v1beta2")],
        "infrastructure-components-development.yaml",  # as CAPD's release names it
    )
    files |= {path.name: path.read_bytes() for path in CAPD.glob("*.yaml")}
    release_server.add_release(owner, repo, "v1.11.3", files)
    spec: dict[str, object] = {
        "providers": [
            {
                "name": "docker",
                "type": "InfrastructureProvider",
                "version": "v1.11.3",
                "url": release_server.repo_url(owner, repo),
            }
        ],
        "kubernetes": {"versions": [VERSION], "url": publish(release_server, "k8s-w", [VERSION])},
        "registries": {
            "registry.k8s.io": {"mirror": source.host},
            "docker.io": {"mirror": source.host},
        },
    }
    write_spec(tmp_path / "spec.yaml", spec)
    bundle = tmp_path / "b.tar"
    result = run_airgap(
        "collect", tmp_path / "spec.yaml", "--sign-key", signing_key.private, "-o", bundle, "-q"
    )
    assert result.returncode == 0, result.stderr
    target = start_registry(tmp_path / "target", "basic", pki)
    try:
        out = tmp_path / "out"
        result = run_airgap(
            "import", bundle, "--key", signing_key.public,
            "--registry", f"{target.host}/mirror", "--ca-file", str(target.ca_file),
            "--username", str(target.username), "--password-stdin",
            "--output-dir", out, "-q",
            input=f"{target.password}\n",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        source.stop()
        # status asks the target for every image, the kubeadm ones among them
        status = run_airgap(
            "status", bundle, "--key", signing_key.public,
            "--registry", f"{target.host}/mirror", "--ca-file", str(target.ca_file),
            "--username", str(target.username), "--password-stdin", "--format", "json",
            input=f"{target.password}\n",
        )  # fmt: skip
        assert status.returncode == 0, status.stdout + status.stderr
        available = {c["type"]: c for c in json.loads(status.stdout)["conditions"]}
        assert available["Available"]["status"] == "True", status.stdout
        yield tamper.manifest_of(bundle), out, target
    finally:
        stop_registry(target)


def test_component_nodes_pull_every_kubeadm_and_node_image(
    imported: tuple[BundleManifest, Path, Any], tmp_path: Path
) -> None:
    manifest, out, target = imported
    (templates,) = [c for c in manifest.contents if c.kind == "templates"]
    assert NODE_IMAGE in templates.images  # the ClusterClass's node image for v1.34.0
    component = out / "workload" / "node-mirror"
    work = tmp_path / "cluster"
    work.mkdir()
    for path in CAPD.glob("*.yaml"):
        (work / path.name).write_text(render(path.read_text(), VARIABLES))
    repository = out / "workload" / "image-repository"
    (work / "kustomization.yaml").write_text(
        "resources: [clusterclass-quick-start.yaml, cluster-template-development.yaml]\n"
        f"components: [{os.path.relpath(component, work)}, "
        f"{os.path.relpath(repository, work)}]\n"
    )
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(work)], capture_output=True, text=True, check=True
    ).stdout
    documents = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    cluster_class = documents["ClusterClass"]
    for kind in ("KubeadmControlPlaneTemplate", "KubeadmConfigTemplate", "ClusterClass"):
        validate(documents[kind])
    assert [p["name"] for p in cluster_class["spec"]["patches"]][-1] == (
        f"{PATCH_PREFIX}podSecurityStandard"
    )
    for enabled in (True, False):  # podSecurityStandard replaces files wholesale
        control_plane = topology(
            cluster_class,
            json.loads(json.dumps(documents["KubeadmControlPlaneTemplate"])),
            "KubeadmControlPlaneTemplate",
            enabled,
        )
        validate(control_plane)
        spec = control_plane["spec"]["template"]["spec"]["kubeadmConfigSpec"]
        paths = [f["path"] for f in spec["files"]]
        assert len(paths) == len(set(paths)), paths  # CAPI refuses a path twice
        assert CONFIG_PATH_COMMAND in spec["preKubeadmCommands"]
        assert "/etc/containerd/certs.d/registry.k8s.io/hosts.toml" in paths
        if enabled:  # the node files survived the wholesale replacement
            assert "/etc/kubernetes/kube-apiserver-admission-pss.yaml" in paths
            replaced = spec
    worker = documents["KubeadmConfigTemplate"]["spec"]["template"]["spec"]
    root = tmp_path / "node"
    write_node_root(root, replaced["files"])
    worker_root = tmp_path / "worker"
    write_node_root(worker_root, worker["files"])
    pss = Path("etc/kubernetes/kube-apiserver-admission-pss.yaml")
    assert files_under(worker_root) == [p for p in files_under(root) if p != pss]
    hosts_dir = root / "etc/containerd/certs.d"
    assert (hosts_dir / "registry.k8s.io/hosts.toml").exists()
    assert (hosts_dir / "registry.k8s.io/ca.crt").read_bytes() == target.ca_file.read_bytes()
    # the alternative: kubeadm's imageRepository at the mirror, CoreDNS's path kept
    repo = f"{target.host}/mirror"
    configuration = spec["clusterConfiguration"]
    assert configuration["imageRepository"] == repo
    assert configuration["dns"] == {"imageRepository": f"{repo}/coredns"}
    direct = [i.replace("registry.k8s.io", repo, 1) for i in KUBEADM_LISTS[VERSION]]
    digests = {i.reference: i.digest for i in manifest.images}
    digests |= {d: digests[i] for d, i in zip(direct, KUBEADM_LISTS[VERSION], strict=True)}
    wanted = [*KUBEADM_LISTS[VERSION], NODE_IMAGE, *direct]
    containerd = Containerd()
    try:
        user = f"{target.username}:{target.password}"
        without = containerd.ctr("images", "pull", "--user", user, wanted[0], check=False)
        assert without.returncode != 0  # the source is stopped: only the node files help
        for reference in wanted:
            containerd.ctr(
                "images", "pull", "--hosts-dir", str(hosts_dir), "--user", user,
                "--platform", "linux/amd64", "--snapshotter", "native", reference,
            )  # fmt: skip
        pulled = containerd.image_digests()
    finally:
        containerd.stop()
    for reference in wanted:
        assert pulled[reference] == digests[reference], reference


# A cluster made without a ClusterClass: its own KubeadmControlPlane and
# KubeadmConfigTemplate (v1beta2, as clusterctl's classic templates write them), each
# with a file of its own that the Component must keep
CLASSIC = """\
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: edge-1-control-plane, namespace: default}
spec:
  replicas: 1
  version: v1.34.0
  machineTemplate:
    spec:
      infrastructureRef:
        apiGroup: infrastructure.cluster.x-k8s.io
        kind: DockerMachineTemplate
        name: edge-1-control-plane
  kubeadmConfigSpec:
    files:
    - {path: /etc/kubernetes/audit-policy.yaml, owner: 'root:root', content: 'rules: []'}
    preKubeadmCommands: [echo ready]
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: edge-1-md-0, namespace: default}
spec:
  template:
    spec:
      files:
      - {path: /etc/motd, content: edge}
"""


def test_component_patches_a_cluster_made_without_a_class(tmp_path: Path) -> None:
    """The Component's files join a KubeadmControlPlane's and a KubeadmConfigTemplate's
    own (merged on path, not replaced), and both still validate against the real CRDs."""
    hosts = b'server = "https://registry.k8s.io"\n[host."https://mirror:5000/v2/capi"]\n'
    node_files = {
        f"{CONTAINERD_DIR}/registry.k8s.io/hosts.toml": hosts,
        f"{CONTAINERD_DIR}/registry.k8s.io/ca.crt": b"-----BEGIN CERTIFICATE-----\n",
    }
    component = tmp_path / "out"
    for name, data in component_files(node_files).items():
        (component / name).parent.mkdir(parents=True, exist_ok=True)
        (component / name).write_bytes(data)
    work = tmp_path / "cluster"
    work.mkdir()
    (work / "cluster.yaml").write_text(CLASSIC)
    (work / "kustomization.yaml").write_text(
        f"resources: [cluster.yaml]\ncomponents: [../out/{COMPONENT_DIR}]\n"
    )
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(work)], capture_output=True, text=True, check=True
    ).stdout
    documents = {d["kind"]: d for d in yaml.safe_load_all(rendered) if d}
    control_plane = documents["KubeadmControlPlane"]
    worker = documents["KubeadmConfigTemplate"]
    validate(control_plane)
    validate(worker)
    spec = control_plane["spec"]["kubeadmConfigSpec"]
    for files, own in (
        (spec["files"], "/etc/kubernetes/audit-policy.yaml"),
        (worker["spec"]["template"]["spec"]["files"], "/etc/motd"),
    ):
        by_path = {f["path"]: f for f in files}
        assert own in by_path and len(by_path) == len(files)
        written = by_path["/etc/containerd/certs.d/registry.k8s.io/hosts.toml"]
        assert written["content"] == hosts.decode() and written["permissions"] == "0644"
        assert "/etc/containerd/certs.d/registry.k8s.io/ca.crt" in by_path
    # containerd is pointed at the hosts directory first; the cluster's own commands stay
    assert spec["preKubeadmCommands"] == [CONFIG_PATH_COMMAND, "echo ready"]
