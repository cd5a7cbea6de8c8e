"""Every example spec under bundles/ is a valid spec: read by the spec reader itself
(no network: the reader checks names, versions, URLs and keys before any fetch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airgap.collect.spec import load_spec
from airgap.content.kinds import ContentKind

pytestmark = pytest.mark.unit

BUNDLES = sorted((Path(__file__).parent.parent / "bundles").glob("*.yaml"))


@pytest.mark.parametrize("path", BUNDLES, ids=[p.name for p in BUNDLES])
def test_example_spec_is_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.providers or spec.images or spec.contents


def test_the_issue_15_examples_are_there() -> None:
    names = {p.name for p in BUNDLES}
    assert {"capi-fleet.yaml", "ccm-aws.yaml", "ccm-azure.yaml", "ccm-openstack.yaml",
            "ccm-vsphere.yaml"} <= names  # fmt: skip
    fleet = load_spec(Path(__file__).parent.parent / "bundles/capi-fleet.yaml")
    assert [c.name for c in fleet.charts] == ["fleet-crd", "fleet"]
    assert any(p.name == "rancher-fleet" for p in fleet.providers)
    azure = load_spec(Path(__file__).parent.parent / "bundles/ccm-azure.yaml")
    assert azure.platforms is not None and "windows/amd64" in azure.platforms
    assert {c.kind for c in azure.contents} == {ContentKind.CHARTS, ContentKind.MANIFESTS}
