"""Import's closure proof covers what workload clusters' nodes pull (mirror.nodeclosure)."""

from __future__ import annotations

import pytest
import yaml

from airgap.bundle.format import ContentRecord
from airgap.bundle.manifest import BundleManifest
from airgap.mirror.nodeclosure import node_references, node_targets
from airgap.mirror.workload import image_repository, image_repository_files
from airgap.rewrite.mapping import Target, map_images

pytestmark = pytest.mark.unit

KUBEADM = ["registry.k8s.io/kube-apiserver:v1.34.0", "registry.k8s.io/pause:3.10.1"]
TEMPLATE = """apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DockerMachineTemplate
metadata: {name: cp}
spec:
  template:
    spec:
      customImage: kindest/node:${KUBERNETES_VERSION}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlane
metadata: {name: cp}
spec:
  kubeadmConfigSpec:
    files:
    - path: /etc/kubernetes/manifests/vip.yaml
      content: |
        apiVersion: v1
        kind: Pod
        metadata: {name: vip}
        spec:
          containers:
          - name: vip
            image: mirror.corp:5000/capi/kube-vip/kube-vip:v0.8.0
"""


def manifest(version: str) -> BundleManifest:
    record = ContentRecord(
        kind="kubernetes",
        name="kubernetes",
        version=version,
        source="https://raw.githubusercontent.com/kubernetes/kubernetes",
        files=[f"content/kubernetes/{version}/kubeadm-images.txt"],
        images=KUBEADM,
    )
    return BundleManifest("2026-01-01T00:00:00Z", "0", [], [], [], contents=[record])


def test_every_node_image_of_each_version_is_named_with_its_origin() -> None:
    found = node_references(manifest("v1.34.0"), [("cluster-template.yaml", TEMPLATE)])
    assert found == {
        KUBEADM[0]: "workload clusters of Kubernetes v1.34.0 (kubeadm)",
        KUBEADM[1]: "workload clusters of Kubernetes v1.34.0 (kubeadm)",
        "docker.io/kindest/node:v1.34.0": (
            "workload clusters of Kubernetes v1.34.0 (cluster-template.yaml)"
        ),
        "mirror.corp:5000/capi/kube-vip/kube-vip:v0.8.0": (
            "workload clusters of Kubernetes v1.34.0 (cluster-template.yaml)"
        ),
    }
    assert node_references(manifest("v1.34.0"), [("notes.yaml", TEMPLATE)]) == {
        image: "workload clusters of Kubernetes v1.34.0 (kubeadm)" for image in KUBEADM
    }


def test_a_node_image_the_bundle_lacks_is_unreachable() -> None:
    """Carried images reach the target pinned by the bundle's digest; one naming the
    target is asked as it is; kindest/node, not carried, has no way there."""
    target = Target.parse("mirror.corp:5000/capi")
    mappings = map_images(KUBEADM, target)
    digests = {image: "sha256:" + "a" * 64 for image in KUBEADM}
    references = node_references(manifest("v1.34.0"), [("cluster-template.yaml", TEMPLATE)])
    reached, unreachable = node_targets(references, mappings, digests, "mirror.corp:5000")
    assert sorted(reached) == sorted(
        [m.pinned("sha256:" + "a" * 64) for m in mappings]
        + ["mirror.corp:5000/capi/kube-vip/kube-vip:v0.8.0"]
    )
    assert unreachable == [
        (
            "docker.io/kindest/node:v1.34.0",
            "workload clusters of Kubernetes v1.34.0 (cluster-template.yaml)",
        )
    ]


def test_image_repository_only_where_the_layout_allows_it() -> None:
    """kubeadm's imageRepository: every kubeadm image at REPO/NAME, one REPO."""
    images = [*KUBEADM, "registry.k8s.io/coredns/coredns:v1.12.1"]
    targets = {
        "registry.k8s.io/kube-apiserver": "mirror.corp:5000/capi/kube-apiserver",
        "registry.k8s.io/pause": "mirror.corp:5000/capi/pause",
        "registry.k8s.io/coredns/coredns": "mirror.corp:5000/capi/coredns/coredns",
    }
    assert image_repository(images, targets) == "mirror.corp:5000/capi"
    moved = targets | {"registry.k8s.io/pause": "mirror.corp:5000/other/pause"}
    assert image_repository(images, moved) is None
    assert image_repository(images, {k: v for k, v in targets.items() if "pause" not in k}) is None
    files = image_repository_files("mirror.corp:5000/capi")
    patch = yaml.safe_load(files["workload/image-repository/kubeadmcontrolplane.yaml"])
    assert patch["spec"]["kubeadmConfigSpec"]["clusterConfiguration"] == {
        "imageRepository": "mirror.corp:5000/capi",
        "dns": {"imageRepository": "mirror.corp:5000/capi/coredns"},
    }
