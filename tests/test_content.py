"""Content besides providers (cert-manager, the operator, cluster templates): the spec,
fetching from every source type, charts, collect, verify, the inventory and policy.

Releases come from the fake GitHub laid out like the real ones (tests/harness/
management.py), images from the real source registry; every bundle is collected and
verified through the CLI.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from airgap.bundle.format import ContentRecord
from airgap.bundle.manifest import BundleManifest
from airgap.content.chart import read_chart
from airgap.content.chartrender import RenderSettings, chart_images
from airgap.content.chartvalues import values_images, values_overrides
from airgap.content.fetch import ContentRequest, fetch_content, request_for
from airgap.content.helmengine import install_values
from airgap.content.kinds import ContentKind, ContentSpec, operator_chart_file
from airgap.core.errors import InputError, NotFoundError
from airgap.oci.reference import Reference, parse_reference
from airgap.sources.directory import index_page_files
from airgap.sources.forurl import source_for
from tests.harness import tamper
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.management import (
    OPERATOR_VERSION,
    cert_manager_yaml,
    cluster_templates,
    operator_chart,
    operator_components_yaml,
    publish_operator,
)
from tests.harness.management_fixtures import ManagementBundle, management_spec
from tests.harness.releases import ReleaseServer
from tests.harness.specs import assert_spec_error, spec_of

NO_ENV: dict[str, str] = {}


# --- the spec --------------------------------------------------------------------------


@pytest.mark.unit
def test_spec_reads_cert_manager_operator_and_templates(tmp_path: Path) -> None:
    spec = spec_of(
        "certManager: {version: v1.16.1}\n"
        "operator: {version: v0.24.0, url: 'file:///srv/capi-operator'}\n"
        "templates: false\n",
        tmp_path,
    )
    assert spec.cert_manager == ContentSpec(ContentKind.CERT_MANAGER, "v1.16.1")
    assert spec.operator == ContentSpec(
        ContentKind.OPERATOR, "v0.24.0", "file:///srv/capi-operator"
    )
    assert spec.templates is False
    assert spec.contents == (spec.cert_manager, spec.operator)
    assert spec.cert_manager.source_url == "https://github.com/cert-manager/cert-manager/releases"
    # templates default to true
    assert spec_of("certManager: {version: latest}\n", tmp_path).templates is True


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("certManager: {versoin: v1}\n", 1, "certManager.versoin: unknown key"),
        ("images: [nginx]\ncertManager: {url: 'https://x.example/a'}\n", 2, "certManager.version"),
        ("operator:\n  version: ../v1\n", 2, "operator.version: invalid version"),
        ("operator:\n  version: v1\n  url: ftp://x/y\n", 3, "operator.url: unsupported URL"),
        ("images: [nginx]\ntemplates: maybe\n", 2, "templates: must be true or false"),
        ("certManager: v1.16.1\n", 1, "certManager: must be a mapping"),
        ("templates: true\n", 1, "nothing to collect"),
    ],
)
def test_spec_errors_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    assert_spec_error(text, tmp_path, line, needle)


@pytest.mark.e2e
def test_spec_error_through_the_cli(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("providers: []\noperator: {version: v0.24.0, chart: true}\n")
    result = run_airgap("collect", spec, "--sign-key", tmp_path / "none.key", "-o", tmp_path / "x")
    assert_clean_failure(result, 2, f"{spec}:2:", "operator.chart: unknown key")


# --- charts ------------------------------------------------------------------------------

OPERATOR_IMAGE = "registry.k8s.io/capi-operator/cluster-api-operator:v0.24.0"


def operator_images(values: dict[str, Any]) -> list[str]:
    """What Helm renders the operator chart's deployment as, with ``values``."""
    package = operator_chart(OPERATOR_IMAGE)
    return chart_images([(package, "chart.tgz")], RenderSettings(values), "cluster-api-operator")


@pytest.mark.unit
def test_helm_renders_the_operator_image() -> None:
    chart = read_chart(operator_chart(OPERATOR_IMAGE), "chart.tgz")
    assert (chart.name, chart.version, chart.app_version) == (
        "cluster-api-operator",
        "0.24.0",
        "0.24.0",
    )
    assert operator_images({}) == [OPERATOR_IMAGE]
    assert operator_chart_file(OPERATOR_VERSION) == "cluster-api-operator-0.24.0.tgz"


@pytest.mark.unit
def test_values_overrides_point_the_chart_at_the_mirror() -> None:
    package = operator_chart(OPERATOR_IMAGE)
    computed = install_values([(package, "chart.tgz")], {})
    digest = "sha256:" + "ab" * 32
    target = parse_reference("mirror.local:5000/capi/capi-operator/cluster-api-operator:v0.24.0")

    def where(reference: str) -> tuple[Reference, str | None] | None:
        return (target, digest) if reference == OPERATOR_IMAGE else None

    values, _ = values_overrides(computed, "0.24.0", [OPERATOR_IMAGE], where)
    assert values == {
        "image": {
            "manager": {
                "repository": "mirror.local:5000/capi/capi-operator/cluster-api-operator",
                "tag": "v0.24.0",
                "digest": digest,
            }
        }
    }
    # what Helm renders with them: the mirror, pinned (the template reads .digest)
    assert operator_images(values) == [f"{target.name}@{digest}"]
    unpinned, _ = values_overrides(computed, "0.24.0", [OPERATOR_IMAGE], lambda r: (target, None))
    assert operator_images(unpinned) == [str(target)]


def chart_package(files: dict[str, bytes], top: str = "c") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


@pytest.mark.unit
def test_chart_values_shapes() -> None:
    values = {
        "image": "quay.io/a/b:v1",
        "sidecar": {"image": {"registry": "ghcr.io", "repository": "x/y", "tag": "1.0"}},
        "agent": {"image": {"repository": "docker.io/z/w"}},  # tag: appVersion
        "broken": {"image": {"repository": "UPPER/case"}},
        "database": {"repository": "ignored/without/an-image-key"},
    }
    assert values_images(values) == ["quay.io/a/b:v1", "ghcr.io/x/y:1.0"]  # no appVersion
    target = parse_reference("m.local/p/x/y:1.0")
    rendered = ["quay.io/a/b:v1", "ghcr.io/x/y:1.0", "my.registry/z/w:v9"]
    overrides, expected = values_overrides(
        values, "v9", rendered, lambda ref: (target, "sha256:" + "0" * 64)
    )
    digest = "sha256:" + "0" * 64
    # the registry split kept; the digest beside the tag (a chart that reads it pins)
    assert overrides["sidecar"]["image"] == {
        "registry": "m.local",
        "repository": "p/x/y",
        "tag": "1.0",
        "digest": digest,
    }
    # docker.io/z/w:v9 in the values, rendered behind a registry the chart adds: it is
    # that one (path and tag), its registry set apart
    assert overrides["agent"]["image"] == {
        "registry": "m.local",
        "repository": "p/x/y",
        "tag": "1.0",
        "digest": digest,
    }
    assert overrides["image"] == f"m.local/p/x/y:1.0@sha256:{'0' * 64}"
    assert "broken" not in overrides and "database" not in overrides
    assert expected[("agent", "image")] == f"m.local/p/x/y:1.0@{digest}"
    # a value whose whole name did not render is split when asked
    split, _ = values_overrides(
        values, "v9", rendered, lambda ref: (target, None), frozenset({("image",)})
    )
    assert split["image"] == "m.local/p/x/y:1.0"  # a string stays whole


@pytest.mark.unit
@pytest.mark.parametrize(
    ("package", "needle"),
    [
        (b"not gzip at all", "not a gzip-compressed chart package"),
        (gzip.compress(b"\0" * 1024), "no Chart.yaml"),
        (gzip.compress(b"x" * 4096), "not a chart package"),
        (chart_package({"values.yaml": b"a: 1\n"}), "no Chart.yaml"),
        (chart_package({"Chart.yaml": b"name: [\n"}), "malformed YAML"),
        (chart_package({"Chart.yaml": b"- a list\n"}), "not a mapping"),
        (
            chart_package({"Chart.yaml": b"name: c\nversion: 1\n# \xff\xfe\n"}),
            "not UTF-8",
        ),
    ],
)
def test_hostile_chart_packages_are_one_line_errors(package: bytes, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        read_chart(package, "hostile.tgz")


@pytest.mark.unit
def test_a_chart_bomb_is_refused_before_it_unpacks() -> None:
    bomb = gzip.compress(b"\0" * (101 << 20), compresslevel=9)  # ~100 KiB on disk
    assert len(bomb) < 1 << 20
    with pytest.raises(InputError, match="unpacks to more than 100 MiB"):
        read_chart(bomb, "bomb.tgz")


@pytest.mark.unit
def test_a_chart_file_over_helms_limit_is_refused() -> None:
    package = chart_package({"Chart.yaml": b"name: c\nversion: 1\n" + b"#" * (5 << 20) + b"\n"})
    with pytest.raises(InputError, match="larger than 5 MiB"):
        read_chart(package, "big.tgz")


# --- release sources list their files ----------------------------------------------------


@pytest.mark.unit
def test_index_page_files() -> None:
    page = (
        '<a href="../">..</a><a href="?C=M;O=A">sort</a><a href="sub/">d</a>'
        '<a href="/abs/x.yaml">a</a><a href="http://other/y.yaml">o</a>'
        "<a href='cluster-template.yaml'>t</a><A HREF=clusterclass-a.yaml>c</A>"
        '<a class="x" href="cluster-template-ha.yaml#frag">h</a>'
    )
    assert index_page_files(page) == [
        "cluster-template-ha.yaml",
        "cluster-template.yaml",
        "clusterclass-a.yaml",
    ]
    assert index_page_files("<a " * 200_000) == []  # linear, whatever the page


def provider_release(server: ReleaseServer, *, prefix: str) -> dict[str, bytes]:
    files = {
        "metadata.yaml": b"apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n",
        **cluster_templates("quay.io/x/addon:v1", "quay.io/x/job:v1"),
        "infrastructure-components.yaml": b"kind: Namespace\n",
    }
    for name, data in files.items():
        server.add_plain(f"{prefix}/v1.0.0/{name}", data)
    return files


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["github", "file", "plain-indexed", "plain"])
def test_templates_from_every_source_type(
    release_server: ReleaseServer, tmp_path: Path, kind: str
) -> None:
    expected = [
        "cluster-template-addon.yaml",
        "cluster-template.yaml",
        "clusterclass-quick-start.yaml",
    ]
    owner, repo = release_server.new_repo("capx")
    files = provider_release(release_server, prefix=f"{owner}/{repo}")
    if kind == "github":
        release_server.add_release(owner, repo, "v1.0.0", files)
        url = release_server.repo_url(owner, repo)
    elif kind == "file":
        base = tmp_path / "repo" / "infrastructure-x"
        (base / "v1.0.0").mkdir(parents=True)
        for name, data in files.items():
            (base / "v1.0.0" / name).write_bytes(data)
        (base / "v1.0.0" / "notes.txt").write_text("not a template")
        url = base.as_uri()
    else:
        if kind == "plain-indexed":
            release_server.index_plain(f"{owner}/{repo}")
        url = release_server.plain_url(f"{owner}/{repo}")
    with httpx.Client(follow_redirects=True) as client:
        source = source_for(url, client, NO_ENV)
        request = ContentRequest(ContentKind.TEMPLATES, "infrastructure-x", "v1.0.0", source)
        fetched = fetch_content(request, tmp_path / "out")
    if kind == "plain":  # a plain directory without an index page cannot be listed
        assert fetched is None
        return
    assert fetched is not None
    assert [path.name for path in fetched.files] == expected
    for path in fetched.files:
        assert path.parent == tmp_path / "out/providers/infrastructure-x/v1.0.0"
        assert path.read_bytes() == files[path.name]
    # the Job's defaulted image is carried; the ConfigMap's nested manifest is text
    assert fetched.images == ["quay.io/x/job:v1"]
    assert len(fetched.unresolved) == 1 and "CUSTOM_IMAGE" in fetched.unresolved[0]


@pytest.mark.integration
def test_operator_without_chart_and_pinned_url(
    release_server: ReleaseServer, tmp_path: Path
) -> None:
    owner, repo = release_server.new_repo("operator")
    url = publish_operator(release_server, OPERATOR_IMAGE, owner=owner, repo=repo, chart=False)
    with httpx.Client(follow_redirects=True) as client:
        pinned = f"{url}/download/{OPERATOR_VERSION}/operator-components.yaml"
        spec = ContentSpec(ContentKind.OPERATOR, "latest", pinned)
        fetched = fetch_content(request_for(spec, client), tmp_path)
        assert fetched is not None
        assert [p.name for p in fetched.files] == ["operator-components.yaml"]
        assert fetched.version == OPERATOR_VERSION
        assert fetched.images == [OPERATOR_IMAGE]
        with pytest.raises(InputError, match="conflicts with version"):
            request_for(ContentSpec(ContentKind.OPERATOR, "v0.1.0", pinned), client)


@pytest.mark.integration
def test_plain_directory_tries_the_optional_chart(
    release_server: ReleaseServer, tmp_path: Path
) -> None:
    owner, repo = release_server.new_repo("operator-plain")
    base = f"{owner}/{repo}/{OPERATOR_VERSION}"
    release_server.add_plain(
        f"{base}/operator-components.yaml", operator_components_yaml(OPERATOR_IMAGE).encode()
    )
    release_server.add_plain(
        f"{base}/{operator_chart_file(OPERATOR_VERSION)}", operator_chart(OPERATOR_IMAGE)
    )
    with httpx.Client(follow_redirects=True) as client:
        source = source_for(release_server.plain_url(f"{owner}/{repo}"), client, NO_ENV)
        request = ContentRequest(
            ContentKind.OPERATOR, "cluster-api-operator", OPERATOR_VERSION, source
        )
        fetched = fetch_content(request, tmp_path)
    assert fetched is not None
    assert [p.name for p in fetched.files] == [
        "operator-components.yaml",
        "cluster-api-operator-0.24.0.tgz",
    ]


@pytest.mark.integration
def test_missing_required_file_names_the_release(
    release_server: ReleaseServer, tmp_path: Path
) -> None:
    owner, repo = release_server.new_repo("cm")
    release_server.add_release(owner, repo, "v1.16.1", {"cert-manager.crds.yaml": b"{}"})
    with httpx.Client(follow_redirects=True) as client:
        source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
        request = ContentRequest(ContentKind.CERT_MANAGER, "cert-manager", "v1.16.1", source)
        with pytest.raises(NotFoundError, match="has no file cert-manager.yaml"):
            fetch_content(request, tmp_path)


# --- collect -------------------------------------------------------------------------------


@pytest.mark.integration
def test_management_bundle_holds_every_kind(management_bundle: ManagementBundle) -> None:
    manifest = management_bundle.manifest
    kinds = [(c.kind, c.name, c.version) for c in manifest.contents]
    assert kinds == [
        ("certManager", "cert-manager", "v1.16.1"),
        ("operator", "cluster-api-operator", OPERATOR_VERSION),
        ("templates", "infrastructure-docker", "v1.9.4"),  # infrastructure providers only
    ]
    cert_manager, operator, templates = manifest.contents
    assert cert_manager.files == ["content/cert-manager/v1.16.1/cert-manager.yaml"]
    assert cert_manager.source == "https://github.com/cert-manager/cert-manager/releases"
    images = management_bundle.images
    # controller, cainjector and webhook; acmesolver is a flag, not a container
    assert sorted(cert_manager.images) == sorted(images.cert_manager.containers)
    assert images.cert_manager.acmesolver not in {i.reference for i in manifest.images}
    assert operator.files == [
        f"content/cluster-api-operator/{OPERATOR_VERSION}/operator-components.yaml",
        f"content/cluster-api-operator/{OPERATOR_VERSION}/cluster-api-operator-0.24.0.tgz",
    ]
    assert operator.images == [images.operator]
    assert [f.rsplit("/", 1)[1] for f in templates.files] == [
        "cluster-template-addon.yaml",
        "cluster-template.yaml",
        "clusterclass-quick-start.yaml",
    ]
    assert all(f.startswith("providers/infrastructure-docker/v1.9.4/") for f in templates.files)
    listed = {i.reference for i in manifest.images}
    assert set(images.images) == listed
    for content in manifest.contents:
        assert set(content.images) <= listed


@pytest.mark.integration
def test_bundle_files_are_the_released_bytes(management_bundle: ManagementBundle) -> None:
    members = {m.name: m.data for m in tamper.read_members(management_bundle.path)}
    images = management_bundle.images
    assert (
        members["content/cert-manager/v1.16.1/cert-manager.yaml"]
        == cert_manager_yaml(images.cert_manager).encode()
    )
    prefix = f"content/cluster-api-operator/{OPERATOR_VERSION}"
    assert members[f"{prefix}/cluster-api-operator-0.24.0.tgz"] == operator_chart(images.operator)
    assert (
        members[f"{prefix}/operator-components.yaml"]
        == operator_components_yaml(images.operator).encode()
    )
    records = {f.path: f for f in management_bundle.manifest.files}
    for name, data in members.items():
        if name.startswith(("content/", "providers/")):
            assert records[name].sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.e2e
def test_templates_false_collects_none(management_bundle: ManagementBundle, tmp_path: Path) -> None:
    spec = management_spec(management_bundle.release_url, templates=False)
    spec["certManager"] = None
    spec["operator"] = None
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "b.tar"
    key = management_bundle.key.private
    result = run_airgap("collect", path, "--sign-key", key, "-o", out, env=management_bundle.env)
    assert result.returncode == 0, result.stderr
    assert tamper.manifest_of(out).contents == []


# --- verify, inventory, policy -------------------------------------------------------------


@pytest.mark.e2e
def test_verify_reports_contents(management_bundle: ManagementBundle) -> None:
    result = run_airgap("verify", management_bundle.path, "--key", management_bundle.key.public)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 content sets" in result.stdout.splitlines()[0]
    assert "CONTENT" in result.stdout and "operator-components.yaml (+1 more)" in result.stdout
    wide = run_airgap(
        "verify", management_bundle.path, "--key", management_bundle.key.public, "--wide"
    )
    assert "operator-components.yaml, cluster-api-operator-0.24.0.tgz" in wide.stdout
    as_json = run_airgap(
        "verify", management_bundle.path, "--key", management_bundle.key.public, "--format", "json"
    )
    report = json.loads(as_json.stdout)
    assert [c["kind"] for c in report["contents"]] == ["certManager", "operator", "templates"]
    inspect = json.loads(run_airgap("inspect", management_bundle.path, "--format", "json").stdout)
    assert inspect["contents"] == report["contents"]


@pytest.mark.e2e
@pytest.mark.parametrize("sbom", ["spdx", "cyclonedx"])
def test_sbom_lists_content_files(management_bundle: ManagementBundle, sbom: str) -> None:
    result = run_airgap(
        "verify", management_bundle.path, "--key", management_bundle.key.public, "--sbom", sbom
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    records = {f.path: f.sha256 for f in management_bundle.manifest.files}
    wanted = [path for c in management_bundle.manifest.contents for path in c.files]
    if sbom == "spdx":
        found: dict[str, Any] = {
            f["fileName"].removeprefix("./"): {
                c["algorithm"]: c["checksumValue"] for c in f["checksums"]
            }
            for f in document["files"]
        }
        for path in wanted:
            assert found[path]["SHA256"] == records[path]
    else:
        found = {
            c["name"]: c["hashes"][0]["content"]
            for c in document["components"]
            if c["type"] == "file"
        }
        for path in wanted:
            assert found[path] == records[path]


@pytest.mark.e2e
def test_policy_required_content(management_bundle: ManagementBundle, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("requiredContent: [certManager, operator, templates]\n")
    args: list[str | Path] = [
        "verify",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
    ]
    assert run_airgap(*args, "--policy", policy).returncode == 0
    # content images meet the image rules too: the operator's tag is not allowed here
    policy.write_text("requiredContent: [certManager]\nforbiddenTags: [v0.24.0]\n")
    result = run_airgap(*args, "--policy", policy, "--format", "json")
    assert result.returncode == 1
    failed = {
        r["rule"]: r["offending"] for r in json.loads(result.stdout)["policy"] if not r["passed"]
    }
    assert failed == {"forbiddenTags": [management_bundle.images.operator]}
    policy.write_text("requiredContent: [charts]\n")  # a kind this bundle lacks
    result = run_airgap(*args, "--policy", policy)
    assert result.returncode == 1 and "required content missing: charts" in result.stderr
    policy.write_text("requiredContent: [helmfiles]\n")  # no such kind
    assert_clean_failure(run_airgap(*args, "--policy", policy), 2, "requiredContent", "helmfiles")


def forged(
    bundle: ManagementBundle, tmp_path: Path, edit: Callable[[BundleManifest], BundleManifest]
) -> tuple[Path, Path]:
    private, public = tamper.new_key(tmp_path)
    out = tamper.resign(bundle.path, tmp_path / "forged.tar", private, edit=edit)
    return out, public


def edit_content(index: int, **changes: Any) -> Callable[[BundleManifest], BundleManifest]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        contents = list(manifest.contents)
        contents[index] = replace(contents[index], **changes)
        return replace(manifest, contents=contents)

    return edit


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (edit_content(0, kind="helmChart"), "unknown content kind"),
        (edit_content(0, name="cert-manager-x"), "cert-manager is named 'cert-manager'"),
        (edit_content(0, version="../v1"), "invalid version"),
        (
            edit_content(0, files=["content/cert-manager/v9.9.9/cert-manager.yaml"]),
            "is not in content/cert-manager/v1.16.1/",
        ),
        (
            edit_content(1, files=["content/cluster-api-operator/v0.24.0/evil.sh"]),
            "is not a file of",
        ),
        (
            edit_content(2, name="infrastructure-other"),
            "infrastructure provider version the bundle lacks",
        ),
        (edit_content(0, images=["quay.io/not/carried:v1"]), "which the bundle lacks"),
        (
            lambda m: replace(m, contents=[*m.contents, m.contents[0]]),
            "listed twice",
        ),
        (
            lambda m: replace(
                m,
                contents=[
                    *m.contents,
                    ContentRecord(
                        "certManager", "cert-manager", "v1.15.3", "x", m.contents[0].files
                    ),
                ],
            ),
            "not in content/cert-manager/v1.15.3/",
        ),
    ],
)
def test_verify_refuses_forged_content_records(
    management_bundle: ManagementBundle,
    tmp_path: Path,
    edit: Callable[[BundleManifest], BundleManifest],
    needle: str,
) -> None:
    bundle, public = forged(management_bundle, tmp_path, edit)
    result = run_airgap("verify", bundle, "--key", public, "--format", "json")
    assert result.returncode == 1, result.stdout
    failures = json.loads(result.stdout)["failures"]
    assert any(needle in f["message"] for f in failures), failures


@pytest.mark.e2e
def test_verify_refuses_a_chart_that_is_not_what_its_name_says(
    management_bundle: ManagementBundle, tmp_path: Path
) -> None:
    path = f"content/cluster-api-operator/{OPERATOR_VERSION}/cluster-api-operator-0.24.0.tgz"
    other = operator_chart(management_bundle.images.operator, "v0.23.0")
    private, public = tamper.new_key(tmp_path)
    bundle = tamper.resign(
        management_bundle.path, tmp_path / "f.tar", private, replace={path: other}
    )
    result = run_airgap("verify", bundle, "--key", public, "--format", "json")
    assert result.returncode == 1
    messages = [f["message"] for f in json.loads(result.stdout)["failures"]]
    assert any("holds chart cluster-api-operator 0.23.0" in m for m in messages), messages
