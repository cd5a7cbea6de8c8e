"""Push the bundle's Helm charts into the target registry as OCI Helm charts.

Every chart package of every ``charts`` record (the entry's chart and the dependencies
collected with it) goes to ``TARGET/charts/NAME`` at tag VERSION (``+`` as ``_``), as
``helm push`` would store it (``content.helmoci``): the package byte for byte as the
layer, ``Chart.yaml`` as the config, the ``.prov`` as a provenance layer when carried.
Blobs the registry already holds are not sent again, and each tag is asked for after
pushing, so a registry that accepted and stored nothing fails the import here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airgap.content.chart import read_chart
from airgap.content.helmoci import HelmArtifact, helm_artifact, oci_tag
from airgap.content.kinds import PROVENANCE_SUFFIX, ContentKind, is_chart
from airgap.core import phases
from airgap.core.errors import AirgapError
from airgap.oci.manifest import Manifest
from airgap.registry.client import Registry, bytes_body
from airgap.rewrite.contents import RewrittenContent
from airgap.rewrite.mapping import Target


@dataclass(frozen=True)
class PushedChart:
    """A chart as import pushed it (``TARGET/charts/NAME:VERSION``): what the import's
    conditions count among the artifacts it placed."""

    name: str
    version: str
    reference: str  # HOST/PREFIX/charts/NAME:TAG
    digest: str


def chart_repository(target: Target, name: str) -> str:
    return target.repository("charts", name)


@dataclass(frozen=True)
class ChartArtifact:
    """A chart package as import pushes it: where, under which tag, which bytes."""

    name: str
    version: str
    repository: str  # PREFIX/charts/NAME
    tag: str
    artifact: HelmArtifact


def chart_artifacts(contents: Iterable[RewrittenContent], target: Target) -> list[ChartArtifact]:
    """Every chart package of the bundle as an OCI Helm chart (pure, byte-identical for
    the same bundle): what import pushes, and what ``airgap status`` expects there."""
    found: list[ChartArtifact] = []
    for content in contents:
        if content.kind is not ContentKind.CHARTS:
            continue
        for name, data in content.files.items():
            if not is_chart(name):
                continue
            chart = read_chart(data, name)
            artifact = helm_artifact(
                chart.metadata, data, content.files.get(name + PROVENANCE_SUFFIX)
            )
            found.append(
                ChartArtifact(
                    chart.name,
                    chart.version,
                    chart_repository(target, chart.name),
                    oci_tag(chart.version),
                    artifact,
                )
            )
    return found


def push_charts(
    registry: Registry, contents: Iterable[RewrittenContent], target: Target
) -> list[PushedChart]:
    pushed: list[PushedChart] = []
    with phases.timed("charts/push"):
        for chart in chart_artifacts(contents, target):
            what = f"push chart {chart.name}"
            _push(registry, chart.repository, chart.tag, chart.artifact, what)
            pushed.append(
                PushedChart(
                    chart.name,
                    chart.version,
                    f"{target.host}/{chart.repository}:{chart.tag}",
                    chart.artifact.digest,
                )
            )
    return pushed


def _push(registry: Registry, repository: str, tag: str, artifact: HelmArtifact, what: str) -> None:
    blobs = [artifact.config, artifact.package]
    if artifact.provenance is not None:
        blobs.append(artifact.provenance)
    manifest = Manifest.from_bytes(artifact.manifest)
    for blob, descriptor in zip(blobs, manifest.blobs(), strict=True):
        if registry.blob_size(repository, descriptor.digest, what=what) == len(blob):
            continue
        registry.upload_blob(repository, descriptor.digest, len(blob), bytes_body(blob), what=what)
    registry.put_manifest(repository, tag, manifest, what=what)
    stored = registry.manifest_digest(repository, tag, what=what)
    if stored != manifest.digest:
        raise AirgapError(
            f"{what}: registry {registry.display_name} answers {repository}:{tag} with "
            f"{stored or 'nothing'}, not the {manifest.digest} pushed"
        )
