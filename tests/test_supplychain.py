"""Signatures, attestations and SBOMs: collected, verified offline, pushed next to their
subjects (issue 17).

The upstream is Debian's docker-registry (no referrers API: the referrers tag is used)
holding images signed as cosign signs them (``tests.harness.cosign``: simple-signing
payloads, ECDSA signatures, a test Fulcio chain and a test Rekor SET), a buildx-style
index with attestation manifests, and an SBOM attached through the referrers tag; the
referrers API itself is served by ``tests.harness.ociserver``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.supplychain.cosign import Identity, NamedKey, Rejected, Trust, keyless_signer
from airgap.supplychain.sigstore import verify_bundle
from tests.harness import browser, cosign, skopeo, tamper
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, collect_args, collect_ok, run_airgap
from tests.harness.images import Descriptor, OciLayout
from tests.harness.importing import import_report
from tests.harness.ociserver import OciServer
from tests.harness.registry import RegistryServer
from tests.harness.tamper import blob_data, tar_member
from tests.test_serve import Served

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
        _tampered(up)
        yield up
    finally:
        registry.stop()


TAMPERED = {
    "badsig": "no trusted key verifies it",
    "wrongdigest": "the payload signs digest sha256:",
    "wrongid": "signed by other@example.test (issuer https://accounts.example.test), which no identity",
    "untrusted": "does not chain to a trusted Fulcio root",
    "badset": "signed entry timestamp does not verify",
    "unsigned": "no signature on image sha256:",
    # RFC 5280 path validation (cryptography's verifier) at the log's integrated time
    "pathlen": "root when the signature was logged (2024-05-01T12:01:00Z): validation failed: "
    "candidates exhausted: path length constraint violated",
    "excluded": "excluded name constraint matched SAN",
    "critical": "1.3.6.1.4.1.99999.1: certificate contains unaccounted-for critical extensions",
    "expired": "root when the signature was logged (2024-05-01T12:01:00Z): validation failed: "
    "candidates exhausted: cert is not valid at validation time",
}
UNKNOWN_CRITICAL = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"")


def _rogue_fulcio(up: Upstream, name: str) -> cosign.Fulcio:
    """The Fulcio a tampered keyless signature of ``name`` chains to: under the trusted
    root, but with a path-length limit the chain breaks, a name constraint excluding the
    signer's domain, or an intermediate expired when the signature was logged."""
    if name == "pathlen":  # a CA limited to issuing leaves issues another CA
        return up.fulcio.beneath("limited", path_length=0).beneath("beyond")
    if name == "excluded":
        return up.fulcio.beneath("constrained", excluded_email=IDENTITY.split("@")[1])
    if name == "expired":
        return up.fulcio.beneath("expired", expired=True)
    return cosign.Fulcio.create("rogue") if name == "untrusted" else up.fulcio


def _tampered(up: Upstream) -> None:
    """One image per way a signature can be wrong, each signed only that way."""
    for name in TAMPERED:
        repository = f"signed/{name}"
        image = up.layout.add_image(["sc-base", f"sc-{name}"])
        cosign.push(up.layout, image, up.registry, f"{repository}:v1")
        reference = up.ref(repository)
        layer: cosign.SignatureLayer | None = None
        if name == "badsig":  # signed, then the payload changed
            good = cosign.keyed_layer(up.key, image.digest, reference)  # type: ignore[arg-type]
            layer = cosign.SignatureLayer(
                good.payload.replace(b'"optional":null', b'"optional":{}'), good.annotations
            )
        elif name == "wrongdigest":  # a genuine signature of another image
            layer = cosign.keyed_layer(up.key, up.app.digest, reference)  # type: ignore[arg-type]
        elif name != "unsigned":
            identity = "other@example.test" if name == "wrongid" else IDENTITY
            layer = cosign.keyless_layer(
                _rogue_fulcio(up, name),
                up.rekor,
                image.digest,
                reference,
                identity=identity,
                issuer=ISSUER,
                critical=(UNKNOWN_CRITICAL,) if name == "critical" else (),
            )
            if name == "badset":  # the log entry claims another time than was signed
                bundle = json.loads(layer.annotations[cosign.BUNDLE])
                bundle["Payload"]["integratedTime"] += 1
                layer.annotations[cosign.BUNDLE] = json.dumps(bundle)
        if layer is not None:
            signature = cosign.signature_manifest(up.layout, [layer])
            tag = f"sha256-{image.digest[7:]}.sig"
            cosign.push(up.layout, signature, up.registry, f"{repository}:{tag}")


def _policy(
    up: Upstream,
    path: Path,
    *,
    keys: bool = True,
    trust: bool = True,
    images: list[str] | None = None,
) -> Path:
    rule: dict[str, object] = {
        "keyless": [{"identity": IDENTITY, "issuer": ISSUER}],
    }
    if images:
        rule["images"] = images
    if keys:
        rule["keys"] = [str(up.public_key)]
    if trust:
        rule["fulcioRoots"] = [
            str(cosign.write_pem(up.directory / "fulcio.pem", up.fulcio.root_pem()))
        ]
        rule["rekorKeys"] = [
            str(cosign.write_pem(up.directory / "rekor.pub", up.rekor.public_pem()))
        ]
    path.write_text(json.dumps({"requireSignatures": rule}))
    return path


def _collect(
    tmp_path: Path, key: SigningKey, images: list[str], *args: str | Path, **spec: object
) -> tuple[Path, BundleManifest]:
    spec_path = write_spec(tmp_path / "spec.yaml", {"images": images, **spec})
    output = tmp_path / "bundle.tar"
    collect_ok(spec_path, key.private, output, "-q", *args)
    return output, read_head(output).manifest


@pytest.mark.e2e
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
        assert blob_data(bundle, artifact.digest) == served  # the exact bytes upstream serves
        for blob in json.loads(served)["layers"]:
            assert skopeo.digest_of(blob_data(bundle, blob["digest"])) == blob["digest"]
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
    spdx = json.loads(
        run_airgap("verify", bundle, "--key", signing_key.public, "--sbom", "spdx").stdout
    )
    attached = [p for p in spdx["packages"] if p["SPDXID"].startswith("SPDXRef-Attached-")]
    assert sorted(p["versionInfo"] for p in attached) == sorted(
        a.digest for a in manifest.artifacts
    )
    related = {
        r["spdxElementId"]
        for r in spdx["relationships"]
        if r["relationshipType"] == "OTHER" and r["relatedSpdxElement"] == "SPDXRef-Image-1"
    }
    assert related == {p["SPDXID"] for p in attached}
    cyclonedx = json.loads(
        run_airgap("verify", bundle, "--key", signing_key.public, "--sbom", "cyclonedx").stdout
    )
    (component,) = cyclonedx["components"]
    assert sorted(p["name"] for p in component["properties"]) == [
        "airgap:attestation",
        "airgap:sbom",
        "airgap:signature",
    ]


@pytest.mark.e2e
def test_platform_filter_keeps_attestations_of_kept_children_and_the_signed_source(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    multi = upstream.ref("signed/multi:v1")
    spec = write_spec(tmp_path / "spec.yaml", {"images": [multi], "platforms": ["linux/arm64"]})
    bundle = tmp_path / "bundle.tar"
    collected = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert collected.returncode == 0, collected.stderr
    # the mirror cannot hold what upstream signed: said once, for this image
    assert collected.stderr.splitlines() == [
        f"airgap: warning: {multi}: index signature cannot be verified in the mirror after "
        "the platform filter; verify children by digest or collect without --platform"
    ]
    manifest = read_head(bundle).manifest
    (image,) = manifest.images
    assert image.source_digest == upstream.multi.digest
    stored = json.loads(blob_data(bundle, image.digest))
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
    assert skopeo.digest_of(blob_data(bundle, upstream.multi.digest)) == upstream.multi.digest
    verified = run_airgap("verify", bundle, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    inspected = json.loads(run_airgap("inspect", bundle, "--format", "json").stdout)
    assert inspected["images"][0]["indexSignature"]["subject"] == upstream.multi.digest


@pytest.mark.e2e
def test_no_signatures_carries_none_and_drops_index_attestations(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    images = [upstream.ref("signed/app:v1"), upstream.ref("signed/multi:v1")]
    bundle, manifest = _collect(
        tmp_path, signing_key, images, "--no-signatures", platforms=["linux/arm64"]
    )
    assert manifest.artifacts == []
    multi = next(i for i in manifest.images if "multi" in i.reference)
    stored = json.loads(blob_data(bundle, multi.digest))
    assert [e["digest"] for e in stored["manifests"]] == [upstream.children["arm64"].digest]
    with tarfile.open(bundle) as tar:
        assert f"images/blobs/sha256/{upstream.multi.digest[7:]}" not in tar.getnames()


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_signatures_verified_at_collect_and_again_offline_with_carried_trust(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    images = [upstream.ref("signed/app:v1"), upstream.ref("signed/multi:v1")]
    policy = _policy(upstream, tmp_path / "collect-policy.yaml")
    bundle, manifest = _collect(
        tmp_path, signing_key, images, "--policy", policy, platforms=["linux/arm64"]
    )
    assert {(t.kind, t.path) for t in manifest.trust} == {
        ("fulcioRoots", "trust/fulcio-roots.pem"),
        ("rekorKeys", "trust/rekor-keys.pem"),
    }
    # offline: the verifier's policy names the identity and the key, not the trust
    # material: the Fulcio root and Rekor key come from the (signed) bundle
    offline = _policy(upstream, tmp_path / "verify-policy.yaml", trust=False)
    review = tmp_path / "review.html"
    result = run_airgap(
        "verify",
        bundle,
        "--key",
        signing_key.public,
        "--policy",
        offline,
        "--format",
        "json",
        "--report",
        review,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (rule,) = json.loads(result.stdout)["policy"]
    assert rule["rule"] == "requireSignatures" and rule["passed"]
    signed = dict(line.split(": ", 1) for line in rule["details"])
    key = f"key {upstream.public_key}"  # named as the policy names it
    assert signed[images[0]] == key  # the keyed layer comes first
    assert signed[images[1]] == f"{key}, on the source index {upstream.multi.digest}"
    # the review report says so on each image's row, with who signed it
    page = browser.parse(review.read_text())
    for number, image in enumerate(images):
        (tag,) = page.by_id(f"image-{number}").find_all("span", class_="tag good")
        assert tag.text == "signature verified" and tag.attribute("title") == signed[image]
    # keyless alone: the app's second layer, its certificate long expired but valid
    # when Rekor logged it
    keyless = _policy(
        upstream, tmp_path / "keyless.yaml", keys=False, trust=False, images=["*/signed/app"]
    )
    result = run_airgap(
        "verify", bundle, "--key", signing_key.public, "--policy", keyless, "--format", "json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (rule,) = json.loads(result.stdout)["policy"]
    assert rule["details"] == [f"{images[0]}: keyless {IDENTITY} ({ISSUER})"]


@pytest.mark.e2e
def test_tampered_signatures_are_named_with_their_reason(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    images = [upstream.ref(f"signed/{name}:v1") for name in TAMPERED]
    bundle, _ = _collect(tmp_path, signing_key, images)
    policy = _policy(upstream, tmp_path / "policy.yaml")
    review = tmp_path / "review.html"
    result = run_airgap(
        "verify",
        bundle,
        "--key",
        signing_key.public,
        "--policy",
        policy,
        "--format",
        "json",
        "--report",
        review,
    )
    assert result.returncode == 1
    assert "requireSignatures" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # and the report's line
    assert "review report (NOT verified) written to" in result.stderr
    (rule,) = json.loads(result.stdout)["policy"]
    offending = dict(line.split(": ", 1) for line in rule["offending"])
    assert set(offending) == set(images)
    images_table = browser.parse(review.read_text()).by_id("images-table")
    reasons = [t.attribute("title") for t in images_table.find_all("span", class_="tag bad")]
    assert sorted(reasons) == sorted(offending.values())  # one per image, with its reason
    for name, reason in TAMPERED.items():
        assert reason in offending[upstream.ref(f"signed/{name}:v1")], (name, offending)
    # collect applies the same policy before signing: it fails and writes nothing
    output = tmp_path / "refused.tar"
    spec = write_spec(tmp_path / "refused.yaml", {"images": images[:2]})
    refused = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", output, "--policy", policy
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "nothing was written" in refused.stderr and images[0] in refused.stderr
    assert not output.exists()


@pytest.mark.e2e
def test_policy_mistakes_name_their_line(tmp_path: Path, upstream: Upstream) -> None:
    cases = {
        "requireSignatures:\n  keys: [missing.pub]\n": ":2: requireSignatures.keys[0]:",
        "requireSignatures:\n  keyless:\n    - {identity: a@b, issuerRegexp: '('}\n": ":3: requireSignatures.keyless[0].issuerRegexp: not a regular expression",
        "requireSignatures:\n  images: [x]\n": ":2: requireSignatures: give keys, keyless identities, or both",
        "requireSignatures:\n  keyless: [{identity: a@b}]\n": "needs identity (or identityRegexp) and issuer",
        "requireSignatures:\n  keys: [bad.pub]\n": "bad.pub: no PEM public key in it",
        "requireSignatures:\n  kys: []\n": "unknown key 'kys'",
    }
    (tmp_path / "bad.pub").write_text("not a key\n")
    bundle = tmp_path / "none.tar"
    bundle.write_bytes(b"")
    for number, (text, expected) in enumerate(cases.items()):
        policy = tmp_path / f"policy-{number}.yaml"
        policy.write_text(text)
        result = run_airgap("verify", bundle, "--no-signature", "--policy", policy)
        assert result.returncode == 2, (text, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"{policy}" in result.stderr and expected in result.stderr, (text, result.stderr)


@pytest.mark.e2e
def test_import_puts_them_where_cosign_and_the_referrers_tag_look(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey, registry_factory: Any
) -> None:
    images = [upstream.ref("signed/app:v1"), upstream.ref("signed/multi:v1")]
    bundle, manifest = _collect(tmp_path, signing_key, images, platforms=["linux/arm64"])
    target = registry_factory("plain")  # Debian's docker-registry: no referrers API
    report = import_report(bundle, signing_key.public, f"{target.host}/mirror", tmp_path / "out")
    # sig, att, sbom of the app and arm64's sig; the source index's sig has no subject there
    assert report["attached"] == {
        "artifacts": 4,
        "skipped": 1,
        "referrers": "tag schema",
        "indexSignatureNotInMirror": [images[1]],
    }
    app_hex, arm64 = upstream.app.digest[7:], upstream.children["arm64"].digest
    for artifact in manifest.artifacts:
        if artifact.via != "tag" or artifact.subject == upstream.multi.digest:
            continue
        repository = "mirror/signed/app" if artifact.image == images[0] else "mirror/signed/multi"
        served = skopeo.raw_manifest(f"{repository}:{artifact.tag}", registry=target)
        assert skopeo.digest_of(served) == artifact.digest
    listing = json.loads(
        skopeo.raw_manifest(f"mirror/signed/app:sha256-{app_hex}", registry=target)
    )
    assert [(m["digest"], m["artifactType"]) for m in listing["manifests"]] == [
        (upstream.sbom.digest, SPDX)
    ]
    tags = skopeo.list_tags("mirror/signed/multi", registry=target)
    assert f"sha256-{arm64[7:]}.sig" in tags
    assert f"sha256-{upstream.multi.digest[7:]}.sig" not in tags
    # what `cosign verify --key` does against the mirror, with openssl as the verifier:
    # resolve the tag, derive cosign's signature tag, check the payload and its claim
    digest = skopeo.digest_of(skopeo.raw_manifest("mirror/signed/app:v1", registry=target))
    signature = json.loads(
        skopeo.raw_manifest(f"mirror/signed/app:sha256-{digest[7:]}.sig", registry=target)
    )
    layer = signature["layers"][0]
    payload = httpx.get(f"{target.url}/v2/mirror/signed/app/blobs/{layer['digest']}").content
    assert json.loads(payload)["critical"]["image"]["docker-manifest-digest"] == digest
    (tmp_path / "payload").write_bytes(payload)
    der = base64.b64decode(layer["annotations"][cosign.SIGNATURE])
    (tmp_path / "sig.der").write_bytes(der)
    checked = subprocess.run(
        [
            "openssl",
            "dgst",
            "-sha256",
            "-verify",
            str(upstream.public_key),
            "-signature",
            str(tmp_path / "sig.der"),
            str(tmp_path / "payload"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0 and "Verified OK" in checked.stdout, checked.stderr
    again = import_report(bundle, signing_key.public, f"{target.host}/mirror", tmp_path / "again")
    assert again["changed"] is False and again["manifests_pushed"] == 0


@pytest.mark.e2e
def test_import_uses_the_referrers_api_where_the_target_has_it(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    bundle, manifest = _collect(tmp_path, signing_key, [upstream.ref("signed/app:v1")])
    server = OciServer()
    try:
        report = import_report(
            bundle, signing_key.public, f"{server.host}/mirror", tmp_path / "out"
        )
        assert report["attached"] == {"artifacts": 3, "skipped": 0, "referrers": "api"}
        fallback = f"/manifests/sha256-{upstream.app.digest[7:]}"
        assert not any(m == "PUT" and p.endswith(fallback) for m, p in server.requests)
        listed = httpx.get(
            f"{server.url}/v2/mirror/signed/app/referrers/{upstream.app.digest}"
        ).json()
        assert [(m["digest"], m["artifactType"]) for m in listed["manifests"]] == [
            (upstream.sbom.digest, SPDX)
        ]
        sig = next(a for a in manifest.artifacts if a.kind == "signature")
        stored = server.repositories["mirror/signed/app"]
        assert stored.tags[str(sig.tag)] == sig.digest  # cosign's tag, the same digest
        # status finds the SBOM listed by the referrers API
        status: list[str | Path] = ["status", bundle, "--key", signing_key.public, "--registry"]
        result = run_airgap(*status, f"{server.host}/mirror")
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        server.stop()


@pytest.mark.e2e
def test_status_asks_for_what_import_attached_and_names_a_lost_signature(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey, registry_factory: Any
) -> None:
    """Signatures, attestations and SBOMs are artifacts of the bundle: status finds them
    where import put them (Available); a signature whose manifest the registry lost (its
    cosign tag still listed) and an SBOM no longer listed among its subject's referrers
    (the referrers tag's index lost) are Degraded, named."""
    image = upstream.ref("signed/app:v1")
    bundle, manifest = _collect(tmp_path, signing_key, [image])
    target = registry_factory("plain")
    import_report(bundle, signing_key.public, f"{target.host}/mirror", tmp_path / "out")
    args: list[str | Path] = [
        "status",
        bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{target.host}/mirror",
    ]
    result = run_airgap(*args, "--format", "json")
    assert result.returncode == 0, result.stdout
    available = json.loads(result.stdout)["conditions"][0]
    assert available["message"] == "All 1 image and 3 artifacts present by digest"
    sig = next(a for a in manifest.artifacts if a.kind == "signature" and a.via == "tag")
    target.blob_path(sig.digest).unlink()
    listing = f"mirror/signed/app:sha256-{upstream.app.digest[7:]}"
    target.blob_path(skopeo.digest_of(skopeo.raw_manifest(listing, registry=target))).unlink()
    result = run_airgap(*args, "--format", "json")
    assert result.returncode == 1
    degraded = json.loads(result.stdout)["conditions"][2]
    assert degraded["reason"] == "ArtifactsDamaged"
    where = f"signature {image} at {target.host}/mirror/signed/app:{sig.tag}: tag {sig.tag} is"
    assert where in degraded["message"], degraded["message"]
    sbom = f"sbom {image} at {target.host}/mirror/signed/app@{upstream.sbom.digest}: not listed"
    assert sbom in degraded["message"], degraded["message"]


@pytest.mark.e2e
def test_verify_refuses_artifact_records_that_do_not_hold(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    """A bundle re-signed by the trusted key with a doctored artifact record (a signed
    manifest is only as careful as whoever signed it) fails verify, naming the record."""
    bundle, manifest = _collect(tmp_path, signing_key, [upstream.ref("signed/app:v1")])
    signature = next(a for a in manifest.artifacts if a.kind == "signature")
    other = upstream.children["arm64"].digest
    cases = {
        "subject": (
            lambda a: dataclasses.replace(a, subject=other, tag=f"sha256-{other[7:]}.sig"),
            "which is not one of the image's manifests",
        ),
        "tag": (lambda a: dataclasses.replace(a, tag="latest"), "is not cosign's tag"),
        "kind": (lambda a: dataclasses.replace(a, kind="../x"), "unknown kind"),
        "image": (
            lambda a: dataclasses.replace(a, image=upstream.ref("signed/other:v1")),
            "belongs to an image the bundle lacks",
        ),
    }
    for name, (change, reason) in cases.items():

        def edit(m: BundleManifest, change: Any = change) -> BundleManifest:
            artifacts = [change(a) if a == signature else a for a in m.artifacts]
            return dataclasses.replace(m, artifacts=artifacts)

        doctored = tamper.resign(bundle, tmp_path / f"{name}.tar", signing_key.private, edit=edit)
        result = run_airgap("verify", doctored, "--key", signing_key.public)
        assert result.returncode == 1, (name, result.stdout)
        assert "artifact" in result.stderr and reason in result.stdout, (name, result.stdout)


@pytest.mark.e2e
def test_a_stale_referrers_tag_entry_is_skipped(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    """The referrers tag is kept up by clients and may name a manifest deleted since
    (distribution refuses such an index, so a registry without the API that does not
    check is played by the loopback server)."""
    server = OciServer(referrers=False)
    try:
        cosign.upload(server.url, "stale/app", upstream.layout, upstream.app, "v1")
        gone = Descriptor(upstream.app.media_type, "sha256:" + "0" * 64, 123)
        index = cosign.referrers_index(upstream.layout, [(gone, SPDX)])
        data = upstream.layout.blob_path(index.digest).read_bytes()
        tag = f"sha256-{upstream.app.digest[7:]}"
        cosign.put_manifest_url(server.url, "stale/app", tag, data, index.media_type)
        _, manifest = _collect(tmp_path, signing_key, [f"{server.host}/stale/app:v1"])
        assert manifest.artifacts == []
        assert ("GET", f"/v2/stale/app/manifests/{gone.digest}") in server.requests
    finally:
        server.stop()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>not json</html>", "malformed index: manifest: not valid JSON"),
        (
            b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}',
            "not an image index",
        ),
        (b'{"manifests":[{"digest":"sha256:../../x","size":1}]}', "malformed index"),
        (
            b'{"manifests":['
            + b",".join(
                [
                    b'{"mediaType":"x","digest":"sha256:' + b"%064x" % n + b'","size":1}'
                    for n in range(300)
                ]
            )
            + b"]}",
            "more than 256 referrers",
        ),
    ],
)
def test_a_hostile_referrers_answer_fails_collect_in_one_line(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey, body: bytes, reason: str
) -> None:
    server = OciServer()
    try:
        cosign.upload(server.url, "hostile/app", upstream.layout, upstream.app, "v1")
        server.referrers_body = body
        spec = write_spec(tmp_path / "spec.yaml", {"images": [f"{server.host}/hostile/app:v1"]})
        output = tmp_path / "bundle.tar"
        result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output, "-q")
        line = assert_clean_failure(result, 1, f"{server.host}/hostile/app:v1")
        assert reason in line, line
        assert not output.exists()
    finally:
        server.stop()


@pytest.mark.e2e
def test_a_delta_relies_on_the_base_for_attached_blobs(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey, registry_factory: Any
) -> None:
    """Signature payloads and SBOM layers the base carried are among a delta's needs;
    verify accepts their absence as it does an image blob's."""
    images = [upstream.ref("signed/app:v1")]
    base, _ = _collect(tmp_path, signing_key, images)
    spec = write_spec(tmp_path / "delta.yaml", {"images": images})
    delta = tmp_path / "delta.tar"
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", delta, "-q", "--base", base
    )
    assert result.returncode == 0, result.stderr
    manifest = read_head(delta).manifest
    assert manifest.artifacts and manifest.needs
    verified = run_airgap("verify", delta, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # requireSignatures: a delta made against the base's manifest alone relies on the
    # signature the base carried, by digest; verify says so (the base checked it)
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        (tmp_path / name).write_bytes(tar_member(base, name))
    thin = tmp_path / "thin.tar"
    result = run_airgap(
        *collect_args(spec, signing_key.private, thin),
        "-q",
        "--base",
        tmp_path / MANIFEST_NAME,
    )
    assert result.returncode == 0, result.stderr
    relied = read_head(thin).manifest
    signature = next(a for a in relied.artifacts if a.kind == "signature")
    policy = _policy(upstream, tmp_path / "policy.yaml")
    expected = {
        base: f"key {upstream.public_key}",
        delta: f"key {upstream.public_key}",  # carried again: checked here
        thin: f"signature {signature.digest} in the base bundle {relied.delta.base} "  # type: ignore[union-attr]
        "(relied on by digest; checked when the base was verified)",
    }
    for bundle, detail in expected.items():
        result = run_airgap(
            "verify", bundle, "--key", signing_key.public, "--policy", policy, "--format", "json"
        )
        assert result.returncode == 0, result.stdout + result.stderr
        (rule,) = json.loads(result.stdout)["policy"]
        assert rule["details"] == [f"{images[0]}: {detail}"]
    # made from a have-list alone, no verified bundle holds the signature: refused
    payload = json.loads(blob_data(base, signature.digest))["layers"][0]["digest"]
    have = tmp_path / "have.json"
    held = {upstream.ref("signed/app"): [payload]}
    have.write_text(
        json.dumps({"kind": "airgap-have-list", "version": 1, "created": "x", "repositories": held})
    )
    listed = tmp_path / "listed.tar"
    args: list[str | Path] = ["-o", listed, "-q", "--have", have]
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, *args)
    assert result.returncode == 0, result.stderr
    result = run_airgap("verify", listed, "--key", signing_key.public, "--policy", policy)
    assert result.returncode == 1
    assert "is not in this delta (the have-list says the target holds it)" in result.stdout
    target = registry_factory("plain")
    import_report(base, signing_key.public, f"{target.host}/mirror", tmp_path / "base-out")
    report = import_report(
        delta, signing_key.public, f"{target.host}/mirror", tmp_path / "delta-out"
    )
    assert report["attached"] == {"artifacts": 3, "skipped": 0, "referrers": "tag schema"}


V3_TAMPERED = {
    "wrongdigest": "the statement signs digest sha256:",
    "badsig": "no trusted key verifies it",
    "wrongid": "signed by other@example.test (issuer https://accounts.example.test), which no identity",
    "badset": "signed entry timestamp does not verify",
}


def _v3_image(server: OciServer, up: Upstream, name: str) -> Descriptor:
    """An image signed only the way ``name`` says, as cosign 3 signs: a Sigstore bundle
    pushed as a referrer (the server lists it through the referrers API)."""
    image = up.layout.add_image(["sc-base", f"sc-v3-{name}"])
    cosign.upload(server.url, f"v3/{name}", up.layout, image, "v1")
    keyless = {"fulcio": up.fulcio, "identity": IDENTITY, "issuer": ISSUER}
    if name == "keyed":
        bundle = cosign.sigstore_bundle(up.rekor, image.digest, key=up.key)  # type: ignore[arg-type]
    elif name == "badsig":  # signed, then the statement changed
        bundle = cosign.sigstore_bundle(up.rekor, image.digest, key=up.key)  # type: ignore[arg-type]
        envelope = bundle["dsseEnvelope"]
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"] = {"tampered": True}
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    elif name == "wrongdigest":  # a genuine bundle of another image
        bundle = cosign.sigstore_bundle(up.rekor, up.app.digest, **keyless)  # type: ignore[arg-type]
    elif name == "wrongid":
        bundle = cosign.sigstore_bundle(
            up.rekor, image.digest, fulcio=up.fulcio, identity="other@example.test", issuer=ISSUER
        )
    else:
        bundle = cosign.sigstore_bundle(up.rekor, image.digest, **keyless)  # type: ignore[arg-type]
        if name == "badset":  # the entry claims another time than the log signed
            entry = bundle["verificationMaterial"]["tlogEntries"][0]
            entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    referrer = cosign.bundle_referrer(up.layout, image, bundle)
    cosign.upload(server.url, f"v3/{name}", up.layout, referrer, referrer.digest)
    return image


@pytest.mark.e2e
def test_cosign3_sigstore_bundles_are_verified_offline_and_pushed_as_referrers(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey, registry_factory: Any
) -> None:
    """cosign 3's signatures (v0.3 Sigstore bundles, DSSE envelopes of cosign's signature
    statement, as referrers) satisfy requireSignatures at collect and at verify, keyless
    and keyed; tampered ones are named; import lists them under the referrers tag of a
    registry without the API."""
    server = OciServer()
    try:
        good = _v3_image(server, upstream, "good")
        _v3_image(server, upstream, "keyed")
        # an SBOM attestation in the same format is carried, but signs nothing
        spdx = "https://spdx.dev/Document"
        sbom = cosign.sigstore_bundle(upstream.rekor, good.digest, key=upstream.key, predicate=spdx)  # type: ignore[arg-type]
        attestation = cosign.bundle_referrer(upstream.layout, good, sbom, spdx)
        cosign.upload(server.url, "v3/good", upstream.layout, attestation, attestation.digest)
        for name in V3_TAMPERED:
            _v3_image(server, upstream, name)
        # v0.3 bundles carry the leaf only: the trust names Fulcio's intermediate and root
        chain = cosign.write_pem(
            tmp_path / "fulcio-chain.pem", upstream.fulcio.chain_pem().encode()
        )
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            json.dumps(
                {
                    "requireSignatures": {
                        "keys": [str(upstream.public_key)],
                        "keyless": [{"identity": IDENTITY, "issuer": ISSUER}],
                        "fulcioRoots": [str(chain)],
                        "rekorKeys": [
                            str(
                                cosign.write_pem(
                                    tmp_path / "rekor.pub", upstream.rekor.public_pem()
                                )
                            )
                        ],
                    }
                }
            )
        )
        names = ["good", "keyed"]
        images = [f"{server.host}/v3/{name}:v1" for name in names]
        # collect checks the genuine ones before it signs (the bundles read whole)
        bundle, manifest = _collect(tmp_path, signing_key, images, "--policy", policy)
        kinds = {(a.image, a.kind, a.via, a.artifact_type) for a in manifest.artifacts}
        assert kinds == {
            (images[0], "signature", "referrers", cosign.BUNDLE_V03),
            (images[0], "attestation", "referrers", cosign.BUNDLE_V03),
            (images[1], "signature", "referrers", cosign.BUNDLE_V03),
        }
        result = run_airgap(
            "verify", bundle, "--key", signing_key.public, "--policy", policy, "--format", "json"
        )
        assert result.returncode == 0, result.stdout + result.stderr
        (rule,) = json.loads(result.stdout)["policy"]
        assert sorted(rule["details"]) == [
            f"{images[0]}: keyless {IDENTITY} ({ISSUER}) (Sigstore bundle)",
            f"{images[1]}: key {upstream.public_key} (Sigstore bundle)",
        ]
        # tampered: each named with its reason
        tampered = [f"{server.host}/v3/{name}:v1" for name in V3_TAMPERED]
        (tmp_path / "tampered").mkdir()
        carried, _ = _collect(tmp_path / "tampered", signing_key, tampered)
        result = run_airgap(
            "verify", carried, "--key", signing_key.public, "--policy", policy, "--format", "json"
        )
        assert result.returncode == 1
        (rule,) = json.loads(result.stdout)["policy"]
        offending = dict(line.split(": ", 1) for line in rule["offending"])
        for name, reason in V3_TAMPERED.items():
            assert reason in offending[f"{server.host}/v3/{name}:v1"], (name, offending)
        # Debian's registry has no referrers API: import lists them under sha256-HEX
        target = registry_factory("plain")
        report = import_report(
            bundle, signing_key.public, f"{target.host}/mirror", tmp_path / "out"
        )
        assert report["attached"] == {"artifacts": 3, "skipped": 0, "referrers": "tag schema"}
        listing = json.loads(
            skopeo.raw_manifest(f"mirror/v3/good:sha256-{good.digest[7:]}", registry=target)
        )
        listed = {m["digest"]: m["annotations"] for m in listing["manifests"]}
        signature = next(
            a for a in manifest.artifacts if a.image == images[0] and a.kind == "signature"
        )
        assert set(listed) == {signature.digest, attestation.digest}
        assert all(m["artifactType"] == cosign.BUNDLE_V03 for m in listing["manifests"])
        assert listed[signature.digest]["dev.sigstore.bundle.predicateType"] == cosign.COSIGN_SIGN
    finally:
        server.stop()


@pytest.mark.e2e
def test_serve_answers_cosign_lookups_of_carried_artifacts(
    tmp_path: Path, upstream: Upstream, signing_key: SigningKey
) -> None:
    """``airgap serve`` answers where cosign and OCI 1.1 clients look: the tags
    ``sha256-HEX.sig|.att``, the referrers API and the referrers tag ``sha256-HEX``."""
    bundle, manifest = _collect(tmp_path, signing_key, [upstream.ref("signed/app:v1")])
    served = Served(bundle, "--key", signing_key.public)
    try:
        flags = ["--tls-verify=false", "--no-creds"]
        hexdigest = upstream.app.digest[7:]
        for artifact in manifest.artifacts:
            if artifact.tag is None:
                continue
            raw = skopeo.run(
                ["inspect", "--raw", *flags, f"docker://{served.address}/signed/app:{artifact.tag}"]
            )
            assert skopeo.digest_of(raw) == artifact.digest
        listing = json.loads(
            skopeo.run(
                [
                    "inspect",
                    "--raw",
                    *flags,
                    f"docker://{served.address}/signed/app:sha256-{hexdigest}",
                ]
            )
        )
        assert [(m["digest"], m["artifactType"]) for m in listing["manifests"]] == [
            (upstream.sbom.digest, SPDX)
        ]
        api = httpx.get(f"{served.url}/v2/signed/app/referrers/{upstream.app.digest}")
        assert api.status_code == 200 and api.json() == listing
        none = httpx.get(f"{served.url}/v2/signed/app/referrers/sha256:{'0' * 64}")
        assert none.status_code == 200 and none.json()["manifests"] == []
        tags = json.loads(
            skopeo.run(["list-tags", *flags, f"docker://{served.address}/signed/app"])
        )["Tags"]
        assert sorted(tags) == sorted(
            ["v1", f"sha256-{hexdigest}", f"sha256-{hexdigest}.sig", f"sha256-{hexdigest}.att"]
        )
    finally:
        served.stop()


@pytest.mark.unit
def test_sigstore_bundle_message_signatures_and_hostile_bundles() -> None:
    """The pure check on its own: a message-signature bundle (hashedrekord entry) is
    accepted over the image's digest, a keyless one only if its certificate was valid
    when the log integrated it; any malformed or mismatched bundle is one Rejected
    line, never a traceback."""
    rekor, key = cosign.Rekor(), cosign.new_key()
    digest = hashlib.sha256(b'{"schemaVersion":2}').digest()
    subject = "sha256:" + digest.hex()
    signature = key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    body = {
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
            "signature": {
                "content": base64.b64encode(signature).decode(),
                "publicKey": {"content": base64.b64encode(cosign.pem_public(key)).decode()},
            },
        },
    }
    entry, promise = rekor.log(json.dumps(body).encode(), at=cosign.SIGNED_AT)
    bundle: dict[str, Any] = {
        "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.2",
        "verificationMaterial": {
            "publicKey": {"hint": "anything"},
            "tlogEntries": [
                {
                    "logIndex": str(entry["logIndex"]),
                    "logId": {"keyId": base64.b64encode(bytes.fromhex(rekor.log_id)).decode()},
                    "kindVersion": {"kind": "hashedrekord", "version": "0.0.1"},
                    "integratedTime": str(entry["integratedTime"]),
                    "inclusionPromise": {
                        "signedEntryTimestamp": base64.b64encode(promise).decode()
                    },
                    "canonicalizedBody": entry["body"],
                }
            ],
        },
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": base64.b64encode(digest).decode()},
            "signature": base64.b64encode(signature).decode(),
        },
    }
    trust = Trust((NamedKey("release.pub", key.public_key()),), (), (), (rekor.key.public_key(),))
    assert verify_bundle(json.dumps(bundle).encode(), subject, trust) == (
        "key release.pub (Sigstore bundle)"
    )
    # keyless: the leaf must have been valid when the log integrated the entry
    fulcio = cosign.Fulcio.create()
    trust = dataclasses.replace(
        trust,
        identities=(Identity(subject=IDENTITY, issuer=ISSUER),),
        roots=(fulcio.intermediate, fulcio.root),
    )
    keyless = cosign.sigstore_bundle(
        rekor, subject, fulcio=fulcio, identity=IDENTITY, issuer=ISSUER
    )
    assert verify_bundle(json.dumps(keyless).encode(), subject, trust) == (
        f"keyless {IDENTITY} ({ISSUER}) (Sigstore bundle)"
    )
    late = cosign.sigstore_bundle(
        rekor,
        subject,
        fulcio=fulcio,
        identity=IDENTITY,
        issuer=ISSUER,
        logged=cosign.SIGNED_AT + timedelta(hours=1),
    )
    keyless["verificationMaterial"]["certificate"]["rawBytes"] = "AAAA"
    entries = bundle["verificationMaterial"]["tlogEntries"]
    hostile = {
        b"[]": "expected an object",
        b"{" * 5000: "malformed",
        json.dumps({**bundle, "mediaType": "x"}).encode(): "media type 'x' is unknown",
        json.dumps({**bundle, "messageSignature": None}).encode(): "neither a DSSE envelope",
        json.dumps(bundle)
        .replace(base64.b64encode(digest).decode(), base64.b64encode(bytes(32)).decode())
        .encode(): f"signs digest sha256:{'0' * 64}, not {subject}",
        json.dumps(
            {
                **bundle,
                "verificationMaterial": {
                    "publicKey": {},
                    "tlogEntries": [{**entries[0], "kindVersion": {"kind": "dsse"}}],
                },
            }
        ).encode(): "its kindVersion a 'dsse'",
        json.dumps(keyless).encode(): "the Sigstore bundle's certificate is not DER",
        json.dumps(late).encode(): "root when the signature was logged (2024-05-01T13:00:00Z)",
    }
    for data, reason in hostile.items():
        with pytest.raises(Rejected) as raised:
            verify_bundle(data, subject, trust)
        assert reason in str(raised.value) and "\n" not in str(raised.value), raised.value


@pytest.mark.unit
def test_a_real_fulcio_certificate_passes_path_validation_at_its_log_time() -> None:
    """The production Fulcio leaf (critical SAN holding only an e-mail, code signing, an
    embedded SCT list) chains through the real intermediate to the real root under the
    verifier's extension policies, and only while it was valid."""
    data = Path(__file__).parent / "sigstore"
    leaf = x509.load_pem_x509_certificate((data / "fulcio-leaf.pem").read_bytes())
    intermediate, root = x509.load_pem_x509_certificates((data / "fulcio-chain.pem").read_bytes())
    identity = Identity(subject="gitlabgpgtest@gmail.com", issuer="https://github.com/login/oauth")
    trust = Trust(identities=(identity,), roots=(root,))
    logged = leaf.not_valid_before_utc + timedelta(minutes=1)
    names, issuer = keyless_signer(leaf, [intermediate], trust, logged)
    assert (names, issuer) == (["gitlabgpgtest@gmail.com"], "https://github.com/login/oauth")
    # the intermediate as the trust anchor (a policy's fulcioRoots may list the chain)
    assert keyless_signer(leaf, [], dataclasses.replace(trust, roots=(intermediate, root)), logged)
    late = leaf.not_valid_after_utc + timedelta(seconds=1)
    with pytest.raises(Rejected, match="cert is not valid at validation time"):
        keyless_signer(leaf, [intermediate], trust, late)
    with pytest.raises(Rejected, match="does not chain to a trusted Fulcio root"):
        keyless_signer(leaf, [], trust, logged)  # the intermediate missing
