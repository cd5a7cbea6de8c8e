"""Helm charts (``charts:``): version constraints, the spec, image discovery without
Helm, and one collect -> verify -> import through the CLI.

A real classic chart repository is served on loopback (``index.yaml`` with a relative
and an absolute package URL, sha256 digests, a provenance file), an OCI chart is pushed
into a real registry with the PyPI ``oras`` client, images come from the real source
registry; import pushes every chart into a real registry, and ``oras`` pulls each back
and finds the package byte-equal under Helm's media types.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jsonschema
import oras.provider
import pytest
import yaml

from airgap.content.chart import (
    MAX_CALL_DEPTH,
    Chart,
    read_chart,
    read_chart_family,
    values_images,
    values_overrides,
)
from airgap.content.constraints import best, satisfies
from airgap.content.helm import HELM_CHART, HELM_CONFIG, HELM_PROVENANCE, index_entries
from airgap.content.helmoci import helm_config
from airgap.content.kinds import ChartLocation, ContentKind
from airgap.content.openpgp import read_keyring
from airgap.content.provenance import PROVENANCE_NOTE, check_provenance
from airgap.errors import AirgapError, DigestMismatchError, InputError, NotFoundError
from airgap.oci import sha256_digest
from airgap.reference import Reference, parse_reference
from tests.harness import skopeo, tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.helmprov import (
    export_public_key,
    gnupg_home,
    message_block,
    sign_provenance,
)
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer
from tests.harness.specs import assert_spec_error, spec_of

# the HelmChartProxy CRD of the Cluster API Helm addon provider (tests/schemas/extract_hcp.py)
HCP_SCHEMA = Path(__file__).parent / "schemas" / "helmchartproxy-v1alpha1.json"


def package(top: str, files: dict[str, str | bytes]) -> bytes:
    """A chart package as ``helm package`` lays it out (members under NAME/)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def to_mirror(reference: str, digest: str | None = None) -> tuple[Reference, str | None]:
    """A ``values_overrides`` target: the image under mirror.local:5000/capi, by tag."""
    source = parse_reference(reference)
    return parse_reference(f"mirror.local:5000/capi/{source.repository}:{source.tag}"), digest


def chart_of(name: str, files: dict[str, str | bytes], version: str = "1.0.0") -> Chart:
    """What airgap reads from a chart NAME VERSION holding ``files`` besides Chart.yaml."""
    chart_yaml = f"apiVersion: v2\nname: {name}\nversion: {version}\n"
    return read_chart(package(name, {"Chart.yaml": chart_yaml, **files}), f"{name}.tgz")


# --- constraints and the spec --------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "constraint", "expected"),
    [
        ("1.2.3", "^1.2.0", True),
        ("2.0.0", "^1.2.0", False),
        ("0.2.5", "^0.2.3", True),
        ("0.3.0", "^0.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.5.0", ">=1.2 <1.6", True),
        ("1.6.0", ">=1.2, <1.6", False),
        ("1.4.0", "1.2 - 1.4.5", True),
        ("1.4.6", "1.2 - 1.4.5", False),
        ("3.1.0", "1.x || >=3", True),
        ("2.0.0", "1.x", False),
        ("1.2.3-rc.1", "^1.2.0", False),  # pre-releases only when asked for
        ("1.2.3-rc.1", ">=1.2.3-rc.0", True),
        ("12.1.2", "12.1.2", True),
        ("1.2.5", "!=1.2.x", False),
        ("1.2.9", ">1.2", False),
    ],
)
def test_helm_constraints(version: str, constraint: str, expected: bool) -> None:
    assert satisfies(version, constraint) is expected


def test_best_version_and_bad_constraint() -> None:
    assert best(["1.0.0", "1.1.0", "2.0.0", "1.2.0-rc.1"], "^1.0.0") == "1.1.0"
    assert best(["1.0.0"], ">=2") is None
    with pytest.raises(InputError, match="invalid version constraint"):
        satisfies("1.0.0", ">=one")
    # pre-releases semver refuses: an empty identifier, a numeric one with a leading zero
    for constraint in ("53-.", "^8-.", "1.2.3-01", "~1.2.3-rc..1"):
        with pytest.raises(InputError, match="invalid pre-release in version constraint"):
            satisfies("1.2.3", constraint)


def test_spec_reads_charts(tmp_path: Path) -> None:
    spec = spec_of(
        "charts:\n"
        "  - {repo: 'https://rancher.github.io/fleet-helm-charts/', name: fleet, version: 0.12.3}\n"
        "  - {oci: 'oci://ghcr.io/example/charts/app', version: 1.2.0, images: [quay.io/x/e:v1]}\n",
        tmp_path,
    )
    fleet, app = spec.charts
    assert (fleet.kind, fleet.name, fleet.version) == (ContentKind.CHARTS, "fleet", "0.12.3")
    assert fleet.chart == ChartLocation(repo="https://rancher.github.io/fleet-helm-charts/")
    assert app.name == "app"
    assert app.chart == ChartLocation(
        oci="oci://ghcr.io/example/charts/app", images=("quay.io/x/e:v1",)
    )
    assert spec.contents == spec.charts


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("charts:\n  - {name: a, version: 1.0.0}\n", 2, "give either repo (with name) or oci"),
        (
            "charts:\n  - {repo: 'https://x/', oci: 'oci://x/a', version: 1}\n",
            2,
            "give either repo",
        ),
        ("charts:\n  - {repo: 'https://x/', version: 1.0.0}\n", 2, "charts[0].name: missing"),
        ("charts:\n  - {oci: 'https://x/a', version: 1.0.0}\n", 2, "invalid OCI chart"),
        ("charts:\n  - {oci: 'oci://x/a', version: '>=one'}\n", 2, "invalid version constraint"),
        ("charts:\n  - {oci: 'oci://x/a', version: 1.0.0, caFile: ca.pem}\n", 2, "registries:"),
        (
            "charts:\n  - {repo: 'https://x/', name: a, version: 1.0.0, caFile: no.pem}\n",
            2,
            "charts[0].caFile: CA file",  # checked now, like a registry's caFile
        ),
        (
            "charts:\n  - {repo: 'https://x/', name: a, version: '>=one'}\n",
            2,
            "invalid version constraint",
        ),
        ("charts:\n  - {repo: 'file:///x', name: a, version: 1.0.0}\n", 2, "https:// or http://"),
        (
            "charts:\n  - repo: 'https://x/'\n    name: a\n    version: 1\n    images: [UP]\n",
            5,
            "charts[0].images[0]",
        ),
        (
            "charts:\n  - {repo: 'https://x/', name: a, version: 1.0.0}\n"
            "  - {repo: 'https://y/', name: a, version: 1.0.0}\n",
            3,
            "duplicate chart a 1.0.0",
        ),
    ],
)
def test_spec_errors_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    assert_spec_error(text, tmp_path, line, needle)


# --- discovery without Helm ----------------------------------------------------------------

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: web
          image: "{{ .Values.image.registry }}/{{ .Values.image.repository }}{{ if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag }}{{ end }}"
        - name: exporter
          image: {{ .Values.exporter.name }}:{{ .Values.exporter.version }}
        - name: literal
          image: LITERAL
        - name: controller
          {{- with (merge .Values.controller.image .Values.global.image) }}
          image: {{ .registry }}/{{ .image }}:{{ .tag }}{{ if .digest }}@{{ .digest }}{{ end }}
          {{- end }}
"""


@dataclass(frozen=True)
class Images:
    app: str
    sidecar: str
    multi: str
    docker: str


def web_chart(images: Images, version: str = "1.2.0", repo: str = "") -> bytes:
    app, multi = parse_reference(images.app), parse_reference(images.multi)
    sub = package(
        "sub",
        {
            "Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
            "values.yaml": yaml.safe_dump(
                {"image": {"repository": images.sidecar.rsplit(":", 1)[0], "tag": "v2"}}
            ),
        },
    )
    annotation = yaml.safe_dump([{"name": "docker", "image": images.docker}])
    return package(
        "web",
        {
            "Chart.yaml": yaml.safe_dump(
                {
                    "apiVersion": "v2",
                    "name": "web",
                    "version": version,
                    "appVersion": "v1",
                    "description": "a web app",
                    "annotations": {"artifacthub.io/images": annotation},
                    "dependencies": [
                        {"name": "lib", "version": "^1.0.0", "repository": repo},
                        {"name": "sub", "version": "0.1.0", "repository": "file://../sub"},
                        {"name": "cache", "version": "^1.0.0", "repository": repo},
                    ],
                }
            ),
            "values.yaml": yaml.safe_dump(
                {
                    "image": {
                        "registry": app.registry,
                        "repository": app.repository,
                        "tag": app.tag,
                        "digest": "",
                    },
                    "sidecar": {"image": images.sidecar},
                    "exporter": {"name": "x", "version": "1"},
                    # ingress-nginx's way: image beside tag, the registry merged in
                    "global": {"image": {"registry": multi.registry}},
                    "controller": {"image": {"image": multi.repository, "tag": multi.tag}},
                    # a dependency it does not vendor, its tag left to it (Argo CD's way
                    # with redis-ha): the image is docker's
                    "cache": {"image": {"repository": images.docker.rsplit(":", 1)[0]}},
                }
            ),
            "templates/deployment.yaml": DEPLOYMENT.replace("LITERAL", images.multi),
            "charts/sub-0.1.0.tgz": sub,
        },
    )


def cache_chart(images: Images) -> bytes:
    """The dependency web sets the repository of: read alone, it names an image on
    docker.io that no test may reach."""
    tag = parse_reference(images.docker).tag
    values = f"image:\n  repository: docker.io/unused/default\n  tag: '{tag}'\n"
    chart_yaml = "apiVersion: v2\nname: cache\nversion: 1.0.0\n"
    return package("cache", {"Chart.yaml": chart_yaml, "values.yaml": values})


def lib_chart(version: str) -> bytes:
    return package(
        "lib",
        {"Chart.yaml": f"apiVersion: v2\nname: lib\nversion: {version}\ntype: library\n"},
    )


def test_discovery_without_helm() -> None:
    images = Images(
        "reg.example/team/app:v1",
        "reg.example/team/sidecar:v2",
        "reg.example/team/multi:v1",
        "reg.example/team/docker:v3",
    )
    chart = read_chart(web_chart(images, repo="https://x/"), "web.tgz")
    assert set(chart.image_references) == {
        images.app,
        images.sidecar,
        images.multi,
        images.docker,
    }
    # the vendored subchart's image sits under its name in the parent's values
    assert ("sub", "image") in {image.path for image in chart.images}
    assert chart.honours_digest
    cache, exporter = chart.warnings
    assert exporter.startswith("templates/deployment.yaml:10:") and ".Values.exporter" in exporter
    # read alone, the dependency it does not vendor leaves the tag unknown
    assert cache.startswith("values cache.image: its tag is the cache chart's default")
    lib, sub, cache_dependency = chart.dependencies
    assert (lib.name, lib.version, lib.vendored) == ("lib", "^1.0.0", False)
    assert (sub.name, sub.vendored) == ("sub", True)
    assert (cache_dependency.name, cache_dependency.vendored) == ("cache", False)


def test_a_dependency_beside_its_chart_is_read_with_the_values_it_is_given() -> None:
    """A dependency fetched beside its chart (not vendored) was read alone: web gives
    cache its repository and leaves the tag to cache, which Helm renders as
    reg.example/team/docker:v3; read alone, cache named docker.io/unused/default:v3,
    an image web never runs, and web's own values left the tag unknown."""
    images = Images(
        "reg.example/team/app:v1",
        "reg.example/team/sidecar:v2",
        "reg.example/team/multi:v1",
        "reg.example/team/docker:v3",
    )
    web_package, cache_package = web_chart(images, repo="https://x/"), cache_chart(images)
    web, lib, cache = read_chart_family(
        [(web_package, "web.tgz"), (lib_chart("1.1.0"), "lib.tgz"), (cache_package, "cache.tgz")]
    )
    rendered = {image.path: image.reference for image in web.images}
    assert rendered[("cache", "image")] == images.docker
    (warning,) = web.warnings  # the exporter's: the cache tag is cache's own
    assert ".Values.exporter" in warning
    assert cache.images == () and cache.warnings == ()  # its images are web's
    assert (cache.name, cache.version) == ("cache", "1.0.0")
    assert lib.images == ()
    # a dependency whose condition is off renders nothing, read beside its chart too
    off = package(
        "top",
        {
            "Chart.yaml": "apiVersion: v2\nname: top\nversion: 1.0.0\ndependencies:\n"
            "- {name: cache, version: 1.0.0, condition: cache.enabled}\n",
            "values.yaml": "cache:\n  enabled: false\n",
        },
    )
    top, cache = read_chart_family([(off, "top.tgz"), (cache_package, "cache.tgz")])
    assert top.image_references == [] and cache.image_references == []
    # a chart nothing here depends on is read alone, as before
    (alone,) = read_chart_family([(cache_package, "cache.tgz")])
    assert alone.image_references == ["docker.io/unused/default:v3"]


# the Cluster API operator chart's deployment.yaml, as released (hack/charts): each
# container's image is read through the dot of a ``with`` over its values
OPERATOR_DEPLOYMENT = """\
spec:
  template:
    spec:
      containers:
      - args:
        {{- with .Values.leaderElection }}
        - --leader-elect={{ .enabled }}
        {{- end }}
        {{- with .Values.image.manager }}
        image: "{{- if .registry -}}{{ .registry }}/{{- end -}}{{ .repository }}{{- if (.digest) -}} @{{ .digest }}{{- else -}}:{{ default $.Chart.AppVersion .tag }} {{- end -}}"
        {{- end }}
        imagePullPolicy: {{ .Values.image.manager.pullPolicy }}
      - args:
        {{- with .Values.image.kubeRBACProxy }}
        image: "{{- if .registry -}}{{ .registry }}/{{- end -}}{{ .repository }}{{- if (.digest) -}} @{{ .digest }}{{- else -}}:{{ default $.Chart.AppVersion .tag }} {{- end -}}"
        {{- end }}
      - args:
        {{- with .Values.image.removed }}
        image: "{{ .repository }}:{{ .tag }}"
        {{- end }}
"""


def operator_like_chart(deployment: str) -> bytes:
    values = {
        "image": {
            "manager": {"repository": "registry.k8s.io/capi-operator/cluster-api-operator"},
            "kubeRBACProxy": {"repository": "gcr.io/kubebuilder/kube-rbac-proxy", "tag": "v0.16"},
        },
        "sidecars": [{"name": "a", "image": {"repository": "x"}}],
        "exporter": {"name": "x", "version": "1"},
    }
    return package(
        "cluster-api-operator",
        {
            "Chart.yaml": "apiVersion: v2\nname: cluster-api-operator\nversion: 0.24.0\n"
            "appVersion: v0.24.0\n",
            "values.yaml": yaml.safe_dump(values),
            "templates/deployment.yaml": deployment,
        },
    )


def test_images_read_through_a_with_block_are_resolved() -> None:
    """The operator chart writes each image as ``{{ .repository }}:{{ .tag }}`` inside
    ``{{- with .Values.image.NAME }}``: the values images found are what it renders,
    so no warning (every collect, inspect and verify of a management bundle showed two
    false "cannot resolve" lines). A ``with`` over a value the chart does not set
    (``image.removed``) renders nothing: no image, no warning."""
    chart = read_chart(operator_like_chart(OPERATOR_DEPLOYMENT), "cluster-api-operator.tgz")
    assert set(chart.image_references) == {
        "registry.k8s.io/capi-operator/cluster-api-operator:v0.24.0",
        "gcr.io/kubebuilder/kube-rbac-proxy:v0.16",
    }
    assert chart.warnings == ()


@pytest.mark.parametrize(
    ("block", "why"),
    [
        ("{{- with .Values.exporter }}", "a with over values that hold no image"),
        (
            "{{- with .Values.image.manager }}{{- range .Values.sidecars }}",
            "a range: the dot is an item",
        ),
        ('{{- with (index .Values.image "manager") }}', "a with over an expression"),
        ("{{- if .Values.image.manager }}", "an if: the dot is the top, not the image"),
    ],
)
def test_an_image_through_a_dot_airgap_cannot_follow_is_still_a_warning(
    block: str, why: str
) -> None:
    deployment = f"""\
spec:
  containers:
  - name: x
    {block}
    image: "{{{{ .repository }}}}:{{{{ .tag }}}}"
    {{{{- end }}}}
    {"{{- end }}" if "range" in block else ""}
"""
    chart = read_chart(operator_like_chart(deployment), "cluster-api-operator.tgz")
    (warning,) = chart.warnings
    assert warning.startswith("templates/deployment.yaml:5: image from a template expression"), why


# Calico's tigera-operator chart (charts/tigera-operator): the image string and its
# tag (or version, and registry) are siblings, and the template builds the reference
# in a named template in _helpers.tpl
TIGERA_VALUES = """\
tigeraOperator:
  image: tigera/operator
  version: v1.38.6
  registry: quay.io
calicoctl:
  image: docker.io/calico/ctl
  tag: v3.30.3
plain:
  image: nginx
"""
TIGERA_HELPERS = """\
{{/* Generate the image name. */}}
{{- define "tigera-operator.image" -}}
{{- if .Values.tigeraOperator.registry -}}
{{ .Values.tigeraOperator.registry }}/{{ .Values.tigeraOperator.image }}:{{ .Values.tigeraOperator.version }}
{{- end -}}
{{- end -}}
{{- define "calicoctl.image" -}}{{ include "calicoctl.repo" . }}:{{ .Values.calicoctl.tag }}{{- end -}}
{{- define "calicoctl.repo" -}}{{ .Values.calicoctl.image }}{{- end -}}
"""
TIGERA_DEPLOYMENT = """\
spec:
  containers:
  - name: tigera-operator
    image: {{ template "tigera-operator.image" . }}
  - name: calicoctl
    image: {{ include "calicoctl.image" . }}
"""


def tigera_chart(helpers: str = TIGERA_HELPERS) -> bytes:
    return package(
        "tigera-operator",
        {
            "Chart.yaml": "apiVersion: v2\nname: tigera-operator\nversion: v3.30.3\n",
            "values.yaml": TIGERA_VALUES,
            "templates/_helpers.tpl": helpers,
            "templates/tigera-operator/02-tigera-operator.yaml": TIGERA_DEPLOYMENT,
        },
    )


def test_an_image_string_beside_its_tag_or_version_is_one_image() -> None:
    """Read alone, ``image: tigera/operator`` named docker.io/tigera/operator:latest and
    ``image: docker.io/calico/ctl`` calico/ctl:latest: images the chart never renders,
    carried instead of the ones it does. A string without siblings stays as it was."""
    chart = read_chart(tigera_chart(), "tigera-operator.tgz")
    assert chart.image_references == [
        "quay.io/tigera/operator:v1.38.6",
        "docker.io/calico/ctl:v3.30.3",
        "docker.io/library/nginx:latest",
    ]
    # the templates call named templates that read those values: nothing unresolved
    assert chart.warnings == ()

    overrides = values_overrides(chart, to_mirror)
    assert overrides["tigeraOperator"] == {
        "image": "capi/tigera/operator",
        "registry": "mirror.local:5000",
        "version": "v1.38.6",
    }
    assert overrides["calicoctl"] == {
        "image": "mirror.local:5000/capi/calico/ctl",
        "tag": "v3.30.3",
    }
    # what the written values name reads back as the mirror's images
    assert values_images(overrides) == [
        "mirror.local:5000/capi/tigera/operator:v1.38.6",
        "mirror.local:5000/capi/calico/ctl:v3.30.3",
        "mirror.local:5000/capi/library/nginx:latest",
    ]


def test_a_sibling_image_at_the_top_of_the_values_is_overridden_there() -> None:
    """``image:`` beside ``tag:`` at the top of values.yaml (found by fuzzing: the
    overrides' empty path was an IndexError)."""
    chart = read_chart(
        package(
            "top",
            {
                "Chart.yaml": "apiVersion: v2\nname: top\nversion: 1.0.0\n",
                "values.yaml": "image: team/app\ntag: v2\nreplicas: 1\n",
            },
        ),
        "top.tgz",
    )
    assert chart.image_references == ["docker.io/team/app:v2"]
    overrides = values_overrides(chart, lambda ref: (parse_reference(f"m.local/{ref[10:]}"), None))
    assert overrides == {"image": "m.local/team/app", "tag": "v2"}


def test_a_registry_key_that_holds_an_image_is_not_a_registry() -> None:
    """Fuzzing found a sibling image whose ``registry`` was a mapping (holding another
    image): taken as a split registry, its override overwrote that mapping with a
    string, and the next override failed inside it with an AttributeError."""
    values = "app:\n  image: team/app\n  tag: v1\n  registry:\n    image:\n      repository: r/x\n      tag: '2'\n"
    chart = read_chart(
        package(
            "c", {"Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n", "values.yaml": values}
        ),
        "c.tgz",
    )
    assert chart.image_references == ["docker.io/team/app:v1", "docker.io/r/x:2"]

    def mirror(ref: str) -> tuple[Reference, str | None]:
        source = parse_reference(ref)
        return parse_reference(f"m.local/{source.repository}:{source.tag}"), None

    assert values_overrides(chart, mirror) == {
        "app": {
            "image": "m.local/team/app",
            "tag": "v1",
            "registry": {"image": {"repository": "m.local/r/x", "tag": "2"}},
        }
    }


# cert-manager's chart from v1.20 (deploy/charts/cert-manager): an image gives its
# ``name`` and an empty ``repository``; the chart's top-level imageRegistry and
# imageNamespace complete it in the ``cert-manager.image`` named template
CERT_MANAGER_VALUES = """\
imageRegistry: quay.io
imageNamespace: jetstack
image:
  # registry: ""
  name: cert-manager-controller
  repository: ""
  pullPolicy: IfNotPresent
webhook:
  image:
    name: cert-manager-webhook
    repository: ""
acmesolver:
  image:
    name: cert-manager-acmesolver
    repository: ""
pinned:
  image:
    name: ignored-when-a-repository-is-given
    repository: registry.example/team/pinned
    tag: v2
"""
CERT_MANAGER_HELPERS = """\
{{- define "cert-manager.image" -}}
{{- $image := index . 0 -}}
{{- $imageRegistry := index . 1 | default "" -}}
{{- $imageNamespace := index . 2 | default "" -}}
{{- $defaultReference := index . 3 -}}
{{- $repository := "" -}}
{{- if $image.repository -}}
    {{- $repository = $image.repository -}}
{{- else -}}
    {{- $repository = $image.name -}}
    {{- if $imageNamespace -}}{{- $repository = printf "%s/%s" $imageNamespace $repository -}}{{- end -}}
    {{- if $imageRegistry -}}{{- $repository = printf "%s/%s" $imageRegistry $repository -}}{{- end -}}
{{- end -}}
{{- $repository -}}
{{- if $image.digest -}}{{- printf "@%s" $image.digest -}}{{- else -}}{{- printf "%s" $defaultReference -}}{{- end -}}
{{- end }}
"""
CERT_MANAGER_DEPLOYMENT = """\
      containers:
        - name: cert-manager-controller
          image: "{{ template "cert-manager.image" (tuple .Values.image .Values.imageRegistry .Values.imageNamespace (printf ":%s" .Chart.AppVersion)) }}"
          args:
          - --acme-http01-solver-image={{ template "cert-manager.image" (tuple .Values.acmesolver.image .Values.imageRegistry .Values.imageNamespace (printf ":%s" .Chart.AppVersion)) }}
        - name: webhook
          image: "{{ template "cert-manager.image" (tuple .Values.webhook.image .Values.imageRegistry .Values.imageNamespace (printf ":%s" .Chart.AppVersion)) }}"
"""


def cert_manager_chart(values: str = CERT_MANAGER_VALUES) -> bytes:
    return package(
        "cert-manager",
        {
            "Chart.yaml": "apiVersion: v2\nname: cert-manager\nversion: v1.21.1\n"
            "appVersion: v1.21.1\n",
            "values.yaml": values,
            "templates/_helpers.tpl": CERT_MANAGER_HELPERS,
            "templates/deployment.yaml": CERT_MANAGER_DEPLOYMENT,
        },
    )


def test_an_image_named_beside_the_charts_registry_and_namespace_is_resolved() -> None:
    """cert-manager's chart from v1.20 named no image at all: every image mapping has
    an empty ``repository`` (a warning each, and one per template line using it), so
    a bundle carrying the chart carried none of its images."""
    chart = read_chart(cert_manager_chart(), "cert-manager-v1.21.1.tgz")
    assert chart.image_references == [
        "quay.io/jetstack/cert-manager-controller:v1.21.1",
        "quay.io/jetstack/cert-manager-webhook:v1.21.1",
        "quay.io/jetstack/cert-manager-acmesolver:v1.21.1",
        "registry.example/team/pinned:v2",  # a repository, when given, wins
    ]
    assert chart.warnings == ()

    # the repository wins over name, imageNamespace and imageRegistry in the template
    overrides = values_overrides(chart, to_mirror)
    assert overrides["image"] == {
        "repository": "mirror.local:5000/capi/jetstack/cert-manager-controller",
        "tag": "v1.21.1",
    }
    assert values_images(overrides) == [
        "mirror.local:5000/capi/jetstack/cert-manager-controller:v1.21.1",
        "mirror.local:5000/capi/jetstack/cert-manager-webhook:v1.21.1",
        "mirror.local:5000/capi/jetstack/cert-manager-acmesolver:v1.21.1",
        "mirror.local:5000/capi/team/pinned:v2",
    ]


def test_an_image_name_without_the_charts_registry_or_namespace_stays_a_warning() -> None:
    """Only charts that set imageRegistry or imageNamespace compose a name with them;
    elsewhere a ``name`` beside an empty ``repository`` is not taken for an image."""
    values = CERT_MANAGER_VALUES.replace("imageRegistry: quay.io\n", "")
    values = values.replace("imageNamespace: jetstack\n", "")
    chart = read_chart(cert_manager_chart(values), "cert-manager.tgz")
    assert chart.image_references == ["registry.example/team/pinned:v2"]
    assert "values image: not a resolvable image" in chart.warnings
    # an empty namespace and no registry: Docker Hub's, as the template renders it
    values = CERT_MANAGER_VALUES.replace("imageRegistry: quay.io\n", "imageRegistry: ''\n")
    chart = read_chart(cert_manager_chart(values), "cert-manager.tgz")
    assert chart.image_references[0] == "docker.io/jetstack/cert-manager-controller:v1.21.1"


# ingress-nginx's chart (charts/ingress-nginx): images name no registry; every template
# merges global.image into its image, and pins tag@digest. Its extraModules template
# is included once per entry of a list the chart leaves empty.
INGRESS_NGINX_VALUES = """\
global:
  image:
    registry: registry.k8s.io
controller:
  image:
    chroot: false
    image: ingress-nginx/controller
    tag: "v1.15.1"
    digest: sha256:594ceea76b01c592858f803f9ff4d2cb40542cae2060410b2c95f75907d659e1
  extraModules: []
"""
INGRESS_NGINX_HELPERS = """\
{{- define "ingress-nginx.image" -}}
{{- if .chroot -}}
{{- printf "%s-chroot" .image -}}
{{- else -}}
{{- printf "%s" .image -}}
{{- end }}
{{- end -}}

{{- define "extraModules" -}}
- name: {{ .name }}
  {{- with .image }}
  image: {{ if .repository }}{{ .repository }}{{ else }}{{ .registry }}/{{ .image }}{{ end }}:{{ .tag }}
  {{- end }}
{{- end -}}
"""
INGRESS_NGINX_DEPLOYMENT = """\
      containers:
        - name: controller
          {{- with (merge .Values.controller.image .Values.global.image) }}
          image: {{ if .repository }}{{ .repository }}{{ else }}{{ .registry }}/{{ include "ingress-nginx.image" . }}{{ end }}:{{ .tag }}{{ if .digest }}@{{ .digest }}{{ end }}
          {{- end }}
      {{- if .Values.controller.extraModules }}
      initContainers:
        {{- range .Values.controller.extraModules }}
          {{- include "extraModules" (dict "name" .name "image" (merge .image $.Values.global.image)) | nindent 8 }}
        {{- end }}
      {{- end }}
"""


def test_an_image_merged_with_global_values_is_read_as_the_chart_renders_it() -> None:
    """ingress-nginx's images were read as docker.io/ingress-nginx/controller:v1.15.1,
    which the chart never renders (registry.k8s.io/…:v1.15.1@sha256:…), and each of its
    image lines was an "unresolved" warning: the ``with (merge …)`` dot was not followed,
    and the template of an empty list's entries was taken for a rendered one."""
    chart = read_chart(
        package(
            "ingress-nginx",
            {
                "Chart.yaml": "apiVersion: v2\nname: ingress-nginx\nversion: 4.15.1\n",
                "values.yaml": INGRESS_NGINX_VALUES,
                "templates/_helpers.tpl": INGRESS_NGINX_HELPERS,
                "templates/controller-deployment.yaml": INGRESS_NGINX_DEPLOYMENT,
            },
        ),
        "ingress-nginx.tgz",
    )
    assert chart.image_references == [
        "registry.k8s.io/ingress-nginx/controller:v1.15.1"
        "@sha256:594ceea76b01c592858f803f9ff4d2cb40542cae2060410b2c95f75907d659e1"
    ]
    assert chart.warnings == ()

    def mirror(reference: str) -> tuple[Reference, str | None]:
        return to_mirror(reference, "sha256:" + "e" * 64)

    # the template always writes REGISTRY/IMAGE: the registry is overridden beside it
    assert values_overrides(chart, mirror)["controller"]["image"] == {
        "image": "capi/ingress-nginx/controller",
        "registry": "mirror.local:5000",
        "tag": "v1.15.1",
        "digest": "sha256:" + "e" * 64,
    }


def test_a_call_after_a_define_on_its_line_is_that_templates_call() -> None:
    """``{{ define "a" }}{{ include "b" . }}`` calls b from a, not from the file: b's
    image line is rendered only if a is (here a is included for each of an empty list)."""
    helpers = (
        '{{- define "a" -}}{{ include "b" . }}{{- end -}}\n'
        '{{- define "b" -}}\nimage: {{ .registry }}/{{ .image }}\n{{- end -}}\n'
    )
    template = '{{- range .Values.modules }}\n{{ include "a" . }}\n{{- end }}\n'
    files: dict[str, str | bytes] = {
        "Chart.yaml": "apiVersion: v2\nname: m\nversion: 1.0.0\n",
        "values.yaml": "modules: []\n",
        "templates/_helpers.tpl": helpers,
        "templates/d.yaml": template,
    }
    assert read_chart(package("m", files), "m.tgz").warnings == ()
    files["values.yaml"] = "modules: [{image: x}]\n"  # now rendered, and unresolved
    (warning,) = read_chart(package("m", files), "m.tgz").warnings
    assert warning.startswith("templates/_helpers.tpl:3: image from a template expression")


def test_a_values_string_a_template_writes_as_the_image_is_one_whatever_its_key() -> None:
    """cloud-provider-azure writes ``image: {{ .Values.cloudNodeManager.
    healthProbeProxyImageWindows }}``: a key not ending in "image", so the image was
    neither carried nor pointed at the mirror, and the line was an "unresolved" warning."""
    values = (
        "cloudNodeManager:\n"
        '  healthProbeProxyImageWindows: "mcr.microsoft.com/oss/v2/kubernetes/azure-health-probe-proxy:v1.34.3"\n'
        "  note: not-an-image-line\n"
    )
    template = (
        "image: {{ .Values.cloudNodeManager.healthProbeProxyImageWindows }}\n"
        'image: "{{ .Values.cloudNodeManager.healthProbeProxyImageWindows | quote }}"\n'
        "name: {{ .Values.cloudNodeManager.note }}\n"
    )
    chart = chart_of("azure", {"values.yaml": values, "templates/d.yaml": template}, "1.36.0")
    assert chart.image_references == [
        "mcr.microsoft.com/oss/v2/kubernetes/azure-health-probe-proxy:v1.34.3"
    ]
    assert chart.warnings == ()
    overrides = values_overrides(chart, lambda ref: (parse_reference(f"m.local/{ref}"), None))
    assert overrides == {
        "cloudNodeManager": {
            "healthProbeProxyImageWindows": "m.local/mcr.microsoft.com/oss/v2/kubernetes/azure-health-probe-proxy:v1.34.3"
        }
    }


def test_chart_files_are_read_as_helm_reads_them_first_document_only() -> None:
    """cloud-provider-aws's chart writes Chart.yaml between two ``---`` lines: two YAML
    documents, which failed collect ("expected one YAML document, found 2") although
    Helm reads the first document of Chart.yaml and values.yaml and ignores the rest."""
    chart = read_chart(
        package(
            "aws-cloud-controller-manager",
            {
                "Chart.yaml": "---\napiVersion: v1\nname: aws-cloud-controller-manager\n"
                "version: 0.0.11\nappVersion: v1.35.0\n---\n",
                "values.yaml": "image:\n  repository: registry.k8s.io/provider-aws/cloud-controller-manager\n"
                "  tag: v1.35.0\n---\nimage:\n  repository: ignored/as-helm-ignores-it\n",
            },
        ),
        "aws-cloud-controller-manager.tgz",
    )
    assert (chart.name, chart.version) == ("aws-cloud-controller-manager", "0.0.11")
    assert chart.image_references == [
        "registry.k8s.io/provider-aws/cloud-controller-manager:v1.35.0"
    ]


def sub_chart(name: str, repository: str) -> bytes:
    values = f"image:\n  repository: {repository}\n  tag: '7.0'\n"
    chart = f"apiVersion: v2\nname: {name}\nversion: 1.0.0\n"
    return package(name, {"Chart.yaml": chart, "values.yaml": values})


# Argo CD's chart (charts/argo-cd): redis-ha is a dependency it does not vendor, off by
# default; its values set redis-ha's images without the tags, which redis-ha's own
# values give. Components leave their image empty for the global one.
ARGO_CD_CHART = """\
apiVersion: v2
name: argo-cd
version: 10.1.1
appVersion: v3.4.4
dependencies:
  - name: redis-ha
    version: 4.38.0
    repository: https://dandydeveloper.github.io/charts/
    condition: redis-ha.enabled
  - name: cache
    version: 1.0.0
    alias: valkey
    condition: valkey.missing,valkey.enabled
  - name: metrics
    version: 1.0.0
    tags: [monitoring]
"""
ARGO_CD_VALUES = """\
global:
  image:
    repository: quay.io/argoproj/argocd
controller:
  image:
    repository: ""
    tag: ""
redis-ha:
  enabled: false
  haproxy:
    image:
      repository: ecr-public.aws.com/docker/library/haproxy
valkey:
  enabled: true
  image:
    repository: docker.io/valkey/valkey
  exporter:
    image:
      repository: docker.io/oliver006/redis_exporter
      tag: v1.75.0
tags:
  monitoring: false
metrics:
  image:
    repository: docker.io/team/metrics
    tag: v1
"""


def test_a_dependency_is_read_as_helm_enables_it_and_never_with_this_charts_tags() -> None:
    """Argo CD's chart sets redis-ha's haproxy repository without its tag: read with
    argo-cd's appVersion it was haproxy:v3.4.4, a tag haproxy never had, which failed
    collect; yet redis-ha is off by default, so Helm renders none of it. Its components'
    empty images (the global one's placeholders) were warnings too."""
    files: dict[str, str | bytes] = {
        "Chart.yaml": ARGO_CD_CHART,
        "values.yaml": ARGO_CD_VALUES,
        "charts/metrics-1.0.0.tgz": sub_chart("metrics", "docker.io/team/metrics-default"),
    }
    chart = read_chart(package("argo-cd", files), "argo-cd.tgz")
    assert chart.image_references == [
        "quay.io/argoproj/argocd:v3.4.4",
        # on: what its values give whole; the image whose tag is valkey's is a warning
        "docker.io/oliver006/redis_exporter:v1.75.0",
    ]
    (warning,) = chart.warnings
    assert warning.startswith("values valkey.image: its tag is the valkey chart's default")
    # its tag turned on, what this chart gives the vendored subchart is rendered
    files["values.yaml"] = ARGO_CD_VALUES.replace("monitoring: false", "monitoring: true")
    chart = read_chart(package("argo-cd", files), "argo-cd.tgz")
    assert "docker.io/team/metrics:v1" in chart.image_references
    # the global the subchart is given is not its image: argo-cd's server is argo-cd's
    assert chart.image_references.count("quay.io/argoproj/argocd:v3.4.4") == 1
    assert not [warning for warning in chart.warnings if "global" in warning]
    # a tag holding anything but a boolean decides nothing (fuzzing: a mapping there
    # was a TypeError)
    files["values.yaml"] = ARGO_CD_VALUES.replace("monitoring: false", "monitoring: {a: 1}")
    assert (
        "docker.io/team/metrics:v1" in read_chart(package("argo-cd", files), "a").image_references
    )


# the AWS EBS CSI driver's chart (templates/tests/helm-tester.yaml): its helm test pod
# runs kubekins-e2e, an image of gigabytes an install never pulls
EBS_TESTER = """\
{{- if .Values.helmTester.enabled -}}
apiVersion: v1
kind: Pod
metadata:
  name: ebs-csi-driver-test
  annotations:
    "helm.sh/hook": test
    "helm.sh/hook-delete-policy": before-hook-creation,hook-succeeded,hook-failed
spec:
  containers:
    - name: kubetest2
      image: {{ .Values.helmTester.image }}
    - name: tools
      image: docker.io/library/busybox:1.36
    - name: shared
      image: {{ .Values.shared.image }}
---
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - image: {{ .Values.shared.image }}
{{- end }}
"""


def test_images_only_helm_test_hooks_use_are_not_carried() -> None:
    """``helm test`` pods are not part of an install (Zarf's find-images and Pulumi
    leave them out too): the EBS CSI driver's chart made every bundle carry
    kubekins-e2e, gigabytes from a staging registry."""
    values = (
        "helmTester:\n  enabled: true\n"
        '  image: "us-central1-docker.pkg.dev/k8s-staging-test-infra/images/kubekins-e2e:v20260817"\n'
        "shared:\n  image: registry.k8s.io/team/shared:v1\n"
    )
    files: dict[str, str | bytes] = {
        "values.yaml": values,
        "templates/tests/helm-tester.yaml": EBS_TESTER,
    }
    chart = chart_of("aws-ebs-csi-driver", files, "2.64.0")
    # the image the Deployment beside the test pod uses too is carried
    assert chart.image_references == ["registry.k8s.io/team/shared:v1"]
    assert chart.warnings == ()


# kube-prometheus-stack (charts/kube-prometheus-stack) vendors its crds subchart and
# sets that subchart's upgrade job images in its own values, under crds:
KPS_VALUES = """\
global:
  imageRegistry: ""
crds:
  upgradeJob:
    image:
      busybox:
        registry: mirror.example
        tag: "1.37"
      kubectl:
        registry: registry.k8s.io
        repository: kubectl
        tag: ""
"""
CRDS_VALUES = """\
upgradeJob:
  image:
    busybox:
      registry: docker.io
      repository: library/busybox
      tag: "1.36"
"""
CRDS_JOB = """\
containers:
  - image: {{ .Values.upgradeJob.image.busybox.registry }}/{{ .Values.upgradeJob.image.busybox.repository }}:{{ .Values.upgradeJob.image.busybox.tag }}
"""


def test_a_vendored_subchart_is_read_with_the_values_its_parent_gives_it() -> None:
    """The subchart was read with its own defaults only (docker.io's busybox:1.36,
    which the parent's values replace), and its template lines reading what only the
    parent sets were warnings; an image the parent leaves without a tag (kubectl's
    is the cluster's Kubernetes version) was given the parent's appVersion, a tag
    kubectl never had, which failed collect."""
    files: dict[str, str | bytes] = {
        "Chart.yaml": "apiVersion: v2\nname: kps\nversion: 88.5.3\nappVersion: v0.93.1\n",
        "values.yaml": KPS_VALUES,
        "charts/crds/Chart.yaml": "apiVersion: v2\nname: crds\nversion: 0.0.0\n",
        "charts/crds/values.yaml": CRDS_VALUES,
        "charts/crds/templates/job.yaml": CRDS_JOB,
    }
    chart = read_chart(package("kps", files), "kps.tgz")
    assert chart.image_references == ["mirror.example/library/busybox:1.37"]
    (warning,) = chart.warnings
    assert warning == (
        "subchart crds: values upgradeJob.image.kubectl: no tag, and no appVersion to "
        "default to: list the image in the entry's images"
    )
    assert values_overrides(chart, to_mirror) == {
        "crds": {
            "upgradeJob": {
                "image": {
                    "busybox": {
                        "registry": "mirror.local:5000",
                        "repository": "capi/library/busybox",
                        "tag": "1.37",
                    }
                }
            }
        }
    }
    # the parent's global reaches the subchart: Bitnami's global.imageRegistry wins
    files["values.yaml"] = KPS_VALUES.replace('imageRegistry: ""', "imageRegistry: corp.example")
    chart = read_chart(package("kps", files), "kps.tgz")
    assert chart.image_references == ["corp.example/library/busybox:1.37"]


# Cilium's chart (install/kubernetes/cilium): the agent's image is its values'; the
# operator's is REPOSITORY-CLOUD:TAG (quay.io/cilium/operator-generic), a repository
# the values never name
CILIUM_VALUES = """\
image:
  override: ~
  repository: "quay.io/cilium/cilium"
  tag: "v1.18.6"
  digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
  useDigest: true
operator:
  image:
    override: ~
    repository: "quay.io/cilium/operator"
    tag: "v1.18.6"
    genericDigest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    useDigest: true
    suffix: ""
"""
CILIUM_HELPERS = """\
{{- define "cilium.image" -}}
{{- $digest := (.useDigest | default false) | ternary (printf "@%s" .digest) "" -}}
{{- if .override -}}
{{- printf "%s" .override -}}
{{- else -}}
{{- printf "%s:%s%s" .repository .tag $digest -}}
{{- end -}}
{{- end -}}
{{- define "cilium.operator.cloud" -}}
{{- $cloud := "generic" -}}
{{- if .Values.eni.enabled -}}
  {{- $cloud = "aws" -}}
{{- end -}}
{{- $cloud -}}
{{- end -}}
{{- define "cilium.operator.image" -}}
{{- if .Values.operator.image.override -}}
{{- printf "%s" .Values.operator.image.override -}}
{{- else -}}
{{- $cloud := include "cilium.operator.cloud" . }}
{{- printf "%s-%s%s:%s" .Values.operator.image.repository $cloud .Values.operator.image.suffix .Values.operator.image.tag -}}
{{- end -}}
{{- end -}}
"""
CILIUM_TEMPLATES = """\
containers:
  - name: cilium-agent
    image: {{ include "cilium.image" .Values.image | quote }}
  - name: cilium-operator
    image: {{ include "cilium.operator.image" . | quote }}
"""


def test_a_template_that_adds_to_a_repository_is_a_warning() -> None:
    """Cilium's operator image was taken for its values name, quay.io/cilium/operator:
    an image the chart never renders (it renders operator-generic), carried silently
    while the install pulled an image the mirror lacked."""
    chart = read_chart(
        package(
            "cilium",
            {
                "Chart.yaml": "apiVersion: v2\nname: cilium\nversion: 1.18.6\n",
                "values.yaml": CILIUM_VALUES,
                "templates/_helpers.tpl": CILIUM_HELPERS,
                "templates/cilium.yaml": CILIUM_TEMPLATES,
            },
        ),
        "cilium.tgz",
    )
    (warning,) = chart.warnings
    assert warning.startswith(
        "templates/cilium.yaml:5: the template adds to an image's repository, so it renders "
        "an image other than its values name; list that image in the entry's images"
    )
    assert chart.image_references[0] == "quay.io/cilium/cilium:v1.18.6@sha256:" + "a" * 64
    # the same written out on the image line
    line = (
        "image: {{ .Values.operator.image.repository }}-generic:{{ .Values.operator.image.tag }}\n"
    )
    files: dict[str, str | bytes] = {"values.yaml": CILIUM_VALUES, "templates/operator.yaml": line}
    (warning,) = chart_of("cilium", files).warnings
    assert "adds to an image's repository" in warning


def tag_chart(template: str, app_version: str = "0.8.1") -> bytes:
    return package(
        "metrics-server",
        {
            "Chart.yaml": f"apiVersion: v2\nname: metrics-server\nversion: 3.13.1\nappVersion: {app_version}\n",
            "values.yaml": "image:\n  repository: registry.k8s.io/metrics-server/metrics-server\n"
            "  tag: ''\nsidecar:\n  image:\n    repository: registry.k8s.io/x/sidecar\n",
            "templates/deployment.yaml": template,
        },
    )


@pytest.mark.parametrize(
    "expression",
    [
        # metrics-server's chart
        '{{ printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) }}',
        # the AWS EBS CSI driver's
        '{{ printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) (.Values.image.tag | toString)) }}',
        # the piped form
        '{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" $.Chart.AppVersion) }}',
    ],
)
def test_a_tag_that_defaults_to_a_prefixed_app_version_is_read_so(expression: str) -> None:
    """appVersion 0.8.1 rendered as tag v0.8.1 was carried as :0.8.1, an image the
    chart never names (and the registry may not have)."""
    chart = read_chart(
        tag_chart(f"image: {expression}\nsidecar: {{{{ .Values.sidecar.image.repository }}}}\n"),
        "m.tgz",
    )
    assert chart.image_references == [
        "registry.k8s.io/metrics-server/metrics-server:v0.8.1",
        "registry.k8s.io/x/sidecar:0.8.1",  # another image keeps the plain appVersion
    ]
    # templates that disagree on the format leave the plain appVersion
    other = expression.replace('"v%s"', '"%s-r1"')
    chart = read_chart(tag_chart(f"image: {expression}\nalso: {other}\n"), "m.tgz")
    assert chart.image_references[0] == "registry.k8s.io/metrics-server/metrics-server:0.8.1"


def test_the_else_of_an_empty_with_is_rendered_and_its_dot_is_the_outer_one() -> None:
    """An ``else`` branch was taken for part of the block before it: the images in
    the ``else`` of a ``with`` over an empty value were neither carried nor warned
    about, and the dot there was taken for the empty value."""
    template = (
        "{{- with .Values.custom }}\n"
        "image: {{ .repository }}\n"
        "{{- else }}\n"
        "image: docker.io/team/default:v1\n"
        "image: {{ .Values.unknown }}\n"
        "{{- end }}\n"
        "{{- range .Values.extra }}\n"
        "image: docker.io/team/extra:v1\n"
        "{{- else }}\n"
        "image: docker.io/team/noextra:v1\n"
        "{{- end }}\n"
    )
    chart = read_chart(
        package(
            "e",
            {
                "Chart.yaml": "apiVersion: v2\nname: e\nversion: 1.0.0\n",
                "values.yaml": "custom: {}\nextra: []\n",
                "templates/d.yaml": template,
            },
        ),
        "e.tgz",
    )
    assert chart.literal_images == ("docker.io/team/default:v1", "docker.io/team/noextra:v1")
    (warning,) = chart.warnings
    assert warning.startswith("templates/d.yaml:5: image from a template expression")


def test_named_templates_are_followed_a_bounded_way() -> None:
    """A template calling itself, or defines nested where Go allows none, end; a chain
    longer than MAX_CALL_DEPTH is left unresolved, with its warning."""
    tigera, calicoctl = TIGERA_HELPERS.split('{{- define "calicoctl.image"')
    calicoctl = '{{- define "calicoctl.image"' + calicoctl
    looping = '{{- define "tigera-operator.image" -}}{{ include "tigera-operator.image" . }}'
    looping += "{{- end -}}\n"
    nested = '{{- define "a" -}}{{- define "b" -}}x{{- end -}}{{- end -}}\n'
    chain = "".join(
        f'{{{{- define "c{i}" -}}}}{{{{ include "c{i + 1}" . }}}}{{{{- end -}}}}\n'
        for i in range(MAX_CALL_DEPTH + 2)
    )
    chain += f'{{{{- define "c{MAX_CALL_DEPTH + 2}" -}}}}{{{{ .Values.calicoctl.image }}}}'
    chain += '{{- end -}}\n{{- define "calicoctl.image" -}}{{ include "c0" . }}{{- end -}}\n'
    for helpers, unresolved in (
        (looping + nested + calicoctl, "tigera-operator.image"),
        (tigera + chain, "calicoctl.image"),
    ):
        chart = read_chart(tigera_chart(helpers), "tigera-operator.tgz")
        (warning,) = chart.warnings
        assert unresolved in warning and "cannot resolve" in warning


def test_global_registry_is_honoured() -> None:
    chart = read_chart(
        package(
            "g",
            {
                "Chart.yaml": "apiVersion: v2\nname: g\nversion: 1.0.0\n",
                "values.yaml": "global:\n  imageRegistry: mirror.example\n"
                "image:\n  registry: docker.io\n  repository: bitnami/nginx\n  tag: '1.25'\n",
            },
        ),
        "g.tgz",
    )
    assert chart.image_references == ["mirror.example/bitnami/nginx:1.25"]


def test_index_section_is_parsed_alone() -> None:
    index = (
        "apiVersion: v1\nentries:\n  big:\n  - name: big\n    version: 1.0.0\n    urls:\n"
        "    - big-1.0.0.tgz\n  web:\n  - name: web\n    version: 1.2.0\n    digest: abc\n"
        "    urls:\n    - web-1.2.0.tgz\n  - name: web\n    version: 1.1.0\n    urls: [x]\n"
        "generated: '2026-01-01T00:00:00Z'\n"
    )
    entries = index_entries(index, "web", "https://x/")
    assert [e["version"] for e in entries] == ["1.2.0", "1.1.0"]
    with pytest.raises(NotFoundError, match="chart nope is not in"):
        index_entries(index, "nope", "https://x/")


def test_helm_config_follows_helm_field_order() -> None:
    config = helm_config(
        {"version": "1.0.0", "apiVersion": "v2", "name": "c", "appVersion": "v1", "zzz": 1}
    )
    assert config == b'{"name":"c","version":"1.0.0","apiVersion":"v2","appVersion":"v1"}'


# --- collect, verify, import ---------------------------------------------------------------


@dataclass(frozen=True)
class ChartBundle:
    path: Path
    images: Images
    web: bytes
    lib: bytes
    prov: bytes
    oci_chart: bytes


def oras_registry() -> oras.provider.Registry:
    return oras.provider.Registry(insecure=True)


def push_chart(directory: Path, repository: str, data: bytes) -> None:
    """Push a chart package as ``helm push`` does, with the PyPI ``oras`` client: tag
    = version with ``+`` written ``_``, config = Chart.yaml as JSON."""
    chart = read_chart(data, "test chart")
    tag = chart.version.replace("+", "_")
    (directory / f"{tag}.tgz").write_bytes(data)
    (directory / f"{tag}.json").write_bytes(helm_config(chart.metadata))
    response = oras_registry().push(
        f"{repository}:{tag}",
        files=[f"{directory / f'{tag}.tgz'}:{HELM_CHART}"],
        manifest_config=f"{directory / f'{tag}.json'}:{HELM_CONFIG}",
        disable_path_validation=True,
        quiet=True,
    )
    assert response.status_code in (200, 201), response.text


@pytest.fixture(scope="module")
def gnupg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A GnuPG home with a signing key, for .prov files as helm package --sign makes."""
    with gnupg_home(tmp_path_factory.mktemp("gnupg")) as home:
        yield home


# what helm package --sign puts above the '...' line: Chart.yaml, here with a list,
# which GnuPG dash-escapes ("- - name: lib")
WEB_PROV_CHART = "apiVersion: v2\nname: web\nversion: 1.2.0\ndependencies:\n- name: lib\n"


@pytest.fixture(scope="module")
def chart_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    signing_key: SigningKey,
    gnupg: Path,
) -> ChartBundle:
    directory = tmp_path_factory.mktemp("charts")
    images = Images(
        source_images["app"].reference,
        source_images["sidecar"].reference,
        source_images["multiarch"].reference,
        source_images["dockerv2"].reference,
    )
    repo = release_server.plain_url("helm-repo") + "/"
    web = web_chart(images, repo=repo)
    libs = {v: lib_chart(v) for v in ("1.0.0", "1.1.0", "2.0.0")}
    prov = sign_provenance(gnupg, WEB_PROV_CHART, "web-1.2.0.tgz", web)
    release_server.add_plain("helm-repo/web-1.2.0.tgz", web)
    release_server.add_plain("helm-repo/web-1.2.0.tgz.prov", prov)
    cache = cache_chart(images)
    release_server.add_plain("helm-repo/cache-1.0.0.tgz", cache)
    entries: dict[str, list[dict[str, object]]] = {"web": [], "lib": []}
    entries["cache"] = [
        {"name": "cache", "version": "1.0.0", "digest": hashlib.sha256(cache).hexdigest(),
         "urls": ["cache-1.0.0.tgz"]}
    ]  # fmt: skip
    entries["web"].append(
        {
            "name": "web",
            "version": "1.2.0",
            "digest": hashlib.sha256(web).hexdigest(),
            "urls": ["web-1.2.0.tgz"],  # relative to the repository
        }
    )
    for version, data in libs.items():
        url = release_server.add_plain(f"helm-repo/pkgs/lib-{version}.tgz", data)
        entries["lib"].append(
            {"name": "lib", "version": version, "digest": hashlib.sha256(data).hexdigest(),
             "urls": [url]}  # absolute
        )  # fmt: skip
    release_server.add_plain(
        "helm-repo/index.yaml", yaml.safe_dump({"apiVersion": "v1", "entries": entries}).encode()
    )
    # an OCI chart, pushed as Helm would by an independent client
    oci_chart = package(
        "ocichart",
        {
            "Chart.yaml": "apiVersion: v2\nname: ocichart\nversion: 0.3.0+build.1\n",
            "values.yaml": f"controller:\n  image: {images.sidecar}\n",
        },
    )
    push_chart(directory, f"{plain_registry.host}/helm/ocichart", oci_chart)
    spec = directory / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "charts": [
                    {"repo": repo, "name": "web", "version": "~1.2"},
                    {
                        "oci": f"oci://{plain_registry.host}/helm/ocichart",
                        "version": "0.3.0+build.1",
                        "images": [images.app],
                    },
                ]
            }
        )
    )
    output = directory / "charts.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert result.returncode == 0, result.stderr
    return ChartBundle(output, images, web, libs["1.1.0"], prov, oci_chart)


def bundle_manifest(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as archive:
        member = archive.extractfile("airgap-bundle.json")
        assert member is not None
        return cast(dict[str, Any], json.loads(member.read()))


def test_collect_carries_charts_byte_for_byte(
    chart_bundle: ChartBundle, signing_key: SigningKey
) -> None:
    manifest = bundle_manifest(chart_bundle.path)
    web, oci = manifest["contents"]
    assert (web["kind"], web["name"], web["version"]) == ("charts", "web", "1.2.0")
    assert web["files"] == [
        "charts/web/1.2.0/web-1.2.0.tgz",
        "charts/web/1.2.0/web-1.2.0.tgz.prov",
        "charts/web/1.2.0/lib-1.1.0.tgz",  # ^1.0.0, highest: not 2.0.0
        "charts/web/1.2.0/cache-1.0.0.tgz",  # read with what web gives it, not alone
    ]
    images = chart_bundle.images
    assert set(web["images"]) == {
        str(parse_reference(i)) for i in (images.app, images.sidecar, images.multi, images.docker)
    }
    assert (oci["name"], oci["version"]) == ("ocichart", "0.3.0+build.1")
    assert str(parse_reference(images.app)) in oci["images"]  # the explicit one
    with tarfile.open(chart_bundle.path) as archive:
        for path, expected in (
            ("charts/web/1.2.0/web-1.2.0.tgz", chart_bundle.web),
            ("charts/web/1.2.0/web-1.2.0.tgz.prov", chart_bundle.prov),
            ("charts/web/1.2.0/lib-1.1.0.tgz", chart_bundle.lib),
            ("charts/ocichart/0.3.0+build.1/ocichart-0.3.0_build.1.tgz", chart_bundle.oci_chart),
        ):
            member = archive.extractfile(path)
            assert member is not None and member.read() == expected, path
    result = run_airgap("verify", chart_bundle.path, "--key", signing_key.public)
    assert result.returncode == 0, result.stdout + result.stderr
    # what discovery could not resolve is in the inventory, never silently dropped
    (warning,) = web["warnings"]
    assert "templates/deployment.yaml:10:" in warning and ".Values.exporter" in warning
    assert "Unresolved images" in result.stdout and ".Values.exporter" in result.stdout
    assert "warnings" not in oci  # absent when there is none
    # the .prov's package digest was checked, its OpenPGP signature not: the record says so
    assert web["provenance"] == [f"web-1.2.0.tgz.prov: {PROVENANCE_NOTE}"]
    assert "provenance" not in oci
    assert "Chart provenance" in result.stdout and "signature not checked" in result.stdout
    inventory = json.loads(run_airgap("inspect", chart_bundle.path, "--format", "json").stdout)
    assert inventory["contents"][0]["warnings"] == [warning]
    assert inventory["contents"][0]["provenance"] == web["provenance"]


def test_a_package_that_does_not_match_its_digest_fails(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    data = lib_chart("1.0.0")
    release_server.add_plain("bad-repo/lib-1.0.0.tgz", data)
    index = {
        "apiVersion": "v1",
        "entries": {"lib": [{"version": "1.0.0", "digest": "0" * 64, "urls": ["lib-1.0.0.tgz"]}]},
    }
    release_server.add_plain("bad-repo/index.yaml", yaml.safe_dump(index).encode())
    spec = tmp_path / "spec.yaml"
    url = release_server.plain_url("bad-repo")
    spec.write_text(f"charts:\n  - {{repo: '{url}', name: lib, version: 1.0.0}}\n")
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    assert_clean_failure(result, 1, f"chart lib 1.0.0 from {url}", "is not the digest")
    # a package the index lists but the repository does not have names the repository
    entry = {"version": "1.0.0", "urls": ["missing-1.0.0.tgz"]}
    missing = {"apiVersion": "v1", "entries": {"lib": [entry]}}
    release_server.add_plain("bad-repo/index.yaml", yaml.safe_dump(missing).encode())
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    line = assert_clean_failure(result, 1, f"download chart lib 1.0.0 from {url}", "HTTP 404")
    assert "<function" not in line


def test_a_provenance_for_another_package_fails_collect(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey, gnupg: Path
) -> None:
    data = lib_chart("1.0.0")
    release_server.add_plain("badprov-repo/lib-1.0.0.tgz", data)
    prov = sign_provenance(gnupg, "name: lib\nversion: 1.0.0\n", "lib-1.0.0.tgz", data + b"!")
    release_server.add_plain("badprov-repo/lib-1.0.0.tgz.prov", prov)
    entry = {"version": "1.0.0", "digest": hashlib.sha256(data).hexdigest(),
             "urls": ["lib-1.0.0.tgz"]}  # fmt: skip
    index = {"apiVersion": "v1", "entries": {"lib": [entry]}}
    release_server.add_plain("badprov-repo/index.yaml", yaml.safe_dump(index).encode())
    spec = tmp_path / "spec.yaml"
    url = release_server.plain_url("badprov-repo")
    spec.write_text(f"charts:\n  - {{repo: '{url}', name: lib, version: 1.0.0}}\n")
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    assert_clean_failure(result, 1, "chart lib 1.0.0: lib-1.0.0.tgz.prov: promises sha256:")


def test_an_oci_chart_by_constraint_takes_the_highest_matching_tag(
    tmp_path: Path, plain_registry: RegistryServer, signing_key: SigningKey
) -> None:
    repository = f"{plain_registry.host}/helm/ranged"
    pushed: dict[str, bytes] = {}
    for version in ("0.3.0", "0.4.0", "0.4.1+build.1", "0.4.2-rc.1", "1.0.0"):
        chart_yaml = f"apiVersion: v2\nname: ranged\nversion: {version}\n"
        pushed[version] = package("ranged", {"Chart.yaml": chart_yaml})
        push_chart(tmp_path, repository, pushed[version])
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"charts:\n  - {{oci: 'oci://{repository}', version: '~0.4'}}\n")
    output = tmp_path / "ranged.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert result.returncode == 0, result.stderr
    (record,) = bundle_manifest(output)["contents"]
    # the highest tag meeting ~0.4, read back with '_' as '+'; no pre-release
    assert (record["name"], record["version"]) == ("ranged", "0.4.1+build.1")
    with tarfile.open(output) as archive:
        member = archive.extractfile("charts/ranged/0.4.1+build.1/ranged-0.4.1_build.1.tgz")
        assert member is not None and member.read() == pushed["0.4.1+build.1"]
    spec.write_text(f"charts:\n  - {{oci: 'oci://{repository}', version: '^2.0'}}\n")
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    assert_clean_failure(result, 1, "'^2.0'", "no tag matches", "0.4.1+build.1, 0.4.2-rc.1")


def test_a_keyring_verifies_the_provenance_signature(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey, gnupg: Path
) -> None:
    """Given a keyring (as helm pull --verify --keyring), the .prov's OpenPGP signature
    is checked too: by the signer's key it passes and the record names the key; by a
    key the keyring lacks, with a text changed after signing, or without a .prov, collect
    fails in one line naming the chart and file."""
    data = lib_chart("3.0.0")
    chart_yaml = "apiVersion: v2\nname: lib\nversion: 3.0.0\nkeywords:\n- signed\n"
    prov = sign_provenance(gnupg, chart_yaml, "lib-3.0.0.tgz", data)
    entry = {"version": "3.0.0", "digest": hashlib.sha256(data).hexdigest(),
             "urls": ["lib-3.0.0.tgz"]}  # fmt: skip
    index = yaml.safe_dump({"apiVersion": "v1", "entries": {"lib": [entry]}}).encode()
    served = {
        "signed": prov,
        "forged": prov.replace(b"- - signed", b"- - forged"),  # the digest still matches
        "bare": None,
    }
    for repo, provenance in served.items():
        release_server.add_plain(f"{repo}-repo/index.yaml", index)
        release_server.add_plain(f"{repo}-repo/lib-3.0.0.tgz", data)
        if provenance is not None:
            release_server.add_plain(f"{repo}-repo/lib-3.0.0.tgz.prov", provenance)
    own = export_public_key(gnupg, tmp_path, armor=False)
    with gnupg_home(tmp_path / "other-gnupg") as other_home:
        other = export_public_key(other_home, tmp_path)

    def collect(keyring: Path, repo: str) -> subprocess.CompletedProcess[str]:
        url = release_server.plain_url(f"{repo}-repo")
        spec = tmp_path / f"{repo}.yaml"
        spec.write_text(
            f"charts:\n  - {{repo: '{url}', name: lib, version: 3.0.0, keyring: '{keyring}'}}\n"
        )
        output = tmp_path / f"{repo}-{keyring.name}.tar"
        return run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)

    result = collect(own, "signed")
    assert result.returncode == 0, result.stderr
    (record,) = bundle_manifest(tmp_path / f"signed-{own.name}.tar")["contents"]
    (line,) = record["provenance"]
    assert line.startswith("lib-3.0.0.tgz.prov: package sha256 matched, OpenPGP signature verified")
    where = "chart lib 3.0.0: lib-3.0.0.tgz.prov: "
    assert_clean_failure(collect(other, "signed"), 1, where, "which the keyring lacks")
    assert_clean_failure(collect(own, "forged"), 1, where, "does not match the signed text")
    assert_clean_failure(collect(own, "bare"), 1, where, "missing, and the entry's keyring")


def test_hostile_keyrings_and_signatures_fail_in_one_line(gnupg: Path, tmp_path: Path) -> None:
    prov = sign_provenance(gnupg, "name: web\n", "web-1.2.0.tgz", b"package")
    key = export_public_key(gnupg, tmp_path, armor=False).read_bytes()
    where = "chart web 1.2.0: web-1.2.0.tgz.prov"
    keys = read_keyring(key, "keyring k")
    assert "verified" in check_provenance(prov, ("web-1.2.0.tgz",), PACKAGE_SHA, where, keys)
    for data, needle in (
        (b"not a key", "not OpenPGP data"),
        (key[:20], "truncated OpenPGP packet"),
        (b"\x99" * (2 << 20), "larger than"),
    ):
        with pytest.raises(InputError, match=needle):
            read_keyring(data, "keyring k")
    head = prov[: prov.index(b"-----BEGIN PGP SIGNATURE-----")]
    packet = base64.b64encode(
        b"".join(
            base64.b64decode(line)
            for line in prov.split(b"\n\n")[-1].splitlines()
            if line and not line.startswith((b"=", b"-"))
        )[:12]
    )
    for block, needle in ((b"!!!", "not base64"), (packet, "truncated OpenPGP packet")):
        broken = head + b"-----BEGIN PGP SIGNATURE-----\n\n" + block
        with pytest.raises(InputError, match=needle) as caught:
            check_provenance(
                broken + b"\n-----END PGP SIGNATURE-----\n",
                ("web-1.2.0.tgz",), PACKAGE_SHA, where, keys,
            )  # fmt: skip
        assert str(caught.value).startswith(where)


def test_verify_checks_the_provenance_digest(
    chart_bundle: ChartBundle, tmp_path: Path, gnupg: Path
) -> None:
    path = "charts/web/1.2.0/web-1.2.0.tgz.prov"
    other = sign_provenance(gnupg, WEB_PROV_CHART, "web-1.2.0.tgz", b"another package")
    private, public = tamper.new_key(tmp_path)
    bundle = tamper.resign(chart_bundle.path, tmp_path / "f.tar", private, replace={path: other})
    result = run_airgap("verify", bundle, "--key", public, "--format", "json")
    assert result.returncode == 1, result.stdout
    failures = json.loads(result.stdout)["failures"]
    assert any(f"{path}: promises sha256:" in f["message"] for f in failures), failures


PACKAGE_SHA = hashlib.sha256(b"package").hexdigest()
GOOD_BODY = message_block("name: web\nversion: 1.2.0\n", "web-1.2.0.tgz", b"package")
SIGNATURE = "-----BEGIN PGP SIGNATURE-----\n\niHUEARYKAB0=\n-----END PGP SIGNATURE-----\n"


def clearsigned(body: str, header: str = "Hash: SHA512") -> bytes:
    return f"-----BEGIN PGP SIGNED MESSAGE-----\n{header}\n\n{body}{SIGNATURE}".encode()


@pytest.mark.parametrize(
    ("data", "error", "needle"),
    [
        (clearsigned(GOOD_BODY.replace(PACKAGE_SHA, "0" * 64)), DigestMismatchError, "promises"),
        (clearsigned(GOOD_BODY.replace("web-1.2.0.tgz", "x.tgz")), InputError, "names no digest"),
        (clearsigned(GOOD_BODY.replace("sha256:", "sha512:")), InputError, "not sha256:"),
        (clearsigned(GOOD_BODY.replace("\n...\n", "\n")), InputError, "no '...' line"),
        (clearsigned("name: web\n\n...\nfiles: [a]\n"), InputError, "no files: mapping"),
        (clearsigned(GOOD_BODY, "Hash: SHA512\x1b[2J"), InputError, "malformed armor header"),
        (clearsigned(GOOD_BODY)[: -len(SIGNATURE)], InputError, "no -----BEGIN PGP SIGNATURE"),
        (b"helm: not signed\n", InputError, "not an OpenPGP clearsigned message"),
        (b"\xff\xfe" * 10, InputError, "not UTF-8"),
        (clearsigned(GOOD_BODY + "#" * (2 << 20) + "\n"), InputError, "larger than"),
    ],
)
def test_hostile_provenance_fails_in_one_line(
    data: bytes, error: type[AirgapError], needle: str
) -> None:
    where = "chart web 1.2.0: web-1.2.0.tgz.prov"
    check_provenance(clearsigned(GOOD_BODY), ("web-1.2.0.tgz",), PACKAGE_SHA, where)
    with pytest.raises(error) as caught:
        check_provenance(data, ("web-1.2.0.tgz",), PACKAGE_SHA, where)
    message = str(caught.value)
    assert message.startswith(where) and needle in message and "\n" not in message


def test_import_pushes_oci_helm_charts_and_writes_values(
    chart_bundle: ChartBundle,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    registry: RegistryServer = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "import", chart_bundle.path, "--key", signing_key.public, "--registry",
        f"{registry.host}/mirror", "--output-dir", out, "-q",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    client = oras_registry()
    for name, tag, expected in (
        ("web", "1.2.0", chart_bundle.web),
        ("lib", "1.1.0", chart_bundle.lib),
        ("ocichart", "0.3.0_build.1", chart_bundle.oci_chart),
    ):
        target = f"{registry.host}/mirror/charts/{name}:{tag}"
        manifest = client.get_manifest(target)
        assert manifest["config"]["mediaType"] == HELM_CONFIG
        layer_types = [layer["mediaType"] for layer in manifest["layers"]]
        assert layer_types[0] == HELM_CHART
        if name == "web":
            assert layer_types[1:] == [HELM_PROVENANCE]
        content = client.get_blob(target, manifest["layers"][0]["digest"]).content
        assert content == expected, name  # byte for byte
        config = json.loads(client.get_blob(target, manifest["config"]["digest"]).content)
        chart = read_chart(expected, name)
        assert (config["name"], config["version"]) == (chart.name, chart.version)
        assert manifest["annotations"]["org.opencontainers.image.version"] == chart.version
    # values point every values image at the mirror, pinned where the chart reads digests
    values = yaml.safe_load((out / "charts/web/values-airgap.yaml").read_text())
    assert values["image"]["registry"] == registry.host
    assert values["image"]["digest"].startswith("sha256:")
    # the dependency web does not vendor, pointed at the mirror through web's values
    cache = parse_reference(
        f"{values['cache']['image']['repository']}:{values['cache']['image']['tag']}"
    )
    assert (cache.registry, cache.repository) == (
        registry.host,
        f"mirror/{parse_reference(chart_bundle.images.docker).repository}",
    )
    controller = values["controller"]["image"]  # its registry beside it: the merge's wins
    assert controller["registry"] == registry.host and controller["digest"].startswith("sha256:")
    for reference in (
        f"{values['image']['registry']}/{values['image']['repository']}@{values['image']['digest']}",
        f"{controller['registry']}/{controller['image']}:{controller['tag']}@{controller['digest']}",
        values["sidecar"]["image"],
        values["sub"]["image"]["repository"] + ":" + values["sub"]["image"]["tag"],
    ):
        ref = parse_reference(reference)
        assert ref.registry == registry.host, reference
        by = f"{ref.name}@{ref.digest}" if ref.digest else str(ref)
        raw = skopeo.raw_manifest(by, registry=registry)
        assert not ref.digest or sha256_digest(raw) == ref.digest
    proxy = yaml.safe_load((out / "charts/web/helmchartproxy.yaml").read_text())
    schema = json.loads(HCP_SCHEMA.read_text())
    proxies = sorted(out.glob("charts/*/helmchartproxy.yaml"))
    assert [p.parent.name for p in proxies] == ["ocichart", "web"]
    for path in proxies:  # CAAPH's own CRD schema, unknown fields refused
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):  # the schema is strict: a field
        jsonschema.validate({**proxy, "spec": {**proxy["spec"], "caFile": "x"}}, schema)
    assert proxy["apiVersion"] == "addons.cluster.x-k8s.io/v1alpha1"
    assert proxy["spec"]["repoURL"] == f"oci://{registry.host}/mirror/charts"
    assert (proxy["spec"]["chartName"], proxy["spec"]["version"]) == ("web", "1.2.0")
    assert yaml.safe_load(proxy["spec"]["valuesTemplate"]) == values
    # the static repository: index.yaml + packages, digests of the packages as carried
    index = yaml.safe_load((out / "charts/repository/index.yaml").read_text())
    for name, expected in (("web", chart_bundle.web), ("lib", chart_bundle.lib)):
        (entry,) = index["entries"][name]
        assert entry["digest"] == hashlib.sha256(expected).hexdigest()
        assert (out / "charts/repository" / entry["urls"][0]).read_bytes() == expected
    assert (out / "charts/repository/web-1.2.0.tgz.prov").read_bytes() == chart_bundle.prov


def test_status_asks_for_every_chart_and_names_a_lost_layer(
    chart_bundle: ChartBundle, signing_key: SigningKey, registry_factory: RegistryFactory
) -> None:
    """The OCI charts import builds are rebuilt by status from the bundle: all there
    is Available; the web chart's package layer lost from the registry's storage is
    Degraded, naming the chart, where it is and the blob."""
    registry: RegistryServer = registry_factory("plain")
    target: list[str | Path] = [
        "--key",
        signing_key.public,
        "--registry",
        f"{registry.host}/mirror",
    ]
    assert run_airgap("import", chart_bundle.path, *target, "-q").returncode == 0
    status: list[str | Path] = ["status", chart_bundle.path, *target, "--format", "json"]
    result = run_airgap(*status)
    assert result.returncode == 0, result.stdout
    available = json.loads(result.stdout)["conditions"][0]
    assert available["reason"] == "AllPresent"
    assert "and 4 artifacts present" in available["message"]  # web, lib, cache, ocichart
    layer = sha256_digest(chart_bundle.web)
    registry.blob_path(layer).unlink()
    result = run_airgap(*status)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    degraded = document["conditions"][2]
    assert (degraded["status"], degraded["reason"]) == ("True", "ArtifactsDamaged")
    where = f"chart web:1.2.0 at {registry.host}/mirror/charts/web:1.2.0: missing blob {layer}"
    assert where in degraded["message"]
    assert [(a["kind"], a["state"]) for a in document["artifacts"]] == [("chart", "damaged")]
