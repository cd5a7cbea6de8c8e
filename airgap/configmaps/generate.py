"""Operator objects and the clusterctl repository for a verified bundle.

Shared by ``airgap import`` (after pushing) and ``airgap configmaps`` (without pushing):
both rewrite the components to the same target references, so their outputs agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from airgap.configmaps import emit, ocisource
from airgap.mirror.mapping import Target
from airgap.mirror.outputs import RewrittenProvider
from airgap.registry.client import Registry

SOURCES = ("selector", "oci")


@dataclass(frozen=True)
class ProviderOutputOptions:
    output_dir: Path
    namespace: str | None = None
    provider_source: str = "selector"


def provider_outputs(
    providers: list[RewrittenProvider],
    options: ProviderOutputOptions,
    *,
    target: Target,
    created: str,
    registry: Registry | None = None,
) -> dict[str, bytes]:
    """``operator/`` and ``clusterctl/`` files; with the OCI source, publish artifacts
    to ``registry`` first and point the CRs at them."""
    oci_references: dict[str, str] | None = None
    if options.provider_source == "oci":
        assert registry is not None, "the OCI provider source needs the target registry"
        oci_references = {
            version.configmap_name: ocisource.publish(
                registry, target.host, target.prefix, version, created
            )
            for version in emit.provider_versions(providers, options.namespace)
        }
    files = emit.operator_files(
        providers, namespace=options.namespace, oci_references=oci_references
    )
    files.update(emit.clusterctl_files(providers, options.output_dir))
    return files
