"""Turn Cluster API's ClusterResourceSet CRD into ``clusterresourceset-v1beta1.json``.

Run from a checkout of kubernetes-sigs/cluster-api::

    python tests/schemas/extract_crs.py COMMIT \\
        core/config/crd/bases/addons.cluster.x-k8s.io_clusterresourcesets.yaml

The v1beta1 ``openAPIV3Schema`` is kept as the API server would apply it under strict
field validation (``extract_crd.strict``: no descriptions, unknown fields refused).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.schemas.extract_crd import version_schema, write_one

OUTPUT = Path(__file__).parent / "clusterresourceset-v1beta1.json"
SOURCE = "https://github.com/kubernetes-sigs/cluster-api"
VERSION = "v1beta1"


def main(commit: str, path: str) -> None:
    schema = version_schema(path, VERSION)
    write_one(OUTPUT, f"the {VERSION} ClusterResourceSet CRD, {SOURCE}", commit, path, schema)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
