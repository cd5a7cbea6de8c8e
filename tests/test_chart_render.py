"""Chart images as Helm renders them (``airgap.content.chartrender``, Helm's own engine
through ``helmengine``): every construct real charts name their images with, each
chart written here in the shape the real ones use, each asserting the exact image set
Helm renders with the default values and with a user's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.content.chartrender import (
    DEFAULT_KUBE_VERSION,
    RenderSettings,
    chart_images,
    merge_values,
)
from airgap.core.errors import InputError
from tests.harness.chartrepo import package
from tests.harness.specs import assert_spec_error, spec_of

APP_VERSION = "v2.1.0"


def chart(
    name: str,
    templates: dict[str, str],
    values: dict[str, Any] | None = None,
    *,
    extra: dict[str, str | bytes] | None = None,
    chart_yaml: dict[str, Any] | None = None,
) -> bytes:
    """A chart package NAME 1.0.0 (appVersion ``APP_VERSION``) of ``templates``."""
    metadata = {"apiVersion": "v2", "name": name, "version": "1.0.0", "appVersion": APP_VERSION}
    files: dict[str, str | bytes] = {
        "Chart.yaml": yaml.safe_dump({**metadata, **(chart_yaml or {})}),
        "values.yaml": yaml.safe_dump(values or {}),
        **{f"templates/{path}": text for path, text in templates.items()},
        **(extra or {}),
    }
    return package(name, files)


def images(package_bytes: bytes, values: dict[str, Any] | None = None, **options: Any) -> list[str]:
    """What Helm renders ``package_bytes`` as, with ``values`` and ``options`` (the
    other ``RenderSettings`` fields)."""
    settings = RenderSettings(values or {}, **options)
    return chart_images([(package_bytes, "chart.tgz")], settings, "chart")


def deployment(containers: str, kind: str = "Deployment") -> str:
    """A workload template whose Pod template holds ``containers`` (YAML, indented 8)."""
    return (
        f"apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: {{{{ .Release.Name }}}}\n"
        "spec:\n  template:\n    spec:\n      containers:\n" + containers
    )


# --- the constructs behind the misses of a template reader --------------------------------

# Cilium's way: a default registry per image, overridden by a global one, overridden by
# the image's own
DEFAULT_REGISTRY_HELPER = """\
{{- define "app.image" -}}
{{- $registry := default (default .image.defaultRegistry .globalRegistry) .image.registry -}}
{{- printf "%s/%s:%s" $registry .image.repository .image.tag -}}
{{- end -}}
"""


@pytest.mark.integration
def test_a_default_registry_helper() -> None:
    values = {
        "global": {"registry": ""},
        "operator": {
            "image": {
                "defaultRegistry": "quay.io",
                "registry": "",
                "repository": "cilium/operator-generic",
                "tag": "v1.16.5",
            }
        },
    }
    call = '{{ include "app.image" (dict "image" .Values.operator.image "globalRegistry" .Values.global.registry) }}'
    package_bytes = chart(
        "cilium",
        {
            "_helpers.tpl": DEFAULT_REGISTRY_HELPER,
            "operator.yaml": deployment(f"        - name: operator\n          image: {call}\n"),
        },
        values,
    )
    assert images(package_bytes) == ["quay.io/cilium/operator-generic:v1.16.5"]
    assert images(package_bytes, {"global": {"registry": "corp.example"}}) == [
        "corp.example/cilium/operator-generic:v1.16.5"
    ]
    own = {"global": {"registry": "corp.example"}, "operator": {"image": {"registry": "x.io"}}}
    assert images(package_bytes, own) == ["x.io/cilium/operator-generic:v1.16.5"]


# a CSI driver's way: null values filled by an image-name helper (the chart's name under
# a registry, the appVersion as tag)
NULL_FILLED_HELPER = """\
{{- define "csi.image" -}}
{{- $repository := .Values.image.repository | default (printf "registry.k8s.io/sig-storage/%s" .Chart.Name) -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
"""


@pytest.mark.integration
def test_null_values_filled_by_an_image_name_helper() -> None:
    package_bytes = chart(
        "csi-driver-nfs",
        {
            "_helpers.tpl": NULL_FILLED_HELPER,
            "node.yaml": deployment(
                '        - name: nfs\n          image: {{ include "csi.image" . }}\n', "DaemonSet"
            ),
        },
        {"image": {"repository": None, "tag": None}},
    )
    assert images(package_bytes) == [f"registry.k8s.io/sig-storage/csi-driver-nfs:{APP_VERSION}"]
    assert images(package_bytes, {"image": {"tag": "v2.2.0"}}) == [
        "registry.k8s.io/sig-storage/csi-driver-nfs:v2.2.0"
    ]


# a tag suffix from a ternary (Calico's -distroless, a Windows -windows-hp variant)
TERNARY = """\
        - name: node
          image: {{ printf "%s:%s%s" .Values.image.repository .Values.image.tag (ternary "-distroless" "" .Values.image.distroless) }}
{{- if .Values.windows.enabled }}
        - name: windows
          image: {{ .Values.image.repository }}:{{ .Values.image.tag }}{{ ternary "-windows-hp" "-windows" .Values.windows.hostProcess }}
{{- end }}
"""


@pytest.mark.integration
def test_a_tag_suffix_from_a_ternary() -> None:
    values = {
        "image": {"repository": "quay.io/calico/node", "tag": "v3.29.1", "distroless": True},
        "windows": {"enabled": False, "hostProcess": True},
    }
    package_bytes = chart("calico", {"node.yaml": deployment(TERNARY, "DaemonSet")}, values)
    assert images(package_bytes) == ["quay.io/calico/node:v3.29.1-distroless"]
    user = {"image": {"distroless": False}, "windows": {"enabled": True}}
    assert images(package_bytes, user) == [
        "quay.io/calico/node:v3.29.1",
        "quay.io/calico/node:v3.29.1-windows-hp",
    ]


# a cloud controller manager's way: the image version follows the cluster's Kubernetes
# version; a ServiceMonitor sidecar only where the API exists
CAPABILITIES = """\
        - name: ccm
          image: registry.k8s.io/provider-aws/cloud-controller-manager:{{ .Values.image.tag | default (printf "v%s.%s.0" .Capabilities.KubeVersion.Major (.Capabilities.KubeVersion.Minor | trimSuffix "+")) }}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}
        - name: metrics
          image: quay.io/brancz/kube-rbac-proxy:v0.18.1
{{- end }}
"""


@pytest.mark.integration
def test_a_version_computed_from_capabilities() -> None:
    package_bytes = chart(
        "aws-ccm", {"ccm.yaml": deployment(CAPABILITIES, "DaemonSet")}, {"image": {"tag": ""}}
    )
    ccm = "registry.k8s.io/provider-aws/cloud-controller-manager"
    assert images(package_bytes) == [f"{ccm}:v1.34.0"]  # the documented default
    assert images(package_bytes, kube_version="v1.31.4") == [f"{ccm}:v1.31.0"]
    assert images(
        package_bytes, kube_version="v1.31.4", api_versions=("monitoring.coreos.com/v1",)
    ) == [f"{ccm}:v1.31.0", "quay.io/brancz/kube-rbac-proxy:v0.18.1"]
    assert images(package_bytes, {"image": {"tag": "v1.30.2"}}) == [f"{ccm}:v1.30.2"]


HAS_KEY = """\
{{- range $name, $image := .Values.images }}
{{- if hasKey $image "repository" }}
        - name: {{ $name }}
          image: {{ $image.repository }}:{{ $image.tag }}
{{- end }}
{{- end }}
"""


@pytest.mark.integration
def test_images_chosen_by_has_key_over_a_map() -> None:
    values = {
        "images": {
            "controller": {"repository": "ghcr.io/kyverno/kyverno", "tag": "v1.13.2"},
            "cleanup": {"digest": "none: no repository key"},
        }
    }
    package_bytes = chart("kyverno", {"controller.yaml": deployment(HAS_KEY)}, values)
    assert images(package_bytes) == ["ghcr.io/kyverno/kyverno:v1.13.2"]
    user = {"images": {"cleanup": {"repository": "ghcr.io/kyverno/cleanup", "tag": "v1.13.2"}}}
    assert images(package_bytes, user) == [
        "ghcr.io/kyverno/cleanup:v1.13.2",  # range walks keys in order
        "ghcr.io/kyverno/kyverno:v1.13.2",
    ]


@pytest.mark.integration
def test_a_base_repository_concatenated_in_front_of_every_image() -> None:
    containers = (
        '        - name: operator\n          image: "{{ .Values.baseRepo }}/{{ .Values.operator.name'
        ' }}:{{ .Values.tag }}"\n'
        "      initContainers:\n"
        '        - name: init\n          image: "{{ .Values.baseRepo }}/{{ .Values.init.name'
        ' }}:{{ .Values.tag }}"\n'
    )
    values = {
        "baseRepo": "quay.io/tigera",
        "tag": "v1.36.2",
        "operator": {"name": "operator"},
        "init": {"name": "operator-init"},
    }
    package_bytes = chart("tigera-operator", {"operator.yaml": deployment(containers)}, values)
    assert images(package_bytes) == [
        "quay.io/tigera/operator:v1.36.2",
        "quay.io/tigera/operator-init:v1.36.2",
    ]
    assert images(package_bytes, {"baseRepo": "corp.example/tigera"}) == [
        "corp.example/tigera/operator:v1.36.2",
        "corp.example/tigera/operator-init:v1.36.2",
    ]


# --- dependencies, hooks, libraries, workload kinds ---------------------------------------


def subchart(name: str, image: str) -> bytes:
    return chart(
        name,
        {"deploy.yaml": deployment(f"        - name: {name}\n          image: {image}\n")},
    )


@pytest.mark.integration
def test_dependencies_as_helm_enables_them() -> None:
    """A vendored dependency disabled by default (its condition), enabled by the user's
    values; another switched by ``tags``; an alias read under its own key."""
    dependencies = [
        {"name": "metrics", "version": "1.0.0", "condition": "metrics.enabled"},
        {"name": "webhook", "version": "1.0.0", "tags": ["extras"]},
        {"name": "metrics", "version": "1.0.0", "alias": "metrics2", "condition": "m2.on"},
    ]
    package_bytes = chart(
        "parent",
        {"deploy.yaml": deployment("        - name: p\n          image: quay.io/p/parent:v1\n")},
        {"metrics": {"enabled": False}, "tags": {"extras": False}, "m2": {"on": True}},
        chart_yaml={"dependencies": dependencies},
        extra={
            "charts/metrics-1.0.0.tgz": subchart("metrics", "quay.io/p/metrics:v1"),
            "charts/webhook-1.0.0.tgz": subchart("webhook", "quay.io/p/webhook:v1"),
        },
    )
    assert images(package_bytes) == ["quay.io/p/metrics:v1", "quay.io/p/parent:v1"]  # the alias
    user = {"metrics": {"enabled": True}, "tags": {"extras": True}, "m2": {"on": False}}
    assert images(package_bytes, user) == [  # in the order of Helm's template paths
        "quay.io/p/metrics:v1",
        "quay.io/p/webhook:v1",
        "quay.io/p/parent:v1",
    ]
    assert images(package_bytes, {"m2": {"on": False}}) == ["quay.io/p/parent:v1"]


@pytest.mark.integration
def test_a_dependency_fetched_beside_its_chart_renders_with_what_its_parent_gives_it() -> None:
    parent = chart(
        "argo-cd",
        {"deploy.yaml": deployment("        - name: s\n          image: quay.io/argo/cd:v2\n")},
        {"redis-ha": {"enabled": False, "image": {"repository": "public.ecr.aws/redis"}}},
        chart_yaml={
            "dependencies": [
                {
                    "name": "redis-ha",
                    "version": "^4.0.0",
                    "repository": "https://dandydeveloper.github.io/charts/",
                    "condition": "redis-ha.enabled",
                }
            ]
        },
    )
    redis = chart(
        "redis-ha",
        {
            "sts.yaml": deployment(
                '        - name: r\n          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"\n',
                "StatefulSet",
            )
        },
        {"image": {"repository": "docker.io/library/redis", "tag": "7.2.4"}},
        chart_yaml={"version": "4.27.0"},
    )
    family = [(parent, "argo-cd.tgz"), (redis, "redis-ha.tgz")]
    settings = RenderSettings({})
    assert chart_images(family, settings, "argo-cd") == ["quay.io/argo/cd:v2"]
    enabled = RenderSettings({"redis-ha": {"enabled": True}})
    assert chart_images(family, enabled, "argo-cd") == [
        "public.ecr.aws/redis:7.2.4",  # the parent's repository, the dependency's tag
        "quay.io/argo/cd:v2",
    ]
    # a second render of the same packages: Helm's loaded chart is never reused
    assert chart_images(family, settings, "argo-cd") == ["quay.io/argo/cd:v2"]


@pytest.mark.integration
def test_hooks_are_installed_and_test_hooks_are_not() -> None:
    job = (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n"
        '    "helm.sh/hook": pre-install,pre-upgrade\nspec:\n  template:\n    spec:\n'
        "      containers:\n        - name: m\n          image: quay.io/p/migrate:v1\n"
    )
    test_pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\n  annotations:\n"
        '    "helm.sh/hook": {{ .Values.testHook }}\nspec:\n  containers:\n'
        "    - name: t\n      image: docker.io/busybox:1.36\n"
    )
    package_bytes = chart(
        "app", {"job.yaml": job, "tests/test.yaml": test_pod}, {"testHook": "test"}
    )
    assert images(package_bytes) == ["quay.io/p/migrate:v1"]
    assert images(package_bytes, {"testHook": "test-success"}) == ["quay.io/p/migrate:v1"]
    assert images(package_bytes, {"testHook": "post-install"}) == [
        "quay.io/p/migrate:v1",
        "docker.io/library/busybox:1.36",
    ]


@pytest.mark.integration
def test_a_library_chart_renders_the_image() -> None:
    library = package(
        "common",
        {
            "Chart.yaml": "apiVersion: v2\nname: common\nversion: 2.0.0\ntype: library\n",
            "templates/_images.tpl": (
                '{{- define "common.images.image" -}}\n'
                "{{- $registry := .global.imageRegistry | default .imageRoot.registry -}}\n"
                '{{- printf "%s/%s:%s" $registry .imageRoot.repository .imageRoot.tag -}}\n'
                "{{- end -}}\n"
            ),
        },
    )
    call = '{{ include "common.images.image" (dict "imageRoot" .Values.image "global" .Values.global) }}'
    package_bytes = chart(
        "nginx",
        {"deploy.yaml": deployment(f"        - name: nginx\n          image: {call}\n")},
        {
            "global": {"imageRegistry": ""},
            "image": {"registry": "docker.io", "repository": "bitnami/nginx", "tag": "1.27"},
        },
        chart_yaml={"dependencies": [{"name": "common", "version": "2.x.x"}]},
        extra={"charts/common-2.0.0.tgz": library},
    )
    assert images(package_bytes) == ["docker.io/bitnami/nginx:1.27"]
    assert images(package_bytes, {"global": {"imageRegistry": "corp.example"}}) == [
        "corp.example/bitnami/nginx:1.27"
    ]


@pytest.mark.integration
def test_every_workload_kind_list_item_and_container_list() -> None:
    templates = {
        "cron.yaml": (
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: c\nspec:\n"
            "  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n"
            "            - name: c\n              image: quay.io/p/cron:v1\n"
        ),
        "list.yaml": (
            "apiVersion: v1\nkind: List\nitems:\n"
            "  - apiVersion: v1\n    kind: Pod\n    metadata:\n      name: p\n    spec:\n"
            "      containers:\n        - name: p\n          image: quay.io/p/pod:v1\n"
            "      ephemeralContainers:\n        - name: debug\n"
            "          image: quay.io/p/debug:v1\n"
        ),
        "sts.yaml": deployment(
            "        - name: s\n          image: quay.io/p/sts:v1\n"
            "      initContainers:\n        - name: i\n          image: quay.io/p/init:v1\n",
            "StatefulSet",
        ),
        # an image in a ConfigMap or a custom resource is no Pod template: not carried
        "cm.yaml": (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n"
            "  image: quay.io/p/runtime:v1\n"
        ),
    }
    assert images(chart("kinds", templates)) == [
        "quay.io/p/cron:v1",
        "quay.io/p/pod:v1",
        "quay.io/p/debug:v1",
        "quay.io/p/sts:v1",
        "quay.io/p/init:v1",
    ]


@pytest.mark.integration
def test_release_name_and_namespace_render_as_given() -> None:
    """An agent chart that must live in its own namespace refuses any other."""
    template = (
        '{{- if ne .Release.Namespace "kube-system" }}{{ fail "install into kube-system" }}'
        "{{- end }}\n"
        + deployment("        - name: a\n          image: quay.io/p/{{ .Release.Name }}:v1\n")
    )
    package_bytes = chart("agent", {"agent.yaml": template})
    with pytest.raises(InputError, match="chart.tgz: Helm cannot render it: .*kube-system"):
        images(package_bytes)
    assert images(package_bytes, release_name="node-agent", namespace="kube-system") == [
        "quay.io/p/node-agent:v1"
    ]
    assert images(package_bytes, namespace="kube-system") == ["quay.io/p/chart:v1"]


# --- what Helm refuses ---------------------------------------------------------------------


@pytest.mark.integration
def test_a_missing_required_value_or_a_schema_is_one_line_naming_the_chart() -> None:
    required = chart(
        "needs",
        {
            "d.yaml": deployment(
                '        - name: a\n          image: {{ required "image.repository is required" '
                ".Values.image.repository }}:v1\n"
            )
        },
        {"image": {"repository": ""}},
    )
    with pytest.raises(InputError) as caught:
        images(required)
    message = str(caught.value)
    assert message.startswith("chart.tgz: Helm cannot render it: ")
    assert "image.repository is required" in message and "\n" not in message
    assert images(required, {"image": {"repository": "quay.io/p/a"}}) == ["quay.io/p/a:v1"]
    schema = (
        '{"type": "object", "required": ["clusterName"],'
        ' "properties": {"clusterName": {"type": "string"}, "port": {"type": "integer"}}}'
    )
    schemed = chart(
        "schemed",
        {"d.yaml": deployment("        - name: a\n          image: quay.io/p/a:v1\n")},
        extra={"values.schema.json": schema},
    )
    for values, needle in (({}, "clusterName"), ({"clusterName": "c", "port": "x"}, "port")):
        with pytest.raises(InputError) as caught:
            images(schemed, values)
        assert needle in str(caught.value) and "\n" not in str(caught.value)
    assert images(schemed, {"clusterName": "c"}) == ["quay.io/p/a:v1"]


@pytest.mark.unit
def test_values_merge_as_helm_merges_values_files_and_set() -> None:
    merged = merge_values(
        [
            {"image": {"repository": "a", "tag": "1"}, "list": [1, 2], "drop": {"x": 1}},
            {"image": {"tag": "2"}, "list": [3], "drop": None},
        ]
    )
    assert merged == {"image": {"repository": "a", "tag": "2"}, "list": [3], "drop": None}


@pytest.mark.unit
def test_render_settings_travel_as_canonical_json() -> None:
    settings = RenderSettings(
        {"b": 1, "a": {"z": None}}, "rel", "ns", "v1.31.0", ("monitoring.coreos.com/v1",)
    )
    text = settings.to_json()
    assert text == (
        '{"apiVersions":["monitoring.coreos.com/v1"],"kubeVersion":"v1.31.0",'
        '"namespace":"ns","releaseName":"rel","values":{"a":{"z":null},"b":1}}'
    )
    assert RenderSettings.from_json(text, "x") == settings
    assert RenderSettings.from_json(None, "x") == RenderSettings()
    for bad in ("[", "[]", '{"values": []}', '{"apiVersions": [1]}'):
        with pytest.raises(InputError, match="^x: render settings"):
            RenderSettings.from_json(bad, "x")


# --- the spec ------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_chart_entry_takes_values_files_values_and_capabilities(tmp_path: Path) -> None:
    (tmp_path / "values").mkdir()
    (tmp_path / "values" / "base.yaml").write_text(
        "image:\n  repository: quay.io/a/b\n  tag: '1'\nreplicas: 2\n"
    )
    (tmp_path / "prod.yaml").write_text("image:\n  tag: '2'\nextra: [1]\n")
    spec = spec_of(
        "charts:\n"
        "  - repo: https://charts.example/\n"
        "    name: cilium\n"
        "    version: 1.16.5\n"
        "    valuesFiles: [values/base.yaml, prod.yaml]\n"
        "    values: {replicas: 3, extra: null, ipam: {mode: kubernetes}}\n"
        "    releaseName: cni\n"
        "    namespace: kube-system\n"
        "    kubeVersion: '1.31'\n"
        "    apiVersions: [monitoring.coreos.com/v1]\n"
        "  - {oci: 'oci://ghcr.io/x/app', version: 1.0.0}\n",
        tmp_path,
    )
    cilium, app = spec.charts
    assert cilium.chart is not None and app.chart is not None
    assert cilium.chart.render == RenderSettings(
        values={
            "image": {"repository": "quay.io/a/b", "tag": "2"},
            "replicas": 3,
            "extra": None,
            "ipam": {"mode": "kubernetes"},
        },
        release_name="cni",
        namespace="kube-system",
        kube_version="v1.31.0",
        api_versions=("monitoring.coreos.com/v1",),
    )
    # the defaults: the chart's name as release (at render), default, a fixed version
    assert app.chart.render == RenderSettings({}, None, "default", DEFAULT_KUBE_VERSION)


@pytest.mark.integration
def test_a_chart_renders_for_the_highest_carried_kubernetes_version(tmp_path: Path) -> None:
    """The workload clusters a chart is installed on run the carried versions: with no
    kubeVersion of its own, a chart renders for the highest of them, not a fixed one."""
    spec = spec_of(
        "kubernetes: {versions: [v1.33.4, v1.34.1, v1.32.9], offline: true}\n"
        "charts:\n"
        "  - {oci: 'oci://ghcr.io/x/app', version: 1.0.0}\n"
        "  - {oci: 'oci://ghcr.io/x/old', version: 1.0.0, kubeVersion: v1.31.2}\n",
        tmp_path,
    )
    app, old = spec.charts
    assert app.chart is not None and old.chart is not None
    assert app.chart.render.kube_version == "v1.34.1"
    assert old.chart.render.kube_version == "v1.31.2"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("entry", "line", "needle"),
    [
        ("    values: [a]\n", 5, "charts[0].values: must be a mapping"),
        ("    values: {when: 2024-01-01}\n", 5, "quote it"),
        ("    valuesFiles: [missing.yaml]\n", 5, "charts[0].valuesFiles[0]: values file"),
        ("    valuesFiles: [list.yaml]\n", 5, "is not a mapping"),
        ("    valuesFiles: [big.yaml]\n", 5, "larger than the 1 MiB limit"),
        ("    valuesFiles: [bad.yaml]\n", 5, "malformed YAML"),
        ("    valuesFiles: a.yaml\n", 5, "charts[0].valuesFiles: must be a list"),
        ("    valuesFiles: [" + ", ".join(["a.yaml"] * 21) + "]\n", 5, "more than 20 files"),
        ("    releaseName: Not_A_Label\n", 5, "invalid release name"),
        ("    releaseName: " + "a" * 54 + "\n", 5, "invalid release name"),
        ("    namespace: Kube_System\n", 5, "invalid namespace"),
        ("    kubeVersion: latest\n", 5, "invalid Kubernetes version"),
        ("    apiVersions: v1\n", 5, "charts[0].apiVersions: must be a list"),
        ("    colour: blue\n", 5, "unknown key 'colour'"),
    ],
)
def test_a_chart_entry_with_bad_render_settings_is_one_line(
    tmp_path: Path, entry: str, line: int, needle: str
) -> None:
    (tmp_path / "list.yaml").write_text("- a\n")
    (tmp_path / "big.yaml").write_text("#" * (1 << 20) + "\n")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    (tmp_path / "a.yaml").write_text("a: 1\n")
    text = "charts:\n  - repo: https://charts.example/\n    name: c\n    version: 1.0.0\n"
    assert_spec_error(text + entry, tmp_path, line, needle)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("image", "needle"),
    [
        ("UPPER/Case", "d.yaml: Pod <unnamed> container a: invalid repository name"),
        ("a: b: c", "d.yaml:2:"),  # what Helm wrote is not YAML: file and line
        ("", "Pod <unnamed> container a has no image"),
    ],
)
def test_what_a_chart_renders_badly_is_one_line(image: str, needle: str) -> None:
    template = "kind: Pod\nspec: {containers: [{name: a, image: {{ .Values.image }}}]}\n"
    package_bytes = chart("bad", {"d.yaml": template}, {"image": "x"})
    with pytest.raises(InputError) as caught:
        images(package_bytes, {"image": image})
    assert needle in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.unit
def test_a_package_helm_cannot_load_is_one_line() -> None:
    with pytest.raises(InputError, match=r"^g\.tgz: Helm cannot render it: "):
        chart_images([(b"\x1f\x8b not a chart", "g.tgz")], RenderSettings(), "g")
