"""Provider images as OpenShift builds them: manifests under /capi-operator-manifests/.

Layers are written entry by entry (files, directories, symbolic and hard links,
whiteouts), deterministic, into an :class:`OciLayout`, then pushed with skopeo like the
rest of the corpus. The standard image has three layers: the first ships a stale
profile file and an old profile, the second replaces the manifests and deletes the
stale file with a ``.wh.`` whiteout and the old profile with an opaque whiteout, the
third adds a hostile ``..`` entry and a link that must never be followed.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass

from tests.harness import skopeo
from tests.harness.images import (
    OCI_LAYER_GZIP,
    OCI_LAYER_TAR,
    Descriptor,
    Layer,
    OciLayout,
)

EPOCH = 1_700_000_000
ROOT = "capi-operator-manifests"
SELF_IMAGE_REF = "registry.ci.openshift.org/openshift:test-cluster-api-controllers"


@dataclass(frozen=True)
class Entry:
    """One tar entry: ``kind`` is file, dir, symlink, hardlink."""

    name: str
    data: bytes = b""
    kind: str = "file"
    target: str = ""


def layer_tar(entries: Sequence[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mtime = EPOCH
            info.mode = 0o644
            if entry.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif entry.kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if entry.kind == "symlink" else tarfile.LNKTYPE
                info.linkname = entry.target
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def add_layer(layout: OciLayout, entries: Sequence[Entry], *, compress: bool = True) -> Layer:
    tar = layer_tar(entries)
    blob = gzip_bytes(tar) if compress else tar
    media_type = OCI_LAYER_GZIP if compress else OCI_LAYER_TAR
    return Layer(layout.write_blob(blob, media_type), skopeo.digest_of(tar))


def add_image(
    layout: OciLayout, layers: Sequence[Sequence[Entry]], *, architecture: str = "amd64"
) -> Descriptor:
    built = [add_layer(layout, entries, compress=i % 2 == 0) for i, entries in enumerate(layers)]
    config = layout.add_config(built, architecture=architecture, label="provider-image")
    return layout.add_manifest(config, built)


def metadata_yaml(
    name: str = "cluster-api-provider-test",
    *,
    type_: str = "infrastructure",
    version: str = "v2.8.1",
    install_order: int = 20,
    platform: str = "AWS",
    extra: str = "",
) -> bytes:
    return (
        f"name: {name}\n"
        f"selfImageRef: {SELF_IMAGE_REF}\n"
        f"ocpPlatform: {platform}\n"
        f"installOrder: {install_order}\n"
        "attributes:\n"
        f"  type: {type_}\n"
        f"  version: {version}\n"
        f"{extra}"
    ).encode()


def manifests_yaml(sidecar: str, *, contract: str = "v1beta2", marker: str = "current") -> bytes:
    """Provider manifests as manifests-gen writes them (no Namespace): a CRD labelled
    with its contract and a Deployment running the provider image and a sidecar."""
    return f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: testclusters.infrastructure.cluster.x-k8s.io
  labels:
    cluster.x-k8s.io/provider: infrastructure-test
    cluster.x-k8s.io/{contract}: {contract}
spec:
  group: infrastructure.cluster.x-k8s.io
  names: {{kind: TestCluster, plural: testclusters}}
  scope: Namespaced
  versions: [{{name: {contract}, served: true, storage: true}}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: capt-controller-manager
  namespace: openshift-cluster-api
  annotations: {{airgap.test/marker: {marker}}}
spec:
  selector: {{matchLabels: {{app: capt}}}}
  template:
    metadata: {{labels: {{app: capt}}}}
    spec:
      containers:
      - name: manager
        image: {SELF_IMAGE_REF}
      - name: sidecar
        image: {sidecar}
""".encode()


@dataclass(frozen=True)
class ProviderImageFiles:
    """What the standard image's default profile holds after its layers are applied."""

    manifests: bytes
    metadata: bytes
    aws_manifests: bytes
    aws_metadata: bytes


def standard_layers(sidecar: str) -> tuple[list[list[Entry]], ProviderImageFiles]:
    """Three layers and the files they leave (see the module docstring)."""
    stale = manifests_yaml(sidecar, marker="stale")
    current = manifests_yaml(sidecar)
    metadata = metadata_yaml()
    aws_metadata = metadata_yaml(install_order=21)
    aws_manifests = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aws-only}\n"
    base = [
        Entry("usr", kind="dir"),
        Entry("usr/bin/manager", b"\x7fELF not really"),
        Entry(ROOT, kind="dir"),
        Entry(f"{ROOT}/default", kind="dir"),
        Entry(f"{ROOT}/default/manifests.yaml", stale),
        Entry(f"{ROOT}/default/metadata.yaml", metadata),
        Entry(f"{ROOT}/default/stale.yaml", b"kind: Stale\n"),
        Entry(f"{ROOT}/old/manifests.yaml", b"kind: Old\n"),
        Entry(f"{ROOT}/old/metadata.yaml", metadata_yaml("old")),
        Entry(f"{ROOT}/aws/manifests.yaml", b"kind: Replaced\n"),
        Entry(f"{ROOT}/aws/leftover.yaml", b"kind: Hidden\n"),
    ]
    update = [
        Entry(f"{ROOT}/default/manifests.yaml", current),
        Entry(f"{ROOT}/default/.wh.stale.yaml"),
        Entry(f"{ROOT}/.wh.old"),
        Entry(f"{ROOT}/aws/.wh..wh..opq"),
        Entry(f"{ROOT}/aws/manifests.yaml", aws_manifests),
        Entry(f"{ROOT}/aws/metadata.yaml", aws_metadata),
    ]
    hostile = [
        Entry("../../../../tmp/airgap-escaped", b"escaped"),
        Entry(f"{ROOT}/../../etc/evil", b"evil"),
        Entry(f"{ROOT}/default/link.yaml", kind="symlink", target="/etc/passwd"),
        Entry("etc/passwd-copy", kind="hardlink", target="/etc/passwd"),
    ]
    return [base, update, hostile], ProviderImageFiles(
        current, metadata, aws_manifests, aws_metadata
    )
