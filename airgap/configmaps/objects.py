"""Kubernetes objects for the Cluster API operator's selector source (pure).

One ConfigMap per provider version, named ``<type>-<name>-<version>`` and labelled the
way the operator labels its own, plus a selector label of ours so a provider CR selects
exactly our ConfigMaps and never ones the operator made itself. Provider CRs
(operator.cluster.x-k8s.io/v1alpha2) select them; a Secret per provider lists the
clusterctl variables its components use.
"""

from __future__ import annotations

import base64
import gzip
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from airgap.core.errors import AirgapError
from airgap.core.fsutil import SecretBytes
from airgap.core.names import shown
from airgap.providers.components import Components, Variable, parse_components
from airgap.providers.types import ProviderType

OPERATOR_API = "operator.cluster.x-k8s.io/v1alpha2"
NAME_LABEL = "provider.cluster.x-k8s.io/name"
TYPE_LABEL = "provider.cluster.x-k8s.io/type"
VERSION_LABEL = "provider.cluster.x-k8s.io/version"
SELECTOR_LABEL = "airgap/provider"  # ours: never on ConfigMaps the operator makes
COMPRESSED_ANNOTATION = "provider.cluster.x-k8s.io/compressed"
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data + binaryData the API server accepts
CORE_CR_NAME = "cluster-api"

DEFAULT_NAMESPACES = {
    (ProviderType.CORE, "cluster-api"): "capi-system",
    (ProviderType.BOOTSTRAP, "kubeadm"): "capi-kubeadm-bootstrap-system",
    (ProviderType.CONTROL_PLANE, "kubeadm"): "capi-kubeadm-control-plane-system",
}


class ConfigMapTooLargeError(AirgapError):
    """Even compressed, a provider does not fit the 1 MiB a ConfigMap may hold."""


@dataclass(frozen=True)
class ProviderVersion:
    """One provider version as the operator objects need it."""

    name: str
    type: ProviderType
    version: str
    metadata: str
    components: str  # already rewritten to the target registry
    namespace: str
    # ``components`` parsed once (images, containers, Namespace); None only where a
    # version is built by hand from text
    parsed: Components | None = None

    @property
    def key(self) -> str:
        """``<type>-<name>``: the provider's identity for names and selector labels."""
        return f"{self.type.operator_type}-{self.name}"

    @property
    def configmap_name(self) -> str:
        return f"{self.key}-{self.version}"

    @property
    def cr_name(self) -> str:
        return CORE_CR_NAME if self.type is ProviderType.CORE else self.name


def components_namespace(components: str, source: str) -> str | None:
    """The name of the one Namespace object a components file creates, if any (outputs
    take it from the one parse, ``Components.namespace``; this parses ``components``)."""
    return parse_components(components, source).namespace


def default_namespace(ptype: ProviderType, name: str, found: str | None) -> str:
    """The components' own Namespace (``found``), else the one clusterctl uses."""
    return found or DEFAULT_NAMESPACES.get((ptype, name), f"{name}-system")


_LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_OCI_HINT = "; use --provider-source oci"


def _label_value(provider: ProviderVersion, value: str, hint: str = "") -> str:
    """``value`` if the API server accepts it as a label value, else a clear failure."""
    if not _LABEL_VALUE_RE.match(value):
        raise AirgapError(
            f"{provider.type.kind} {provider.name} {provider.version}: {shown(value)} cannot be "
            "a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.'), which "
            f"the operator's ConfigMap source needs{hint}"
        )
    return value


def selector_labels(provider: ProviderVersion) -> dict[str, str]:
    return {
        NAME_LABEL: _label_value(provider, provider.name, _OCI_HINT),
        TYPE_LABEL: provider.type.operator_type,
        SELECTOR_LABEL: _label_value(provider, provider.key, _OCI_HINT),
    }


def configmap(provider: ProviderVersion) -> dict[str, Any]:
    """The ConfigMap; components go gzip-compressed into binaryData above 1 MiB."""
    metadata = provider.metadata
    components = provider.components.encode()
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": provider.configmap_name,
            "namespace": provider.namespace,
            "labels": {
                **selector_labels(provider),
                VERSION_LABEL: _label_value(provider, provider.version),
            },
        },
    }
    room = CONFIGMAP_LIMIT - len(metadata.encode())  # what the components may take
    if len(components) <= room:
        document["data"] = {"metadata": metadata, "components": provider.components}
        return document
    compressed = _compressed_to_fit(components, room)
    if len(compressed) > room:
        raise ConfigMapTooLargeError(
            f"{provider.type.kind} {provider.name} {provider.version}: components are "
            f"{len(compressed)} bytes even gzip-compressed, over the 1 MiB a ConfigMap holds; "
            "use --provider-source oci to publish it as an OCI artifact instead"
        )
    document["metadata"]["annotations"] = {COMPRESSED_ANNOTATION: "true"}
    document["data"] = {"metadata": metadata}
    document["binaryData"] = {"components": base64.b64encode(compressed).decode()}
    return document


def _compressed_to_fit(data: bytes, room: int) -> bytes:
    """gzip at level 6 (gzip's default), and at 9 only if that does not fit in ``room``:
    level 9 costs several times level 6's time for a percent or two less, and every
    import and configmaps run builds it."""
    compressed = gzip.compress(data, compresslevel=6, mtime=0)
    if len(compressed) <= room:
        return compressed
    return gzip.compress(data, compresslevel=9, mtime=0)


def provider_cr(
    provider: ProviderVersion,
    *,
    secret: str | None,
    oci: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The provider CR; exactly one fetch source, never a github-token, and the image
    overrides (``deployment``, ``additionalDeployments``; ``manager`` untouched)."""
    fetch: dict[str, Any] = (
        {"oci": oci} if oci else {"selector": {"matchLabels": selector_labels(provider)}}
    )
    spec: dict[str, Any] = {"version": provider.version, "fetchConfig": fetch}
    if secret:
        spec["configSecret"] = {"name": secret, "namespace": provider.namespace}
    spec.update(overrides or {})
    return {
        "apiVersion": OPERATOR_API,
        "kind": provider.type.kind,
        "metadata": {"name": provider.cr_name, "namespace": provider.namespace},
        "spec": spec,
    }


def namespace_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def secret_name(provider: ProviderVersion) -> str:
    return f"{provider.key}-variables"


def _yaml_scalar(value: str) -> str:
    """``value`` as one double-quoted YAML scalar on one line, whatever it holds."""
    return yaml.safe_dump(value, default_style='"', width=1 << 30, allow_unicode=False).strip()


def variables_secret(
    provider: ProviderVersion, variables: list[Variable], values: Mapping[str, str]
) -> SecretBytes:
    """The Secret the provider CR names as its ``configSecret``, as YAML text.

    The operator sets every key of the Secret as a clusterctl variable (an empty string
    counts as set), so: a value from ``values`` where there is one, else the default
    the components give; a required variable without a value stays commented out, so
    that the operator refuses to install instead of installing with an empty value.
    Keys of ``values`` that are not component variables (the OCI source's
    ``OCI_USERNAME``/``OCI_PASSWORD``) are written too.
    """
    lines = [
        f"# Variables of {provider.type.kind} {provider.name}: values given to airgap where",
        "# there were some, else the default the components use. A required variable",
        "# nobody set is commented out: set it before applying.",
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        f"  name: {secret_name(provider)}",
        f"  namespace: {provider.namespace}",
        "type: Opaque",
    ]
    by_name = {variable.name: variable for variable in variables}
    entries: list[str] = []
    for name in sorted(set(by_name) | set(values)):
        # keys quoted too: a YAML 1.1 reader (kubectl's) takes a bare Y, NO or NULL
        # for a boolean or null
        key = _yaml_scalar(name)
        variable = by_name.get(name)
        if name in values:
            entries.append(f"  {key}: {_yaml_scalar(values[name])}")
        elif variable is not None and variable.required:
            entries.append(f"  # required, not set: {name} has no default")
            entries.append(f'  # {key}: ""')
        elif variable is not None:
            entries.append(f"  {key}: {_yaml_scalar(variable.default or '')}")
    has_values = any(not entry.lstrip().startswith("#") for entry in entries)
    lines.append("stringData:" if has_values else "stringData: {}")
    return SecretBytes(("\n".join(lines + entries) + "\n").encode())


def variables_markdown(rows: list[tuple[str, Variable]]) -> str:
    """``variables.md``: one row per (provider, variable)."""
    lines = [
        "# Provider variables",
        "",
        "| variable | provider | required | default |",
        "| --- | --- | --- | --- |",
    ]
    for provider, variable in rows:
        # a pipe, even inside a code span, would end the table cell
        default = "" if variable.default is None else f"`{variable.default}`".replace("|", "\\|")
        required = "yes" if variable.required else "no"
        lines.append(f"| `{variable.name}` | {provider} | {required} | {default} |")
    return "\n".join(lines) + "\n"


def kustomization(resources: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }
