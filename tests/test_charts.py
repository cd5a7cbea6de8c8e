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
import dataclasses
import hashlib
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jsonschema
import oras.provider
import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.content.chart import read_chart
from airgap.content.constraints import best, satisfies
from airgap.content.helm import HELM_CHART, HELM_CONFIG, HELM_PROVENANCE, index_entries
from airgap.content.helmoci import helm_config
from airgap.content.kinds import ChartLocation, ContentKind
from airgap.content.openpgp import read_keyring
from airgap.content.provenance import PROVENANCE_NOTE, check_provenance
from airgap.core.errors import AirgapError, DigestMismatchError, InputError, NotFoundError
from airgap.oci.manifest import sha256_digest
from airgap.oci.reference import Reference, parse_reference
from tests.harness import skopeo, tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.chartrepo import package
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
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


def to_mirror(reference: str, digest: str | None = None) -> tuple[Reference, str | None]:
    """A mirror target: the image under mirror.local:5000/capi, by tag."""
    source = parse_reference(reference)
    return parse_reference(f"mirror.local:5000/capi/{source.repository}:{source.tag}"), digest


# --- constraints and the spec --------------------------------------------------------------


@pytest.mark.unit
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


@pytest.mark.unit
def test_best_version_and_bad_constraint() -> None:
    assert best(["1.0.0", "1.1.0", "2.0.0", "1.2.0-rc.1"], "^1.0.0") == "1.1.0"
    assert best(["1.0.0"], ">=2") is None
    with pytest.raises(InputError, match="invalid version constraint"):
        satisfies("1.0.0", ">=one")
    # pre-releases semver refuses: an empty identifier, a numeric one with a leading zero
    for constraint in ("53-.", "^8-.", "1.2.3-01", "~1.2.3-rc..1"):
        with pytest.raises(InputError, match="invalid pre-release in version constraint"):
            satisfies("1.2.3", constraint)


@pytest.mark.unit
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


@pytest.mark.unit
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


# --- the charts of the collect -> verify -> import test ----------------------------------

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  labels:
    {{- include "lib.labels" . | nindent 4 }}
spec:
  template:
    spec:
      containers:
        - name: web
          image: "{{ .Values.image.registry }}/{{ .Values.image.repository }}{{ if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag }}{{ end }}"
        - name: sidecar
          image: {{ .Values.sidecar.image }}
        - name: controller
          {{- with (merge .Values.controller.image .Values.global.image) }}
          image: {{ .registry }}/{{ .image }}:{{ .tag }}{{ if .digest }}@{{ .digest }}{{ end }}
          {{- end }}
"""

TEST_HOOK = """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    helm.sh/hook: test
spec:
  containers:
    - name: test
      image: docker.io/never/pulled:v1
"""

CACHE = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: cache
spec:
  template:
    spec:
      containers:
        - name: cache
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
"""

LIB_HELPERS = """\
{{- define "lib.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
{{- end -}}
"""


@dataclass(frozen=True)
class Images:
    app: str
    sidecar: str
    multi: str
    docker: str


def web_chart(images: Images, version: str = "1.2.0", repo: str = "") -> bytes:
    """A chart with a vendored subchart, a library and a dependency fetched beside it
    (cache, whose repository web sets and whose tag is cache's own default), an image
    through ``merge`` with global values, and a ``helm test`` hook."""
    app, multi = parse_reference(images.app), parse_reference(images.multi)
    sub = package(
        "sub",
        {
            "Chart.yaml": "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
            "values.yaml": "enabled: false\n",
        },
    )
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
                    # ingress-nginx's way: image beside tag, the registry merged in
                    "global": {"image": {"registry": multi.registry}},
                    "controller": {"image": {"image": multi.repository, "tag": multi.tag}},
                    # a dependency it does not vendor, its tag left to it (Argo CD's way
                    # with redis-ha): the image is docker's
                    "cache": {"image": {"repository": images.docker.rsplit(":", 1)[0]}},
                }
            ),
            "templates/deployment.yaml": DEPLOYMENT,
            "templates/tests/test-connection.yaml": TEST_HOOK,
            "charts/sub-0.1.0.tgz": sub,
        },
    )


def cache_chart(images: Images) -> bytes:
    """The dependency web sets the repository of: rendered alone, it names an image on
    docker.io that no test may reach."""
    tag = parse_reference(images.docker).tag
    values = f"image:\n  repository: docker.io/unused/default\n  tag: '{tag}'\n"
    chart_yaml = "apiVersion: v2\nname: cache\nversion: 1.0.0\n"
    return package(
        "cache",
        {"Chart.yaml": chart_yaml, "values.yaml": values, "templates/statefulset.yaml": CACHE},
    )


def lib_chart(version: str) -> bytes:
    return package(
        "lib",
        {
            "Chart.yaml": f"apiVersion: v2\nname: lib\nversion: {version}\ntype: library\n",
            "templates/_helpers.tpl": LIB_HELPERS,
        },
    )


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.e2e
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
    # Helm renders the images: nothing is left unresolved, the render settings travel
    assert "warnings" not in web and "warnings" not in oci
    assert json.loads(web["render"]) == {
        "kubeVersion": "v1.34.0",
        "namespace": "default",
        "values": {},
    }
    # the .prov's package digest was checked, its OpenPGP signature not: the record says so
    assert web["provenance"] == [f"web-1.2.0.tgz.prov: {PROVENANCE_NOTE}"]
    assert "provenance" not in oci
    assert "Chart provenance" in result.stdout and "signature not checked" in result.stdout
    inventory = json.loads(run_airgap("inspect", chart_bundle.path, "--format", "json").stdout)
    assert inventory["contents"][0]["provenance"] == web["provenance"]


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.integration
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


@pytest.mark.e2e
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


@pytest.mark.unit
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


@pytest.mark.e2e
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
    # values point every rendered image at the mirror, pinned by digest
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


@pytest.mark.e2e
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


# --- values: collect renders with them, verify re-renders, import proves its own -----------

AGENT = """\
{{- if ne .Release.Namespace "kube-system" }}{{ fail "the agent lives in kube-system" }}{{ end }}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}
spec:
  template:
    spec:
      containers:
        - name: agent
          image: "{{ .Values.image.registry }}/{{ required "image.repository is required" .Values.image.repository }}:{{ .Values.image.tag }}"
{{- if .Values.sidecar.enabled }}
        - name: sidecar
          image: {{ .Values.sidecar.image }}
{{- end }}
{{- if .Values.literal }}
        - name: literal
          image: {{ .Values.literal }}
{{- end }}
"""


def agent_repository(release_server: ReleaseServer, images: dict[str, TestImage]) -> str:
    """A repository with the agent chart: its image left to the user's values, its
    sidecar off by default."""
    data = package(
        "agent",
        {
            "Chart.yaml": "apiVersion: v2\nname: agent\nversion: 1.0.0\n",
            "values.yaml": yaml.safe_dump(
                {
                    "image": {"registry": "", "repository": "", "tag": ""},
                    "sidecar": {"enabled": False, "image": images["sidecar"].reference},
                    "literal": "",
                }
            ),
            "templates/daemonset.yaml": AGENT,
        },
    )
    release_server.add_plain("agent-repo/agent-1.0.0.tgz", data)
    entry = {"version": "1.0.0", "digest": hashlib.sha256(data).hexdigest()}
    index = {"apiVersion": "v1", "entries": {"agent": [{**entry, "urls": ["agent-1.0.0.tgz"]}]}}
    release_server.add_plain("agent-repo/index.yaml", yaml.safe_dump(index).encode())
    return release_server.plain_url("agent-repo") + "/"


@pytest.mark.e2e
def test_collect_renders_with_the_entrys_values_and_import_proves_its_own(
    tmp_path: Path,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    repo = agent_repository(release_server, source_images)
    app = parse_reference(source_images["app"].reference)
    spec = tmp_path / "spec.yaml"
    entry = f"charts:\n  - repo: '{repo}'\n    name: agent\n    version: 1.0.0\n"
    # the chart refuses the namespace, then needs a value the entry does not give: one
    # line naming the chart and Helm's message
    bundle = tmp_path / "agent.tar"
    for text, message in (
        (entry, "the agent lives in kube-system"),
        (entry + "    namespace: kube-system\n", "image.repository is required"),
    ):
        spec.write_text(text)
        result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle)
        where = f"chart agent 1.0.0 from {repo}: Helm cannot render it:"
        assert_clean_failure(result, 2, where, message)
    # its values in a file beside the spec, the tag and sidecar inline, its namespace
    (tmp_path / "agent-values.yaml").write_text(
        yaml.safe_dump({"image": {"registry": app.registry, "repository": app.repository}})
    )
    spec.write_text(
        entry + "    valuesFiles: [agent-values.yaml]\n"
        f"    values: {{image: {{tag: '{app.tag}'}}, sidecar: {{enabled: true}}}}\n"
        "    namespace: kube-system\n    releaseName: node-agent\n"
    )
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle)
    assert result.returncode == 0, result.stderr
    (record,) = bundle_manifest(bundle)["contents"]
    sidecar = str(parse_reference(source_images["sidecar"].reference))
    assert record["images"] == [str(app), sidecar]  # exactly what Helm rendered
    render = json.loads(record["render"])
    assert render["values"]["sidecar"] == {"enabled": True}
    assert (render["namespace"], render["releaseName"]) == ("kube-system", "node-agent")
    inventory = json.loads(run_airgap("inspect", bundle, "--format", "json").stdout)
    assert inventory["contents"][0]["render"] == render
    # verify renders it again from the bundle alone, with no network at all
    verify = [*AIRGAP, "verify", str(bundle), "--key", str(signing_key.public)]
    result = subprocess.run(["unshare", "-rn", *verify], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    # values edited in the record (consistently re-signed): the render names an image
    # the record does not list, and verify says which
    multi = str(parse_reference(source_images["multiarch"].reference))

    def edit(manifest: BundleManifest) -> BundleManifest:
        (content,) = manifest.contents
        settings = json.loads(content.render or "{}")
        settings["values"]["literal"] = multi
        edited = dataclasses.replace(content, render=json.dumps(settings))
        return dataclasses.replace(manifest, contents=[edited])

    edited = tamper.resign(bundle, tmp_path / "edited.tar", signing_key.private, edit=edit)
    result = run_airgap("verify", edited, "--key", signing_key.public)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"renders image {multi}, which the record lacks" in result.stdout + result.stderr
    # import: values-airgap.yaml is the entry's values pointed at the mirror, and the
    # HelmChartProxy carries the same
    registry: RegistryServer = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "import", bundle, "--key", signing_key.public, "--registry", f"{registry.host}/m",
        "--output-dir", out, "-q",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    values = yaml.safe_load((out / "charts/agent/values-airgap.yaml").read_text())
    assert values["image"]["registry"] == registry.host
    assert values["image"]["repository"] == f"m/{app.repository}"
    assert values["sidecar"]["enabled"] is True
    assert values["sidecar"]["image"].startswith(f"{registry.host}/m/")
    assert "@sha256:" in values["sidecar"]["image"]
    proxy = yaml.safe_load((out / "charts/agent/helmchartproxy.yaml").read_text())
    jsonschema.validate(proxy, json.loads(HCP_SCHEMA.read_text()))
    assert yaml.safe_load(proxy["spec"]["valuesTemplate"]) == values
    assert (proxy["spec"]["namespace"], proxy["spec"]["releaseName"]) == (
        "kube-system",
        "node-agent",
    )


@pytest.mark.e2e
def test_an_image_values_cannot_point_at_the_mirror_fails_import_by_name(
    tmp_path: Path,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    """An image the chart renders from a value airgap does not recognise as one (here
    ``literal``, a plain string under a key that does not say image): collect carries
    it, import cannot point it at the mirror and says which."""
    repo = agent_repository(release_server, source_images)
    app = parse_reference(source_images["app"].reference)
    multi = str(parse_reference(source_images["multiarch"].reference))
    spec = tmp_path / "spec.yaml"
    values = {"image": {"registry": app.registry, "repository": app.repository, "tag": app.tag}}
    spec.write_text(
        f"charts:\n  - repo: '{repo}'\n    name: agent\n    version: 1.0.0\n"
        f"    namespace: kube-system\n    values: {json.dumps({**values, 'literal': multi})}\n"
    )
    bundle = tmp_path / "agent.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle)
    assert result.returncode == 0, result.stderr
    (record,) = bundle_manifest(bundle)["contents"]
    assert record["images"] == [str(app), multi]
    registry: RegistryServer = registry_factory("plain")
    result = run_airgap(
        "import", bundle, "--key", signing_key.public, "--registry", f"{registry.host}/m",
        "--output-dir", tmp_path / "out", "-q",
    )  # fmt: skip
    assert_clean_failure(result, 1, "chart agent 1.0.0: rendered with values-airgap.yaml", multi)


@pytest.mark.e2e
def test_without_helms_engine_a_chart_command_fails_in_one_line(
    tmp_path: Path,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> None:
    """Where the binding has no wheel (aarch64) airgap still starts; a chart entry then
    fails in one line (the import blocked here as a missing wheel leaves it)."""
    repo = agent_repository(release_server, source_images)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"charts:\n  - {{repo: '{repo}', name: agent, version: 1.0.0}}\n")
    blocked = "import sys; sys.modules['helm_python'] = None; from airgap.cli import main; main()"
    command = [sys.executable, "-c", blocked, "collect", str(spec)]
    command += ["--sign-key", str(signing_key.private), "-o", str(tmp_path / "x.tar")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert_clean_failure(result, 1, "Helm's engine is not available here", "helm-python-sdk")
