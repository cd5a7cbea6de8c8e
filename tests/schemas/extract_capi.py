"""Turn Cluster API's bootstrap, control-plane and ClusterClass CRDs into
``capi-v1beta2-KIND.json`` (the objects the workload Component patches).

Run from a checkout of kubernetes-sigs/cluster-api at a release tag::

    python tests/schemas/extract_capi.py TAG \\
        controlplane/kubeadm/config/crd/bases/controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml \\
        controlplane/kubeadm/config/crd/bases/controlplane.cluster.x-k8s.io_kubeadmcontrolplanetemplates.yaml \\
        bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml \\
        config/crd/bases/cluster.x-k8s.io_clusterclasses.yaml

Each v1beta2 ``openAPIV3Schema`` is kept as the API server applies it under strict
field validation (``extract_crd.strict``: no descriptions, unknown fields refused).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from tests.schemas.extract_crd import version_schema, write_one

SOURCE = "https://github.com/kubernetes-sigs/cluster-api"
VERSION = "v1beta2"


def main(tag: str, paths: list[str]) -> None:
    for path in paths:
        kind = yaml.safe_load(Path(path).read_text())["spec"]["names"]["kind"]
        output = Path(__file__).parent / f"capi-{VERSION}-{kind.lower()}.json"
        write_one(
            output,
            f"the {VERSION} {kind} CRD, {SOURCE} release",
            tag,
            path,
            version_schema(path, VERSION),
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
