"""Provider releases shaped like the real Cluster API ones, deterministic (pure).

Real ``core-components.yaml`` is ~1.2 MB, and almost all of it is CRDs: several API
versions each, every one with a large OpenAPI v3 schema whose multi-line descriptions are
``|-`` blocks (controller-gen's style, kept by kustomize). Around them: a Namespace,
RBAC, a webhook Service, cert-manager's Issuer and Certificate, mutating and validating
webhook configurations (one webhook per kind), and the manager Deployment whose args use
clusterctl variables with defaults. What airgap spends its time on (parsing, image
discovery, variables, the line-based rewrite, ConfigMaps) scales with exactly this, so
the benchmark and the tests use these files instead of toy manifests.

The same seed and size always give the same bytes (no clock, no hash randomisation).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import yaml

from airgap.providers.types import ProviderType
from tests.harness.releases import make_metadata

KB = 1000

_TEXT = (
    "the object field value controller cluster machine node reference status condition "
    "spec template infrastructure provider bootstrap control plane version replicas "
    "selector label annotation namespace name must should may be is are defined when "
    "which that this set of to for in on by with from a an and or not if used specifies "
    "indicates represents desired observed state current last time update strategy "
    "rollout deletion policy timeout interval duration seconds minimum maximum number "
    "list map key secret data format configuration kubelet kubeadm etcd api server "
    "endpoint host port address certificate authority token discovery join init phase "
    "failure reason message severity type true false unknown ready available paused "
    "health check remediation drain volume detach pre post hook lifecycle taint toleration"
)
_WORDS = _TEXT.split()

_FEATURE_GATES = (
    "MachinePool=${EXP_MACHINE_POOL:=true},"
    "ClusterResourceSet=${EXP_CLUSTER_RESOURCE_SET:=true},"
    "ClusterTopology=${CLUSTER_TOPOLOGY:=false},"
    "RuntimeSDK=${EXP_RUNTIME_SDK:=false},"
    "MachineSetPreflightChecks=${EXP_MACHINE_SET_PREFLIGHT_CHECKS:=true}"
)


@dataclass(frozen=True)
class RealisticProvider:
    """One provider of the realistic set: what to publish and what its images are."""

    name: str
    type: ProviderType
    namespace: str
    components_file: str
    target_bytes: int
    crd_kinds: tuple[str, ...]
    repository: str = "kubernetes-sigs/cluster-api"  # OWNER/REPO of its GitHub releases
    version: str = "v1.10.0"

    @property
    def spec_entry(self) -> dict[str, str]:
        """The entry of an airgap spec that collects this provider."""
        return {"name": self.name, "type": self.type.kind, "version": self.version}


# Sizes of the v1.9 releases: core ~1.2 MB, kubeadm bootstrap ~0.6 MB, kubeadm
# control-plane ~0.7 MB, docker ~0.16 MB; plus an out-of-tree infrastructure provider.
REALISTIC_PROVIDERS = (
    RealisticProvider(
        "cluster-api",
        ProviderType.CORE,
        "capi-system",
        "core-components.yaml",
        1_200 * KB,
        (
            "Cluster",
            "ClusterClass",
            "Machine",
            "MachineSet",
            "MachineDeployment",
            "MachineHealthCheck",
            "MachinePool",
            "ClusterResourceSet",
            "ClusterResourceSetBinding",
            "ExtensionConfig",
            "IPAddress",
            "IPAddressClaim",
            "MachineDrainRule",
        ),
    ),
    RealisticProvider(
        "kubeadm",
        ProviderType.BOOTSTRAP,
        "capi-kubeadm-bootstrap-system",
        "bootstrap-components.yaml",
        600 * KB,
        ("KubeadmConfig", "KubeadmConfigTemplate"),
    ),
    RealisticProvider(
        "kubeadm",
        ProviderType.CONTROL_PLANE,
        "capi-kubeadm-control-plane-system",
        "control-plane-components.yaml",
        700 * KB,
        ("KubeadmControlPlane", "KubeadmControlPlaneTemplate"),
    ),
    RealisticProvider(
        "docker",
        ProviderType.INFRASTRUCTURE,
        "capd-system",
        "infrastructure-components-development.yaml",
        160 * KB,
        (
            "DockerCluster",
            "DockerClusterTemplate",
            "DockerMachine",
            "DockerMachineTemplate",
            "DockerMachinePool",
            "DockerMachinePoolTemplate",
        ),
    ),
    RealisticProvider(
        "openstack",
        ProviderType.INFRASTRUCTURE,
        "capo-system",
        "infrastructure-components.yaml",
        650 * KB,
        (
            "OpenStackCluster",
            "OpenStackClusterTemplate",
            "OpenStackMachine",
            "OpenStackMachineTemplate",
            "OpenStackFloatingIPPool",
            "OpenStackServer",
        ),
        "kubernetes-sigs/cluster-api-provider-openstack",
        "v0.12.1",
    ),
)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """controller-gen/kustomize style: multi-line strings as ``|-`` blocks, key order kept."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(document: Any) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1 << 16)


class _Writer:
    """Draws every random choice of one provider from its own seeded generator."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def sentence(self, low: int = 4, high: int = 11) -> str:
        words = [self.rng.choice(_WORDS) for _ in range(self.rng.randint(low, high))]
        return " ".join(words).capitalize() + "."

    def description(self) -> str:
        """One to five lines, like controller-gen's wrapped Go doc comments."""
        lines = [self.sentence() for _ in range(self.rng.randint(1, 5))]
        if self.rng.random() < 0.15:
            lines.append("More info: https://kubernetes.io/docs/concepts/overview/")
        return "\n".join(lines)

    def field_name(self) -> str:
        first, second = self.rng.choice(_WORDS), self.rng.choice(_WORDS)
        return first + second.capitalize()

    def schema(self, depth: int) -> dict[str, Any]:
        """A property: leaf types mostly, objects and arrays of objects while depth lasts."""
        roll = self.rng.random()
        if depth > 0 and roll < 0.22:
            return self.object_schema(depth - 1)
        if depth > 0 and roll < 0.32:
            items = self.object_schema(depth - 1)
            out: dict[str, Any] = {"description": self.description(), "items": items}
            out["type"] = "array"
            if self.rng.random() < 0.5:
                out["x-kubernetes-list-map-keys"] = ["name"]
                out["x-kubernetes-list-type"] = "map"
            return out
        leaf: dict[str, Any] = {"description": self.description()}
        kind = self.rng.choice(("string", "string", "string", "integer", "boolean", "quantity"))
        if kind == "quantity":
            leaf["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            leaf["pattern"] = (
                r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
                r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
            )
            leaf["x-kubernetes-int-or-string"] = True
            return leaf
        if kind == "integer":
            leaf["format"] = "int32"
            leaf["minimum"] = 0
        if kind == "string" and self.rng.random() < 0.3:
            leaf["maxLength"] = self.rng.choice((63, 253, 256, 512))
            leaf["minLength"] = 1
        if kind == "string" and self.rng.random() < 0.1:
            leaf["enum"] = sorted({self.rng.choice(_WORDS).capitalize() for _ in range(4)})
        leaf["type"] = kind
        return leaf

    def object_schema(self, depth: int) -> dict[str, Any]:
        names = sorted({self.field_name() for _ in range(self.rng.randint(2, 9))})
        properties = {name: self.schema(depth) for name in names}
        out: dict[str, Any] = {"description": self.description(), "properties": properties}
        if len(names) > 2 and self.rng.random() < 0.4:
            out["required"] = names[: self.rng.randint(1, 2)]
        out["type"] = "object"
        return out


def _labels(provider: RealisticProvider) -> dict[str, str]:
    return {"cluster.x-k8s.io/provider": provider.type.label(provider.name)}


def _crd(writer: _Writer, provider: RealisticProvider, kind: str, depth: int) -> dict[str, Any]:
    group = {
        ProviderType.CORE: "cluster.x-k8s.io",
        ProviderType.BOOTSTRAP: "bootstrap.cluster.x-k8s.io",
        ProviderType.CONTROL_PLANE: "controlplane.cluster.x-k8s.io",
    }.get(provider.type, "infrastructure.cluster.x-k8s.io")
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    versions = []
    for index, version in enumerate(("v1alpha4", "v1beta1")):
        root = {
            "description": writer.description(),
            "properties": {
                "apiVersion": {"description": writer.description(), "type": "string"},
                "kind": {"description": writer.description(), "type": "string"},
                "metadata": {"type": "object"},
                "spec": writer.object_schema(depth),
                "status": writer.object_schema(max(0, depth - 1)),
            },
            "type": "object",
        }
        versions.append(
            {
                "additionalPrinterColumns": [
                    {
                        "description": "Time duration since creation of " + kind,
                        "jsonPath": ".metadata.creationTimestamp",
                        "name": "Age",
                        "type": "date",
                    }
                ],
                "name": version,
                "schema": {"openAPIV3Schema": root},
                "served": True,
                "storage": index == 1,
                "subresources": {"status": {}},
            }
        )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "annotations": {
                "cert-manager.io/inject-ca-from": f"{provider.namespace}/serving-cert",
                "controller-gen.kubebuilder.io/version": "v0.16.5",
            },
            "labels": _labels(provider),
            "name": f"{plural}.{group}",
        },
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "caBundle": "Cg==",
                        "service": {
                            "name": "webhook-service",
                            "namespace": provider.namespace,
                            "path": "/convert",
                        },
                    },
                    "conversionReviewVersions": ["v1", "v1beta1"],
                },
            },
            "group": group,
            "names": {
                "categories": ["cluster-api"],
                "kind": kind,
                "listKind": kind + "List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": versions,
        },
    }


def _rbac(provider: RealisticProvider, groups: list[str]) -> list[dict[str, Any]]:
    ns, labels = provider.namespace, _labels(provider)
    prefix = provider.namespace.removesuffix("-system")
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    rules = [{"apiGroups": [g], "resources": ["*"], "verbs": verbs} for g in groups]
    rules.append({"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": verbs})
    subject = [{"kind": "ServiceAccount", "name": "manager", "namespace": ns}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"labels": labels,
            "name": "manager", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {
            "labels": labels, "name": f"{prefix}-leader-election-role", "namespace": ns},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": verbs}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {
            "labels": labels, "name": f"{prefix}-manager-role"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {
            "labels": labels, "name": f"{prefix}-leader-election-rolebinding",
            "namespace": ns}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role", "name": f"{prefix}-leader-election-role"}, "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"labels": labels, "name": f"{prefix}-manager-rolebinding"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
            "name": f"{prefix}-manager-role"}, "subjects": subject},
    ]  # fmt: skip


def _deployment(provider: RealisticProvider, images: list[str]) -> dict[str, Any]:
    ns, labels = provider.namespace, _labels(provider)
    variable = provider.type.label(provider.name).upper().replace("-", "_")
    container: dict[str, Any] = {
        "args": [
            "--leader-elect",
            f"--diagnostics-address=${{{variable}_DIAGNOSTICS_ADDRESS:=:8443}}",
            f"--insecure-diagnostics=${{{variable}_INSECURE_DIAGNOSTICS:=false}}",
            f"--feature-gates={_FEATURE_GATES}",
        ],
        "command": ["/manager"],
        "env": [
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "image": images[0],
        "imagePullPolicy": "IfNotPresent",
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "healthz"}},
        "name": "manager",
        "ports": [
            {"containerPort": 9443, "name": "webhook-server", "protocol": "TCP"},
            {"containerPort": 9440, "name": "healthz", "protocol": "TCP"},
            {"containerPort": 8443, "name": "metrics", "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "healthz"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "runAsGroup": 65532,
            "runAsUser": 65532,
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"mountPath": "/tmp/k8s-webhook-server/serving-certs", "name": "cert",
                          "readOnly": True}],
    }  # fmt: skip
    containers = [container] + [
        {"args": ["--secure-listen-address=0.0.0.0:8443"], "image": image, "name": f"sidecar-{i}"}
        for i, image in enumerate(images[1:], start=1)
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"labels": {**labels, "control-plane": "controller-manager"},
                     "name": f"{ns.removesuffix('-system')}-controller-manager", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {**labels, "control-plane": "controller-manager"}},
            "template": {
                "metadata": {"labels": {**labels, "control-plane": "controller-manager"}},
                "spec": {
                    "containers": containers,
                    "serviceAccountName": "manager",
                    "terminationGracePeriodSeconds": 10,
                    "tolerations": [
                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/master"},
                        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane"},
                    ],
                    "volumes": [{"name": "cert", "secret": {"secretName": f"{ns}-webhook-service-cert"}}],
                },
            },
        },
    }  # fmt: skip


def _webhooks(provider: RealisticProvider, crds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ns, labels = provider.namespace, _labels(provider)
    prefix = ns.removesuffix("-system")
    annotations = {"cert-manager.io/inject-ca-from": f"{ns}/serving-cert"}
    hooks: dict[str, list[dict[str, Any]]] = {"mutate": [], "validate": []}
    for crd in crds:
        names, group = crd["spec"]["names"], crd["spec"]["group"]
        for verb, hook_list in hooks.items():
            hook_list.append(
                {
                    "admissionReviewVersions": ["v1", "v1beta1"],
                    "clientConfig": {
                        "service": {
                            "name": "webhook-service",
                            "namespace": ns,
                            "path": f"/{verb}-{group.replace('.', '-')}-v1beta1-{names['singular']}",
                        }
                    },
                    "failurePolicy": "Fail",
                    "matchPolicy": "Equivalent",
                    "name": f"{verb[0]}.{names['singular']}.{group}",
                    "rules": [
                        {
                            "apiGroups": [group],
                            "apiVersions": ["v1beta1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": [names["plural"]],
                        }
                    ],
                    "sideEffects": "None",
                }
            )
    meta = {"annotations": annotations, "labels": labels}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {**meta, "name": f"{prefix}-mutating-webhook-configuration"},
            "webhooks": hooks["mutate"],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {**meta, "name": f"{prefix}-validating-webhook-configuration"},
            "webhooks": hooks["validate"],
        },
    ]


def _cert_manager(provider: RealisticProvider) -> list[dict[str, Any]]:
    ns, labels = provider.namespace, _labels(provider)
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"labels": labels, "name": "serving-cert", "namespace": ns},
            "spec": {
                "dnsNames": [f"webhook-service.{ns}.svc", f"webhook-service.{ns}.svc.cluster.local"],
                "issuerRef": {"kind": "Issuer", "name": "selfsigned-issuer"},
                "secretName": f"{ns}-webhook-service-cert",
                "subject": {"organizations": ["k8s-sig-cluster-lifecycle"]},
            },
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"labels": labels, "name": "selfsigned-issuer", "namespace": ns},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"labels": labels, "name": "webhook-service", "namespace": ns},
            "spec": {"ports": [{"port": 443, "targetPort": "webhook-server"}],
                     "selector": {**labels, "control-plane": "controller-manager"}},
        },
    ]  # fmt: skip


def _fitting_crd(
    writer: _Writer, provider: RealisticProvider, kind: str, budget: float
) -> tuple[dict[str, Any], str]:
    """A CRD about ``budget`` characters long: shallower schemas until it fits."""
    for depth in (4, 3, 2, 1, 0):
        crd = _crd(writer, provider, kind, depth)
        text = _dump(crd)
        if len(text) <= budget:
            break
    return crd, text


def realistic_components(provider: RealisticProvider, images: list[str]) -> str:
    """Components of about ``provider.target_bytes``: CRDs (cycling through the kinds,
    numbered once they repeat) are added until the size is reached."""
    if not images:
        raise ValueError("realistic_components needs at least the manager image")
    writer = _Writer(f"airgap-realistic:{provider.type.kind}:{provider.name}")
    head = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "labels": {**_labels(provider), "control-plane": "controller-manager"},
        "name": provider.namespace}}]  # fmt: skip
    tail_docs = [*_cert_manager(provider), _deployment(provider, images)]
    fixed = sum(len(_dump(doc)) for doc in head + tail_docs) + 6_000
    crds: list[dict[str, Any]] = []
    crd_texts: list[str] = []
    size = fixed
    while size < provider.target_bytes or not crds:
        kind = provider.crd_kinds[len(crds) % len(provider.crd_kinds)]
        if len(crds) >= len(provider.crd_kinds):
            kind += str(len(crds) // len(provider.crd_kinds) + 1)
        per_kind = (provider.target_bytes - fixed) / len(provider.crd_kinds)
        budget = min(per_kind, max(provider.target_bytes - size, per_kind / 8))
        crd, text = _fitting_crd(writer, provider, kind, budget)
        if crds and size + len(text) > provider.target_bytes * 1.05:
            break
        crds.append(crd)
        crd_texts.append(text)
        size += len(text) + 4
    groups = sorted({crd["spec"]["group"] for crd in crds})
    rest = [*_rbac(provider, groups), *tail_docs, *_webhooks(provider, crds)]
    texts = [_dump(head[0]), *crd_texts, *(_dump(doc) for doc in rest)]
    header = f"# {provider.components_file}: generated by tests/harness/realistic.py\n"
    return header + "---\n".join(texts)


def realistic_metadata(provider: RealisticProvider) -> str:
    """A metadata.yaml with every release series up to the provider's version, the old
    ones on older contracts (as cluster-api's own lists 0.3 v1alpha3 onwards)."""
    major, minor = (int(part) for part in provider.version.lstrip("v").split(".")[:2])
    series = [(0, m, "v1alpha3" if m <= 3 else "v1alpha4") for m in range(3, 5)]
    series += [(major, m, "v1beta1") for m in range(5 if major == 0 else 0, minor + 1)]
    return make_metadata(series)


def realistic_releases(images: list[str]) -> dict[tuple[str, str], dict[str, bytes]]:
    """Every file of every realistic provider, by ``(OWNER/REPO, tag)``: the four
    cluster-api providers share one release, as upstream. Provider ``i`` runs
    ``images[i % len(images)]``; the core provider also runs the next one as a sidecar."""
    releases: dict[tuple[str, str], dict[str, bytes]] = {}
    for index, provider in enumerate(REALISTIC_PROVIDERS):
        used = [images[index % len(images)]]
        if provider.type is ProviderType.CORE and len(images) > 1:
            used.append(images[len(REALISTIC_PROVIDERS) % len(images)])
        files = releases.setdefault((provider.repository, provider.version), {})
        files["metadata.yaml"] = realistic_metadata(provider).encode()
        files[provider.components_file] = realistic_components(provider, used).encode()
    return releases
