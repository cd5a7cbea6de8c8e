"""Built-in provider names users expect to type without a URL (pure).

clusterctl ships the same table; matching it means a spec that says ``name: aws``
fetches exactly what ``clusterctl init --infrastructure aws`` would have fetched.
"""

from __future__ import annotations

from dataclasses import dataclass

from airgap.providers.types import ProviderType


@dataclass(frozen=True)
class WellKnownProvider:
    """Where a built-in provider's releases live and which components file to take."""

    name: str
    type: ProviderType
    url: str
    components_file: str


def _github(owner_repo: str) -> str:
    return f"https://github.com/{owner_repo}/releases"


_CAPI = "kubernetes-sigs/cluster-api"

_TABLE: tuple[tuple[str, ProviderType, str, str | None], ...] = (
    ("cluster-api", ProviderType.CORE, _CAPI, None),
    ("kubeadm", ProviderType.BOOTSTRAP, _CAPI, None),
    ("kubeadm", ProviderType.CONTROL_PLANE, _CAPI, None),
    # The docker provider is released from the core repository under a dev file name.
    ("docker", ProviderType.INFRASTRUCTURE, _CAPI, "infrastructure-components-development.yaml"),
    ("aws", ProviderType.INFRASTRUCTURE, "kubernetes-sigs/cluster-api-provider-aws", None),
    ("azure", ProviderType.INFRASTRUCTURE, "kubernetes-sigs/cluster-api-provider-azure", None),
    ("vsphere", ProviderType.INFRASTRUCTURE, "kubernetes-sigs/cluster-api-provider-vsphere", None),
    ("gcp", ProviderType.INFRASTRUCTURE, "kubernetes-sigs/cluster-api-provider-gcp", None),
    (
        "openstack",
        ProviderType.INFRASTRUCTURE,
        "kubernetes-sigs/cluster-api-provider-openstack",
        None,
    ),
    ("metal3", ProviderType.INFRASTRUCTURE, "metal3-io/cluster-api-provider-metal3", None),
    ("in-cluster", ProviderType.IPAM, "kubernetes-sigs/cluster-api-ipam-provider-in-cluster", None),
    ("helm", ProviderType.ADDON, "kubernetes-sigs/cluster-api-addon-provider-helm", None),
    ("fleet", ProviderType.ADDON, "rancher/cluster-api-addon-provider-fleet", None),
)

WELL_KNOWN: dict[tuple[str, ProviderType], WellKnownProvider] = {
    (name, ptype): WellKnownProvider(
        name=name,
        type=ptype,
        url=_github(repo),
        components_file=components or ptype.components_file,
    )
    for name, ptype, repo, components in _TABLE
}


def lookup(name: str, provider_type: ProviderType) -> WellKnownProvider | None:
    """The built-in entry for ``(name, type)``, or None when the user must give a URL."""
    return WELL_KNOWN.get((name, provider_type))
