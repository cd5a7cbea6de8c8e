"""Files for ``operator/`` (kustomize-ready) and ``clusterctl/`` (a local repository).

Deterministic: the same bundle and options give byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from airgap.configmaps import objects
from airgap.configmaps.objects import ProviderVersion
from airgap.mirror.outputs import RewrittenProvider
from airgap.providers.components import Variable, find_variables
from airgap.providers.types import ProviderType


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (components, metadata) as literal blocks, readable in review."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump(document: Any) -> bytes:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1 << 16).encode()


def dump_all(documents: list[Any]) -> bytes:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=1 << 16).encode()


def provider_versions(
    providers: list[RewrittenProvider], namespace: str | None
) -> list[ProviderVersion]:
    result = []
    for provider in providers:
        record = provider.record
        ptype = ProviderType.parse(record.type)
        result.append(
            ProviderVersion(
                name=record.name,
                type=ptype,
                version=record.version,
                metadata=provider.metadata,
                components=provider.components,
                namespace=namespace
                or objects.default_namespace(
                    ptype, record.name, provider.components, record.components
                ),
            )
        )
    return result


def _installed(versions: list[ProviderVersion]) -> list[ProviderVersion]:
    """Per provider, the version its CR installs: the first the bundle lists; core first."""
    chosen: dict[str, ProviderVersion] = {}
    for version in versions:
        chosen.setdefault(version.key, version)
    return sorted(chosen.values(), key=lambda v: v.type is not ProviderType.CORE)


def operator_files(
    providers: list[RewrittenProvider],
    *,
    namespace: str | None = None,
    oci_references: dict[str, str] | None = None,
) -> dict[str, bytes]:
    """``operator/…`` relative paths -> contents, with a kustomization in apply order."""
    versions = provider_versions(providers, namespace)
    files: dict[str, bytes] = {}
    namespaces = sorted({v.namespace for v in versions})
    files["operator/namespaces.yaml"] = dump_all([objects.namespace_object(n) for n in namespaces])
    resources = ["namespaces.yaml"]
    if oci_references is None:
        for version in versions:
            path = f"configmaps/{version.configmap_name}.yaml"
            files[f"operator/{path}"] = dump(objects.configmap(version))
            resources.append(path)
    variables: dict[str, list[Variable]] = {}
    rows: list[tuple[str, Variable]] = []
    for version in versions:
        found = find_variables(version.components)
        if found and version.key not in variables:
            variables[version.key] = found
            rows.extend((f"{version.type.kind} {version.name}", v) for v in found)
    installed = _installed(versions)
    for version in installed:
        if version.key in variables:
            path = f"secrets/{objects.secret_name(version)}.yaml"
            files[f"operator/{path}"] = objects.variables_secret(
                version, variables[version.key]
            ).encode()
            resources.append(path)
    for index, version in enumerate(installed):
        path = f"providers/{index:02d}-{version.key}.yaml"
        oci = (oci_references or {}).get(version.configmap_name)
        secret = objects.secret_name(version) if version.key in variables else None
        files[f"operator/{path}"] = dump(objects.provider_cr(version, secret=secret, oci=oci))
        resources.append(path)
    files["operator/kustomization.yaml"] = dump(objects.kustomization(resources))
    files["operator/variables.md"] = objects.variables_markdown(rows).encode()
    return files


def clusterctl_files(providers: list[RewrittenProvider], output_dir: Path) -> dict[str, bytes]:
    """A clusterctl local repository and a ``clusterctl.yaml`` pointing at it."""
    files: dict[str, bytes] = {}
    entries: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    base = output_dir.absolute() / "clusterctl"
    for provider in providers:
        record = provider.record
        folder = f"clusterctl/{record.label}/{record.version}"
        files[f"{folder}/metadata.yaml"] = provider.metadata.encode()
        files[f"{folder}/{provider.components_name}"] = provider.components.encode()
        if (record.type, record.name) in seen:
            continue
        seen.add((record.type, record.name))
        url = (base / record.label / record.version / provider.components_name).as_uri()
        entries.append({"name": record.name, "url": url, "type": record.type})
    header = (
        "# Generated by airgap: clusterctl init --config clusterctl.yaml installs from the\n"
        "# local repository beside this file, with images in the disconnected registry.\n"
    )
    files["clusterctl/clusterctl.yaml"] = header.encode() + dump({"providers": entries})
    return files
