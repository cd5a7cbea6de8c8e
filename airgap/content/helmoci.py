"""A chart package as Helm stores it in an OCI registry (pure).

``helm push`` writes an image manifest whose config is ``Chart.yaml`` as JSON
(``application/vnd.cncf.helm.config.v1+json``: the fields of Helm's ``Metadata`` in its
order, empty ones left out) and whose one layer is the package, byte for byte
(``application/vnd.cncf.helm.chart.content.v1.tar+gzip``), plus a provenance layer when
the chart is signed; the manifest is annotated with the chart's title and version. The
tag is the chart version with ``+`` written ``_``, which OCI tags cannot hold.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airgap.content.helm import HELM_CHART, HELM_CONFIG, HELM_PROVENANCE
from airgap.oci.manifest import OCI_MANIFEST, sha256_digest

# Helm's chart.Metadata fields, in the order Go's encoding/json writes them
METADATA_ORDER = (
    "name",
    "home",
    "sources",
    "version",
    "description",
    "keywords",
    "maintainers",
    "icon",
    "apiVersion",
    "condition",
    "tags",
    "appVersion",
    "deprecated",
    "annotations",
    "kubeVersion",
    "dependencies",
    "type",
)


@dataclass(frozen=True)
class HelmArtifact:
    """The blobs and manifest of one chart as pushed."""

    config: bytes
    package: bytes
    provenance: bytes | None
    manifest: bytes

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest)


def oci_tag(version: str) -> str:
    return version.replace("+", "_")


def helm_config(metadata: Mapping[str, Any]) -> bytes:
    """Chart.yaml as the JSON config Helm pushes: known fields in Helm's order, those
    that are empty or unknown left out (Go's omitempty); YAML dates become strings."""
    document = {
        key: _plain(metadata[key])
        for key in METADATA_ORDER
        if key in metadata and metadata[key] not in (None, "", [], {}, False)
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value) if isinstance(value, float) else value
    return value


def helm_artifact(
    metadata: Mapping[str, Any], package: bytes, provenance: bytes | None = None
) -> HelmArtifact:
    config = helm_config(metadata)
    layers = [_descriptor(HELM_CHART, package)]
    if provenance is not None:
        layers.append(_descriptor(HELM_PROVENANCE, provenance))
    annotations = {
        "org.opencontainers.image.title": str(metadata.get("name", "")),
        "org.opencontainers.image.version": str(metadata.get("version", "")),
    }
    if isinstance(metadata.get("description"), str) and metadata["description"]:
        annotations["org.opencontainers.image.description"] = metadata["description"]
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": _descriptor(HELM_CONFIG, config),
        "layers": layers,
        "annotations": annotations,
    }
    data = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    return HelmArtifact(config, package, provenance, data)


def _descriptor(media_type: str, data: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": sha256_digest(data), "size": len(data)}
