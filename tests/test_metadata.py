"""clusterctl metadata.yaml parsing and contract lookup."""

from __future__ import annotations

import pytest

from airgap.core.errors import InputError
from airgap.providers.metadata import Metadata, ReleaseSeries, parse_metadata
from tests.harness.releases import make_metadata

pytestmark = pytest.mark.unit

SRC = "https://example.test/acme/capx/releases v1.9.4/metadata.yaml"


def test_parse_and_contract_for() -> None:
    metadata = parse_metadata(
        make_metadata([(1, 8, "v1beta1"), (1, 9, "v1beta1"), (1, 10, "v1beta2")]), SRC
    )
    assert metadata == Metadata(
        source=SRC,
        release_series=(
            ReleaseSeries(1, 8, "v1beta1"),
            ReleaseSeries(1, 9, "v1beta1"),
            ReleaseSeries(1, 10, "v1beta2"),
        ),
    )
    assert metadata.contract_for("v1.9.4") == "v1beta1"
    assert metadata.contract_for("1.10.0-rc.1") == "v1beta2"
    assert metadata.contract_for("v1.10.2+meta") == "v1beta2"
    assert metadata.contract_for("v1.11.0") is None
    assert metadata.contract_for("v2.9.0") is None
    assert metadata.describe_series() == "1.8 (v1beta1), 1.9 (v1beta1), 1.10 (v1beta2)"


def test_contract_for_rejects_non_semver() -> None:
    metadata = parse_metadata(make_metadata([(1, 9, "v1beta1")]), SRC)
    with pytest.raises(InputError, match="'main' is not a semantic version"):
        metadata.contract_for("main")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("releaseSeries: [\n", "malformed YAML at line 2"),
        ("- a\n- b\n", "not a clusterctl Metadata document"),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha2\nkind: Metadata\nreleaseSeries: []\n",
            "expected apiVersion clusterctl.cluster.x-k8s.io/v1alpha3 kind Metadata",
        ),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Other\n",
            "kind 'Other'",
        ),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n",
            "releaseSeries must be a non-empty list",
        ),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n"
            "releaseSeries:\n  - {major: one, minor: 9, contract: v1beta1}\n",
            "releaseSeries[0].major: must be a non-negative integer",
        ),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n"
            "releaseSeries:\n  - {major: 1, minor: 9, contract: v1beta1}\n  - {major: 1, minor: 10}\n",
            "releaseSeries[1].contract: must be a non-empty string",
        ),
        (
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n"
            "releaseSeries:\n  - v1beta1\n",
            "releaseSeries[0]: must be a mapping",
        ),
    ],
)
def test_errors_are_one_line_and_name_the_source(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_metadata(text, SRC)
    message = str(caught.value)
    assert message.startswith(SRC)
    assert fragment in message
    assert "\n" not in message
