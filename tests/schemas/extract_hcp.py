"""Turn the Cluster API Helm addon provider's HelmChartProxy CRD into
``helmchartproxy-v1alpha1.json``.

Run from a checkout of kubernetes-sigs/cluster-api-addon-provider-helm::

    python tests/schemas/extract_hcp.py COMMIT \\
        config/crd/bases/addons.cluster.x-k8s.io_helmchartproxies.yaml

The ``openAPIV3Schema`` of the served storage version (v1alpha1) is kept as the API
server would apply it under strict field validation (``extract_crd.strict``: no
descriptions, unknown fields refused).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.schemas.extract_crd import version_schema, write_one

OUTPUT = Path(__file__).parent / "helmchartproxy-v1alpha1.json"
SOURCE = "https://github.com/kubernetes-sigs/cluster-api-addon-provider-helm"
VERSION = "v1alpha1"


def main(commit: str, path: str) -> None:
    schema = version_schema(path, VERSION, storage=True)
    write_one(OUTPUT, f"the {VERSION} HelmChartProxy CRD, {SOURCE}", commit, path, schema)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
