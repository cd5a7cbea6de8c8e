"""YAML tags outside the core schema are refused wherever collect reads YAML (issue 41).

A manifest carrying ``!!python/object/apply:os.system [...]`` or an application's own
``!custom`` tag is hostile or broken: the safe loader would never run it, but Kubernetes'
decoder refuses it on the far side. Each file is served by a real release server (the
fake GitHub, a plain HTTP directory, a classic chart repository) on loopback and read
by the real ``collect``: exit 2, one line, ``FILE:LINE``. The documents a components
file's reader never builds (CRDs, set aside by ``yamlskim`` or skipped by the composer)
are checked too.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import yaml

from airgap.core.errors import InputError
from airgap.formats.yamlload import iter_documents
from airgap.formats.yamlsafe import safe_load
from airgap.formats.yamlskim import skim
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.releases import ReleaseServer, make_metadata

PYTHON_TAG = "!!python/object/apply:os.system ['touch /tmp/airgap-foreign-tag']"
NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: tagged-system\n"
CRD = (
    "apiVersion: apiextensions.k8s.io/v1\n"
    "kind: CustomResourceDefinition\n"
    "metadata:\n"
    "  name: things.tagged.example\n"
    "spec:\n"
    "  group: tagged.example\n"
    "  validation:\n"
    "    rule: self.a != self.b\n"  # CEL's '!=' is no tag
    "    message: '!has(self.c)'\n"
)


def _release(server: ReleaseServer, files: dict[str, str]) -> tuple[str, dict[str, str]]:
    """An infrastructure provider release holding ``files`` (defaults for the others)."""
    owner, repo = server.new_repo("cluster-api-provider-tagged")
    release = {
        "metadata.yaml": make_metadata([(0, 1, "v1beta1")]),
        "infrastructure-components.yaml": NAMESPACE,
        **files,
    }
    server.add_release(owner, repo, "v0.1.0", {k: v.encode() for k, v in release.items()})
    entry = (
        "providers:\n"
        "  - {name: tagged, type: InfrastructureProvider, version: v0.1.0,\n"
        f"     url: '{server.repo_url(owner, repo)}'}}\n"
    )
    return entry, {"GITHUB_API_URL": server.api_url}


def _collect(
    tmp_path: Path, spec_text: str, signing_key: SigningKey, env: dict[str, str] | None = None
) -> str:
    """Collect ``spec_text``: refused with exit 2 in one line, no bundle; the line."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    output = tmp_path / "bundle.tar"
    result = run_airgap(*collect_args(spec, signing_key.private, output), env=env)
    line = assert_clean_failure(result, 2, "YAML tag", "outside YAML's core schema")
    assert not output.exists()
    assert not Path("/tmp/airgap-foreign-tag").exists()
    return line


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("components", "line", "tag"),
    [
        (f"{NAMESPACE}---\napiVersion: v1\nkind: ConfigMap\ndata:\n  a: {PYTHON_TAG}\n", 9, "!!python/object/apply:os.system"),
        (f"{NAMESPACE}---\n{CRD}  extra: !custom {{a: 1}}\n", 15, "!custom"),
        (f"{NAMESPACE}---\nkind: Deployment\nspec: !!binary aGVsbG8=\n", 7, "!!binary"),
        (f"---\n{CRD}  versions: [v1, !v2 x]\n", 11, "!v2"),
    ],
    ids=["python-tag-in-a-configmap", "custom-tag-in-a-crd", "binary-in-a-deployment", "in-a-flow-list"],
)  # fmt: skip
def test_collect_refuses_a_foreign_tag_in_components(
    tmp_path: Path,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    components: str,
    line: int,
    tag: str,
) -> None:
    entry, env = _release(release_server, {"infrastructure-components.yaml": components})
    message = _collect(tmp_path, entry, signing_key, env)
    assert "infrastructure-components.yaml of provider tagged" in message, message
    assert f"/releases:{line}: YAML tag '{tag}'" in message, message


@pytest.mark.e2e
def test_collect_refuses_a_foreign_tag_in_metadata(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    metadata = make_metadata([(0, 1, "v1beta1")]) + "extra: !custom x\n"
    entry, env = _release(release_server, {"metadata.yaml": metadata})
    message = _collect(tmp_path, entry, signing_key, env)
    assert "metadata.yaml" in message, message
    assert f":{metadata.count(chr(10))}: YAML tag '!custom'" in message, message


@pytest.mark.e2e
def test_collect_refuses_a_foreign_tag_in_a_template(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    template = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n"
    template += f"  name: ${{CLUSTER_NAME}}\n  labels: {PYTHON_TAG}\n"
    entry, env = _release(release_server, {"cluster-template.yaml": template})
    message = _collect(tmp_path, entry, signing_key, env)
    assert "cluster-template.yaml" in message and ":5: YAML tag" in message, message


@pytest.mark.e2e
def test_collect_refuses_a_foreign_tag_in_an_addon_manifest(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    url = release_server.add_plain(
        "tagged-addons/cni.yaml", f"{NAMESPACE}---\n{CRD}  x: !custom 1\n".encode()
    )
    message = _collect(tmp_path, f"manifests:\n  - {{name: cni, url: '{url}'}}\n", signing_key)
    assert "cni" in message and ":15: YAML tag '!custom'" in message, message


def _chart(values: str) -> bytes:
    raw = io.BytesIO()
    files = {"Chart.yaml": "apiVersion: v2\nname: tagged\nversion: 1.0.0\n", "values.yaml": values}
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in files.items():
            info = tarfile.TarInfo(f"tagged/{name}")
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return raw.getvalue()


@pytest.mark.e2e
def test_collect_refuses_a_foreign_tag_in_chart_values(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    import gzip

    data = gzip.compress(_chart(f"replicas: 1\nextra:\n  cmd: {PYTHON_TAG}\n"), mtime=0)
    release_server.add_plain("tagged-repo/tagged-1.0.0.tgz", data)
    entry = {
        "version": "1.0.0",
        "digest": hashlib.sha256(data).hexdigest(),
        "urls": ["tagged-1.0.0.tgz"],
    }
    index = {"apiVersion": "v1", "entries": {"tagged": [entry]}}
    release_server.add_plain("tagged-repo/index.yaml", yaml.safe_dump(index).encode())
    url = release_server.plain_url("tagged-repo")
    spec = f"charts:\n  - {{repo: '{url}', name: tagged, version: 1.0.0}}\n"
    message = _collect(tmp_path, spec, signing_key)
    assert "values.yaml:3: YAML tag '!!python/object/apply:os.system'" in message, message


@pytest.mark.e2e
def test_the_spec_refuses_a_foreign_tag(tmp_path: Path, signing_key: SigningKey) -> None:
    spec = "providers:\n  - {name: !custom cluster-api, type: CoreProvider, version: v1.9.4}\n"
    message = _collect(tmp_path, spec, signing_key)
    assert f"{tmp_path / 'spec.yaml'}:2: YAML tag '!custom'" in message


# --- the bounded YAML path itself ----------------------------------------------------


@pytest.mark.unit
def test_core_schema_tags_and_the_non_specific_tag_are_accepted() -> None:
    text = "kind: Deployment\na: !!str 1\nb: !!int '2'\nc: ! x\nd: !!map {e: !!null ''}\n"
    text += "f: !!seq [!!bool true, !!float 1.5]\ng: !<tag:yaml.org,2002:str> h\n"
    (document,) = iter_documents(text, "f.yaml", kinds=frozenset({"Deployment"}))
    assert document["a"] == "1" and document["b"] == 2 and document["c"] == "x"
    assert safe_load(text, "m.yaml", max_bytes=4096)["f"] == [True, 1.5]


@pytest.mark.unit
@pytest.mark.parametrize("pure", [False, True])
def test_a_tag_in_a_skipped_document_is_refused(pure: bool) -> None:
    """The composer skips a CRD without building it; its tags are still checked."""
    text = f"{NAMESPACE}---\nkind: CustomResourceDefinition\nspec:\n  a:\n  - !custom x\n"
    with pytest.raises(InputError, match=r"^f\.yaml:9: YAML tag '!custom'"):
        list(iter_documents(text, "f.yaml", pure=pure, kinds=frozenset({"Namespace"})))


@pytest.mark.unit
def test_the_skim_never_sets_aside_a_document_with_a_tag() -> None:
    """libyaml's parser alone checks what the skim sets aside, and sees no tags: a
    document with a ``!`` where a node could start is left to the composer; CEL's
    ``!=`` and a quoted ``'!has(...)'`` are not tags and do not stop the skim."""
    wanted = frozenset({"Namespace"})
    plain = skim(f"{NAMESPACE}---\n{CRD}", wanted)
    assert plain is not None and len(plain.blanked) == 1
    for tagged in ("  x: !custom 1\n", "  x:\n  - !t 1\n", "  x: [a, !t b]\n", "  x: {a: !t b}\n"):
        assert skim(f"{NAMESPACE}---\n{CRD}{tagged}", wanted) is None, tagged
