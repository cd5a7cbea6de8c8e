"""Image and variable discovery in components YAML, beyond what clusterctl scans."""

from __future__ import annotations

import pytest

from airgap.core.errors import InputError
from airgap.providers.components import Variable, find_images, find_variables
from airgap.providers.types import ProviderType
from tests.harness.releases import make_components

pytestmark = pytest.mark.unit

SRC = "infrastructure-components.yaml"

ALL_KINDS = """\
# every workload kind that runs containers
apiVersion: v1
kind: Namespace
metadata:
  name: capx-system
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: manager, namespace: capx-system}
spec:
  template:
    spec:
      initContainers:
        - name: wait
          image: busybox:1.36
      containers:
        - name: manager
          image: registry.k8s.io/capx/manager:v1.0.0
        - name: sidecar
          image: quay.io/brancz/kube-rbac-proxy:v0.18.0
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  template:
    spec:
      containers:
        - {name: agent, image: "ghcr.io/acme/agent:v2"}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: store}
spec:
  template:
    spec:
      containers:
        - {name: store, image: "ghcr.io/acme/store:v3"}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  template:
    spec:
      containers:
        - {name: rs, image: "ghcr.io/acme/rs:v4"}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec:
      containers:
        - {name: migrate, image: "ghcr.io/acme/migrate:v5"}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup}
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers:
            - {name: cleanup, image: "ghcr.io/acme/cleanup:v6"}
---
apiVersion: v1
kind: Pod
metadata: {name: debug}
spec:
  containers:
    - {name: main, image: "ghcr.io/acme/pod:v7"}
  ephemeralContainers:
    - {name: dbg, image: "ghcr.io/acme/debug:v8"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-workload}
data:
  image: ghcr.io/acme/ignored:v0
---
apiVersion: v1
kind: Service
metadata: {name: svc}
spec:
  ports: [{port: 443}]
"""


def test_every_workload_kind_in_order_of_appearance() -> None:
    assert find_images(ALL_KINDS, SRC) == [
        "docker.io/library/busybox:1.36",
        "registry.k8s.io/capx/manager:v1.0.0",
        "quay.io/brancz/kube-rbac-proxy:v0.18.0",
        "ghcr.io/acme/agent:v2",
        "ghcr.io/acme/store:v3",
        "ghcr.io/acme/rs:v4",
        "ghcr.io/acme/migrate:v5",
        "ghcr.io/acme/cleanup:v6",
        "ghcr.io/acme/pod:v7",
        "ghcr.io/acme/debug:v8",
    ]


def test_images_are_normalised_and_de_duplicated() -> None:
    text = """\
kind: Deployment
metadata: {name: a}
spec:
  template:
    spec:
      containers:
        - {name: a, image: nginx}
        - {name: b, image: "docker.io/library/nginx:latest"}
        - {name: c, image: "index.docker.io/library/nginx"}
      initContainers:
        - {name: d, image: nginx}
"""
    assert find_images(text, SRC) == ["docker.io/library/nginx:latest"]


def test_list_kind_and_empty_documents() -> None:
    text = """\
---
---
apiVersion: v1
kind: List
items:
  - kind: Pod
    metadata: {name: p}
    spec:
      containers: [{name: p, image: "quay.io/a/p:v1"}]
"""
    assert find_images(text, SRC) == ["quay.io/a/p:v1"]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("${IMG:=registry.k8s.io/capi/manager:v1.9.4}", "registry.k8s.io/capi/manager:v1.9.4"),
        ("${IMG=registry.k8s.io/capi/manager:v1.9.4}", "registry.k8s.io/capi/manager:v1.9.4"),
        ("${IMG:-registry.k8s.io/capi/manager:v1.9.4}", "registry.k8s.io/capi/manager:v1.9.4"),
        ("registry.k8s.io/capi:${TAG:=v1.9.4}", "registry.k8s.io/capi:v1.9.4"),
        ("${REG:=gcr.io}/acme/${NAME:=app}:${TAG:-v1}", "gcr.io/acme/app:v1"),
    ],
)
def test_image_variables_resolve_to_their_defaults(image: str, expected: str) -> None:
    text = (
        "kind: Deployment\nmetadata: {name: m}\nspec:\n  template:\n    spec:\n"
        f'      containers:\n        - name: manager\n          image: "{image}"\n'
    )
    assert find_images(text, SRC) == [expected]


def test_image_needing_a_required_variable_names_source_document_and_variable() -> None:
    text = """\
kind: Namespace
metadata: {name: ns}
---
kind: Deployment
metadata: {name: capx-controller-manager}
spec:
  template:
    spec:
      containers:
        - name: manager
          image: ${REGISTRY}/capx:${TAG:=v1}
"""
    with pytest.raises(InputError) as caught:
        find_images(text, SRC)
    message = str(caught.value)
    assert SRC in message
    assert "Deployment capx-controller-manager" in message
    assert "REGISTRY" in message
    assert "manager" in message
    assert "\n" not in message


def test_invalid_image_names_document_and_container() -> None:
    text = """\
kind: Job
metadata: {name: j}
spec:
  template:
    spec:
      containers: [{name: run, image: "Bad/Upper:1"}]
"""
    with pytest.raises(InputError, match=r"components\.yaml: Job j container run: .*'Bad/Upper:1'"):
        find_images(text, SRC)


def test_container_without_image() -> None:
    text = "kind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
    with pytest.raises(InputError, match="Pod p container c: has no image"):
        find_images(text, SRC)


def test_malformed_yaml_names_source_and_line() -> None:
    text = (
        "kind: Namespace\nmetadata:\n  name: ns\n---\nkind: Deployment\nspec: [unclosed\nfoo: bar\n"
    )
    with pytest.raises(InputError) as caught:
        find_images(text, SRC)
    message = str(caught.value)
    assert message.startswith(f"{SRC}:7:")
    assert "malformed YAML" in message
    assert "\n" not in message


def test_variables_with_each_default_syntax() -> None:
    text = """\
# header comment
kind: Deployment
spec:
  replicas: ${REPLICAS:=1}
  template:
    spec:
      containers:
        - name: manager
          image: ${IMG=quay.io/a/b:v1}
          args:
            - --v=${LOG_LEVEL:-2}
            - --creds=${CREDENTIALS}
            - --empty=${EMPTY:=}
            - --again=${CREDENTIALS}
            - --later-default=${REPLICAS}
"""
    assert find_variables(text) == [
        Variable("REPLICAS", "1", False),
        Variable("IMG", "quay.io/a/b:v1", False),
        Variable("LOG_LEVEL", "2", False),
        Variable("CREDENTIALS", None, True),
        Variable("EMPTY", "", False),
    ]


def test_a_default_anywhere_makes_a_variable_optional() -> None:
    assert find_variables("a: ${X}\nb: ${X:=7}\nc: ${X:=8}\n") == [Variable("X", "7", False)]


def test_no_variables() -> None:
    assert find_variables("kind: Namespace\nmetadata: {name: x}\n") == []


def test_harness_components_are_realistic() -> None:
    text = make_components(
        ProviderType.INFRASTRUCTURE,
        "capx-system",
        ["registry.k8s.io/capx/manager:v1.0.0", "busybox:1.36"],
    )
    assert text.startswith("#")
    assert find_images(text, SRC) == [
        "registry.k8s.io/capx/manager:v1.0.0",
        "docker.io/library/busybox:1.36",
    ]
    variables = {v.name: v for v in find_variables(text)}
    assert variables["PROVIDER_CREDENTIALS"].required
    assert variables["EXP_MACHINE_POOL"] == Variable("EXP_MACHINE_POOL", "true", False)
    assert variables["CAPI_DIAGNOSTICS_ADDRESS"].default == ":8443"
    assert variables["LOG_LEVEL"].default == "2"
    assert variables["CLUSTER_TOPOLOGY"].default == "false"
