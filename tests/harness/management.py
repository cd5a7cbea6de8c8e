"""cert-manager and Cluster API operator releases laid out like the real ones, plus
cluster templates, for the fake GitHub (deterministic, pure but for ``publish_*``).

- cert-manager (github.com/cert-manager/cert-manager releases): ``cert-manager.yaml`` is
  what its ``make/manifests.mk`` builds: a license comment, the ``cert-manager``
  Namespace, the six CRDs, then ``helm template`` output of the chart with
  ``startupapicheck.enabled=false`` (``# Source:`` comments, quoted images): service
  accounts, RBAC, Services, the cainjector, controller and webhook Deployments (the
  controller names the acmesolver image only in a flag), and the webhook
  configurations. Also ``cert-manager.crds.yaml``, as the real release has.
- The operator (github.com/kubernetes-sigs/cluster-api-operator releases):
  ``operator-components.yaml`` is a ``kustomize build config/default`` (keys sorted,
  ``capi-operator-`` prefix, namespace ``capi-operator-system``, seven provider CRDs
  with the cert-manager CA injection annotation, a webhook Service, the
  ``capi-operator-controller-manager`` Deployment, an Issuer and a Certificate), and the
  Helm chart ``cluster-api-operator-<version without v>.tgz`` that ``make release-chart``
  packages (Chart.yaml, values.yaml with ``image.manager``, the deployment template
  with the real image line, a helpers file, and the CRDs as a template).
- Templates: ``cluster-template*.yaml`` and ``clusterclass-*.yaml`` as provider releases
  carry them, one with a workload whose image has a default and one left to a variable.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from dataclasses import dataclass
from typing import Any

import yaml

from tests.harness.releases import ReleaseServer

CERT_MANAGER_VERSION = "v1.16.1"
OPERATOR_VERSION = "v0.24.0"
CERT_MANAGER_CRDS = (
    ("acme.cert-manager.io", "Challenge", "challenges"),
    ("acme.cert-manager.io", "Order", "orders"),
    ("cert-manager.io", "CertificateRequest", "certificaterequests"),
    ("cert-manager.io", "Certificate", "certificates"),
    ("cert-manager.io", "ClusterIssuer", "clusterissuers"),
    ("cert-manager.io", "Issuer", "issuers"),
)
OPERATOR_KINDS = (
    "AddonProvider",
    "BootstrapProvider",
    "ControlPlaneProvider",
    "CoreProvider",
    "InfrastructureProvider",
    "IPAMProvider",
    "RuntimeExtensionProvider",
)


@dataclass(frozen=True)
class CertManagerImages:
    controller: str
    cainjector: str
    webhook: str
    acmesolver: str  # in a flag only: never a container

    @property
    def containers(self) -> list[str]:
        """In the order the manifest runs them (cainjector's Deployment comes first)."""
        return [self.cainjector, self.controller, self.webhook]


# --- cert-manager -------------------------------------------------------------------------


def _crd_text(group: str, kind: str, plural: str, version: str) -> str:
    scope = "Cluster" if kind.startswith("Cluster") else "Namespaced"
    return f"""# Source: cert-manager/templates/crd-{group}_{plural}.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: "{plural}.{group}"
  annotations:
    helm.sh/resource-policy: keep
  labels:
    app: "cert-manager"
    app.kubernetes.io/name: "cert-manager"
    app.kubernetes.io/instance: "cert-manager"
    app.kubernetes.io/component: "crds"
    app.kubernetes.io/version: "{version}"
spec:
  group: {group}
  names:
    kind: {kind}
    listKind: {kind}List
    plural: {plural}
    singular: {kind.lower()}
    categories:
      - cert-manager
  scope: {scope}
  versions:
    - name: v1
      subresources:
        status: {{}}
      schema:
        openAPIV3Schema:
          description: |-
            A {kind} resource of cert-manager.
          type: object
          properties:
            apiVersion:
              description: |-
                APIVersion defines the versioned schema of this representation of an object.
              type: string
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
      served: true
      storage: true
"""


def _cm_labels(name: str, component: str, version: str, indent: int) -> str:
    pad = " " * indent
    return "\n".join(
        f"{pad}{line}"
        for line in (
            f"app: {name}",
            f"app.kubernetes.io/name: {name}",
            "app.kubernetes.io/instance: cert-manager",
            f'app.kubernetes.io/component: "{component}"',
            f'app.kubernetes.io/version: "{version}"',
        )
    )


def _cm_deployment(
    name: str, component: str, container: str, image: str, args: list[str], version: str
) -> str:
    arg_lines = "\n".join(f"          - {arg}" for arg in args)
    return f"""# Source: cert-manager/templates/{component}-deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: cert-manager
  labels:
{_cm_labels(name, component, version, 4)}
spec:
  replicas: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {name}
      app.kubernetes.io/instance: cert-manager
      app.kubernetes.io/component: "{component}"
  template:
    metadata:
      labels:
{_cm_labels(name, component, version, 8)}
    spec:
      serviceAccountName: {name}
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {container}
          image: "{image}"
          imagePullPolicy: IfNotPresent
          args:
{arg_lines}
          env:
          - name: POD_NAMESPACE
            valueFrom:
              fieldRef:
                fieldPath: metadata.namespace
          securityContext:
            allowPrivilegeEscalation: false
            capabilities:
              drop:
              - ALL
            readOnlyRootFilesystem: true
      nodeSelector:
        kubernetes.io/os: linux
"""


def _cm_service_account(name: str, component: str, version: str) -> str:
    return f"""# Source: cert-manager/templates/{component}-serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
automountServiceAccountToken: true
metadata:
  name: {name}
  namespace: cert-manager
  labels:
{_cm_labels(name, component, version, 4)}
"""


def cert_manager_yaml(images: CertManagerImages, version: str = CERT_MANAGER_VERSION) -> str:
    """``cert-manager.yaml`` as the release publishes it."""
    docs = [
        "# Copyright 2022 The cert-manager Authors.\n#\n"
        '# Licensed under the Apache License, Version 2.0 (the "License");\n'
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n",
    ]
    docs += [_crd_text(group, kind, plural, version) for group, kind, plural in CERT_MANAGER_CRDS]
    docs += [
        _cm_service_account("cert-manager-cainjector", "cainjector", version),
        _cm_service_account("cert-manager", "controller", version),
        _cm_service_account("cert-manager-webhook", "webhook", version),
        f"""# Source: cert-manager/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cert-manager-controller-certificates
  labels:
{_cm_labels("cert-manager", "controller", version, 4)}
rules:
  - apiGroups: ["cert-manager.io"]
    resources: ["certificates", "certificates/status", "certificaterequests"]
    verbs: ["update", "patch"]
""",
        f"""# Source: cert-manager/templates/webhook-service.yaml
apiVersion: v1
kind: Service
metadata:
  name: cert-manager-webhook
  namespace: cert-manager
  labels:
{_cm_labels("webhook", "webhook", version, 4)}
spec:
  type: ClusterIP
  ports:
  - name: https
    port: 443
    protocol: TCP
    targetPort: "https"
  selector:
    app.kubernetes.io/name: webhook
    app.kubernetes.io/instance: cert-manager
    app.kubernetes.io/component: "webhook"
""",
        _cm_deployment(
            "cert-manager-cainjector",
            "cainjector",
            "cert-manager-cainjector",
            images.cainjector,
            ["--v=2", "--leader-election-namespace=kube-system"],
            version,
        ),
        _cm_deployment(
            "cert-manager",
            "controller",
            "cert-manager-controller",
            images.controller,
            [
                "--v=2",
                "--cluster-resource-namespace=$(POD_NAMESPACE)",
                "--leader-election-namespace=kube-system",
                f"--acme-http01-solver-image={images.acmesolver}",
                "--max-concurrent-challenges=60",
            ],
            version,
        ),
        _cm_deployment(
            "cert-manager-webhook",
            "webhook",
            "cert-manager-webhook",
            images.webhook,
            [
                "--v=2",
                "--secure-port=10250",
                "--dynamic-serving-ca-secret-namespace=$(POD_NAMESPACE)",
                "--dynamic-serving-ca-secret-name=cert-manager-webhook-ca",
            ],
            version,
        ),
        f"""# Source: cert-manager/templates/webhook-mutating-webhook.yaml
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: cert-manager-webhook
  labels:
{_cm_labels("webhook", "webhook", version, 4)}
  annotations:
    cert-manager.io/inject-ca-from-secret: "cert-manager/cert-manager-webhook-ca"
webhooks:
  - name: webhook.cert-manager.io
    rules:
      - apiGroups:
          - "cert-manager.io"
        apiVersions:
          - "v1"
        operations:
          - CREATE
        resources:
          - "certificaterequests"
    admissionReviewVersions: ["v1"]
    timeoutSeconds: 30
    failurePolicy: Fail
    sideEffects: None
    clientConfig:
      service:
        name: cert-manager-webhook
        namespace: cert-manager
        path: /mutate
""",
    ]
    return "---\n".join(docs)


def cert_manager_crds_yaml(version: str = CERT_MANAGER_VERSION) -> str:
    return "---\n".join(
        _crd_text(group, kind, plural, version) for group, kind, plural in CERT_MANAGER_CRDS
    )


# --- the Cluster API operator --------------------------------------------------------------


class _KustomizeDumper(yaml.SafeDumper):
    """kustomize's output: keys sorted, block style, plain scalars where possible."""


def _dump_sorted(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(
        documents, Dumper=_KustomizeDumper, sort_keys=True, default_flow_style=False
    )


_OPERATOR_LABELS = {"clusterctl.cluster.x-k8s.io/core": "capi-operator"}


def _operator_crd(kind: str) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "annotations": {
                "cert-manager.io/inject-ca-from": "capi-operator-system/capi-operator-serving-cert",
                "controller-gen.kubebuilder.io/version": "v0.16.5",
            },
            "labels": dict(_OPERATOR_LABELS),
            "name": f"{plural}.operator.cluster.x-k8s.io",
        },
        "spec": {
            "group": "operator.cluster.x-k8s.io",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha2",
                    "schema": {
                        "openAPIV3Schema": {
                            "description": f"{kind} is the Schema for the {plural} API",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                            "type": "object",
                        }
                    },
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def _operator_deployment(image: str) -> dict[str, Any]:
    labels = {**_OPERATOR_LABELS, "control-plane": "controller-manager"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "labels": labels,
            "name": "capi-operator-controller-manager",
            "namespace": "capi-operator-system",
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "args": [
                                "--leader-elect",
                                "--diagnostics-address=:8443",
                                "--insecure-diagnostics=false",
                            ],
                            "command": ["/manager"],
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "name": "manager",
                            "ports": [
                                {"containerPort": 9443, "name": "webhook-server", "protocol": "TCP"}
                            ],
                            "volumeMounts": [
                                {
                                    "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                                    "name": "cert",
                                    "readOnly": True,
                                }
                            ],
                        }
                    ],
                    "serviceAccountName": "capi-operator-controller-manager",
                    "terminationGracePeriodSeconds": 10,
                    "volumes": [
                        {
                            "name": "cert",
                            "secret": {"secretName": "capi-operator-webhook-service-cert"},
                        }
                    ],
                },
            },
        },
    }


def _operator_support(namespace: str = "capi-operator-system") -> list[dict[str, Any]]:
    meta = {"labels": dict(_OPERATOR_LABELS), "namespace": namespace}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**meta, "name": "capi-operator-controller-manager"},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta, "name": "capi-operator-webhook-service"},
            "spec": {
                "ports": [{"port": 443, "targetPort": 9443}],
                "selector": dict(_OPERATOR_LABELS),
            },
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {**meta, "name": "capi-operator-serving-cert"},
            "spec": {
                "dnsNames": [
                    f"capi-operator-webhook-service.{namespace}.svc",
                    f"capi-operator-webhook-service.{namespace}.svc.cluster.local",
                ],
                "issuerRef": {"kind": "Issuer", "name": "capi-operator-selfsigned-issuer"},
                "secretName": "capi-operator-webhook-service-cert",
            },
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {**meta, "name": "capi-operator-selfsigned-issuer"},
            "spec": {"selfSigned": {}},
        },
    ]


def operator_components_yaml(image: str) -> str:
    """``operator-components.yaml`` as ``kustomize build config/default`` writes it."""
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "labels": {**_OPERATOR_LABELS, "control-plane": "controller-manager"},
                "name": "capi-operator-system",
            },
        },
        *(_operator_crd(kind) for kind in OPERATOR_KINDS),
        *_operator_support(),
        _operator_deployment(image),
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {
                "annotations": {
                    "cert-manager.io/inject-ca-from": "capi-operator-system/capi-operator-serving-cert"
                },
                "labels": dict(_OPERATOR_LABELS),
                "name": "capi-operator-validating-webhook-configuration",
            },
            "webhooks": [
                {
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {
                        "service": {
                            "name": "capi-operator-webhook-service",
                            "namespace": "capi-operator-system",
                            "path": "/validate-operator-cluster-x-k8s-io-v1alpha2-coreprovider",
                        }
                    },
                    "failurePolicy": "Fail",
                    "name": "vcoreprovider.kb.io",
                    "sideEffects": "None",
                }
            ],
        },
    ]
    return _dump_sorted(documents)


_DEPLOYMENT_TEMPLATE = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ template "capi-operator.fullname" . }}
  namespace: '{{ .Release.Namespace }}'
spec:
  replicas: {{ .Values.replicaCount }}
  template:
    spec:
      serviceAccountName: capi-operator-manager
      containers:
      - args:
        - --v={{ .Values.logLevel }}
        command:
        - /manager
        {{- with .Values.image.manager }}
        image: "{{- if .registry -}}{{ .registry }}/{{- end -}}{{ .repository }}{{- if (.digest) -}} @{{ .digest }}{{- else -}}:{{ default $.Chart.AppVersion .tag }} {{- end -}}"
        {{- end }}
        imagePullPolicy: {{ .Values.image.manager.pullPolicy }}
        name: manager
"""

_HELPERS = """{{- define "capi-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "capi-operator.fullname" -}}
{{- printf "%s-%s" .Release.Name "capi-operator" | trunc 63 | trimSuffix "-" }}
{{- end }}
"""


def operator_values(repository: str, tag: str) -> str:
    return f"""---
# ---
# Cluster API provider options
core: {{}}
bootstrap: {{}}
controlPlane: {{}}
infrastructure: {{}}
addon: {{}}
ipam: {{}}
fetchConfig: {{}}
configSecret: {{}}
# ---
# CAPI operator deployment options
logLevel: 2
replicaCount: 1
leaderElection:
  enabled: true
image:
  manager:
    repository: {repository}
    tag: {tag}
    pullPolicy: IfNotPresent
env:
  manager: []
diagnosticsAddress: ":8443"
healthAddr: ":9440"
imagePullSecrets: {{}}
resources:
  manager:
    limits:
      cpu: 100m
      memory: 300Mi
enableHelmHook: true
"""


def operator_chart(image: str, version: str = OPERATOR_VERSION) -> bytes:
    """The chart package ``make release-chart`` builds: ``helm package`` with
    ``--version``/``--app-version`` set to the tag without its ``v``, gzip, members
    under ``cluster-api-operator/``. ``image`` is ``REPOSITORY:TAG``."""
    repository, _, tag = image.rpartition(":")
    chart_version = version.removeprefix("v")
    chart_yaml = (
        "apiVersion: v2\nname: cluster-api-operator\ndescription: Cluster API Operator\n"
        f"type: application\nversion: {chart_version}\nappVersion: {chart_version}\n"
    )
    crds = _dump_sorted([_operator_crd(kind) for kind in OPERATOR_KINDS])
    files = {
        "Chart.yaml": chart_yaml,
        "values.yaml": operator_values(repository, tag),
        ".helmignore": ".DS_Store\n.git/\n",
        "templates/_helpers.tpl": _HELPERS,
        "templates/deployment.yaml": _DEPLOYMENT_TEMPLATE,
        "templates/operator-components.yaml": crds,
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"cluster-api-operator/{name}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


# --- cluster templates ---------------------------------------------------------------------


def cluster_templates(addon_image: str, job_image: str) -> dict[str, bytes]:
    """Flavors as a provider release carries them: the default template, a flavor that
    installs an addon through a ClusterResourceSet (its DaemonSet inside a ConfigMap)
    and runs a Job whose image has a default, one whose image only a variable names,
    and a ClusterClass."""
    default = """apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: ${CLUSTER_NAME}
  namespace: ${NAMESPACE}
spec:
  clusterNetwork:
    pods:
      cidrBlocks:
      - ${POD_CIDR:=192.168.0.0/16}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: ${CLUSTER_NAME}-control-plane
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: ${CLUSTER_NAME}-control-plane
spec:
  replicas: ${CONTROL_PLANE_MACHINE_COUNT}
  version: ${KUBERNETES_VERSION}
  kubeadmConfigSpec:
    clusterConfiguration:
      imageRepository: registry.k8s.io
"""
    addon = f"""apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata:
  name: ${{CLUSTER_NAME}}-cni
spec:
  clusterSelector:
    matchLabels:
      cni: ${{CLUSTER_NAME}}-cni
  resources:
  - kind: ConfigMap
    name: ${{CLUSTER_NAME}}-cni
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ${{CLUSTER_NAME}}-cni
data:
  cni.yaml: |
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: cni
      namespace: kube-system
    spec:
      template:
        spec:
          containers:
          - name: cni
            image: {addon_image}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: ${{CLUSTER_NAME}}-prepare
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: prepare
        image: ${{PREPARE_IMAGE:={job_image}}}
      - name: custom
        image: ${{CUSTOM_IMAGE}}
"""
    clusterclass = """apiVersion: cluster.x-k8s.io/v1beta1
kind: ClusterClass
metadata:
  name: quick-start
spec:
  controlPlane:
    ref:
      apiVersion: controlplane.cluster.x-k8s.io/v1beta1
      kind: KubeadmControlPlaneTemplate
      name: quick-start-control-plane
"""
    return {
        "cluster-template.yaml": default.encode(),
        "cluster-template-addon.yaml": addon.encode(),
        "clusterclass-quick-start.yaml": clusterclass.encode(),
    }


# --- publishing ------------------------------------------------------------------------------


def publish_cert_manager(
    server: ReleaseServer,
    images: CertManagerImages,
    version: str = CERT_MANAGER_VERSION,
    owner: str = "cert-manager",
    repo: str = "cert-manager",
) -> str:
    """Publish a cert-manager release (and an older and a pre-release); its URL."""
    files = {
        "cert-manager.yaml": cert_manager_yaml(images, version).encode(),
        "cert-manager.crds.yaml": cert_manager_crds_yaml(version).encode(),
        "cmctl-linux-amd64.tar.gz": b"not a real binary",
    }
    for tag, prerelease in (("v1.15.3", False), (version, False), ("v1.17.0-alpha.0", True)):
        server.add_release(owner, repo, tag, files, prerelease=prerelease)
    return server.repo_url(owner, repo)


def publish_operator(
    server: ReleaseServer,
    image: str,
    version: str = OPERATOR_VERSION,
    owner: str = "kubernetes-sigs",
    repo: str = "cluster-api-operator",
    chart: bool = True,
) -> str:
    """Publish an operator release laid out as its release workflow does; its URL."""
    files = {"operator-components.yaml": operator_components_yaml(image).encode()}
    if chart:
        files[f"cluster-api-operator-{version.removeprefix('v')}.tgz"] = operator_chart(
            image, version
        )
    files["cluster-api-operator_Linux_x86_64.tar.gz"] = b"not a real plugin"
    server.add_release(owner, repo, version, files)
    return server.repo_url(owner, repo)
