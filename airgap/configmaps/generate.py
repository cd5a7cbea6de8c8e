"""Operator objects and the clusterctl repository for a verified bundle.

Shared by ``airgap import`` (after pushing) and ``airgap configmaps`` (without pushing):
both rewrite the components to the same target references, so their outputs agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airgap.configmaps import emit, ocisource
from airgap.configmaps.management import README, content_outputs, readme
from airgap.configmaps.variables import VariableValues
from airgap.core import phases
from airgap.registry.client import Registry
from airgap.rewrite.contents import RewrittenContent
from airgap.rewrite.mapping import Target
from airgap.rewrite.providers import RewrittenProvider

SOURCES = ("selector", "oci")


@dataclass(frozen=True)
class ProviderOutputOptions:
    """How the operator's objects are written: shared by ``import --output-dir`` and
    ``configmaps``, which must emit the same files."""

    output_dir: Path
    namespace: str | None = None
    provider_source: str = "selector"
    # values for the components' variables (environment over --variables FILE)
    variables: VariableValues = field(default_factory=VariableValues)
    # where the tree will be read from, if not output_dir (--output-location): the
    # file:// URLs of clusterctl.yaml point there
    location: Path | None = None


@dataclass(frozen=True)
class ProviderOutputs:
    """The operator's objects as files, and the required variables nobody gave a value
    for (reported, never guessed)."""

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
    contents: Sequence[RewrittenContent] = (),
) -> ProviderOutputs:
    """``operator/`` and ``clusterctl/`` files; with the OCI source, publish artifacts
    to ``registry`` first and point the CRs at them. ``contents`` (cert-manager, the
    operator, templates) add their install steps and clusterctl files
    (``configmaps.management``)."""
    with phases.timed("providers/outputs"):
        outputs = _provider_outputs(
            providers, options, target=target, created=created, registry=registry
        )
    location = options.location or options.output_dir
    management = content_outputs(contents, location, str(target))
    files = outputs.files
    files.update(emit.clusterctl_files(providers, location, extra=management.clusterctl))
    files.update(management.files)
    files[README] = readme(management.steps, files)
    return outputs


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
            version.configmap_name: ocisource.publish(registry, target, version, created)
            for version in emit.provider_versions(providers, options.namespace)
        }
        # OCI_USERNAME/OCI_PASSWORD given as variables win over the import's own
        # credentials (a read-only account for the cluster, say)
        values = values.with_fallback(_registry_credentials(registry))
    operator = emit.operator_files(
        providers, namespace=options.namespace, oci_references=oci_references, lookup=values.get
    )
    files = operator.files  # clusterctl/ is added by provider_outputs, with content
    return ProviderOutputs(files, operator.missing)
