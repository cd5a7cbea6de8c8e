"""Signatures, attestations and SBOMs: collected, verified offline, pushed next to their
subjects (issue 17).

The upstream is Debian's docker-registry (no referrers API: the referrers tag is used)
holding images signed as cosign signs them (``tests.harness.cosign``: simple-signing
payloads, ECDSA signatures, a test Fulcio chain and a test Rekor SET), a buildx-style
index with attestation manifests, and an SBOM attached through the referrers tag; the
referrers API itself is served by ``tests.harness.ociserver``.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.format import BundleManifest
from airgap.bundle.reader import read_head
from tests.harness import cosign, skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import run_airgap
from tests.harness.images import Descriptor, OciLayout
from tests.harness.ociserver import OciServer
from tests.harness.registry import RegistryServer

IDENTITY = "release@example.test"
ISSUER = "https://accounts.example.test"
SPDX = "application/spdx+json"
AMD64 = {"architecture": "amd64", "os": "linux"}
ARM64 = {"architecture": "arm64", "os": "linux"}


@dataclass
class Upstream:
    registry: RegistryServer
    layout: OciLayout
    directory: Path
    key: object  # the cosign signing key (ECDSA P-256)
    fulcio: cosign.Fulcio
    rekor: cosign.Rekor
    app: Descriptor
    multi: Descriptor
    children: dict[str, Descriptor]  # amd64, arm64
    attestations: dict[str, Descriptor]  # child digest -> buildx attestation manifest
    sbom: Descriptor

    def ref(self, name: str) -> str:
        return f"{self.registry.host}/{name}"

    @property
    def public_key(self) -> Path:
        return cosign.write_pem(self.directory / "cosign.pub", cosign.pem_public(self.key))  # type: ignore[arg-type]


def _sign(
    upstream: Upstream, repository: str, subject: Descriptor, *, keyless: bool = False
) -> Descriptor:
    reference = upstream.ref(repository)
    layers = [cosign.keyed_layer(upstream.key, subject.digest, reference)]  # type: ignore[arg-type]
    if keyless:
        layers.append(
            cosign.keyless_layer(
                upstream.fulcio,
                upstream.rekor,
                subject.digest,
                reference,
                identity=IDENTITY,
                issuer=ISSUER,
            )
        )
    signature = cosign.signature_manifest(upstream.layout, layers)
    tag = f"sha256-{subject.digest[7:]}.sig"
    cosign.push(upstream.layout, signature, upstream.registry, f"{repository}:{tag}")
    return signature


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    directory = tmp_path_factory.mktemp("supplychain")
    registry = RegistryServer(directory / "registry", "plain")
    try:
        layout = OciLayout(directory / "layout")
        app = layout.add_image(["sc-base", "sc-app"])
        amd64 = layout.add_image(["sc-base", "sc-amd64"], architecture="amd64")
        arm64 = layout.add_image(["sc-base", "sc-arm64"], architecture="arm64")
        multi, attestations = cosign.buildx_index(layout, [(amd64, AMD64), (arm64, ARM64)])
        up = Upstream(
            registry,
            layout,
            directory,
            cosign.new_key(),
            cosign.Fulcio.create(),
            cosign.Rekor(),
            app,
            multi,
            {"amd64": amd64, "arm64": arm64},
            attestations,
            app,
        )
        cosign.push(layout, app, registry, "signed/app:v1")
        cosign.push(layout, multi, registry, "signed/multi:v1")
        _sign(up, "signed/app", app, keyless=True)
        _sign(up, "signed/multi", multi)
        _sign(up, "signed/multi", arm64)
        attestation = cosign.dsse_manifest(layout, app.digest)
        cosign.push(layout, attestation, registry, f"signed/app:sha256-{app.digest[7:]}.att")
        # an SBOM attached the OCI 1.1 way, listed under the referrers tag (no API here)
        up.sbom = cosign.referrer_manifest(layout, app, SPDX, b'{"spdxVersion":"SPDX-2.3"}', SPDX)
        cosign.push(layout, up.sbom, registry, f"signed/app@{up.sbom.digest}")
        index = cosign.referrers_index(layout, [(up.sbom, SPDX)])
        data = layout.blob_path(index.digest).read_bytes()
        cosign.put_manifest(
            registry, "signed/app", f"sha256-{app.digest[7:]}", data, index.media_type
        )
        yield up
    finally:
        registry.stop()


def _collect(
    tmp_path: Path, key: SigningKey, images: list[str], *args: str | Path, **spec: object
) -> tuple[Path, BundleManifest]:
    spec_path = write_spec(tmp_path / "spec.yaml", {"images": images, **spec})
    output = tmp_path / "bundle.tar"
    result = run_airgap("collect", spec_path, "--sign-key", key.private, "-o", output, "-q", *args)
    assert result.returncode == 0, result.stderr
    return output, read_head(output).manifest


def _member(bundle: Path, digest: str) -> bytes:
    with tarfile.open(bundle) as tar:
        extracted = tar.extractfile(f"images/blobs/sha256/{digest[7:]}")
        assert extracted is not None
        return extracted.read()


def test_collect_carries_signatures_attestations_and_sboms_byte_for_byte(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    app = upstream.ref("signed/app:v1")
    bundle, manifest = _collect(tmp_path, signing_key, [app])
    found = {(a.kind, a.via, a.tag) for a in manifest.artifacts}
    hexdigest = upstream.app.digest[7:]
    assert found == {
        ("signature", "tag", f"sha256-{hexdigest}.sig"),
        ("attestation", "tag", f"sha256-{hexdigest}.att"),
        ("sbom", "referrers", None),
    }
    for artifact in manifest.artifacts:
        assert artifact.image == app and artifact.subject == upstream.app.digest
        where = artifact.tag or artifact.digest
        served = skopeo.raw_manifest(
            upstream.ref(f"signed/app{'@' if where.startswith('sha256:') else ':'}{where}"),
            registry=upstream.registry,
        )
        assert _member(bundle, artifact.digest) == served  # the exact bytes upstream serves
        for blob in json.loads(served)["layers"]:
            assert skopeo.digest_of(_member(bundle, blob["digest"])) == blob["digest"]
    sbom = next(a for a in manifest.artifacts if a.kind == "sbom")
    assert sbom.digest == upstream.sbom.digest and sbom.artifact_type == SPDX
    verified = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    inspected = json.loads(run_airgap("inspect", bundle, "--format", "json").stdout)
    (image,) = inspected["images"]
    assert {(a["kind"], a["via"]) for a in image["attached"]} == {
        ("signature", "tag"),
        ("attestation", "tag"),
        ("sbom", "referrers"),
    }
    text = run_airgap("inspect", bundle).stdout
    assert "ATTACHED" in text and "sbom" in text


def test_platform_filter_keeps_attestations_of_kept_children_and_the_signed_source(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    multi = upstream.ref("signed/multi:v1")
    bundle, manifest = _collect(tmp_path, signing_key, [multi], platforms=["linux/arm64"])
    (image,) = manifest.images
    assert image.source_digest == upstream.multi.digest
    stored = json.loads(_member(bundle, image.digest))
    arm64 = upstream.children["arm64"].digest
    kept = [entry["digest"] for entry in stored["manifests"]]
    assert kept == [arm64, upstream.attestations[arm64].digest]
    attached = {(a.kind, a.via, a.subject) for a in manifest.artifacts}
    assert attached == {
        ("attestation", "index", arm64),  # buildx's, inside the index
        ("signature", "tag", arm64),
        ("signature", "tag", upstream.multi.digest),  # upstream signed the whole index
    }
    # the source index travels too: its signature is checkable only against it
    assert skopeo.digest_of(_member(bundle, upstream.multi.digest)) == upstream.multi.digest
    verified = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_no_signatures_carries_none_and_drops_index_attestations(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    images = [upstream.ref("signed/app:v1"), upstream.ref("signed/multi:v1")]
    bundle, manifest = _collect(
        tmp_path, signing_key, images, "--no-signatures", platforms=["linux/arm64"]
    )
    assert manifest.artifacts == []
    multi = next(i for i in manifest.images if "multi" in i.reference)
    stored = json.loads(_member(bundle, multi.digest))
    assert [e["digest"] for e in stored["manifests"]] == [upstream.children["arm64"].digest]
    with tarfile.open(bundle) as tar:
        assert f"images/blobs/sha256/{upstream.multi.digest[7:]}" not in tar.getnames()


def test_referrers_api_is_asked_and_paged(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    server = OciServer(page_size=1)
    try:
        layout = upstream.layout
        cosign.upload(server.url, "api/app", layout, upstream.app, "v1")
        sbom = cosign.referrer_manifest(
            layout, upstream.app, SPDX, b'{"spdxVersion":"SPDX-2.3","name":"x"}', SPDX
        )
        signature = cosign.referrer_manifest(
            layout,
            upstream.app,
            "application/vnd.dev.cosign.artifact.sig.v1+json",
            cosign.payload(upstream.app.digest, f"{server.host}/api/app"),
            "application/vnd.dev.cosign.simplesigning.v1+json",
        )
        for artifact in (sbom, signature):
            cosign.upload(server.url, "api/app", layout, artifact, artifact.digest)
        _, manifest = _collect(tmp_path, signing_key, [f"{server.host}/api/app:v1"])
        found = {(a.kind, a.via, a.digest) for a in manifest.artifacts}
        assert found == {
            ("sbom", "referrers", sbom.digest),
            ("signature", "referrers", signature.digest),
        }
        asked = [path for method, path in server.requests if "/referrers/" in path]
        assert len(asked) == 2 and asked[1].endswith("?page=1")  # two pages of one
        # the referrers tag is not asked for where the API answers
        assert not any(
            p.endswith(f"/manifests/sha256-{upstream.app.digest[7:]}") for _, p in server.requests
        )
    finally:
        server.stop()
