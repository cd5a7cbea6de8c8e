"""Everything a management cluster needs besides the provider objects (pure).

From the rewritten content (``rewrite.contents``):

- ``clusterctl/``: cert-manager where clusterctl's local repository looks for it
  (``cert-manager/VERSION/cert-manager.yaml``, clusterctl reads it through a fake
  provider named ``cert-manager``) and a ``cert-manager:`` entry for ``clusterctl.yaml``;
  each infrastructure provider's cluster templates beside its components, where
  ``clusterctl generate cluster`` reads flavors and ClusterClasses;
- ``operator/00-cert-manager/`` and ``operator/01-capi-operator/``: the install steps
  before the provider steps ``02-provider-configmaps/``, ``03-core-provider/`` and
  ``04-providers/`` (``configmaps.emit``), each a kustomization applied server-side,
  with ``operator/README.md`` saying the order and what to wait for between steps
  (cert-manager's webhook, the operator's CRDs and webhook, the CoreProvider Ready
  before the rest), the waits derived from the manifests and CRs themselves;
- ``operator/helm/``: the operator's chart package as released and a values file that
  points its image at the mirror, for those who install the operator with Helm;
- ``addons/``: each addon manifest as ConfigMaps and a ClusterResourceSet for workload
  clusters (``configmaps.addons``);
- ``charts/``: values files, HelmChartProxy examples and a static chart repository for
  the bundle's Helm charts (``configmaps.charts``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airgap.configmaps.addons import addon_files, addons_index
from airgap.configmaps.charts import chart_files, chart_index, repository_index
from airgap.configmaps.emit import CONFIG_STEP, CORE_STEP, PROVIDER_STEPS, PROVIDERS_STEP, dump
from airgap.content.kinds import CERT_MANAGER_FILE, OPERATOR_FILE, ContentKind, is_chart
from airgap.formats.yamlload import iter_documents
from airgap.providers.components import parse_components
from airgap.rewrite.contents import RewrittenContent

CERT_MANAGER_STEP = "00-cert-manager"
OPERATOR_STEP = "01-capi-operator"
_PROVIDER_STEPS = {
    CONFIG_STEP: "The providers' ConfigMaps and Secrets",
    CORE_STEP: "The CoreProvider",
    PROVIDERS_STEP: "The other providers",
}
_PROVIDER_NOTES = {
    CONFIG_STEP: "The Namespaces the providers install into, one labelled ConfigMap per "
    "provider version (the operator's selector source; none with the OCI source) and each "
    "provider's variables Secret. Nothing to wait for: they exist once applied.",
    CORE_STEP: "The operator fetches its components and installs Cluster API's core: wait "
    "until it is Ready before the other providers, which need its CRDs and webhooks.",
    PROVIDERS_STEP: "Every other provider: bootstrap, control plane, infrastructure and the "
    "rest, each waited for until Ready.",
}
HELM_DIR = "helm"
VALUES_FILE = "values-airgap.yaml"
README = "operator/README.md"
APPLY = "kubectl apply --server-side -k"
WAIT_CRDS = "kubectl wait --for=condition=Established --timeout=120s"
WAIT_DEPLOYMENTS = "kubectl wait --for=condition=Available --timeout=300s"
WAIT_PROVIDERS = "kubectl wait --for=condition=Ready --timeout=600s"


@dataclass
class ContentOutputs:
    """Files to write, and the top-level keys content adds to ``clusterctl.yaml``."""

    files: dict[str, bytes] = field(default_factory=dict)
    clusterctl: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    target: str | None = None  # import's --registry, where charts were pushed


@dataclass(frozen=True)
class Step:
    """One install step before the providers, for the README."""

    directory: str  # below operator/
    title: str
    crds: list[str]
    namespace: str | None
    deployments: list[str]
    note: str = ""


def content_outputs(
    contents: Iterable[RewrittenContent], location: Path, target: str | None = None
) -> ContentOutputs:
    """``location`` is where the output tree will be read from (``--output-location``,
    default ``--output-dir``): clusterctl needs absolute ``file://`` URLs. ``target``
    (HOST[/PREFIX]) is where import pushed the charts."""
    outputs = ContentOutputs(target=target)
    addons: list[str] = []
    charts: list[str] = []
    for content in contents:
        _EMITTERS[content.kind](content, outputs, location.absolute() / "clusterctl")
        if content.kind is ContentKind.MANIFESTS:
            addons.append(content.record.name)
        if content.kind is ContentKind.CHARTS:
            charts.append(content.record.name)
    if addons:
        outputs.files.update(addons_index(addons))
    if charts:
        outputs.files["charts/repository/index.yaml"] = repository_index(outputs.files)
        outputs.files.update(chart_index(charts))
    return outputs


def _cert_manager(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    record, data = content.record, content.files[CERT_MANAGER_FILE]
    folder = f"cert-manager/{record.version}"
    out.files[f"clusterctl/{folder}/{CERT_MANAGER_FILE}"] = data
    out.clusterctl["cert-manager"] = {
        "url": (base / folder / CERT_MANAGER_FILE).as_uri(),
        "version": record.version,
    }
    _step(
        out,
        CERT_MANAGER_STEP,
        CERT_MANAGER_FILE,
        data,
        f"cert-manager {record.version}",
        "Its webhook must answer before anything asks for a certificate: the operator's "
        "own serving certificate in the next step is one.",
    )


def _operator(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    record = content.record
    _step(
        out,
        OPERATOR_STEP,
        OPERATOR_FILE,
        content.files[OPERATOR_FILE],
        f"The Cluster API operator {record.version}",
        "Its CRDs must be established and its webhook available before the provider "
        "objects of step 3 are applied.",
    )
    for name, data in content.files.items():
        if is_chart(name):
            out.files[f"operator/{HELM_DIR}/{name}"] = data
            header = (
                f"# Generated by airgap: values for {name} that point the operator's image\n"
                "# at the disconnected registry (pinned by digest where the chart reads one).\n"
            )
            out.files[f"operator/{HELM_DIR}/{VALUES_FILE}"] = header.encode() + dump(
                content.values.get(name, {})
            )


def _templates(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    record = content.record
    for name, data in content.files.items():
        out.files[f"clusterctl/{record.name}/{record.version}/{name}"] = data


def _addons(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    record = content.record
    for data in content.files.values():  # one manifest per record: NAME.yaml
        out.files.update(addon_files(record.name, record.version, data.decode()))


def _charts(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    record = content.record
    out.files.update(
        chart_files(
            record.name, record.version, content.files, content.values, out.target, record.render
        )
    )


def _kubernetes(content: RewrittenContent, out: ContentOutputs, base: Path) -> None:
    """A Kubernetes version is its images: pushed with the others, no file to emit."""


_EMITTERS = {
    ContentKind.CERT_MANAGER: _cert_manager,
    ContentKind.OPERATOR: _operator,
    ContentKind.TEMPLATES: _templates,
    ContentKind.MANIFESTS: _addons,
    ContentKind.CHARTS: _charts,
    ContentKind.KUBERNETES: _kubernetes,
}


def _step(
    out: ContentOutputs, directory: str, file: str, data: bytes, title: str, note: str
) -> None:
    text = data.decode()
    components = parse_components(text, f"operator/{directory}/{file}")
    out.files[f"operator/{directory}/{file}"] = data
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [file],
    }
    header = _kustomization_header(directory, title)
    out.files[f"operator/{directory}/kustomization.yaml"] = header + dump(kustomization)
    deployments = [name for name, _containers in components.deployments]
    out.steps.append(
        Step(directory, title, crd_names(text), components.namespace, deployments, note)
    )


def _kustomization_header(directory: str, title: str) -> bytes:
    return (
        f"# Generated by airgap: {title}, one install step (operator/README.md says the\n"
        "# order and the waits). Apply it server-side (capi-out: import's --output-dir):\n"
        f"#   {APPLY} capi-out/operator/{directory}\n"
    ).encode()


_CRD_KIND = re.compile(r"^kind:\s*['\"]?CustomResourceDefinition['\"]?\s*$", re.MULTILINE)


def crd_names(text: str) -> list[str]:
    """The names of the CustomResourceDefinitions a manifest creates, in order (read
    document by document; only ``kind`` and ``metadata.name`` are looked at)."""
    names: list[str] = []
    if not _CRD_KIND.search(text):
        return names
    for document in iter_documents(text, "CRDs"):
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
            metadata = document.get("metadata")
            name = metadata.get("name") if isinstance(metadata, dict) else None
            if isinstance(name, str) and name:
                names.append(name)
    return names


# --- the README ----------------------------------------------------------------------------


def readme(steps: list[Step], files: Mapping[str, bytes]) -> bytes:
    """``operator/README.md``: the install order and the waits, from what was written."""
    lines = [
        "# Installing the management cluster",
        "",
        "Generated by airgap. Apply each step server-side, in this order, and wait where it",
        "says: each step's webhooks must answer before the next step's objects reach them.",
        "Paths are relative to the directory above `operator/` (`capi-out`: import's",
        "`--output-dir`).",
        "",
    ]
    number = 0
    for directory, step in (
        (CERT_MANAGER_STEP, _find(steps, CERT_MANAGER_STEP)),
        (OPERATOR_STEP, _find(steps, OPERATOR_STEP)),
    ):
        number += 1
        if step is None:
            what = "cert-manager" if directory == CERT_MANAGER_STEP else "the Cluster API operator"
            lines += [
                f"## {number}. {what[0].upper()}{what[1:]}",
                "",
                f"Not in this bundle: install {what} from your own copy before step 3",
                "(add `certManager:` / `operator:` to the bundle spec to carry it).",
                "",
            ]
            continue
        lines += [f"## {number}. {step.title} (`operator/{directory}/`)", "", "```sh"]
        lines.append(f"{APPLY} capi-out/operator/{directory}")
        if step.crds:
            lines.append(f"{WAIT_CRDS} " + " ".join(f"crd/{name}" for name in step.crds))
        if step.deployments:
            where = f"-n {step.namespace} " if step.namespace else ""
            names = " ".join(f"deployment/{name}" for name in step.deployments)
            lines.append(f"{WAIT_DEPLOYMENTS} {where}{names}")
        lines += ["```", "", step.note, ""]
        if directory == OPERATOR_STEP:
            lines += _helm_lines(files, step)
    for provider_step in PROVIDER_STEPS:
        if f"operator/{provider_step}/kustomization.yaml" not in files:
            continue
        number += 1
        title = _PROVIDER_STEPS[provider_step]
        lines += [f"## {number}. {title} (`operator/{provider_step}/`)", "", "```sh"]
        lines.append(f"{APPLY} capi-out/operator/{provider_step}")
        lines += [*_provider_waits(files, provider_step), "```", ""]
        lines += [_PROVIDER_NOTES[provider_step], ""]
    lines += [
        "Steps 3 to 5 can also be applied at once (`operator/kustomization.yaml` names",
        "them in order): the operator installs the other providers only once the",
        "CoreProvider is ready, so the last wait is the one that matters.",
        "",
        "```sh",
        f"{APPLY} capi-out/operator",
        "```",
        "",
    ]
    return "\n".join(lines).encode()


def _find(steps: list[Step], directory: str) -> Step | None:
    return next((step for step in steps if step.directory == directory), None)


def _helm_lines(files: Mapping[str, bytes], step: Step) -> list[str]:
    charts = sorted(
        name.rsplit("/", 1)[1]
        for name in files
        if name.startswith(f"operator/{HELM_DIR}/") and is_chart(name)
    )
    if not charts:
        return []
    namespace = step.namespace or "capi-operator-system"
    return [
        "Or install the operator with Helm instead of the kustomization (the values point",
        "its image at the disconnected registry):",
        "",
        "```sh",
        f"helm install capi-operator capi-out/operator/{HELM_DIR}/{charts[0]} \\",
        f"  --namespace {namespace} --create-namespace \\",
        f"  --values capi-out/operator/{HELM_DIR}/{VALUES_FILE} --wait",
        "```",
        "",
    ]


def _provider_waits(files: Mapping[str, bytes], step: str) -> list[str]:
    """A Ready wait for every provider CR of a step (none for ConfigMaps and Secrets:
    they exist once applied)."""
    waits: list[str] = []
    if step == CONFIG_STEP:
        return waits
    for name in sorted(files):
        if not name.startswith(f"operator/{step}/") or name.endswith("/kustomization.yaml"):
            continue
        for document in iter_documents(files[name].decode(), name):
            if not isinstance(document, dict):
                continue
            metadata = document.get("metadata") or {}
            kind, cr = str(document.get("kind", "")).lower(), metadata.get("name")
            waits.append(f"{WAIT_PROVIDERS} -n {metadata.get('namespace')} {kind}/{cr}")
    return waits
