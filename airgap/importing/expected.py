"""Everything import puts in the target registry for a bundle, as ``airgap status``
expects to find it (pure: nothing is pushed or asked here).

Images and what upstream attached to them are in the bundle as they are pushed. The
rest import builds: every chart package as an OCI Helm chart (``mirror.charts``), every
provider as a manifests image (``mirror.manifestimage``) and, with ``--provider-source
oci``, every provider version as an OCI artifact (``configmaps.ocisource``). Each of
those builders is reproducible (the same bundle and options give the same bytes), so
the digests import pushed are rebuilt here from the bundle alone, without import's
output directory. What they depend on besides the bundle are import's own options: the
target, ``--no-pin`` (the components inside), ``--keep-source-registry`` (through the
mappings) and ``--provider-source``; ``airgap status`` takes the same flags.
"""

from __future__ import annotations

from collections.abc import Sequence

from airgap.configmaps import emit, ocisource
from airgap.importing.status import Expected, from_manifest, from_tree
from airgap.mirror.attached import AttachedPlan
from airgap.mirror.charts import chart_artifacts
from airgap.mirror.manifestimage import build_image, image_profiles, repository_for
from airgap.oci.manifest import Manifest
from airgap.rewrite.contents import RewrittenContent
from airgap.rewrite.mapping import Target
from airgap.rewrite.providers import RewrittenProvider
from airgap.supplychain.formats import Kind, parse_tag

CHART, MANIFESTS_IMAGE, PROVIDER_ARTIFACT = "chart", "manifests image", "provider artifact"


def attached_artifacts(plan: AttachedPlan) -> list[Expected]:
    """Signatures, attestations and SBOMs as import pushes them next to their subjects:
    under cosign's tag (``sha256-HEX.sig``) or, a referrer, by digest and listed among
    its subject's referrers."""
    referrers = {id(tree): record for tree, record in plan.referrers}
    found = []
    for tree in plan.trees:
        record = referrers.get(id(tree))
        if record is not None:  # by digest, listed for its subject
            found.append(from_tree(tree, record.kind, subject=record.subject))
            continue
        parsed = parse_tag(tree.mapping.target.tag or "")
        kind = parsed[1] if parsed and parsed[1] else Kind.OTHER
        found.append(from_tree(tree, kind.value))
    return found


def built_artifacts(
    providers: Sequence[RewrittenProvider],
    contents: Sequence[RewrittenContent],
    target: Target,
    *,
    created: str,
    provider_source: str,
) -> list[Expected]:
    """The charts, manifests images and (``provider_source == "oci"``) provider
    artifacts import builds from the bundle, each once, as it pushes them."""
    found: list[Expected] = []
    for chart in chart_artifacts(contents, target):
        found.append(
            from_manifest(
                CHART,
                f"{chart.name}:{chart.version}",
                target.host,
                chart.repository,
                chart.tag,
                Manifest.from_bytes(chart.artifact.manifest),
            )
        )
    for provider in providers:
        record = provider.record
        image = build_image(image_profiles(provider))
        found.append(
            from_manifest(
                MANIFESTS_IMAGE,
                f"{record.label}:{record.version}",
                target.host,
                repository_for(target, record),
                record.version,
                image.manifest,
            )
        )
    if provider_source == "oci":
        for version in emit.provider_versions(list(providers), None):
            manifest = ocisource.artifact_manifest(ocisource.artifact_files(version), created)
            found.append(
                from_manifest(
                    PROVIDER_ARTIFACT,
                    version.configmap_name,
                    target.host,
                    ocisource.artifact_repository(target, version),
                    version.version,
                    manifest,
                )
            )
    return _once(found)


def _once(found: list[Expected]) -> list[Expected]:
    """One entry per repository and reference (two charts may carry the same
    dependency; import pushes it twice, with the same bytes)."""
    seen: set[tuple[str, str]] = set()
    unique = []
    for item in found:
        key = (item.repository, item.reference)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique
