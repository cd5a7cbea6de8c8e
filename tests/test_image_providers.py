"""Image-based providers (issue 18): manifests read from /capi-operator-manifests/ of
provider images, and manifests images written for the mirror.

Layers are applied in memory (whiteouts, opaque directories, hostile names and links)
by feeding real tar/gzip bytes to the sinks; then real images built by the harness and
pushed with skopeo into a real registry are collected, verified and imported through
the CLI.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import yaml

from airgap.bundle.format import ProviderRecord
from airgap.bundle.reader import read_head
from airgap.collect.spec import parse_spec
from airgap.core.errors import AirgapError, InputError, SpecError
from airgap.mirror.manifestimage import Published, component_list
from airgap.providers.imagefs import ImageFiles, LayerError
from airgap.providers.imagesource import (
    clusterctl_profile,
    contract_from_manifests,
    parse_profile_metadata,
    select_profiles,
    substitute_self,
    wanted,
)
from airgap.providers.types import ProviderType
from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.cli import run_airgap
from tests.harness.images import AMD64, ARM64, OciLayout, TestImage, push_image
from tests.harness.providerimages import (
    ROOT,
    SELF_IMAGE_REF,
    Entry,
    add_image,
    gzip_bytes,
    layer_tar,
    manifests_yaml,
    metadata_yaml,
    standard_layers,
)
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.tiers import need_tool

if TYPE_CHECKING:
    from tests.harness.tamper import TarMember

SIDECAR = "quay.example/test/sidecar@sha256:" + "1" * 64


def apply(layers: list[list[Entry]], *, gzip_first: bool = True) -> ImageFiles:
    files = ImageFiles(wanted, "test image")
    for index, entries in enumerate(layers):
        tar = layer_tar(entries)
        compressed = gzip_first and index % 2 == 0
        sink = files.layer(
            "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compressed else ""),
            f"sha256:{index}",
        )
        blob = gzip_bytes(tar) if compressed else tar
        for start in range(0, len(blob), 777):  # arbitrary chunks, as a download gives them
            sink.write(blob[start : start + 777])
        sink.finish()
    return files


# --- reading layers ------------------------------------------------------------------


@pytest.mark.unit
def test_layers_apply_in_order_with_whiteouts() -> None:
    layers, expected = standard_layers(SIDECAR)
    files = apply(layers).files
    assert files == {
        f"{ROOT}/aws/manifests.yaml": expected.aws_manifests,
        f"{ROOT}/aws/metadata.yaml": expected.aws_metadata,
        f"{ROOT}/default/manifests.yaml": expected.manifests,
        f"{ROOT}/default/metadata.yaml": expected.metadata,
    }
    assert not Path("/tmp/airgap-escaped").exists()


@pytest.mark.unit
def test_a_retried_download_starts_the_layer_again() -> None:
    files = ImageFiles(wanted, "test image")
    blob = gzip_bytes(layer_tar([Entry(f"{ROOT}/default/metadata.yaml", b"name: x\n")]))
    sink = files.layer("application/vnd.oci.image.layer.v1.tar+gzip", "sha256:0")
    sink.write(blob[:40])
    sink.seek(0)
    sink.truncate()
    sink.write(blob)
    sink.finish()
    assert files.files == {f"{ROOT}/default/metadata.yaml": b"name: x\n"}


@pytest.mark.unit
def test_a_link_where_a_profile_file_should_be_is_refused() -> None:
    layers = [
        [Entry(f"{ROOT}/default/metadata.yaml", metadata_yaml())],
        [Entry(f"{ROOT}/default/manifests.yaml", kind="symlink", target="/etc/shadow")],
    ]
    files = apply(layers)
    with pytest.raises(AirgapError, match="manifests.yaml is a symbolic link, not a file"):
        select_profiles(files, None, "test image")


@pytest.mark.unit
def test_a_file_replacing_a_directory_hides_its_tree() -> None:
    layers = [
        [
            Entry(f"{ROOT}/default/metadata.yaml", metadata_yaml()),
            Entry(f"{ROOT}/default/manifests.yaml", b"kind: X\n"),
        ],
        [Entry(ROOT, b"now a file")],
    ]
    assert apply(layers).files == {}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("blob", "media_type", "message"),
    [
        (b"\x1f\x8b\x08\x00garbage" * 10, "+gzip", "not gzip data"),
        (gzip_bytes(b"x" * 100)[:-12], "+gzip", "truncated"),
        (layer_tar([Entry("a", b"x" * 2000)])[:1100], "", "truncated tar"),
        (b"\x01" * 512, "", "checksum"),
        (b"abc", "+zstd", "zstandard"),
        (b"abc", "+bzip2", "unsupported layer media type"),
    ],
)
def test_broken_layers_are_one_clear_error(blob: bytes, media_type: str, message: str) -> None:
    files = ImageFiles(wanted, "test image")
    with pytest.raises(LayerError, match=message):
        sink = files.layer("application/vnd.oci.image.layer.v1.tar" + media_type, "sha256:0")
        sink.write(blob)
        sink.finish()


def _pax_sized_layer(size: str) -> bytes:
    """A layer whose one file's PAX header says ``size=SIZE``."""
    import tarfile

    body = f" size={size}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    record = str(length).encode() + body
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, len(record)
    padding = b"\0" * (-len(record) % 512)
    file = tarfile.TarInfo("a")
    file.size = 1
    return (
        pax.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
        + record
        + padding
        + file.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
        + b"x"
        + b"\0" * 511
        + b"\0" * 1024
    )


@pytest.mark.unit
@pytest.mark.parametrize("size", ["9" * 5000, "\u0661\u0662", "1x"])
def test_a_pax_size_that_is_not_a_bounded_number_is_one_clear_error(size: str) -> None:
    # a hostile image's 5,000-digit PAX size was a traceback from int()
    files = ImageFiles(wanted, "test image")
    with pytest.raises(LayerError, match=r"PAX header at byte \d+ has an invalid size"):
        sink = files.layer("application/vnd.oci.image.layer.v1.tar", "sha256:0")
        sink.write(_pax_sized_layer(size))
        sink.finish()
    sane = ImageFiles(wanted, "test image").layer(
        "application/vnd.oci.image.layer.v1.tar", "sha256:0"
    )
    sane.write(_pax_sized_layer("1"))
    sane.finish()


@pytest.mark.unit
def test_oversized_profile_files_are_refused_before_being_read() -> None:
    big = b"#" * (1024 * 1024 + 1)
    with pytest.raises(LayerError, match="metadata.yaml is 1048577 bytes, over 1 MiB"):
        apply([[Entry(f"{ROOT}/default/metadata.yaml", big)]])


@pytest.mark.unit
def test_only_profile_files_are_wanted() -> None:
    assert wanted(f"{ROOT}/default/manifests.yaml") is not None
    assert wanted(f"{ROOT}/default/metadata.yaml") is not None
    assert wanted(f"{ROOT}/default/other.yaml") is None
    assert wanted(f"{ROOT}/a/b/manifests.yaml") is None
    assert wanted(f"{ROOT}/bad name/manifests.yaml") is None
    assert wanted("usr/bin/manager") is None


# --- metadata, contract, profiles ----------------------------------------------------


@pytest.mark.unit
def test_profile_metadata_is_parsed_strictly() -> None:
    parsed = parse_profile_metadata(metadata_yaml().decode(), "m")
    assert (parsed.name, parsed.install_order, parsed.ocp_platform) == (
        "cluster-api-provider-test",
        20,
        "AWS",
    )
    assert parsed.self_image_ref == SELF_IMAGE_REF
    assert dict(parsed.attributes) == {"type": "infrastructure", "version": "v2.8.1"}
    for text, message in [
        ("name: x\nreleaseSeries: []\n", "unknown key 'releaseSeries'"),
        ("attributes: {}\n", "name: missing"),
        ("name: x\ninstallOrder: -1\n", "installOrder"),
        ("name: x\nattributes: {type: [1]}\n", "attributes"),
        ("- a\n", "not a provider metadata document"),
        ("name: [\n", "malformed YAML"),
    ]:
        with pytest.raises(InputError, match=message):
            parse_profile_metadata(text, "m")


@pytest.mark.unit
def test_contract_comes_from_the_crd_labels() -> None:
    assert contract_from_manifests(manifests_yaml(SIDECAR).decode()) == "v1beta2"
    both = (
        manifests_yaml(SIDECAR, contract="v1beta1").decode()
        + "---\n"
        + (manifests_yaml(SIDECAR, contract="v1beta2").decode())
    )
    assert contract_from_manifests(both) == "v1beta2"
    assert contract_from_manifests("kind: ConfigMap\n") is None
    # an image's label with a 5,000-digit contract was a traceback from int(): no contract
    huge = f"metadata:\n  labels:\n    cluster.x-k8s.io/v{'9' * 5000}: v1\n"
    assert contract_from_manifests(huge) is None
    assert contract_from_manifests(huge + "---\n" + manifests_yaml(SIDECAR).decode()) == "v1beta2"


@pytest.mark.unit
def test_profiles_default_first_and_self_image_substituted() -> None:
    layers, expected = standard_layers(SIDECAR)
    profiles = select_profiles(apply(layers), None, "img")
    assert [p.name for p in profiles] == ["default", "aws"]
    assert [p.name for p in select_profiles(apply(layers), ("aws",), "img")] == ["aws"]
    with pytest.raises(AirgapError, match="no profile 'old'.*it has default, aws"):
        select_profiles(apply(layers), ("old",), "img")
    default = profiles[0]
    assert default.metadata_text == expected.metadata.decode()
    text = substitute_self(
        default.manifests, default.metadata.self_image_ref, "quay.example/p@sha256:" + "2" * 64
    )
    assert SELF_IMAGE_REF not in text
    assert text.count("quay.example/p@sha256:") == 1


@pytest.mark.unit
def test_the_clusterctl_profile_is_one_profile() -> None:
    layers, _ = standard_layers(SIDECAR)
    profiles = select_profiles(apply(layers), None, "img")
    assert clusterctl_profile(profiles, None, "img").name == "default"
    assert clusterctl_profile(profiles, "aws", "img").name == "aws"
    assert clusterctl_profile(profiles[1:], None, "img").name == "aws"  # the only one
    with pytest.raises(InputError, match="clusterctlProfile 'gpu' is not among .*default, aws"):
        clusterctl_profile(profiles, "gpu", "img")
    other = select_profiles(apply(layers), None, "img")[1]
    renamed = type(other)("gpu", other.metadata, other.manifests, other.metadata_text)
    with pytest.raises(InputError, match="'aws' and 'gpu' but no 'default'"):
        clusterctl_profile([profiles[1], renamed], None, "img")


@pytest.mark.unit
def test_spec_reads_image_providers(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    text = (
        "providers:\n"
        "- {name: cluster-api, type: core, version: v1.9.4}\n"
        "- image: quay.io/openshift/capa@sha256:" + "a" * 64 + "\n"
        "  profiles: [default, aws]\n"
        "  type: infrastructure\n"
    )
    spec = parse_spec(text, path)
    assert len(spec.providers) == 1
    (entry,) = spec.image_providers
    assert entry.image == "quay.io/openshift/capa@sha256:" + "a" * 64
    assert entry.profiles == ("default", "aws")
    assert entry.type is ProviderType.INFRASTRUCTURE
    assert entry.where == f"{path}:3: providers[1]"
    assert (
        parse_spec("providers:\n- image: quay.io/x/y:v1\n", path).image_providers[0].profiles
        is None
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- image: 'UPPER/x'\n", "spec.yaml:2: providers[0].image"),
        ("- image: q.io/x:v1\n  profiles: []\n", "spec.yaml:3: providers[0].profiles: empty"),
        ("- image: q.io/x:v1\n  profiles: [a/b]\n", "spec.yaml:3: providers[0].profiles[0]"),
        ("- image: q.io/x:v1\n  profiles: [a, a]\n", "listed twice"),
        (
            "- image: q.io/x:v1\n  url: https://x.example\n",
            "spec.yaml:3: providers[0].url: unknown",
        ),
        ("- image: q.io/x:v1\n  version: latest\n", "providers[0].version: invalid version"),
        ("- image: q.io/x:v1\n  contract: beta\n", "providers[0].contract: invalid contract"),
        ("- image: q.io/x:v1\n  type: cloud\n", "providers[0].type: unknown provider type"),
        (
            "- image: q.io/x:v1\n  clusterctlProfile: [default, techpreview]\n",
            "spec.yaml:3: providers[0].clusterctlProfile: one profile, not a list "
            "('default', 'techpreview')",
        ),
        (
            "- image: q.io/x:v1\n  profiles: [default]\n  clusterctlProfile: techpreview\n",
            "spec.yaml:4: providers[0].clusterctlProfile: profile 'techpreview' is not among",
        ),
        (
            "- image: q.io/x:v1\n  profiles: [aws, techpreview]\n",
            "spec.yaml:3: providers[0].profiles: 'aws' and 'techpreview' but no 'default'",
        ),
        ("- image: q.io/x:v1\n  clusterctlProfile: a/b\n", "invalid profile 'a/b'"),
    ],
)
def test_spec_errors_name_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("providers:\n" + text, tmp_path / "spec.yaml")
    assert needle in str(caught.value)


# --- collect from a real registry ----------------------------------------------------


@pytest.fixture(scope="module")
def provider_image(
    tmp_path_factory: pytest.TempPathFactory,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
) -> tuple[TestImage, bytes, bytes]:
    """The standard three-layer image (amd64) in an index with an arm64 image whose
    manifests differ, pushed with skopeo; returns it with the amd64 default files."""
    sidecar = source_images["sidecar"].digest_reference
    layout = OciLayout(tmp_path_factory.mktemp("provider-image") / "layout")
    layers, expected = standard_layers(sidecar)
    amd = add_image(layout, layers)
    arm_layer = [Entry(f"{ROOT}/default/manifests.yaml", b"kind: Arm\n")]
    arm = add_image(layout, [*layers[:2], arm_layer], architecture="arm64")
    index = layout.add_index([(amd, AMD64), (arm, ARM64)])
    layout.tag("provider", index)
    pushed = push_image(layout, "provider", plain_registry, "openshift/capt", "v2.8.1")
    return pushed, expected.manifests, expected.metadata


def collect(
    tmp_path: Path, spec_text: str, signing_key: SigningKey, *, expect_ok: bool = True
) -> tuple[subprocess.CompletedProcess[str], Path]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text)
    output = tmp_path / "bundle.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    if expect_ok:
        assert result.returncode == 0, result.stderr
    return result, output


@pytest.mark.e2e
def test_collect_reads_the_image_and_carries_it(
    tmp_path: Path,
    provider_image: tuple[TestImage, bytes, bytes],
    signing_key: SigningKey,
    source_images: dict[str, TestImage],
) -> None:
    image, manifests, metadata_bytes = provider_image
    _, bundle = collect(tmp_path, f"providers:\n- image: {image.digest_reference}\n", signing_key)
    manifest = read_head(bundle).manifest
    (provider,) = manifest.providers
    assert (provider.name, provider.type, provider.version, provider.contract) == (
        "test",
        "InfrastructureProvider",
        "v2.8.1",
        "v1beta2",
    )
    assert provider.image is not None
    assert provider.image.reference == image.digest_reference
    assert provider.image.profiles == ["default", "aws"]
    assert (provider.image.name, provider.image.install_order) == ("cluster-api-provider-test", 20)
    assert provider.image.ocp_platform == "AWS"
    assert provider.image.self_image_ref == SELF_IMAGE_REF
    # the image itself and what its manifests run travel in the bundle
    carried = {i.reference: i for i in manifest.images}
    assert image.digest_reference in carried
    assert carried[image.digest_reference].digest == image.digest
    assert source_images["sidecar"].digest_reference in carried
    assert provider.images[0] == image.digest_reference
    # the components are the amd64 default profile alone with selfImageRef replaced;
    # each profile is carried apart beside them
    members = {m.name: m.data for m in _members(bundle)}
    components = members[provider.components].decode()
    expected = manifests.decode().replace(SELF_IMAGE_REF, image.digest_reference)
    assert components == expected
    assert provider.image.clusterctl_profile == "default"
    base = "providers/infrastructure-test/v2.8.1/profiles"
    assert provider.image.profile_files == [
        f"{base}/default/metadata.yaml",
        f"{base}/default/manifests.yaml",
        f"{base}/aws/metadata.yaml",
        f"{base}/aws/manifests.yaml",
    ]
    assert members[f"{base}/default/manifests.yaml"].decode() == expected
    assert (
        members[f"{base}/aws/manifests.yaml"]
        == b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aws-only}\n"
    )
    assert members[f"{base}/default/metadata.yaml"] == metadata_bytes
    assert b"installOrder: 21" in members[f"{base}/aws/metadata.yaml"]
    assert "kind: Arm" not in components and "stale" not in components
    metadata = yaml.safe_load(members[provider.metadata])
    assert metadata["releaseSeries"] == [{"major": 2, "minor": 8, "contract": "v1beta2"}]
    verify = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    inspect = run_airgap("inspect", bundle, "--format", "json")
    assert inspect.returncode == 0, inspect.stderr
    assert image.digest_reference in inspect.stdout
    assert '"clusterctlProfile": "default"' in inspect.stdout
    assert f'"{base}/aws/manifests.yaml"' in inspect.stdout


@pytest.mark.e2e
def test_collect_reads_the_platform_asked_for(
    tmp_path: Path, provider_image: tuple[TestImage, bytes, bytes], signing_key: SigningKey
) -> None:
    image, _, _ = provider_image
    spec = (
        "platforms: [linux/arm64]\n"
        f"providers:\n- image: {image.digest_reference}\n  profiles: [default]\n"
        "  contract: v1beta1\n"
    )
    _, bundle = collect(tmp_path, spec, signing_key)
    (provider,) = read_head(bundle).manifest.providers
    members = {m.name: m.data for m in _members(bundle)}
    assert members[provider.components] == b"kind: Arm\n"
    assert provider.image is not None
    assert provider.contract == "v1beta1" and provider.image.profiles == ["default"]


@pytest.mark.e2e
def test_collect_errors_name_the_spec_entry(
    tmp_path: Path, provider_image: tuple[TestImage, bytes, bytes], signing_key: SigningKey
) -> None:
    image, _, _ = provider_image
    spec = f"providers:\n- image: {image.digest_reference}\n  profiles: [gcp]\n"
    result, bundle = collect(tmp_path, spec, signing_key, expect_ok=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "spec.yaml:2: providers[0]" in lines[0] and "no profile 'gcp'" in lines[0]
    assert not bundle.exists()
    spec = f"providers:\n- image: {image.digest_reference}\n  type: core\n"
    result, _ = collect(tmp_path, spec, signing_key, expect_ok=False)
    assert "the spec says type CoreProvider" in result.stderr


def _members(bundle: Path) -> list[TarMember]:
    from tests.harness.tamper import read_members

    return read_members(bundle)


# --- manifests images written on import ----------------------------------------------


@pytest.mark.unit
def test_manifests_image_is_reproducible_and_well_formed() -> None:
    from airgap.mirror.manifestimage import ImageProfile, build_image

    def one(text: str) -> list[ImageProfile]:
        return [ImageProfile("default", text, b"name: x\n", 30)]

    first = build_image(one("kind: A\n"))
    assert build_image(one("kind: A\n")) == first
    assert build_image(one("kind: B\n")).manifest.digest != first.manifest.digest
    import gzip as gz
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(gz.decompress(first.layer))) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        f"{ROOT}",
        f"{ROOT}/default",
        f"{ROOT}/default/manifests.yaml",
        f"{ROOT}/default/metadata.yaml",
    ]
    assert {(m.uid, m.gid, m.mtime, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    assert first.layer[4:8] == b"\0\0\0\0"  # gzip mtime 0


@pytest.mark.unit
def test_component_refs_are_checked_against_the_api_rule() -> None:
    from airgap.mirror.manifestimage import ref_accepted

    digest = "@sha256:" + "a" * 64
    assert ref_accepted("registry.local:5000/capi-manifests/aws" + digest)
    assert ref_accepted("127.0.0.1:5000/capi-manifests/cluster-api" + digest)
    assert not ref_accepted("registry.local:5000/mirror/capi-manifests/aws" + digest)
    assert not ref_accepted("localhost:5000/capi-manifests/aws" + digest)
    assert not ref_accepted("registry.local/capi-manifests/aws:v1")


def import_bundle(
    bundle: Path, signing_key: SigningKey, registry: RegistryServer, out: Path, *extra: str
) -> dict[str, Any]:
    result = run_airgap(
        "import",
        bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{registry.host}/mirror",
        "--output-dir",
        out,
        *extra,
    )
    assert result.returncode == 0, result.stderr
    return cast(
        dict[str, Any], yaml.safe_load((out / "openshift" / "capi-components.yaml").read_text())
    )


def umoci_unpack(reference: str, registry: RegistryServer, work: Path) -> Path:
    """skopeo copies the image by digest into an OCI layout, umoci unpacks it."""
    layout = work / "layout"
    work.mkdir(parents=True, exist_ok=True)
    skopeo.copy(
        skopeo.docker_ref(reference.split("/", 1)[1], registry),
        f"oci:{layout}:img",
        src_registry=registry,
    )
    bundle = work / "unpacked"
    umoci = need_tool("umoci")
    subprocess.run(
        [umoci, "raw", "unpack", "--rootless", "--image", f"{layout}:img", str(bundle)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return bundle


@pytest.mark.e2e
def test_import_writes_manifests_images_umoci_unpacks(
    tmp_path: Path,
    provider_image: tuple[TestImage, bytes, bytes],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    image, _, _ = provider_image
    spec = f"providers:\n- image: {image.digest_reference}\n  profiles: [default]\n"
    _, bundle = collect(tmp_path, spec, signing_key)
    target = registry_factory()
    listed = import_bundle(bundle, signing_key, target, tmp_path / "out")
    text = (tmp_path / "out/openshift/capi-components.yaml").read_text()
    assert "it would refuse" in text  # the --registry prefix adds a path element
    (component,) = listed["components"]
    assert component["type"] == "Image" and component["image"]["profile"] == "default"
    ref = component["image"]["ref"]
    assert ref.startswith(f"{target.host}/mirror/capi-manifests/infrastructure-test@sha256:")
    digest = ref.split("@", 1)[1]
    # skopeo reads it by digest; the tag names the same manifest
    raw = skopeo.raw_manifest(ref, registry=target)
    assert skopeo.digest_of(raw) == digest
    tagged = skopeo.raw_manifest(
        f"{target.host}/mirror/capi-manifests/infrastructure-test:v2.8.1", registry=target
    )
    assert skopeo.digest_of(tagged) == digest
    # umoci unpacks the files the import wrote, byte for byte
    rootfs = umoci_unpack(ref, target, tmp_path / "umoci")
    written = tmp_path / "out/components/infrastructure-test/v2.8.1/infrastructure-components.yaml"
    unpacked = rootfs / ROOT / "default"
    assert (unpacked / "manifests.yaml").read_bytes() == written.read_bytes()
    assert sorted(p.name for p in unpacked.iterdir()) == ["manifests.yaml", "metadata.yaml"]
    metadata = yaml.safe_load((unpacked / "metadata.yaml").read_text())
    assert metadata == {
        "name": "cluster-api-provider-test",
        "attributes": {"type": "infrastructure", "version": "v2.8.1", "contract": "v1beta2"},
        "installOrder": 20,
        "ocpPlatform": "AWS",
    }
    # the manifests are pinned to the mirror: the provider image itself included
    text = (unpacked / "manifests.yaml").read_text()
    assert SELF_IMAGE_REF not in text and f"{target.host}/mirror/" in text
    assert image.digest in text
    # importing again pushes the same bytes: the same digest
    again = import_bundle(bundle, signing_key, target, tmp_path / "out2")
    assert again["components"][0]["image"]["ref"] == ref


@pytest.mark.e2e
def test_every_provider_gets_a_manifests_image_in_install_order(
    tmp_path: Path, capi_bundle: CollectedBundle, registry_factory: RegistryFactory
) -> None:
    target = registry_factory()
    listed = import_bundle(capi_bundle.path, capi_bundle.key, target, tmp_path / "out")
    refs = [c["image"]["ref"] for c in listed["components"]]
    labels = [r.split("/capi-manifests/", 1)[1].split("@", 1)[0] for r in refs]
    assert labels[0] == "cluster-api"
    types = {p.label: p.type for p in capi_bundle.manifest.providers}
    order = {"CoreProvider": 0, "BootstrapProvider": 1, "ControlPlaneProvider": 1}
    ranks = [order.get(types[label], 2) for label in labels]
    assert ranks == sorted(ranks)
    # one image per provider: kubeadm's bootstrap and control plane do not collide
    assert len(set(refs)) == len(refs) == len(capi_bundle.manifest.providers)
    assert {"bootstrap-kubeadm", "control-plane-kubeadm"} <= set(labels)
    for ref in refs:
        assert skopeo.digest_of(skopeo.raw_manifest(ref, registry=target)) == ref.split("@")[1]


@pytest.mark.unit
def test_the_component_list_says_why_a_reference_would_be_refused() -> None:
    """OpenShift's ImageDigestFormat wants a dotted host or IPv4 and at most one path
    element before the name: the note names which of the two a reference breaks (for
    an IPv6 target, dropping the prefix would not help)."""
    record = ProviderRecord(
        "aws", "InfrastructureProvider", "v1.0.0", "v1beta1", "infrastructure-aws", "s", "m", "c"
    )
    digest = "sha256:" + "a" * 64

    def note(reference: str) -> str:
        listed = component_list([Published(record, "r", "v1.0.0", reference, 1)]).decode()
        return "\n".join(line for line in listed.splitlines() if "would refuse" in line)

    assert note(f"reg.local:5000/capi-manifests/aws@{digest}") == ""
    assert "without a --registry prefix" in note(f"reg.local:5000/p/capi-manifests/aws@{digest}")
    assert "DNS name with a dot" in note(f"[::1]:5000/capi-manifests/aws@{digest}")
    listed = yaml.safe_load(
        component_list([Published(record, "r", "v1.0.0", f"[::1]:5000/x@{digest}", 1)])
    )
    assert listed["components"][0]["image"]["ref"] == f"[::1]:5000/x@{digest}"  # quoted


# --- two profiles: carried apart, never concatenated (issue 41) ----------------------


def acme_manifests(*args: str) -> bytes:
    """A profile's manifests: the Namespace, a CRD labelled with its contract and the
    Deployment ``acme-system/acme-controller-manager`` running the provider image."""
    listed = ", ".join(f'"{arg}"' for arg in ("--leader-elect", *args))
    return f"""apiVersion: v1
kind: Namespace
metadata:
  name: acme-system
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: acmeclusters.infrastructure.cluster.x-k8s.io
  labels:
    cluster.x-k8s.io/v1beta2: v1beta2
spec:
  group: infrastructure.cluster.x-k8s.io
  names: {{kind: AcmeCluster, plural: acmeclusters}}
  scope: Namespaced
  versions: [{{name: v1beta2, served: true, storage: true}}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: acme-controller-manager
  namespace: acme-system
spec:
  selector: {{matchLabels: {{app: acme}}}}
  template:
    metadata: {{labels: {{app: acme}}}}
    spec:
      containers:
      - name: manager
        image: {SELF_IMAGE_REF}
        args: [{listed}]
""".encode()


TECH_PREVIEW = "--feature-gates=TechPreview=true"


@pytest.fixture(scope="module")
def two_profile_image(
    tmp_path_factory: pytest.TempPathFactory, plain_registry: RegistryServer
) -> TestImage:
    """Three layers: ``default`` and a stale ``techpreview``; the real ``techpreview``
    (the same Namespace and Deployment, with the tech-preview feature gate) over it;
    hostile entries last. Pushed with skopeo into the real registry."""
    layout = OciLayout(tmp_path_factory.mktemp("two-profiles") / "layout")
    preview_metadata = metadata_yaml(
        "cluster-api-provider-acme", extra="  featureSet: TechPreviewNoUpgrade\n"
    )
    layers = [
        [
            Entry(ROOT, kind="dir"),
            Entry(f"{ROOT}/default/manifests.yaml", acme_manifests()),
            Entry(f"{ROOT}/default/metadata.yaml", metadata_yaml("cluster-api-provider-acme")),
            Entry(f"{ROOT}/techpreview/manifests.yaml", b"kind: Stale\n"),
        ],
        [
            Entry(f"{ROOT}/techpreview/manifests.yaml", acme_manifests(TECH_PREVIEW)),
            Entry(f"{ROOT}/techpreview/metadata.yaml", preview_metadata),
        ],
        [
            Entry(f"{ROOT}/../../etc/evil", b"evil"),
            Entry(f"{ROOT}/techpreview/link.yaml", kind="symlink", target="/etc/passwd"),
        ],
    ]
    layout.tag("acme", add_image(layout, layers))
    return push_image(layout, "acme", plain_registry, "openshift/acme", "v2.8.1")


def _objects(text: str) -> list[tuple[str, str]]:
    return [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(text) if d is not None]


@pytest.mark.e2e
def test_two_profiles_are_carried_apart_and_listed_as_two_components(
    tmp_path: Path,
    two_profile_image: TestImage,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    """No ``profiles:`` key: both profiles are carried, each apart; the components
    (operator, clusterctl) are ``default`` alone; the OpenShift list has both."""
    image = two_profile_image
    _, bundle = collect(tmp_path, f"providers:\n- image: {image.digest_reference}\n", signing_key)
    (provider,) = read_head(bundle).manifest.providers
    assert provider.image is not None
    assert provider.image.profiles == ["default", "techpreview"]
    assert provider.image.clusterctl_profile == "default"
    members = {m.name: m.data.decode() for m in _members(bundle) if m.name.startswith("prov")}
    components = members[provider.components]
    assert _objects(components) == [
        ("Namespace", "acme-system"),
        ("CustomResourceDefinition", "acmeclusters.infrastructure.cluster.x-k8s.io"),
        ("Deployment", "acme-controller-manager"),
    ]
    assert "TechPreview" not in components
    preview = members["providers/infrastructure-acme/v2.8.1/profiles/techpreview/manifests.yaml"]
    assert TECH_PREVIEW in preview and _objects(preview) == _objects(components)
    assert SELF_IMAGE_REF not in preview and image.digest_reference in preview
    verify = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # import: one manifests image holding both profiles, two components
    target = registry_factory()
    out = tmp_path / "out"
    listed = import_bundle(bundle, signing_key, target, out)
    refs = {c["image"]["ref"] for c in listed["components"]}
    assert [c["image"]["profile"] for c in listed["components"]] == ["default", "techpreview"]
    assert len(refs) == 1
    rootfs = umoci_unpack(refs.pop(), target, tmp_path / "umoci")
    assert sorted(p.name for p in (rootfs / ROOT).iterdir()) == ["default", "techpreview"]
    unpacked = (rootfs / ROOT / "techpreview" / "manifests.yaml").read_text()
    assert TECH_PREVIEW in unpacked and f"{target.host}/mirror/" in unpacked
    metadata = yaml.safe_load((rootfs / ROOT / "techpreview" / "metadata.yaml").read_text())
    assert metadata["attributes"]["featureSet"] == "TechPreviewNoUpgrade"
    default = (rootfs / ROOT / "default" / "manifests.yaml").read_text()
    assert "TechPreview" not in default
    # nothing the operator or clusterctl installs holds the tech-preview profile
    for path in out.rglob("*"):
        if path.is_file() and "openshift" not in path.parts:
            assert "TechPreview=true" not in path.read_text(errors="replace"), path


@pytest.mark.e2e
def test_the_spec_names_the_clusterctl_profile(
    tmp_path: Path, two_profile_image: TestImage, signing_key: SigningKey
) -> None:
    image = two_profile_image
    spec = f"providers:\n- image: {image.digest_reference}\n  clusterctlProfile: techpreview\n"
    _, bundle = collect(tmp_path, spec, signing_key)
    (provider,) = read_head(bundle).manifest.providers
    assert provider.image is not None and provider.image.clusterctl_profile == "techpreview"
    components = {m.name: m.data for m in _members(bundle)}[provider.components].decode()
    assert TECH_PREVIEW in components
    assert [k for k, _ in _objects(components)].count("Deployment") == 1
    # two profiles for one components file: a spec error naming both, at its line
    spec = (
        f"providers:\n- image: {image.digest_reference}\n"
        "  clusterctlProfile: [default, techpreview]\n"
    )
    (tmp_path / "two").mkdir()
    result, output = collect(tmp_path / "two", spec, signing_key, expect_ok=False)
    assert result.returncode == 2 and not output.exists()
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "spec.yaml:3: providers[0].clusterctlProfile" in line
    assert "'default', 'techpreview'" in line


@pytest.mark.e2e
def test_a_profile_defining_an_object_twice_is_refused_at_collect(
    tmp_path: Path, plain_registry: RegistryServer, signing_key: SigningKey
) -> None:
    layout = OciLayout(tmp_path / "layout")
    twice = acme_manifests() + b"---\n" + acme_manifests(TECH_PREVIEW).split(b"---\n")[2]
    layers = [
        [
            Entry(f"{ROOT}/default/manifests.yaml", twice),
            Entry(f"{ROOT}/default/metadata.yaml", metadata_yaml("cluster-api-provider-acme")),
        ]
    ]
    layout.tag("twice", add_image(layout, layers))
    image = push_image(layout, "twice", plain_registry, "openshift/acme-twice", "v2.8.1")
    spec = f"providers:\n- image: {image.digest_reference}\n"
    result, output = collect(tmp_path, spec, signing_key, expect_ok=False)
    assert result.returncode == 2 and not output.exists()
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert f"/{ROOT}/default/manifests.yaml of {tmp_path / 'spec.yaml'}:2: providers[0]" in lines[0]
    assert (
        ":33: 'Deployment acme-system/acme-controller-manager' (apps API group) is defined "
        "twice, at lines 18 and 33"
    ) in lines[0]


@pytest.mark.unit
def test_verify_checks_the_profile_files_where_collect_writes_them() -> None:
    """What a signer put in the manifest is checked against what collect writes: each
    profile's two files, in order, present, its metadata parsing."""
    from dataclasses import replace

    from airgap.bundle.format import ProviderImageRecord
    from airgap.verify.layoutcheck import _check_profile_files

    base = "providers/infrastructure-acme/v2.8.1/profiles"
    paths = [
        f"{base}/{p}/{f}" for p in ("default", "tp") for f in ("metadata.yaml", "manifests.yaml")
    ]
    files = {path: b"kind: X\n" for path in paths}
    files[paths[0]] = files[paths[2]] = metadata_yaml("cluster-api-provider-acme")
    image = ProviderImageRecord("q.io/a@sha256:" + "a" * 64, ["default", "tp"], "a", 20, None,
                                None, None, None, "default", paths)  # fmt: skip
    record = ProviderRecord(
        "acme", "InfrastructureProvider", "v2.8.1", "v1beta2", "infrastructure-acme", "s",
        "m", "c", image=image,
    )  # fmt: skip
    sizes = {path: len(data) for path, data in files.items()}

    def problems(record: ProviderRecord, present: dict[str, int] = sizes) -> list[str]:
        found = _check_profile_files(record, files.__getitem__, present)
        return [failure.message for failure in found]

    assert problems(record) == []
    assert problems(replace(record, image=replace(image, profile_files=paths[:2])))
    moved = [p.replace("/tp/", "/../tp/") for p in paths]
    assert problems(replace(record, image=replace(image, profile_files=moved)))
    assert (
        "is not carried"
        in problems(replace(record, image=replace(image, clusterctl_profile="gpu")))[0]
    )
    missing = {p: s for p, s in sizes.items() if p != paths[3]}
    assert problems(record, missing) == [f"{paths[3]} is not in the bundle"]
    files[paths[2]] = b"name: [\n"
    assert "metadata does not parse" in problems(record)[0]
    # a bundle written before profiles were carried apart: nothing to check
    old = replace(image, clusterctl_profile=None, profile_files=[])
    assert problems(replace(record, image=old), {}) == []


@pytest.mark.e2e
def test_a_bundle_written_before_profiles_were_carried_apart_verifies_and_imports(
    tmp_path: Path,
    two_profile_image: TestImage,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    """The bundle an earlier airgap wrote for the two-profile image: no profile
    members, no ``clusterctlProfile``/``profileFiles``, both profiles concatenated in
    the components. It verifies and imports as it did (one ``default`` component);
    the same bundle missing a profile file it lists fails verify naming it."""
    from dataclasses import replace

    from airgap.bundle.manifest import BundleManifest
    from tests.harness.tamper import resign

    image = two_profile_image
    _, bundle = collect(tmp_path, f"providers:\n- image: {image.digest_reference}\n", signing_key)
    (provider,) = read_head(bundle).manifest.providers
    assert provider.image is not None
    members = {m.name: m.data for m in _members(bundle)}
    old_components = b"---\n".join(members[p] for p in provider.image.profile_files[1::2])

    def as_before(manifest: BundleManifest) -> BundleManifest:
        (record,) = manifest.providers
        assert record.image is not None
        old = replace(record.image, clusterctl_profile=None, profile_files=[])
        return replace(manifest, providers=[replace(record, image=old)])

    old_bundle = resign(
        bundle,
        tmp_path / "old.tar",
        signing_key.private,
        drop=provider.image.profile_files,
        replace={provider.components: old_components},
        edit=as_before,
    )
    head = read_head(old_bundle).manifest
    assert head.providers[0].image is not None
    assert head.providers[0].image.profile_files == []
    verify = run_airgap("verify", old_bundle, "--key", signing_key.public)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    listed = import_bundle(old_bundle, signing_key, registry_factory(), tmp_path / "out")
    assert [c["image"]["profile"] for c in listed["components"]] == ["default"]
    # a new bundle whose image record lists a profile file the bundle does not hold
    missing = provider.image.profile_files[3]
    broken = resign(bundle, tmp_path / "broken.tar", signing_key.private, drop=[missing])

    verify = run_airgap("verify", broken, "--key", signing_key.public)
    assert verify.returncode != 0
    assert f"{missing} is not in the bundle" in verify.stdout + verify.stderr
