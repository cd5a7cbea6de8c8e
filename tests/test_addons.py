"""Addon manifests (``manifests:``): the spec, the ConfigMap split, the ClusterResourceSet
against Cluster API's own CRD schema, and one collect -> verify -> import through the
CLI: manifests served over real HTTP and from file://, images from the real source
registry, imported into a real registry and resolved there by skopeo.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from airgap.configmaps.addons import (
    MAX_CONFIGMAP_BYTES,
    addon_files,
    selector_label,
    split_documents,
)
from airgap.content.kinds import ContentKind, ContentSpec
from airgap.core.errors import AirgapError, SpecError
from airgap.oci.manifest import sha256_digest
from airgap.oci.reference import parse_reference
from airgap.providers.components import parse_components
from tests.harness import skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer
from tests.harness.specs import assert_spec_error, spec_of
from tests.test_management_import import kustomize

SCHEMA = Path(__file__).parent / "schemas" / "clusterresourceset-v1beta1.json"


# --- the spec ----------------------------------------------------------------------------


@pytest.mark.unit
def test_spec_reads_manifests(tmp_path: Path) -> None:
    spec = spec_of(
        "manifests:\n"
        "  - {name: aws-ccm, url: 'https://example.com/ccm.yaml'}\n"
        "  - {name: calico, url: 'file:///srv/calico.yaml'}\n",
        tmp_path,
    )
    assert spec.manifests == (
        ContentSpec(ContentKind.MANIFESTS, "latest", "https://example.com/ccm.yaml", "aws-ccm"),
        ContentSpec(ContentKind.MANIFESTS, "latest", "file:///srv/calico.yaml", "calico"),
    )
    assert spec.contents == spec.manifests


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("manifests:\n  - {name: a, urll: 'https://x/a'}\n", 2, "manifests[0].urll: unknown key"),
        ("manifests:\n  - {name: a}\n", 2, "manifests[0].url: missing required key"),
        ("manifests:\n  - {name: A_b, url: 'https://x/a'}\n", 2, "manifests[0].name: invalid"),
        ("manifests:\n  - {name: a, url: 'ftp://x/a'}\n", 2, "manifests[0].url: unsupported URL"),
        (
            "manifests:\n  - {name: a, url: 'https://x/a'}\n  - {name: a, url: 'https://x/b'}\n",
            3,
            "duplicate manifest name 'a'",
        ),
        (f"manifests:\n  - {{name: {'a' * 58}, url: 'https://x/a'}}\n", 2, "a label's limit"),
        ("manifests: {name: a}\n", 1, "manifests: must be a list"),
    ],
)
def test_spec_errors_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    assert_spec_error(text, tmp_path, line, needle)


@pytest.mark.unit
def test_spec_credentials_never_in_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        spec_of("manifests:\n  - {name: a, url: 'gopher://u:s3cret@x/a'}\n", tmp_path)
    assert "s3cret" not in str(caught.value)


# --- ConfigMaps and the ClusterResourceSet (pure) ----------------------------------------


def validate_crs(document: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(document, schema)


def documents(files: dict[str, bytes], name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(files[f"addons/{name}/configmap.yaml"]))


@pytest.mark.unit
def test_split_documents_keeps_every_byte() -> None:
    text = "# head\n---\na: 1\n--- # two\nb: 2\n---\n# only a comment\n---\nc: 3\n...\n"
    parts = split_documents(text)
    assert "".join(parts) == text
    assert len(parts) == 3
    assert parts[0].startswith("# head") and "a: 1" in parts[0]
    assert parts[1].startswith("--- # two")
    assert "c: 3" in parts[2] and "# only a comment" in parts[2]


@pytest.mark.unit
def test_small_manifest_is_one_configmap_and_a_valid_crs() -> None:
    text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"
    files = addon_files("calico", "sha256-0123456789abcdef", text)
    (configmap,) = documents(files, "calico")
    assert configmap["data"] == {"calico.yaml": text}
    crs = yaml.safe_load(files["addons/calico/clusterresourceset.yaml"])
    validate_crs(crs)
    assert crs["apiVersion"] == "addons.cluster.x-k8s.io/v1beta1"
    assert crs["spec"]["clusterSelector"] == {"matchLabels": {"airgap.io/addon-calico": "true"}}
    assert crs["spec"]["resources"] == [{"kind": "ConfigMap", "name": "airgap-addon-calico"}]
    assert selector_label("calico") == "airgap.io/addon-calico"


@pytest.mark.unit
def test_large_manifest_is_split_between_documents_under_1_mib() -> None:
    # 40 documents of ~100 KiB: about 4 MiB in all
    docs = [
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n"
        f"data:\n  blob: {'x' * (100 << 10)}\n"
        for i in range(40)
    ]
    text = "".join(docs)
    files = addon_files("big", "sha256-0123456789abcdef", text)
    raw = files["addons/big/configmap.yaml"]
    configmaps = documents(files, "big")
    assert len(configmaps) >= 4
    for part in raw.split(b"\n---\n"):
        assert len(part) < MAX_CONFIGMAP_BYTES
    joined = "".join(value for c in configmaps for value in c["data"].values())
    assert joined == text  # every byte, in order
    crs = yaml.safe_load(files["addons/big/clusterresourceset.yaml"])
    validate_crs(crs)
    assert [r["name"] for r in crs["spec"]["resources"]] == [
        c["metadata"]["name"] for c in configmaps
    ]


@pytest.mark.unit
def test_one_document_too_large_fails_naming_the_addon() -> None:
    text = "a: 1\n---\nb: " + "y" * (MAX_CONFIGMAP_BYTES + 10) + "\n"
    with pytest.raises(AirgapError, match="addon huge: document 2 alone is too large"):
        addon_files("huge", "sha256-0123456789abcdef", text)


# --- collect, verify, import through the CLI ----------------------------------------------


def addon_manifest(app: str, sidecar: str) -> str:
    """One image in each workload kind a CCM or CNI manifest uses."""
    return (
        "# an addon as projects publish them\n"
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-addon\n"
        "---\n"
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: node-agent\n"
        "  namespace: kube-addon\nspec:\n  selector: {matchLabels: {app: a}}\n  template:\n"
        "    metadata: {labels: {app: a}}\n    spec:\n"
        f"      initContainers:\n        - name: init\n          image: {sidecar}\n"
        f"      containers:\n        - name: agent\n          image: {app}\n"
        "---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: controller\n"
        "  namespace: kube-addon\nspec:\n  selector: {matchLabels: {app: c}}\n  template:\n"
        "    metadata: {labels: {app: c}}\n    spec:\n"
        f'      containers:\n        - name: manager\n          image: "{app}"\n'
        "---\n"
        "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: cleanup\n"
        "  namespace: kube-addon\nspec:\n  schedule: '@daily'\n  jobTemplate:\n    spec:\n"
        "      template:\n        spec:\n          restartPolicy: Never\n"
        f"          containers:\n            - name: c\n              image: {sidecar}\n"
    )


@pytest.fixture(scope="module")
def addon_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> tuple[Path, dict[str, str]]:
    directory = tmp_path_factory.mktemp("addons")
    app, sidecar = source_images["app"].reference, source_images["sidecar"].reference
    url = release_server.add_plain("addons/ccm/ccm.yaml", addon_manifest(app, sidecar).encode())
    local = directory / "cni.yaml"
    local.write_text(addon_manifest(sidecar, sidecar))
    spec = directory / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"manifests": [{"name": "ccm", "url": url}, {"name": "cni", "url": local.as_uri()}]}
        )
    )
    output = directory / "addons.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert result.returncode == 0, result.stderr
    return output, {"app": app, "sidecar": sidecar}


@pytest.mark.e2e
def test_collect_carries_manifests_as_content(
    addon_bundle: tuple[Path, dict[str, str]], signing_key: SigningKey
) -> None:
    bundle, _images = addon_bundle
    result = run_airgap("inspect", bundle, "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    text = json.dumps(document)
    assert "manifests" in text and "ccm" in text and "cni" in text
    result = run_airgap("verify", bundle, "--key", signing_key.public)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.e2e
def test_missing_manifest_url_fails_in_one_line(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"manifests:\n  - {{name: gone, url: '{release_server.url}/plain/nope.yaml'}}\n"
    )
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    assert_clean_failure(result, 1, "nope.yaml")


@pytest.mark.e2e
def test_import_writes_cluster_resource_sets_pointing_at_the_mirror(
    addon_bundle: tuple[Path, dict[str, str]],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    bundle, images = addon_bundle
    registry: RegistryServer = registry_factory("plain")
    out = tmp_path / "out"
    result = run_airgap(
        "import", bundle, "--key", signing_key.public, "--registry",
        f"{registry.host}/mirror", "--output-dir", out, "-q",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    index = yaml.safe_load((out / "addons/kustomization.yaml").read_text())
    assert index["resources"] == ["ccm", "cni"]
    assert "airgap.io/addon-ccm" in (out / "addons/README.md").read_text()
    for name in ("ccm", "cni"):
        crs = yaml.safe_load((out / f"addons/{name}/clusterresourceset.yaml").read_text())
        validate_crs(crs)
        configmaps = list(yaml.safe_load_all((out / f"addons/{name}/configmap.yaml").read_text()))
        assert [r["name"] for r in crs["spec"]["resources"]] == [
            c["metadata"]["name"] for c in configmaps
        ]
        text = "".join(v for c in configmaps for v in c["data"].values())
        assert "# an addon as projects publish them" in text  # comments stay
        found = parse_components(text, name).images
        assert found, name
        for reference in found:
            ref = parse_reference(reference)
            assert ref.registry == registry.host and ref.digest, reference
            raw = skopeo.raw_manifest(f"{ref.name}@{ref.digest}", registry=registry)
            assert sha256_digest(raw) == ref.digest
        assert images["sidecar"] not in text
    built = kustomize(out / "addons")
    assert {(d["kind"], d["metadata"]["namespace"]) for d in built} == {
        ("ConfigMap", "default"),
        ("ClusterResourceSet", "default"),
    }
    assert len([d for d in built if d["kind"] == "ClusterResourceSet"]) == 2
