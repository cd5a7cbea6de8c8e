"""The closure check's discovery (``airgap.mirror.closure.references``, pure): the
documents it builds and the components it parses only once must not cost a reference."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airgap.mirror.closure import ReferenceScan, merged, references

pytestmark = pytest.mark.unit

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: manager, namespace: system}}
spec:
  template:
    spec:
      containers:
        - name: manager
          image: {image}
"""
CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.example.com}
spec:
  versions:
    - name: v1
      schema:
        openAPIV3Schema:
          properties:
            image: {type: string, description: "image: not/a-workload:v1"}
"""


def _configmap(components: str) -> bytes:
    document = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "core-v1.0.0", "namespace": "capi-system"},
        "data": {"components": components, "metadata": "apiVersion: v1\n"},
    }
    return json.dumps(document).encode()  # JSON is YAML


def _operator_cr(image: str) -> bytes:
    document = {
        "apiVersion": "operator.cluster.x-k8s.io/v1alpha2",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api"},
        "spec": {"deployment": {"containers": [{"name": "manager", "imageUrl": image}]}},
    }
    return json.dumps(document).encode()


def test_workloads_configmaps_and_provider_crs_are_read_and_crds_are_not() -> None:
    core = CRD + "---\n" + DEPLOYMENT.format(image="mirror.example/capi/core:v1")
    other = DEPLOYMENT.format(image="mirror.example/capi/other:v1")
    files = {
        "components/core.yaml": core.encode(),
        "clusterctl/cluster-api/v1/core-components.yaml": core.encode(),
        "operator/core-configmap.yaml": _configmap(core),  # the same components: read once
        "operator/other-configmap.yaml": _configmap(other),  # different ones: read
        "operator/core-provider.yaml": _operator_cr("mirror.example/capi/override:v2"),
        "node/hosts.toml": b"image: ignored/not-a-manifest:v1\n",
    }
    found = references(files)
    assert found == {  # path order: clusterctl/ sorts before components/
        "mirror.example/capi/core:v1": "clusterctl/cluster-api/v1/core-components.yaml",
        "mirror.example/capi/other:v1": "operator/other-configmap.yaml",
        "mirror.example/capi/override:v2": "operator/core-provider.yaml",
    }
    assert "not/a-workload:v1" not in " ".join(found)


def test_references_scanned_in_two_parts_merge_as_one_scan_of_both() -> None:
    """Import scans the outputs built before the push while it pushes, and the files
    written after it then: merging the two must name the same file for every reference
    as one scan of all of them."""
    core = DEPLOYMENT.format(image="mirror.example/capi/core:v1")
    before = {
        "components/core.yaml": core.encode(),
        "operator/core-provider.yaml": _operator_cr("mirror.example/capi/override:v2"),
    }
    after = {  # a copy sorting first, and one new reference
        "clusterctl/cluster-api/v1/core-components.yaml": core.encode(),
        "operator/z-other.yaml": DEPLOYMENT.format(image="mirror.example/capi/z:v1").encode(),
    }
    assert merged(references(before), references(after)) == references(before | after)
    assert merged(references(after), references(before)) == references(before | after)
    scan = ReferenceScan()  # as import does it: the copy in `after` is not parsed again
    assert merged(scan.add(before), scan.add(after)) == references(before | after)


def test_each_text_is_parsed_once_for_its_images_and_its_embedded_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file that runs workloads and also holds objects embedding components (the
    word "components" in a CRD's description is enough to make it a candidate) is
    parsed once for both: the closure scan runs beside the push on a 2-core machine,
    where a second parse of megabytes of CRDs is CPU the registry loses."""
    from airgap.formats import yamlload
    from airgap.providers import components as components_module

    parsed: list[str] = []
    real = yamlload.iter_documents

    def counting(text: str, source: str, **kwargs: Any) -> Any:
        parsed.append(source)
        return real(text, source, **kwargs)

    monkeypatch.setattr(yamlload, "iter_documents", counting)  # the closure's own reads
    monkeypatch.setattr(components_module, "iter_documents", counting)
    embedded = DEPLOYMENT.format(image="mirror.example/capi/embedded:v1")
    mixed = (
        CRD.replace("image: not/a-workload", "components: not/a-workload")
        + "---\n"
        + DEPLOYMENT.format(image="mirror.example/capi/core:v1")
        + "---\n"
        + _configmap(embedded).decode()
        + "\n"
    )
    found = references({"components/mixed.yaml": mixed.encode()})
    assert found == {
        "mirror.example/capi/core:v1": "components/mixed.yaml",
        "mirror.example/capi/embedded:v1": "components/mixed.yaml",
    }
    # the file once, then the components its ConfigMap embeds (a text of its own) once
    assert parsed == ["components/mixed.yaml", "components/mixed.yaml: data.components"]
