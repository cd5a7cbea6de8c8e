"""Operator objects and the clusterctl repository for a verified bundle.

Shared by ``airgap import`` (after pushing) and ``airgap configmaps`` (without pushing):
both rewrite the components to the same target references, so their outputs agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from airgap import phases
from airgap.configmaps import emit, ocisource
from airgap.configmaps.variables import VariableValues
from airgap.mirror.mapping import Target
from airgap.mirror.outputs import RewrittenProvider
from airgap.registry.client import Registry

SOURCES = ("selector", "oci")


@dataclass(frozen=True)
class ProviderOutputOptions:
    output_dir: Path
    namespace: str | None = None
    provider_source: str = "selector"
    # values for the components' variables (environment over --variables FILE)
    variables: VariableValues = field(default_factory=VariableValues)


@dataclass(frozen=True)
class ProviderOutputs:
    files: dict[str, bytes]
    # "<Kind> <name>" -> required variables nobody gave a value for (names only)
    missing: dict[str, list[str]] = field(default_factory=dict)


def _registry_credentials(registry: Registry) -> Callable[[str], str | None]:
    """``OCI_USERNAME``/``OCI_PASSWORD`` as the operator's OCI source reads them: the
    credentials the target registry asked airgap for, if it asked."""
    credentials = registry.presented_credentials()
    values = (
        {"OCI_USERNAME": credentials.username, "OCI_PASSWORD": credentials.password}
        if credentials
        else {}
    )
    return values.get


def provider_outputs(
    providers: list[RewrittenProvider],
    options: ProviderOutputOptions,
    *,
    target: Target,
    created: str,
    registry: Registry | None = None,
) -> ProviderOutputs:
    """``operator/`` and ``clusterctl/`` files; with the OCI source, publish artifacts
    to ``registry`` first and point the CRs at them."""
    with phases.timed("providers/outputs"):
        return _provider_outputs(
            providers, options, target=target, created=created, registry=registry
        )


def _provider_outputs(
    providers: list[RewrittenProvider],
    options: ProviderOutputOptions,
    *,
    target: Target,
    created: str,
    registry: Registry | None,
) -> ProviderOutputs:
    oci_references: dict[str, str] | None = None
    values = options.variables
    if options.provider_source == "oci":
        assert registry is not None, "the OCI provider source needs the target registry"
        oci_references = {
            version.configmap_name: ocisource.publish(
                registry, target.host, target.prefix, version, created
            )
            for version in emit.provider_versions(providers, options.namespace)
        }
        # OCI_USERNAME/OCI_PASSWORD given as variables win over the import's own
        # credentials (a read-only account for the cluster, say)
        values = values.with_fallback(_registry_credentials(registry))
    operator = emit.operator_files(
        providers, namespace=options.namespace, oci_references=oci_references, lookup=values.get
    )
    files = operator.files
    files.update(emit.clusterctl_files(providers, options.output_dir))
    return ProviderOutputs(files, operator.missing)
