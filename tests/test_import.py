"""``airgap import`` end to end: a real TLS + htpasswd registry, skopeo as the judge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml

from airgap.oci.manifest import DOCKER_LIST, DOCKER_MANIFEST, sha256_digest
from airgap.providers.components import find_images
from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.importing import import_args, run_import
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry

pytestmark = pytest.mark.e2e

PREFIX = "capi"


@dataclass(frozen=True)
class Imported:
    registry: RegistryServer
    out: Path
    stdout: str

    @property
    def report(self) -> dict[str, Any]:
        return cast(dict[str, Any], json.loads((self.out / "import-report.json").read_text()))


def target_ref(source: str, registry: RegistryServer) -> str:
    return f"{registry.host}/{PREFIX}/{source.split('/', 1)[1]}"


def catalog(registry: RegistryServer) -> list[str]:
    # the harness sets a password with every username
    auth = (registry.username, cast(str, registry.password)) if registry.username else None
    response = httpx.get(f"{registry.url}/v2/_catalog", auth=auth, verify=registry.ssl_context())
    return cast(list[str], response.json()["repositories"])


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[RegistryServer]:
    registry = start_registry(tmp_path_factory.mktemp("import-target"), "basic", pki)
    yield registry
    stop_registry(registry)


@pytest.fixture(scope="module")
def imported(
    capi_bundle: CollectedBundle, target: RegistryServer, tmp_path_factory: pytest.TempPathFactory
) -> Imported:
    out = tmp_path_factory.mktemp("import-out") / "capi-out"
    result = run_import(capi_bundle, target, PREFIX, out)
    assert result.returncode == 0, result.stderr
    assert target.password is not None
    assert target.password not in result.stdout + result.stderr
    return Imported(target, out, result.stdout)


def test_every_image_in_the_target_has_the_source_digest(
    capi_bundle: CollectedBundle, imported: Imported
) -> None:
    for source, image in capi_bundle.providers.images.items():
        ref = target_ref(source, imported.registry)
        raw = skopeo.raw_manifest(ref, registry=imported.registry)
        assert sha256_digest(raw) == image.digest, ref
        assert raw == image.raw_manifest
        for child in image.child_digests:  # multi-arch indexes are complete
            child_ref = f"{ref.rsplit(':', 1)[0]}@{child}"
            assert (
                sha256_digest(skopeo.raw_manifest(child_ref, registry=imported.registry)) == child
            )
    media_types = {i.media_type for i in capi_bundle.providers.images.values()}
    assert {DOCKER_MANIFEST, DOCKER_LIST} <= media_types  # Docker schema 2 images survived


def test_report_counts_are_integers(imported: Imported) -> None:
    report = imported.report
    for key in (
        "images",
        "blobs_uploaded",
        "blobs_skipped",
        "blobs_mounted",
        "manifests_pushed",
        "bytes_uploaded",
    ):
        assert isinstance(report[key], int), key
    assert report["images"] == 5 and report["blobs_uploaded"] > 0
    assert report["blobs_mounted"] > 0  # shared base layers are mounted, not re-sent
    assert isinstance(report["duration_seconds"], float | int)
    assert "imported 5 images" in imported.stdout


def test_second_import_uploads_nothing(
    capi_bundle: CollectedBundle, imported: Imported, tmp_path: Path
) -> None:
    result = run_import(capi_bundle, imported.registry, PREFIX, tmp_path / "again")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "again/import-report.json").read_text())
    assert report["blobs_uploaded"] == 0 and report["manifests_pushed"] == 0
    assert report["bytes_uploaded"] == 0 and report["changed"] is False
    assert "nothing changed" in result.stdout


def test_rewritten_components_reference_only_the_target(
    capi_bundle: CollectedBundle, imported: Imported
) -> None:
    files = sorted((imported.out / "components").rglob("*.yaml"))
    assert len(files) == len(capi_bundle.manifest.providers)
    with tarfile.open(capi_bundle.path) as tar:
        originals = {
            p.components.rsplit("/", 1)[0].removeprefix("providers/"): tar.extractfile(p.components)  # type: ignore[union-attr]  # a regular member: never None
            .read()
            .decode()
            for p in capi_bundle.manifest.providers
        }
    for path in files:
        text = path.read_text()
        images = find_images(text, str(path))
        assert images
        for image in images:
            assert image.startswith(f"{imported.registry.host}/{PREFIX}/") and "@sha256:" in image
            name_and_tag, digest = image.rsplit("@", 1)
            by_digest = f"{name_and_tag.rsplit(':', 1)[0]}@{digest}"  # skopeo: tag or digest
            assert (
                sha256_digest(skopeo.raw_manifest(by_digest, registry=imported.registry)) == digest
            )
        original = originals[path.parent.relative_to(imported.out / "components").as_posix()]
        changed = [
            (a, b) for a, b in zip(original.splitlines(), text.splitlines(), strict=True) if a != b
        ]
        assert changed and all("image:" in a for a, _ in changed)
        assert "${PROVIDER_CREDENTIALS}" in text and text.startswith("# ")


def test_mirror_configs_parse_and_name_the_hosts(
    capi_bundle: CollectedBundle, imported: Imported
) -> None:
    source_host = next(iter(capi_bundle.providers.images)).split("/", 1)[0]
    target = f"{imported.registry.host}/{PREFIX}"
    hosts = tomllib.loads(
        (imported.out / f"mirror/containerd/certs.d/{source_host}/hosts.toml").read_text()
    )
    assert hosts["server"] == f"https://{source_host}"
    assert list(hosts["host"]) == [f"https://{imported.registry.host}/v2/{PREFIX}"]
    conf = tomllib.loads(
        (imported.out / "mirror/containers/registries.conf.d/50-airgap-capi.conf").read_text()
    )
    assert conf["registry"][0]["prefix"] == source_host
    assert conf["registry"][0]["mirror"][0]["location"] == target
    idms, itms = yaml.safe_load_all(
        (imported.out / "mirror/openshift/mirror-sets.yaml").read_text()
    )
    assert idms["spec"]["imageDigestMirrors"] == [{"source": source_host, "mirrors": [target]}]
    assert itms["spec"]["imageTagMirrors"] == [{"source": source_host, "mirrors": [target]}]
    overrides = yaml.safe_load((imported.out / "clusterctl-images.yaml").read_text())["images"]
    assert overrides["cluster-api/app"]["repository"] == f"{target}/test"
    lines = (imported.out / "mapping.txt").read_text().splitlines()
    assert len(lines) == 5 and all("=" + target in line for line in lines)


def test_dry_run_pushes_nothing(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    result = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/{PREFIX}"),
        "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 5 and " -> " in result.stdout
    assert catalog(registry) == []


def _wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _wait_until_quiet(count: Callable[[], int], quiet: float = 1.0, timeout: float = 60) -> None:
    """Until ``count()`` has not changed for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "timed out waiting for quiet"
        time.sleep(0.05)
        if count() != last:
            last, since = count(), time.monotonic()


@pytest.mark.parametrize("stage", ["blobs", "manifests"])
def test_killed_import_completes_on_rerun(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
    stage: str,
) -> None:
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    if stage == "blobs":  # the 4th blob upload hangs: three are in, the rest are not
        hang = proxy.inject("PUT", r"/blobs/uploads/", status=503, delay=30, after=3)
    else:  # the first manifest hangs: its image's blobs are in, others' may not be
        hang = proxy.inject("PUT", r"/manifests/", status=503, delay=30)
    args = [
        "import",
        str(capi_bundle.path),
        "--key",
        str(capi_bundle.key.public),
        "--registry",
        f"{proxy.host}/{PREFIX}",
        "--concurrency",
        "1",
        "-q",
        "--output-dir",
        str(tmp_path / "killed"),
    ]
    process = subprocess.Popen([*AIRGAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # the proxy logs a faulted request only after its delay: wait for what precedes it
        if stage == "blobs":
            _wait_for(
                lambda: (
                    sum(
                        1
                        for r in proxy.requests
                        if r.method == "PUT" and "/blobs/uploads/" in r.path
                    )
                    >= 3
                )
            )
        else:  # an image's manifests go once its blobs are in: the first PUT of one
            # hangs, and the one worker (--concurrency 1) sends nothing more
            _wait_for(
                lambda: any(
                    r.method == "PUT" and "/blobs/uploads/" in r.path for r in proxy.requests
                )
            )  # a blob is in: the rerun skips it
            _wait_until_quiet(lambda: len(proxy.requests))
        _wait_for(lambda: hang.remaining <= 0)  # the next request is hanging in the proxy
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed").exists()  # nothing half-written
    again = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/{PREFIX}"),
        "--output-dir",
        tmp_path / "again",
    )
    assert again.returncode == 0, again.stderr
    report = json.loads((tmp_path / "again/import-report.json").read_text())
    assert report["blobs_skipped"] >= 3
    if stage == "manifests":  # the hanging image's blobs are not sent again
        blobs = {
            blob for image in capi_bundle.providers.images.values() for blob in image.blob_digests
        }
        assert report["blobs_uploaded"] < len(blobs) and report["manifests_pushed"] > 0
    for source, image in capi_bundle.providers.images.items():
        raw = skopeo.raw_manifest(target_ref(source, registry), registry=registry)
        assert sha256_digest(raw) == image.digest


def test_wrong_password_is_one_line_without_the_password(
    capi_bundle: CollectedBundle, target: RegistryServer, tmp_path: Path
) -> None:
    args = import_args(capi_bundle, target, PREFIX, tmp_path / "out")
    result = run_airgap(*args, input="not-the-password\n")
    line = assert_clean_failure(result, 1, target.host, "401")
    assert "not-the-password" not in result.stderr + result.stdout
    assert "credentials were tried" in line


def test_untrusted_ca_says_to_use_ca_file(
    capi_bundle: CollectedBundle, target: RegistryServer, tmp_path: Path
) -> None:
    result = run_airgap(
        *capi_bundle.import_args(f"{target.host}/{PREFIX}"),
    )
    assert_clean_failure(result, 1, "--ca-file")


def test_unreachable_registry(capi_bundle: CollectedBundle) -> None:
    result = run_airgap(
        *capi_bundle.import_args("127.0.0.1:9/capi"),
    )
    assert_clean_failure(result, 1, "127.0.0.1:9", "cannot connect")


def test_refuses_a_bundle_that_fails_verification(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    tampered = tmp_path / "tampered.tar"
    tampered.write_bytes(capi_bundle.path.read_bytes())
    with tarfile.open(tampered) as tar:
        member = next(m for m in tar.getmembers() if "/blobs/" in m.name and m.size > 1000)
    with tampered.open("r+b") as handle:
        handle.seek(member.offset_data + member.size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    registry = registry_factory("plain")
    result = run_airgap(
        "import",
        tampered,
        "--key",
        capi_bundle.key.public,
        "--registry",
        f"{registry.host}/{PREFIX}",
    )
    # the blob goes up unhashed under its digest: the registry refuses the altered
    # bytes (DIGEST_INVALID), import hashes the member to name it, and no manifest or
    # tag refers to anything (genuine blobs may already have landed)
    assert_clean_failure(result, 1, member.name, "does not match the signed manifest")
    for repository in catalog(registry):
        digest = "sha256:" + member.name.rsplit("/", 1)[1]
        base = f"{registry.url}/v2/{repository}"
        assert httpx.head(f"{base}/blobs/{digest}").status_code == 404
        assert not (httpx.get(f"{base}/tags/list").json().get("tags") or [])


def test_password_stdin_needs_username(capi_bundle: CollectedBundle) -> None:
    result = run_airgap(
        *capi_bundle.import_args("127.0.0.1:9/capi"),
        "--password-stdin",
        input="x\n",
    )
    assert_clean_failure(result, 2, "--username")


def test_reimport_hashes_what_it_uses_and_reverify_hashes_everything(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """No cache: an import hashes every member but the blobs up front and each blob it
    pushes as it streams ("on-use"); --reverify hashes every blob first ("full"). An
    altered bundle is the hostile suite's business (tests/test_hostile_trust.py)."""
    registry = registry_factory("plain")

    def run(*extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        result = run_airgap(
            *capi_bundle.import_args(f"{registry.host}/{PREFIX}"),
            "--output-dir",
            out,
            "-q",
            *extra,
        )
        report = json.loads((out / "import-report.json").read_text()) if out.exists() else {}
        return result, report

    first, report = run()
    assert first.returncode == 0, first.stderr
    assert (report["verification"], report["changed"]) == ("on-use", True)
    second, report = run()
    assert (second.returncode, report["verification"], report["changed"]) == (0, "on-use", False)
    forced, report = run("--reverify")
    assert (forced.returncode, report["verification"], report["changed"]) == (0, "full", False)


def test_rerun_of_a_complete_import_only_checks_top_manifests(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    """A tag that already names the image's digest proves the image complete (the
    registry accepted that manifest only once everything under it existed)."""
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    args = [
        *capi_bundle.import_args(f"{proxy.host}/{PREFIX}"),
        "-q",
    ]
    assert run_airgap(*args).returncode == 0
    proxy.clear()
    again = run_airgap(*args, "--output-dir", tmp_path / "out")
    assert again.returncode == 0, again.stderr
    requests = [(r.method, r.path) for r in proxy.requests if r.path != "/v2/"]
    assert requests and all(m == "HEAD" and "/manifests/" in p for m, p in requests), requests
    # one per image for the push (its tag) and one per provider for its manifests
    # image (capi-manifests/LABEL:VERSION); the closure check (each image the output
    # references is one of the bundle's) reuses the push's answers, asking nothing again
    images = len(capi_bundle.manifest.images)
    providers = len(capi_bundle.manifest.providers)
    assert not [p for _, p in requests if "/manifests/sha256:" in p]
    assert len(set(requests)) == len(requests) == images + providers
    report = json.loads((tmp_path / "out/import-report.json").read_text())
    assert (report["blobs_uploaded"], report["manifests_pushed"], report["changed"]) == (
        0,
        0,
        False,
    )
    assert report["blobs_skipped"] > 0


def test_keep_going_pushes_what_it_can_and_reports_every_failure(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    """Issue 46: with --keep-going, a registry that refuses two images' repositories
    (their blob uploads; their manifests) still gets every other image; both failures
    are reported, one line each, then a count, exit 1; the report records both."""
    registry = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    proxy.inject("POST", rf"^/v2/{PREFIX}/test/sidecar/blobs/uploads/", status=403, times=10**6)
    proxy.inject("PUT", rf"^/v2/{PREFIX}/test/multi/manifests/", status=400, times=10**6)
    out = tmp_path / "out"
    args = [*capi_bundle.import_args(f"{proxy.host}/{PREFIX}"), "--output-dir", out]
    stopped = run_airgap(*args)  # without --keep-going: the first failure, alone
    assert_clean_failure(stopped, 1)
    result = run_airgap(*args, "--keep-going")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    failed = {
        source
        for source in capi_bundle.providers.images
        if source.split("/", 1)[1].split(":")[0] in ("test/sidecar", "test/multi")
    }
    assert len(failed) == 2
    assert len(lines) == 3, result.stderr
    for source in failed:
        (line,) = [line for line in lines if line.startswith(f"airgap: error: {source} (")]
        assert f"{proxy.host}/{PREFIX}/" in line
        assert ("HTTP 403" if "sidecar" in source else "HTTP 400") in line, line
    pushed = len(capi_bundle.providers.images) - 2
    assert lines[-1] == (
        f"airgap: error: 2 images failed, {pushed} pushed into {proxy.host}/{PREFIX} "
        "(see import-report.json)"
    )
    report = json.loads((out / "import-report.json").read_text())
    assert report["images_pushed"] == pushed
    assert {entry["what"] for entry in report["failed"]} == failed
    assert {entry["status"] for entry in report["failed"]} == {"HTTP 403", "HTTP 400"}
    for source, image in capi_bundle.providers.images.items():
        if source not in failed:
            raw = skopeo.raw_manifest(target_ref(source, registry), registry=registry)
            assert sha256_digest(raw) == image.digest
