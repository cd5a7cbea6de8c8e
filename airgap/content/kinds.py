"""What a bundle carries besides provider releases, kind by kind (pure).

A management cluster needs more than providers: cert-manager (``clusterctl init``
installs it first, from its release manifest), the Cluster API operator (its own
manifest, and its Helm chart when the release has one) and the infrastructure
providers' cluster templates (``clusterctl generate cluster`` reads flavors and
ClusterClasses from the infrastructure provider's repository). Each of these is *content*: a named,
versioned set of release files with the images they use, recorded in the bundle
manifest as one ``ContentRecord``. Collect, verify, the inventory, policy and import
treat every kind through the one path this table describes; a kind only says where
its files come from, which files it takes and where they live in the bundle.

Files are told apart by name: ``*.yaml`` files are manifests (images discovered and
rewritten line by line, like components), ``*.tgz`` files are Helm chart packages
(images read from ``values.yaml``; the package travels byte for byte).

Addon manifests (``manifests:`` in the spec) are content too: one file fetched from any
URL, named ``NAME.yaml`` under ``addons/NAME/VERSION`` where VERSION is ``sha256-`` and
the first 16 hex digits of the file's digest (a URL has no release version, and two
bundles of different bytes must not claim the same one). Import turns each into a
ClusterResourceSet for workload clusters (``configmaps.addons``).

Helm charts (``charts:``) are content as well: a record per spec entry, named and
versioned as the chart's ``Chart.yaml`` says, under ``charts/NAME/VERSION``, holding the
package as published (``NAME-VERSION.tgz``, its ``.prov`` when there is one) and the
packages of the dependencies it does not vendor.

Kubernetes versions (``kubernetes: {versions: [...]}``) are content too: a record per
version, named ``kubernetes``, under ``content/kubernetes/VERSION``, holding the list of
images that version's kubeadm pulls (``kubeadm-images.txt``, as ``kubeadm config images
list`` prints it) and the release's ``constants.go`` it was derived from (absent when an
offline collect used the built-in table: ``content.kubeadm``).
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

from airgap.content.chartrender import RenderSettings
from airgap.core.names import file_name_problem, provider_name_problem, shown

CONTENT_DIR = "content"
PROVIDERS_DIR = "providers"  # templates live beside their provider's components
ADDONS_DIR = "addons"  # addon manifests, one directory per entry name
CHARTS_DIR = "charts"  # Helm charts and their dependencies, per chart and version
PROVENANCE_SUFFIX = ".prov"
MANIFEST_SUFFIXES = (".yaml", ".yml")
CHART_SUFFIX = ".tgz"

CERT_MANAGER_NAME = "cert-manager"
CERT_MANAGER_URL = "https://github.com/cert-manager/cert-manager/releases"
CERT_MANAGER_FILE = "cert-manager.yaml"
OPERATOR_NAME = "cluster-api-operator"
OPERATOR_URL = "https://github.com/kubernetes-sigs/cluster-api-operator/releases"
OPERATOR_FILE = "operator-components.yaml"
# clusterctl's flavors: cluster-template.yaml, cluster-template-FLAVOR.yaml, and the
# ClusterClasses they use (clusterclass-NAME.yaml), all in the release's assets.
TEMPLATE_PATTERNS = ("cluster-template*.yaml", "clusterclass*.yaml")
KUBERNETES_NAME = "kubernetes"
# kubeadm's source at a tag, raw: URL/TAG/cmd/kubeadm/app/constants/constants.go
KUBERNETES_URL = "https://raw.githubusercontent.com/kubernetes/kubernetes"
# the kubeadm image list and the constants.go it was read from (content.kubeadm)
KUBERNETES_FILES = ("kubeadm-images.txt", "constants.go")


class ContentKind(enum.Enum):
    """A kind of content; the value is how the bundle manifest and the spec name it."""

    CERT_MANAGER = "certManager"
    OPERATOR = "operator"
    TEMPLATES = "templates"
    MANIFESTS = "manifests"
    CHARTS = "charts"
    KUBERNETES = "kubernetes"

    @property
    def title(self) -> str:
        """How messages and the inventory name the kind."""
        return _TITLES[self]

    @property
    def default_url(self) -> str | None:
        """Where releases come from when the spec gives no ``url``."""
        return {
            ContentKind.CERT_MANAGER: CERT_MANAGER_URL,
            ContentKind.OPERATOR: OPERATOR_URL,
            ContentKind.KUBERNETES: KUBERNETES_URL,
        }.get(self)

    @property
    def fixed_name(self) -> str | None:
        """The one name content of this kind has (templates take their provider's label)."""
        return {
            ContentKind.CERT_MANAGER: CERT_MANAGER_NAME,
            ContentKind.OPERATOR: OPERATOR_NAME,
            ContentKind.KUBERNETES: KUBERNETES_NAME,
        }.get(self)

    @property
    def unique(self) -> bool:
        """At most one record of this kind per bundle (one cert-manager, one operator)."""
        return self not in (
            ContentKind.TEMPLATES,
            ContentKind.MANIFESTS,
            ContentKind.CHARTS,
            ContentKind.KUBERNETES,
        )

    def directory(self, name: str, version: str) -> str:
        """The bundle directory of a record. Templates sit beside their provider's
        components, so the bundle's ``providers/`` is a clusterctl repository with its
        flavors; cert-manager and the operator under ``content/NAME/VERSION``."""
        top = {
            ContentKind.TEMPLATES: PROVIDERS_DIR,
            ContentKind.MANIFESTS: ADDONS_DIR,
            ContentKind.CHARTS: CHARTS_DIR,
        }.get(self, CONTENT_DIR)
        return f"{top}/{name}/{version}"

    def required_files(self, version: str) -> list[str]:
        """Files a release of this kind must have."""
        if self is ContentKind.CERT_MANAGER:
            return [CERT_MANAGER_FILE]
        if self is ContentKind.OPERATOR:
            return [OPERATOR_FILE]
        return []

    def optional_files(self, version: str) -> list[str]:
        """Files taken when the release has them: the operator's chart package, named
        as its release workflow names it (``helm package --version`` with the tag
        without its ``v``: ``cluster-api-operator-0.24.0.tgz`` for v0.24.0)."""
        if self is ContentKind.OPERATOR:
            return [operator_chart_file(version)]
        return []

    def listed_files(self, listing: Sequence[str]) -> list[str]:
        """Files taken from a release's listing because of their names (templates)."""
        if self is not ContentKind.TEMPLATES:
            return []
        return sorted(name for name in listing if is_template_file(name))

    def file_problem(self, name: str, version: str) -> str | None:
        """Why a file may not belong to a record of this kind (verify's rule)."""
        problem = file_name_problem(name)
        if problem:
            return problem
        allowed = self.required_files(version) + self.optional_files(version)
        if self is ContentKind.TEMPLATES:
            return None if is_template_file(name) else f"{shown(name)} is not a cluster template"
        if self is ContentKind.MANIFESTS:
            return None if is_manifest(name) else f"{shown(name)} is not a YAML manifest"
        if self is ContentKind.CHARTS:
            chart = is_chart(name) or name.endswith(CHART_SUFFIX + PROVENANCE_SUFFIX)
            return None if chart else f"{shown(name)} is not a chart package or its provenance"
        if self is ContentKind.KUBERNETES and name not in KUBERNETES_FILES:
            return f"{shown(name)} is not a file of Kubernetes ({', '.join(KUBERNETES_FILES)})"
        if self is ContentKind.KUBERNETES:
            return None
        if name not in allowed:
            return f"{shown(name)} is not a file of {self.title} (expected {', '.join(allowed)})"
        return None


_TITLES = {
    ContentKind.CERT_MANAGER: "cert-manager",
    ContentKind.OPERATOR: "the Cluster API operator",
    ContentKind.TEMPLATES: "cluster templates",
    ContentKind.MANIFESTS: "addon manifests",
    ContentKind.CHARTS: "Helm charts",
    ContentKind.KUBERNETES: "Kubernetes",
}


def operator_chart_file(version: str) -> str:
    return f"{OPERATOR_NAME}-{version.removeprefix('v')}{CHART_SUFFIX}"


def chart_file(name: str, version: str) -> str:
    """A chart package's file name, as ``helm package`` names it, with a version's
    ``+`` (build metadata) written ``_`` as Helm writes it in OCI tags: a file name
    in a bundle holds letters, digits, '.', '_' and '-' only."""
    return f"{name}-{version.replace('+', '_')}{CHART_SUFFIX}"


def is_template_file(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in TEMPLATE_PATTERNS)


def is_manifest(name: str) -> bool:
    return name.endswith(MANIFEST_SUFFIXES)


def is_chart(name: str) -> bool:
    return name.endswith(CHART_SUFFIX)


def parse_kind(text: str) -> ContentKind | None:
    try:
        return ContentKind(text)
    except ValueError:
        return None


def name_problem(kind: ContentKind, name: str) -> str | None:
    """Why ``name`` cannot name content of ``kind``."""
    fixed = kind.fixed_name
    if fixed is not None and name != fixed:
        return f"{kind.title} is named {shown(fixed)}, not {shown(name)}"
    return provider_name_problem(name)


@dataclass(frozen=True)
class ChartLocation:
    """Where a spec's chart entry comes from: a classic chart repository (``repo``, its
    ``index.yaml``) or an OCI reference (``oci://HOST/PATH/NAME``); ``ca_file`` adds a CA
    for the repository's TLS; ``images`` are carried besides those discovered;
    ``keyring`` (OpenPGP public keys) makes every chart of the entry need a ``.prov``
    signed by one of them, as ``helm pull --verify --keyring`` does."""

    repo: str | None = None
    oci: str | None = None
    ca_file: str | None = None
    images: tuple[str, ...] = ()
    keyring: str | None = None
    render: RenderSettings = field(default_factory=RenderSettings)  # values, capabilities


@dataclass(frozen=True)
class ContentSpec:
    """One content entry of a spec: a kind, a version (or ``latest``) and an optional
    release URL (any source a provider URL may be). Addon manifests have a ``name`` (the
    spec's) and a ``url`` to the one file; their version is decided by its bytes."""

    kind: ContentKind
    version: str
    url: str | None = None
    name: str | None = None
    chart: ChartLocation | None = None  # charts: where the chart comes from
    offline: bool = False  # kubernetes: the built-in table, no source read

    @property
    def source_url(self) -> str:
        url = self.url or self.kind.default_url
        assert url is not None, "templates come from their provider's source"
        return url
