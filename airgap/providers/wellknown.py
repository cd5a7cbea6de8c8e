"""Built-in provider names users expect to type without a URL (pure).

clusterctl ships this table (``cmd/clusterctl/client/config/providers_client.go``,
66 entries at cluster-api commit ae7ff047db49, August 2026); carrying it verbatim means a
spec that says ``name: talos`` fetches exactly what ``clusterctl init --bootstrap talos``
would have fetched, with clusterctl's spelling (``rancher-fleet``, not ``fleet``).

Each URL is kept as clusterctl writes it and mapped to airgap's release sources by
:func:`split_url`: ``https://github.com/OWNER/REPO/releases/latest/FILE`` is the GitHub
repository ``.../releases`` (read through the releases API, so any version can be asked
for, not only ``latest``) plus the components file ``FILE``. Two providers have a file
name of their own: docker's ``infrastructure-components-development.yaml`` and the
nutanix runtime extension's ``runtime-extensions-components.yaml``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from airgap.core.names import shown
from airgap.providers.types import ProviderType

# name, type, URL: clusterctl's defaults() in its order, byte for byte.
_CLUSTERCTL_TABLE = """
cluster-api              CoreProvider             https://github.com/kubernetes-sigs/cluster-api/releases/latest/core-components.yaml
linode-linode            InfrastructureProvider   https://github.com/linode/cluster-api-provider-linode/releases/latest/infrastructure-components.yaml
aws                      InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases/latest/infrastructure-components.yaml
azure                    InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-azure/releases/latest/infrastructure-components.yaml
docker                   InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api/releases/latest/infrastructure-components-development.yaml
cloudscale-ch-cloudscale InfrastructureProvider   https://github.com/cloudscale-ch/cluster-api-provider-cloudscale/releases/latest/infrastructure-components.yaml
cloudstack               InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-cloudstack/releases/latest/infrastructure-components.yaml
digitalocean             InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-digitalocean/releases/latest/infrastructure-components.yaml
gcp                      InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-gcp/releases/latest/infrastructure-components.yaml
tinkerbell-tinkerbell    InfrastructureProvider   https://github.com/tinkerbell/cluster-api-provider-tinkerbell/releases/latest/infrastructure-components.yaml
metal3                   InfrastructureProvider   https://github.com/metal3-io/cluster-api-provider-metal3/releases/latest/infrastructure-components.yaml
nested                   InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-nested/releases/latest/infrastructure-components.yaml
oci                      InfrastructureProvider   https://github.com/oracle/cluster-api-provider-oci/releases/latest/infrastructure-components.yaml
openstack                InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-openstack/releases/latest/infrastructure-components.yaml
sidero                   InfrastructureProvider   https://github.com/siderolabs/sidero/releases/latest/infrastructure-components.yaml
vcd                      InfrastructureProvider   https://github.com/vmware/cluster-api-provider-cloud-director/releases/latest/infrastructure-components.yaml
vsphere                  InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-vsphere/releases/latest/infrastructure-components.yaml
maas                     InfrastructureProvider   https://github.com/spectrocloud/cluster-api-provider-maas/releases/latest/infrastructure-components.yaml
coxedge                  InfrastructureProvider   https://github.com/coxedge/cluster-api-provider-coxedge/releases/latest/infrastructure-components.yaml
byoh                     InfrastructureProvider   https://github.com/vmware-tanzu/cluster-api-provider-bringyourownhost/releases/latest/infrastructure-components.yaml
harvester-harvester      InfrastructureProvider   https://github.com/rancher-sandbox/cluster-api-provider-harvester/releases/latest/infrastructure-components.yaml
hetzner                  InfrastructureProvider   https://github.com/syself/cluster-api-provider-hetzner/releases/latest/infrastructure-components.yaml
huawei                   InfrastructureProvider   https://github.com/HuaweiCloudDeveloper/cluster-api-provider-huawei/releases/latest/infrastructure-components.yaml
outscale                 InfrastructureProvider   https://github.com/outscale/cluster-api-provider-outscale/releases/latest/infrastructure-components.yaml
ibmcloud                 InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-ibmcloud/releases/latest/infrastructure-components.yaml
nutanix                  InfrastructureProvider   https://github.com/nutanix-cloud-native/cluster-api-provider-nutanix/releases/latest/infrastructure-components.yaml
kubekey                  InfrastructureProvider   https://github.com/kubesphere/kubekey/releases/latest/infrastructure-components.yaml
kubevirt                 InfrastructureProvider   https://github.com/kubernetes-sigs/cluster-api-provider-kubevirt/releases/latest/infrastructure-components.yaml
vcluster                 InfrastructureProvider   https://github.com/loft-sh/cluster-api-provider-vcluster/releases/latest/infrastructure-components.yaml
virtink                  InfrastructureProvider   https://github.com/smartxworks/cluster-api-provider-virtink/releases/latest/infrastructure-components.yaml
proxmox                  InfrastructureProvider   https://github.com/ionos-cloud/cluster-api-provider-proxmox/releases/latest/infrastructure-components.yaml
k0sproject-k0smotron     InfrastructureProvider   https://github.com/k0sproject/k0smotron/releases/latest/infrastructure-components.yaml
ionoscloud-ionoscloud    InfrastructureProvider   https://github.com/ionos-cloud/cluster-api-provider-ionoscloud/releases/latest/infrastructure-components.yaml
vultr-vultr              InfrastructureProvider   https://github.com/vultr/cluster-api-provider-vultr/releases/latest/infrastructure-components.yaml
opennebula               InfrastructureProvider   https://github.com/OpenNebula/cluster-api-provider-opennebula/releases/latest/infrastructure-components.yaml
scaleway                 InfrastructureProvider   https://github.com/scaleway/cluster-api-provider-scaleway/releases/latest/infrastructure-components.yaml
metal-stack              InfrastructureProvider   https://github.com/metal-stack/cluster-api-provider-metal-stack/releases/latest/infrastructure-components.yaml
oxide                    InfrastructureProvider   https://github.com/oxidecomputer/cluster-api-provider-oxide/releases/latest/infrastructure-components.yaml
kubeswift-io             InfrastructureProvider   https://github.com/kubeswift-io/cluster-api-provider-kubeswift/releases/latest/infrastructure-components.yaml
kairos-io-fleet          InfrastructureProvider   https://github.com/kairos-io/cluster-api-provider-kairos-fleet/releases/latest/infrastructure-components.yaml
kubeadm                  BootstrapProvider        https://github.com/kubernetes-sigs/cluster-api/releases/latest/bootstrap-components.yaml
kubekey-k3s              BootstrapProvider        https://github.com/kubesphere/kubekey/releases/latest/bootstrap-components.yaml
talos                    BootstrapProvider        https://github.com/siderolabs/cluster-api-bootstrap-provider-talos/releases/latest/bootstrap-components.yaml
microk8s                 BootstrapProvider        https://github.com/canonical/cluster-api-bootstrap-provider-microk8s/releases/latest/bootstrap-components.yaml
rke2                     BootstrapProvider        https://github.com/rancher/cluster-api-provider-rke2/releases/latest/bootstrap-components.yaml
k0sproject-k0smotron     BootstrapProvider        https://github.com/k0sproject/k0smotron/releases/latest/bootstrap-components.yaml
canonical-kubernetes     BootstrapProvider        https://github.com/canonical/cluster-api-k8s/releases/latest/bootstrap-components.yaml
kairos-io                BootstrapProvider        https://github.com/kairos-io/cluster-api-provider-kairos/releases/latest/bootstrap-components.yaml
kubeadm                  ControlPlaneProvider     https://github.com/kubernetes-sigs/cluster-api/releases/latest/control-plane-components.yaml
kubekey-k3s              ControlPlaneProvider     https://github.com/kubesphere/kubekey/releases/latest/control-plane-components.yaml
talos                    ControlPlaneProvider     https://github.com/siderolabs/cluster-api-control-plane-provider-talos/releases/latest/control-plane-components.yaml
microk8s                 ControlPlaneProvider     https://github.com/canonical/cluster-api-control-plane-provider-microk8s/releases/latest/control-plane-components.yaml
nested                   ControlPlaneProvider     https://github.com/kubernetes-sigs/cluster-api-provider-nested/releases/latest/control-plane-components.yaml
kamaji                   ControlPlaneProvider     https://github.com/clastix/cluster-api-control-plane-provider-kamaji/releases/latest/control-plane-components.yaml
rke2                     ControlPlaneProvider     https://github.com/rancher/cluster-api-provider-rke2/releases/latest/control-plane-components.yaml
k0sproject-k0smotron     ControlPlaneProvider     https://github.com/k0sproject/k0smotron/releases/latest/control-plane-components.yaml
canonical-kubernetes     ControlPlaneProvider     https://github.com/canonical/cluster-api-k8s/releases/latest/control-plane-components.yaml
hosted-control-plane     ControlPlaneProvider     https://github.com/teutonet/cluster-api-provider-hosted-control-plane/releases/latest/control-plane-components.yaml
kairos-io                ControlPlaneProvider     https://github.com/kairos-io/cluster-api-provider-kairos/releases/latest/control-plane-components.yaml
in-cluster               IPAMProvider             https://github.com/kubernetes-sigs/cluster-api-ipam-provider-in-cluster/releases/latest/ipam-components.yaml
metal3                   IPAMProvider             https://github.com/metal3-io/ip-address-manager/releases/latest/ipam-components.yaml
nutanix                  IPAMProvider             https://github.com/nutanix-cloud-native/cluster-api-ipam-provider-nutanix/releases/latest/ipam-components.yaml
rancher-fleet            AddonProvider            https://github.com/rancher/cluster-api-addon-provider-fleet/releases/latest/addon-components.yaml
helm                     AddonProvider            https://github.com/kubernetes-sigs/cluster-api-addon-provider-helm/releases/latest/addon-components.yaml
eitco-cdk8s              AddonProvider            https://github.com/eitco/cluster-api-addon-provider-cdk8s/releases/latest/addon-components.yaml
nutanix                  RuntimeExtensionProvider https://github.com/nutanix-cloud-native/cluster-api-runtime-extensions-nutanix/releases/latest/runtime-extensions-components.yaml
"""

_GITHUB_LATEST_RE = re.compile(
    r"^(?P<repo>https://github\.com/[^/]+/[^/]+/releases)/latest/(?P<file>[^/]+)$"
)


@dataclass(frozen=True)
class WellKnownProvider:
    """A built-in provider: clusterctl's URL, and where airgap reads its releases.

    ``url`` is the release source airgap reads (``https://github.com/O/R/releases``),
    ``components_file`` the file a release of it carries, ``clusterctl_url`` the URL
    exactly as clusterctl lists it.
    """

    name: str
    type: ProviderType
    url: str
    components_file: str
    clusterctl_url: str


def split_url(clusterctl_url: str) -> tuple[str, str]:
    """clusterctl's provider URL -> (release source URL, components file name).

    A GitHub ``releases/latest/FILE`` URL becomes its repository's releases, so that a
    pinned version resolves too; any other URL is handed to the release sources as is
    (they read clusterctl-style ``BASE/VERSION/FILE`` URLs), with its last segment as
    the file.
    """
    match = _GITHUB_LATEST_RE.match(clusterctl_url)
    if match:
        return match.group("repo"), match.group("file")
    return clusterctl_url, clusterctl_url.rstrip("/").rsplit("/", 1)[-1]


def _parse_table(text: str) -> dict[tuple[str, ProviderType], WellKnownProvider]:
    table: dict[tuple[str, ProviderType], WellKnownProvider] = {}
    for line in text.strip().splitlines():
        name, kind, clusterctl_url = line.split()
        ptype = ProviderType.parse(kind)
        url, components_file = split_url(clusterctl_url)
        table[(name, ptype)] = WellKnownProvider(
            name=name,
            type=ptype,
            url=url,
            components_file=components_file,
            clusterctl_url=clusterctl_url,
        )
    return table


WELL_KNOWN: dict[tuple[str, ProviderType], WellKnownProvider] = _parse_table(_CLUSTERCTL_TABLE)


def lookup(name: str, provider_type: ProviderType) -> WellKnownProvider | None:
    """The built-in entry for ``(name, type)``, or None when the user must give a URL."""
    return WELL_KNOWN.get((name, provider_type))


def closest_names(name: str, provider_type: ProviderType, limit: int = 3) -> list[str]:
    """Built-in names of ``provider_type`` a user probably meant: close spellings
    (difflib), then names that contain the given one as a part (``fleet`` ->
    ``rancher-fleet``, ``kairos-io-fleet``) or are a part of it."""
    names = [known for known, ptype in WELL_KNOWN if ptype is provider_type]
    found = difflib.get_close_matches(name, names, n=limit, cutoff=0.6)
    for known in names:
        if known not in found and _shares_a_part(name, known):
            found.append(known)
    return found[:limit]


def _shares_a_part(name: str, known: str) -> bool:
    given, parts = name.split("-"), known.split("-")
    return any(
        given == parts[i : i + len(given)] for i in range(len(parts) - len(given) + 1)
    ) or any(parts == given[i : i + len(parts)] for i in range(len(given) - len(parts) + 1))


def unknown_provider_message(name: str, provider_type: ProviderType) -> str:
    """Why ``name`` needs a URL, with the built-in names the user may have meant."""
    message = f"unknown provider {shown(name)} of type {provider_type.kind}"
    other_types = [ptype.kind for known, ptype in WELL_KNOWN if known == name]
    hints = []
    if other_types:
        hints.append(f"{shown(name)} is built in as {', '.join(other_types)} only")
    close = closest_names(name, provider_type)
    if close:
        hints.append(f"closest built-in names: {', '.join(close)}")
    give = "give url (e.g. https://github.com/OWNER/REPO/releases)"
    hints.append(f"or {give}" if hints else give)
    return f"{message}: {'; '.join(hints)}"
