"""Proof of the mirror: the closure check at the end of import and ``airgap status``.

Real registries throughout: a blob deleted from a registry's storage directory makes
status Degraded naming the image; an import killed mid-push makes it Progressing; a tag
pushed over by another image is a moved tag; a reference the target cannot resolve fails
the import's closure check, naming the reference and the file that holds it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airgap.bundle.format import blob_member
from airgap.oci.manifest import Manifest
from tests.harness import skopeo, tamper
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.management_fixtures import ManagementBundle
from tests.harness.registry import RegistryFactory, RegistryServer

pytestmark = pytest.mark.e2e

PREFIX = "mgmt"
CAMEL = re.compile(r"^[A-Z][A-Za-z]+$")
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def status(
    bundle: ManagementBundle, host: str, *extra: str | Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = run_airgap(
        "status",
        bundle.path,
        "--key",
        bundle.key.public,
        "--registry",
        f"{host}/{PREFIX}",
        "--format",
        "json",
        *extra,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(result.stdout)


def conditions(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in document["conditions"]}


def assert_cluster_operator_shape(document: dict[str, Any]) -> None:
    assert [c["type"] for c in document["conditions"]] == ["Available", "Progressing", "Degraded"]
    for condition in document["conditions"]:
        assert set(condition) == {"type", "status", "reason", "message", "lastTransitionTime"}
        assert condition["status"] in ("True", "False", "Unknown")
        assert CAMEL.match(condition["reason"]), condition["reason"]
        assert TIMESTAMP.match(condition["lastTransitionTime"])
    progressing = conditions(document)["Progressing"]["message"]
    assert len(progressing.split()) <= 10  # terse, as the convention asks
    names = [v["name"] for v in document["versions"]]
    assert names[:2] == ["bundle", "airgap"]
    assert "cluster-api" in names and "certManager/cert-manager" in names


def run_import(
    bundle: ManagementBundle, host: str, out: Path | None = None, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = bundle.import_args(f"{host}/{PREFIX}")
    if out is not None:
        args += ["--output-dir", out]
    return run_airgap(*args, "-q", *extra)


def test_an_empty_registry_is_not_available(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory
) -> None:
    registry = registry_factory("plain")
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 1
    assert_cluster_operator_shape(document)
    state = conditions(document)
    assert (state["Available"]["status"], state["Available"]["reason"]) == ("False", "NotImported")
    assert state["Progressing"]["status"] == "False"
    assert state["Degraded"]["status"] == "False"


def test_import_reports_and_status_agree(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    imported = run_import(management_bundle, registry.host, tmp_path / "out")
    assert imported.returncode == 0, imported.stderr
    report = json.loads((tmp_path / "out/import-report.json").read_text())
    assert_cluster_operator_shape(report)
    assert conditions(report)["Available"]["status"] == "True"
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 0, result.stdout
    assert_cluster_operator_shape(document)
    state = conditions(document)
    assert [state[t]["status"] for t in ("Available", "Progressing", "Degraded")] == [
        "True",
        "False",
        "False",
    ]
    assert document["images"] == []  # only incomplete images are listed
    text = run_airgap(
        "status",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
    )
    assert text.returncode == 0
    assert re.search(r"^Available\s+True\s+AllPresent", text.stdout, re.MULTILINE)
    # lastTransitionTime moves only with the status (--previous, and import's own report)
    earlier = {"conditions": [
        {**report_condition, "lastTransitionTime": "2020-01-02T03:04:05Z"}
        for report_condition in json.loads((tmp_path / "out/import-report.json").read_text())[
            "conditions"
        ]
    ]}  # fmt: skip
    earlier["conditions"][2]["status"] = "True"  # Degraded then, not now
    previous = tmp_path / "previous.json"
    previous.write_text(json.dumps(earlier))
    result, document = status(management_bundle, registry.host, "--previous", previous)
    times = [c["lastTransitionTime"] for c in document["conditions"]]
    assert times[:2] == ["2020-01-02T03:04:05Z"] * 2 and times[2] != times[0]
    (tmp_path / "out/import-report.json").write_text(json.dumps(earlier))
    assert run_import(management_bundle, registry.host, tmp_path / "out").returncode == 0
    report = json.loads((tmp_path / "out/import-report.json").read_text())
    assert [c["lastTransitionTime"] == "2020-01-02T03:04:05Z" for c in report["conditions"]] == [
        True,
        True,
        False,
    ]
    previous.write_text("[]")
    args: list[str | Path] = [
        "status",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
    ]
    result = run_airgap(*args, "--registry", registry.host, "--previous", previous)
    assert result.returncode == 2 and result.stderr.startswith("airgap: error: --previous")
    assert len(result.stderr.splitlines()) == 1
    previous.write_text("conditions: [not json")  # the user's file, not JSON: exit 2 too
    result = run_airgap(*args, "--registry", registry.host, "--previous", previous)
    assert result.returncode == 2 and "not valid JSON" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_every_artifact_import_built_is_checked_and_a_lost_one_named(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """Besides the images, import --provider-source oci pushes a manifests image per
    provider (capi-manifests/LABEL:VERSION) and an OCI artifact per provider version
    (capi-providers/KEY:VERSION), both built at import time. Status rebuilds them from
    the bundle alone and asks for them: a manifest lost from the registry's storage
    (its tag still listed) is Degraded, named; without --provider-source oci the
    provider artifacts are not expected."""
    registry: RegistryServer = registry_factory("plain")
    out = tmp_path / "out"
    imported = run_import(management_bundle, registry.host, out, "--provider-source", "oci")
    assert imported.returncode == 0, imported.stderr
    report = conditions(json.loads((out / "import-report.json").read_text()))
    images = len(management_bundle.manifest.images)
    present = f"All {images} images and 8 artifacts present by digest"  # 4 providers, 2 each
    assert report["Available"]["reason"] == "AllPresent"
    assert report["Available"]["message"] == present
    result, document = status(management_bundle, registry.host, "--provider-source", "oci")
    assert result.returncode == 0, document
    assert conditions(document)["Available"]["message"] == present
    core = f"{PREFIX}/capi-manifests/cluster-api"
    docker = f"{PREFIX}/capi-providers/infrastructure-docker"
    for repository in (core, docker):
        raw = skopeo.raw_manifest(f"{repository}:v1.9.4", registry=registry)
        registry.blob_path(skopeo.digest_of(raw)).unlink()  # the manifest's bytes, lost
    result, document = status(management_bundle, registry.host, "--provider-source", "oci")
    assert result.returncode == 1
    assert_cluster_operator_shape(document)
    state = conditions(document)
    assert state["Degraded"]["status"] == "True"
    assert state["Degraded"]["reason"] == "ArtifactsDamaged"
    message = state["Degraded"]["message"]
    host = registry.host
    for named in (
        f"manifests image cluster-api:v1.9.4 at {host}/{core}:v1.9.4: tag v1.9.4 is listed",
        f"provider artifact infrastructure-docker-v1.9.4 at {host}/{docker}:v1.9.4: tag v1.9.4",
    ):
        assert named in message, message
    assert message.count("manifest unknown") == 2
    assert document["images"] == []
    kinds = sorted(a["kind"] for a in document["artifacts"])
    assert kinds == ["manifests image", "provider artifact"]
    assert state["Progressing"]["status"] == "False"  # nothing to resume: damage
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 1
    assert [a["kind"] for a in document["artifacts"]] == ["manifests image"]


def unique_blob(bundle: ManagementBundle) -> tuple[str, str]:
    """An image of the bundle and a blob of it that no other image uses."""
    members = {m.name: m.data for m in tamper.read_members(bundle.path)}

    def blobs(digest: str, media_type: str | None) -> set[str]:
        manifest = Manifest.from_bytes(members[blob_member(digest)], media_type)
        found = {b.digest for b in manifest.blobs()}
        for child in manifest.children():
            found |= blobs(child.digest, child.media_type)
        return found

    per_image = {i.reference: blobs(i.digest, i.media_type) for i in bundle.manifest.images}
    for reference, own in per_image.items():
        others = set().union(*(b for r, b in per_image.items() if r != reference))
        if own - others:
            return reference, sorted(own - others)[0]
    raise AssertionError("every blob is shared")


def test_a_deleted_blob_makes_it_degraded_naming_the_image(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory
) -> None:
    registry: RegistryServer = registry_factory("plain")
    assert run_import(management_bundle, registry.host).returncode == 0
    source, digest = unique_blob(management_bundle)
    hexpart = digest.split(":", 1)[1]
    data = registry.storage_dir / f"docker/registry/v2/blobs/sha256/{hexpart[:2]}/{hexpart}/data"
    assert data.is_file()
    data.unlink()  # what a garbage collection or a failing disk does
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 1
    state = conditions(document)
    assert (state["Degraded"]["status"], state["Degraded"]["reason"]) == ("True", "ImagesDamaged")
    target = f"{registry.host}/{PREFIX}/{source.split('/', 1)[1]}"
    assert target in state["Degraded"]["message"] and digest in state["Degraded"]["message"]
    assert state["Available"]["status"] == "False"
    assert [i["target"] for i in document["images"]] == [target]


def test_a_moved_tag_is_degraded(
    management_bundle: ManagementBundle, registry_factory: RegistryFactory
) -> None:
    registry: RegistryServer = registry_factory("plain")
    assert run_import(management_bundle, registry.host).returncode == 0
    webhook = f"{registry.host}/{PREFIX}/jetstack/cert-manager-webhook:v1.16.1"
    controller = f"{registry.host}/{PREFIX}/jetstack/cert-manager-controller:v1.16.1"
    skopeo.copy(
        f"docker://{controller}",
        f"docker://{webhook}",
        src_registry=registry,
        dest_registry=registry,
        preserve_digests=True,
    )
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 1
    state = conditions(document)
    assert (state["Degraded"]["status"], state["Degraded"]["reason"]) == ("True", "TagsMoved")
    assert webhook in state["Degraded"]["message"]
    assert [(i["target"], i["state"]) for i in document["images"]] == [(webhook, "moved")]


def _wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_an_interrupted_import_is_progressing(
    management_bundle: ManagementBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
) -> None:
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    # the 4th blob upload hangs: three are in, the rest and every manifest are not
    hang = proxy.inject("PUT", r"/blobs/uploads/", status=503, delay=30, after=3)
    args = [
        "import",
        str(management_bundle.path),
        "--key",
        str(management_bundle.key.public),
        "--registry",
        f"{proxy.host}/{PREFIX}",
        "--concurrency",
        "1",
        "-q",
    ]
    process = subprocess.Popen([*AIRGAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(
            lambda: sum(1 for r in proxy.requests if r.method == "PUT" and "/blobs/" in r.path) >= 3
        )
        _wait_for(lambda: hang.remaining <= 0)  # the fourth upload hangs in the proxy
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 1
    assert_cluster_operator_shape(document)
    state = conditions(document)
    assert (state["Progressing"]["status"], state["Progressing"]["reason"]) == (
        "True",
        "ImportInterrupted",
    )
    assert state["Available"]["status"] == "False"
    assert state["Degraded"]["status"] == "False"
    # resuming finishes it
    assert run_import(management_bundle, registry.host).returncode == 0
    result, document = status(management_bundle, registry.host)
    assert result.returncode == 0, document
    assert conditions(document)["Progressing"]["status"] == "False"


def test_an_unreachable_registry_is_unknown(management_bundle: ManagementBundle) -> None:
    result, document = status(management_bundle, "127.0.0.1:9")
    assert result.returncode == 1
    assert {c["status"] for c in document["conditions"]} == {"Unknown"}
    assert {c["reason"] for c in document["conditions"]} == {"RegistryUnreachable"}


def _status_text(
    bundle: ManagementBundle, host: str, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    args = ("status", bundle.path, "--key", bundle.key.public, "--registry", f"{host}/{PREFIX}")
    return run_airgap(*args, *extra)


def test_an_unreachable_registry_is_not_asked_in_the_text(
    management_bundle: ManagementBundle,
) -> None:
    result = _status_text(management_bundle, "127.0.0.1:9")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].endswith(f"127.0.0.1:9/{PREFIX}: not asked")


def test_what_the_user_gave_is_a_usage_error_not_an_unknown_registry(
    management_bundle: ManagementBundle, tmp_path: Path, registry_factory: RegistryFactory
) -> None:
    """A CA file or credentials file that cannot be used is the user's to fix (exit 2,
    one line, as import says it), not a registry that could not be asked."""
    registry = registry_factory("basic")
    assert registry.ca_file is not None
    broken = tmp_path / "auth.json"
    broken.write_text("{not json")
    for extra, needle in (
        (("--ca-file", "/dev/null"), "/dev/null"),
        (("--ca-file", registry.ca_file, "--authfile", broken), "not valid JSON"),
    ):
        result = _status_text(management_bundle, registry.host, *extra)
        assert_clean_failure(result, 2, needle)
        assert result.stdout == ""


def test_closure_failure_names_each_dangling_reference(
    management_bundle: ManagementBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    """The operator image is pushed, then the target stops resolving it by digest (a
    proxy in front of the registry answers 404 to HEADs of it once the push is done):
    import fails with exit 1, naming the reference and the file that holds it, and still
    writes its outputs with conditions saying why."""
    record = next(
        i for i in management_bundle.manifest.images if "cluster-api-operator" in i.reference
    )
    path = rf"/capi-operator/cluster-api-operator/manifests/{re.escape(record.digest)}$"
    # how many such HEADs a whole import makes: the push's, then one of the closure's
    counting = fault_proxy_factory(registry_factory("plain"))
    assert run_import(management_bundle, counting.host).returncode == 0
    heads = sum(1 for r in counting.requests if r.method == "HEAD" and re.search(path, r.path))
    assert heads >= 1
    proxy = fault_proxy_factory(registry_factory("plain"))
    proxy.inject("HEAD", path, status=404, times=1000, after=heads - 1)
    out = tmp_path / "out"
    result = run_import(management_bundle, proxy.host, out)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "closure check failed" in lines[0]
    target = f"{proxy.host}/{PREFIX}/capi-operator/cluster-api-operator:v0.24.0@{record.digest}"
    assert target in lines[0]
    assert "(in clusterctl/" in lines[0] or "(in operator/" in lines[0]
    report = json.loads((out / "import-report.json").read_text())
    state = conditions(report)
    assert (state["Degraded"]["status"], state["Degraded"]["reason"]) == (
        "True",
        "DanglingReferences",
    )
    assert target in state["Degraded"]["message"]
    assert state["Available"]["status"] == "False"


@pytest.mark.parametrize("pinned", [True, False])
def test_closure_collects_every_kind_of_reference(
    management_bundle: ManagementBundle, tmp_path: Path, pinned: bool
) -> None:
    """``references`` finds the images of components, the ConfigMaps' components, the
    CRs' imageUrl overrides, templates and the chart values, in the files written."""
    from airgap.mirror.closure import references

    out = tmp_path / "out"
    args: list[str | Path] = [
        "configmaps",
        management_bundle.path,
        "--key",
        management_bundle.key.public,
    ]
    args += ["--registry", f"mirror.local:5000/{PREFIX}", "--output-dir", out]
    if not pinned:
        args.append("--no-pin")
    assert run_airgap(*args).returncode == 0
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    found = references(files)
    mirror = f"mirror.local:5000/{PREFIX}/"
    wanted = {mirror + image.split("/", 1)[1] for image in management_bundle.images.images}
    assert {ref.split("@", 1)[0] for ref in found} == wanted
    assert all(("@sha256:" in ref) is pinned for ref in found)
    # each kind of file on its own
    operator = mirror + "capi-operator/cluster-api-operator:v0.24.0"
    for path, expected in (
        ("operator/helm/values-airgap.yaml", {operator}),
        ("operator/01-capi-operator/operator-components.yaml", {operator}),
        ("operator/03-core-provider/00-core-cluster-api.yaml", {mirror + "test/app:v1"}),
        (
            "operator/02-provider-configmaps/configmaps/core-cluster-api-v1.9.4.yaml",
            {mirror + "test/app:v1"},
        ),
        (
            "clusterctl/infrastructure-docker/v1.9.4/cluster-template-addon.yaml",
            {mirror + "test/dockerlist:v1"},
        ),
    ):
        alone = references({path: files[path]})
        assert {ref.split("@", 1)[0] for ref in alone} == expected, path
