"""Cluster templates resolved per Kubernetes version, as clusterctl generate renders
them: node images (CAPD's kindest/node), static Pods in bootstrap files (vSphere's
kube-vip), ClusterClass patches, and images only a variable names reported."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from airgap.content.fetch import ContentRequest, fetch_content
from airgap.content.kinds import ContentKind
from airgap.content.templateimages import for_version, template_images
from airgap.sources.forurl import source_for
from tests.harness.releases import ReleaseServer

FLAVOR = """apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: DockerMachineTemplate
metadata:
  name: ${CLUSTER_NAME}-control-plane
spec:
  template:
    spec:
      customImage: kindest/node:${KUBERNETES_VERSION}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
spec:
  version: ${KUBERNETES_VERSION}
  kubeadmConfigSpec:
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      owner: root:root
      content: |
        apiVersion: v1
        kind: Pod
        metadata:
          name: kube-vip
          namespace: kube-system
        spec:
          containers:
          - name: kube-vip
            image: ghcr.io/kube-vip/kube-vip:${KUBE_VIP_VERSION:=v0.8.0}
          hostNetwork: true
    - path: /etc/motd
      content: "welcome: ${CLUSTER_NAME}"
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata:
  name: ${CLUSTER_NAME}-md-0
spec:
  template:
    spec:
      files:
      - path: /etc/kubernetes/manifests/agent.yaml
        content: |
          apiVersion: v1
          kind: Pod
          metadata: {name: agent}
          spec:
            containers:
            - name: agent
              image: ${AGENT_IMAGE}
"""

# the shape of CAPD's clusterclass-quick-start.yaml: the node image from the
# topology's version, and a patch that replaces kubeadmConfigSpec.files wholesale
CLUSTERCLASS = """apiVersion: cluster.x-k8s.io/v1beta1
kind: ClusterClass
metadata:
  name: quick-start
spec:
  patches:
  - name: customImage
    definitions:
    - selector:
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
        kind: DockerMachineTemplate
        matchResources:
          controlPlane: true
      jsonPatches:
      - op: add
        path: /spec/template/spec/customImage
        valueFrom:
          template: |
            kindest/node:{{ .builtin.controlPlane.version | replace "+" "_" }}
  - name: podSecurityStandard
    enabledIf: '{{ .podSecurityStandard.enabled }}'
    definitions:
    - selector:
        apiVersion: controlplane.cluster.x-k8s.io/v1beta1
        kind: KubeadmControlPlaneTemplate
        matchResources:
          controlPlane: true
      jsonPatches:
      - op: add
        path: /spec/template/spec/kubeadmConfigSpec/files
        valueFrom:
          template: |
            - content: |
                apiVersion: v1
                kind: Pod
                metadata: {name: audit}
                spec:
                  containers:
                  - name: audit
                    image: registry.example/audit:{{ .podSecurityStandard.audit }}1.0
              path: /etc/kubernetes/manifests/audit.yaml
"""


@pytest.mark.unit
def test_a_flavor_resolves_per_version() -> None:
    images, unresolved = template_images(FLAVOR, "cluster-template.yaml", ("v1.33.4", "v1.34.1"))
    assert images == [
        "docker.io/kindest/node:v1.33.4",
        "ghcr.io/kube-vip/kube-vip:v0.8.0",
        "docker.io/kindest/node:v1.34.1",
    ]
    assert len(unresolved) == 1
    assert "needs variable AGENT_IMAGE, which has no default" in unresolved[0]
    assert "files[0] /etc/kubernetes/manifests/agent.yaml" in unresolved[0]


@pytest.mark.unit
def test_without_versions_the_node_image_is_reported_not_dropped() -> None:
    images, unresolved = template_images(FLAVOR, "cluster-template.yaml")
    assert images == ["ghcr.io/kube-vip/kube-vip:v0.8.0"]
    assert any("needs variable KUBERNETES_VERSION" in line for line in unresolved)
    assert any("AGENT_IMAGE" in line for line in unresolved)


@pytest.mark.unit
def test_a_clusterclass_patch_image_and_files_resolve() -> None:
    images, unresolved = template_images(
        CLUSTERCLASS, "clusterclass-quick-start.yaml", ("v1.34.1",)
    )
    assert images == ["docker.io/kindest/node:v1.34.1"]
    (line,) = unresolved  # the audit image depends on a ClusterClass variable's value
    assert "patch podSecurityStandard" in line and "CLUSTERCLASS_PATCH_VARIABLE" in line


@pytest.mark.unit
def test_for_version_substitutes_only_the_version() -> None:
    text = "a: ${KUBERNETES_VERSION}\nb: ${KUBERNETES_VERSION:=v1.0.0}\nc: ${OTHER:=x}\n"
    assert for_version(text, "v1.34.1") == "a: v1.34.1\nb: v1.34.1\nc: ${OTHER:=x}\n"


@pytest.mark.integration
def test_collect_resolves_carried_templates_for_each_version(
    release_server: ReleaseServer, tmp_path: Path
) -> None:
    """Through collect's content path: a provider release's flavors and ClusterClass,
    fetched from a loopback GitHub, give each carried version's node image."""
    owner, repo = release_server.new_repo("capd")
    files = {
        "cluster-template.yaml": FLAVOR.encode(),
        "clusterclass-quick-start.yaml": CLUSTERCLASS.encode(),
        "infrastructure-components.yaml": b"kind: Namespace\n",
    }
    release_server.add_release(owner, repo, "v1.11.3", files)
    with httpx.Client(follow_redirects=True) as client:
        source = source_for(release_server.repo_url(owner, repo), client, {})
        request = ContentRequest(
            ContentKind.TEMPLATES, "infrastructure-docker", "v1.11.3", source, ("v1.33.4",)
        )
        fetched = fetch_content(request, tmp_path)
    assert fetched is not None
    assert fetched.images == ["docker.io/kindest/node:v1.33.4", "ghcr.io/kube-vip/kube-vip:v0.8.0"]
    assert [line.split(": ")[0] for line in fetched.unresolved] == [
        "cluster-template.yaml of cluster templates v1.11.3 from " + source.url,
        "clusterclass-quick-start.yaml of cluster templates v1.11.3 from " + source.url,
    ]
