"""``airgap collect`` end to end against real registries and a fake GitHub on loopback."""

from __future__ import annotations

import base64
import json
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.signing import load_public_key, verify
from airgap.oci.manifest import sha256_digest
from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.images import OciLayout, TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer, make_metadata
from tests.harness.tarextract import extract


@pytest.fixture(scope="module")
def extracted(capi_bundle: CollectedBundle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("extracted")
    with tarfile.open(capi_bundle.path) as tar:
        extract(tar, target)
    return target


@pytest.mark.integration
def test_every_image_digest_equals_the_source_registry(
    capi_bundle: CollectedBundle, extracted: Path
) -> None:
    recorded = {image.reference: image for image in capi_bundle.manifest.images}
    assert set(recorded) == set(capi_bundle.providers.images)
    for reference, source in capi_bundle.providers.images.items():
        served = skopeo.raw_manifest(reference, registry=None)
        assert sha256_digest(served) == source.digest
        assert recorded[reference].digest == source.digest
        assert recorded[reference].media_type == source.media_type
        blob = extracted / "images/blobs/sha256" / source.digest.split(":", 1)[1]
        assert blob.read_bytes() == served  # manifests are stored byte for byte
        if source.media_type.startswith("application/vnd.oci."):
            # an independent client reads the extracted layout by the original reference
            # (containers/image only resolves OCI-typed entries of index.json, so Docker
            # schema 2 images are checked by their bytes above and, after import, in a registry)
            raw = skopeo.raw_manifest_oci(extracted / "images", reference)
            assert sha256_digest(raw) == source.digest


@pytest.mark.integration
def test_multi_arch_and_docker_images_are_complete(
    capi_bundle: CollectedBundle, extracted: Path
) -> None:
    blobs = {p.name for p in (extracted / "images" / "blobs" / "sha256").iterdir()}
    for source in capi_bundle.providers.images.values():
        needed = {d.split(":", 1)[1] for d in source.blob_digests | set(source.child_digests)}
        assert needed <= blobs, source.reference
    multi = next(i for i in capi_bundle.manifest.images if "multi" in i.reference)
    source = capi_bundle.providers.images[multi.reference]
    assert multi.platforms == sorted(source.platforms) == ["linux/amd64", "linux/arm64/v8"]


@pytest.mark.integration
def test_shared_blobs_are_stored_once(
    capi_bundle: CollectedBundle, source_images: dict[str, TestImage]
) -> None:
    shared = source_images["app"].layer_digests & source_images["sidecar"].layer_digests
    assert shared, "the corpus must share base layers"
    with tarfile.open(capi_bundle.path) as tar:
        names = Counter(tar.getnames())
    assert max(names.values()) == 1
    for digest in shared:
        assert names[f"images/blobs/sha256/{digest.split(':', 1)[1]}"] == 1


@pytest.mark.integration
def test_signature_checks_with_the_public_key(capi_bundle: CollectedBundle) -> None:
    with tarfile.open(capi_bundle.path) as tar:
        assert tar.getnames()[:2] == [MANIFEST_NAME, SIGNATURE_NAME]
        manifest = tar.extractfile(MANIFEST_NAME).read()  # type: ignore[union-attr]
        signature = tar.extractfile(SIGNATURE_NAME).read()  # type: ignore[union-attr]
    key = load_public_key(capi_bundle.key.public)
    assert verify(signature, manifest, [key]).startswith("SHA256:")
    assert len(base64.b64decode(signature)) == 64


@pytest.mark.integration
def test_manifest_records_providers_files_and_images(
    capi_bundle: CollectedBundle, extracted: Path
) -> None:
    manifest = capi_bundle.manifest
    versions = {(p.type, p.name): (p.version, p.contract) for p in manifest.providers}
    # latest is the highest release that is not a pre-release
    assert versions[("CoreProvider", "cluster-api")] == ("v1.9.4", "v1beta1")
    assert versions[("InfrastructureProvider", "odd")] == ("v0.3.1", "v1beta1")
    docker = next(p for p in manifest.providers if p.name == "docker")
    assert docker.components.endswith("infrastructure-components-development.yaml")
    assert docker.label == "infrastructure-docker"
    for record in manifest.files:
        data = (extracted / record.path).read_bytes()
        assert len(data) == record.size
        assert sha256_digest(data) == f"sha256:{record.sha256}"
    listed = {f.path for f in manifest.files} | {MANIFEST_NAME, SIGNATURE_NAME}
    on_disk = {p.relative_to(extracted).as_posix() for p in extracted.rglob("*") if p.is_file()}
    assert listed == on_disk
    assert manifest.images[0].size > 0 and manifest.created.endswith("Z")


@pytest.mark.e2e
def test_inspect_shows_providers_and_images(capi_bundle: CollectedBundle) -> None:
    result = run_airgap("inspect", capi_bundle.path, "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert len(document["providers"]) == 5
    assert {i["digest"] for i in document["images"]} == {
        i.digest for i in capi_bundle.providers.images.values()
    }
    text = run_airgap("inspect", capi_bundle.path)
    assert "cluster-api" in text.stdout and "v1beta1" in text.stdout
    assert "linux/amd64,linux/arm64/v8" in text.stdout


@pytest.mark.e2e
def test_platform_filter_keeps_only_wanted_platforms(
    tmp_path: Path, source_images: dict[str, TestImage], signing_key: SigningKey
) -> None:
    multi = source_images["multiarch"]
    spec = write_spec(
        tmp_path / "spec.yaml", {"images": [multi.reference], "platforms": ["linux/arm64"]}
    )
    output = tmp_path / "arm.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output, "-q")
    assert result.returncode == 0, result.stderr
    document = json.loads(run_airgap("inspect", output, "--format", "json").stdout)
    (image,) = document["images"]
    assert image["platforms"] == ["linux/arm64/v8"]
    assert image["digest"] != multi.digest  # a filtered index is a new index
    with tarfile.open(output) as tar:
        blobs = {n.rsplit("/", 1)[1] for n in tar.getnames() if "/blobs/" in n}
    amd64_only = {d.split(":", 1)[1] for d in multi.child_digests} - blobs
    assert len(amd64_only) == 1


@pytest.mark.e2e
def test_registry_settings_ca_file_and_stored_credentials(
    tmp_path: Path,
    source_images: dict[str, TestImage],
    secure_registry: RegistryServer,
    signing_key: SigningKey,
) -> None:
    secure = source_images["secure_multiarch"]
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "images": [secure.reference],
            "registries": {secure_registry.host: {"caFile": str(secure_registry.ca_file)}},
        },
    )
    output = tmp_path / "secure.tar"
    # no credentials: a clear 401 naming the registry, and nothing written
    denied = run_airgap(
        *collect_args(spec, signing_key.private, output),
        env={"DOCKER_CONFIG": str(tmp_path / "nodocker")},
    )
    assert_clean_failure(denied, 1, secure_registry.host, "401", "no credentials were found")
    assert not output.exists()
    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(f"{secure_registry.username}:{secure_registry.password}".encode())
    (config / "config.json").write_text(
        json.dumps({"auths": {secure_registry.host: {"auth": auth.decode()}}})
    )
    result = run_airgap(
        *collect_args(spec, signing_key.private, output),
        env={"DOCKER_CONFIG": str(config)},
    )
    assert result.returncode == 0, result.stderr
    assert secure_registry.password is not None
    assert secure_registry.password not in result.stderr + result.stdout
    with tarfile.open(output) as tar:
        assert secure_registry.password.encode() not in tar.extractfile(MANIFEST_NAME).read()  # type: ignore[union-attr]
    document = json.loads(run_airgap("inspect", output, "--format", "json").stdout)
    assert document["images"][0]["digest"] == secure.digest


@pytest.mark.e2e
def test_untrusted_tls_says_to_use_a_ca_file(
    tmp_path: Path, source_images: dict[str, TestImage], signing_key: SigningKey
) -> None:
    spec = write_spec(tmp_path / "spec.yaml", {"images": [source_images["secure_app"].reference]})
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x.tar"
    )
    assert_clean_failure(result, 1, "certificate", "ca")


@pytest.mark.e2e
def test_missing_release_file_names_the_url(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    owner, repo = release_server.new_repo("broken")
    release_server.add_release(
        owner, repo, "v1.0.0", {"metadata.yaml": make_metadata([(1, 0, "v1beta1")]).encode()}
    )
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "providers": [
                {
                    "name": "broken",
                    "type": "InfrastructureProvider",
                    "version": "v1.0.0",
                    "url": release_server.repo_url(owner, repo),
                }
            ]
        },
    )
    output = tmp_path / "x.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    line = assert_clean_failure(result, 1, "infrastructure-components.yaml")
    assert "http://127.0.0.1" in line
    assert not output.exists()
    assert not list(tmp_path.glob(".airgap-collect-*")) and not list(tmp_path.glob(".x.tar*"))


@pytest.mark.e2e
def test_missing_image_tag_names_the_image(
    tmp_path: Path, plain_registry: RegistryServer, signing_key: SigningKey
) -> None:
    missing = f"{plain_registry.host}/test/app:does-not-exist"
    spec = write_spec(tmp_path / "spec.yaml", {"images": [missing]})
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x.tar"
    )
    assert_clean_failure(result, 1, missing, "404")


@pytest.mark.e2e
def test_unreachable_registry(tmp_path: Path, signing_key: SigningKey) -> None:
    spec = write_spec(tmp_path / "spec.yaml", {"images": ["127.0.0.1:9/nothing/here:v1"]})
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x.tar"
    )
    assert_clean_failure(result, 1, "127.0.0.1:9", "cannot connect")


@pytest.mark.e2e
def test_corrupt_registry_blob_aborts_naming_the_image(
    tmp_path: Path,
    registry_factory: RegistryFactory,
    corpus_layout: OciLayout,
    signing_key: SigningKey,
) -> None:
    from tests.harness.images import CorpusEntry, push_corpus

    registry = registry_factory("plain")
    (image,) = push_corpus(
        corpus_layout, registry, {"app": CorpusEntry("app", "rot/app", "v1")}
    ).values()
    layer = sorted(image.layer_digests)[0].split(":", 1)[1]
    data = registry.storage_dir / "docker/registry/v2/blobs/sha256" / layer[:2] / layer / "data"
    assert data.is_file()
    rotten = bytearray(data.read_bytes())
    rotten[len(rotten) // 2] ^= 0xFF  # bit rot on the registry's disk
    data.write_bytes(bytes(rotten))
    spec = write_spec(tmp_path / "spec.yaml", {"images": [image.reference]})
    output = tmp_path / "x.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert_clean_failure(result, 1, image.reference, "digest")
    assert not output.exists()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("spec_text", "needles"),
    [
        ("providers:\n  - {name: x, type: InfrastructureProvider}\n", ["version"]),
        ("providers:\n  - {name: x, type: Nope, version: v1.0.0}\n", ["Nope"]),
        ("images: [ok]\nbogus: 1\n", ["bogus"]),
        ("images: [\n", ["spec.yaml"]),
    ],
)
def test_bad_spec_is_a_usage_error(
    tmp_path: Path, signing_key: SigningKey, spec_text: str, needles: list[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x.tar"
    )
    assert_clean_failure(result, 2, "spec.yaml", *needles)


@pytest.mark.e2e
def test_unknown_provider_name_names_the_line_and_the_closest_names(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    """A misspelt built-in name fails before anything is fetched, at its line."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "providers:\n"
        "  - {name: cluster-api, type: CoreProvider, version: latest}\n"
        "  - {name: vsphre, type: InfrastructureProvider, version: v1.12.0}\n"
    )
    release_server.clear_requests()
    result = run_airgap(
        *collect_args(spec, signing_key.private, tmp_path / "x.tar"),
        env={"GITHUB_API_URL": release_server.api_url},  # a fetch would show up here
    )
    line = assert_clean_failure(result, 2)
    assert line == (
        f"airgap: error: {spec}:3: providers[1].name: unknown provider 'vsphre' of type "
        "InfrastructureProvider: closest built-in names: vsphere; "
        "or give url (e.g. https://github.com/OWNER/REPO/releases)"
    )
    assert release_server.requests() == []
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.e2e
def test_missing_sign_key_is_a_usage_error(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.yaml", {"images": ["127.0.0.1:9/x:v1"]})
    result = run_airgap("collect", spec, "--sign-key", tmp_path / "nokey", "-o", tmp_path / "x.tar")
    assert_clean_failure(result, 2, "nokey")


@pytest.mark.e2e
def test_keygen_then_collect_from_the_cli(
    tmp_path: Path, source_images: dict[str, TestImage]
) -> None:
    assert run_airgap("keygen", tmp_path / "k.key").returncode == 0
    again = run_airgap("keygen", tmp_path / "k.key")
    assert_clean_failure(again, 2, "already exists")


@pytest.mark.e2e
def test_pull_mirror_keeps_the_original_reference(
    tmp_path: Path,
    source_images: dict[str, TestImage],
    plain_registry: RegistryServer,
    signing_key: SigningKey,
) -> None:
    """registry.k8s.io/* is pulled through a mirror; the bundle keeps the upstream name."""
    app = source_images["app"]
    upstream = f"registry.k8s.io/{app.repository}:{app.tag}"
    spec = write_spec(
        tmp_path / "spec.yaml",
        {"images": [upstream], "registries": {"registry.k8s.io": {"mirror": plain_registry.host}}},
    )
    output = tmp_path / "mirror.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output, "-q")
    assert result.returncode == 0, result.stderr
    (image,) = json.loads(run_airgap("inspect", output, "--format", "json").stdout)["images"]
    assert (image["reference"], image["digest"]) == (upstream, app.digest)
    with tarfile.open(output) as tar:
        extract(tar, tmp_path / "x")
    assert sha256_digest(skopeo.raw_manifest_oci(tmp_path / "x/images", upstream)) == app.digest


@pytest.mark.unit
def test_example_specs_are_valid() -> None:
    from airgap.collect.spec import load_spec

    examples = sorted(Path(__file__).parent.parent.joinpath("bundles").glob("*.yaml"))
    assert examples
    for path in examples:
        assert load_spec(path).providers, path


@pytest.mark.e2e
def test_every_failure_of_a_collect_is_reported_in_one_run(
    tmp_path: Path,
    plain_registry: RegistryServer,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> None:
    """Issue 46: three images that cannot be had and one release that is missing are
    reported together (one line each: reference, registry, status; then the count),
    exit 1, and nothing is written."""
    owner, repo = release_server.new_repo("gone")
    release_server.add_release(
        owner, repo, "v1.0.0", {"metadata.yaml": make_metadata([(1, 0, "v1beta1")]).encode()}
    )
    bad = [
        f"{plain_registry.host}/test/app:no-such-tag",
        f"{plain_registry.host}/no/such-repository:v1",
        "127.0.0.1:9/nothing/here:v1",
    ]
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "providers": [
                {
                    "name": "gone",
                    "type": "InfrastructureProvider",
                    "version": "v1.0.0",
                    "url": release_server.repo_url(owner, repo),
                }
            ],
            "images": [source_images["app"].reference, *bad],
        },
    )
    output = tmp_path / "x.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 5, result.stderr
    assert all(line.startswith("airgap: error: ") for line in lines)
    release_host = release_server.repo_url(owner, repo).split("/")[2]
    assert f"provider gone (InfrastructureProvider) v1.0.0 ({release_host}): HTTP 404" in lines[0]
    assert "infrastructure-components.yaml" in lines[0]
    for reference in bad[:2]:
        (line,) = [line for line in lines if f"{reference} ({plain_registry.host}): " in line]
        assert "HTTP 404" in line, line
    (line,) = [line for line in lines if "127.0.0.1:9/nothing/here:v1 (127.0.0.1:9): " in line]
    assert "unreachable" in line and "cannot connect" in line, line
    assert lines[-1] == "airgap: error: 1 release and 3 images failed; nothing written"
    assert source_images["app"].reference not in result.stderr
    assert not output.exists()
    assert not list(tmp_path.glob(".airgap-collect-*")) and not list(tmp_path.glob(".x.tar*"))
