"""``airgap verify --sbom spdx|cyclonedx``: inventory documents of a verified bundle.

The documents are checked against minimal JSON schemas of the fields SPDX 2.3 and
CycloneDX 1.5 require, and against the bundle itself: every image a package/component
with a ``pkg:oci`` purl and its digest, every provider file with the sha256 of its bytes
as they are in the tar.
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema
import pytest

from airgap.bundle.format import ImageRecord
from airgap.bundle.signing import load_public_key
from airgap.oci.reference import parse_reference
from airgap.verify.bundle import verify_bundle
from airgap.verify.sbom import image_purl, spdx
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import run_airgap

HEX64 = "^[0-9a-f]{64}$"
CHECKSUM = {
    "type": "object",
    "required": ["algorithm", "checksumValue"],
    "properties": {
        "algorithm": {"enum": ["SHA1", "SHA224", "SHA256", "SHA384", "SHA512", "MD5"]},
        "checksumValue": {"type": "string", "pattern": "^[0-9a-f]+$"},
    },
}
SPDX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "spdxVersion",
        "dataLicense",
        "SPDXID",
        "name",
        "documentNamespace",
        "creationInfo",
        "packages",
        "files",
        "relationships",
    ],
    "properties": {
        "spdxVersion": {"const": "SPDX-2.3"},
        "dataLicense": {"const": "CC0-1.0"},
        "SPDXID": {"const": "SPDXRef-DOCUMENT"},
        "name": {"type": "string", "minLength": 1},
        "documentNamespace": {"type": "string", "pattern": "^https?://[^#]+$"},
        "creationInfo": {
            "type": "object",
            "required": ["created", "creators"],
            "properties": {
                "created": {
                    "type": "string",
                    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$",
                },
                "creators": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "string", "pattern": "^(Tool|Organization|Person): .+"},
                },
            },
        },
        "packages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["SPDXID", "name", "downloadLocation", "externalRefs"],
                "properties": {
                    "SPDXID": {"type": "string", "pattern": "^SPDXRef-[A-Za-z0-9.-]+$"},
                    "name": {"type": "string", "minLength": 1},
                    "filesAnalyzed": {"type": "boolean"},
                    "primaryPackagePurpose": {"const": "CONTAINER"},
                    "checksums": {"type": "array", "items": CHECKSUM},
                    "externalRefs": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": [
                                "referenceCategory",
                                "referenceType",
                                "referenceLocator",
                            ],
                            "properties": {
                                "referenceCategory": {
                                    "enum": [
                                        "SECURITY",
                                        "PACKAGE-MANAGER",
                                        "PERSISTENT-ID",
                                        "OTHER",
                                    ]
                                },
                                "referenceLocator": {"type": "string", "pattern": r"^\S+$"},
                            },
                        },
                    },
                },
            },
        },
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["SPDXID", "fileName", "checksums"],
                "properties": {
                    "SPDXID": {"type": "string", "pattern": "^SPDXRef-[A-Za-z0-9.-]+$"},
                    "fileName": {"type": "string", "pattern": "^\\./"},
                    "checksums": {"type": "array", "minItems": 1, "items": CHECKSUM},
                },
            },
        },
        "relationships": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["spdxElementId", "relationshipType", "relatedSpdxElement"],
            },
        },
    },
}
CYCLONEDX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["bomFormat", "specVersion", "serialNumber", "version", "metadata", "components"],
    "properties": {
        "bomFormat": {"const": "CycloneDX"},
        "specVersion": {"const": "1.5"},
        "serialNumber": {
            "type": "string",
            "pattern": "^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        },
        "version": {"type": "integer", "minimum": 1},
        "metadata": {
            "type": "object",
            "required": ["timestamp", "tools"],
            "properties": {"timestamp": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT"}},
        },
        "components": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "name", "bom-ref", "hashes"],
                "properties": {
                    "type": {"enum": ["container", "file", "application", "library"]},
                    "name": {"type": "string", "minLength": 1},
                    "purl": {"type": "string", "pattern": "^pkg:"},
                    "hashes": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["alg", "content"],
                            "properties": {
                                "alg": {"enum": ["SHA-1", "SHA-256", "SHA-384", "SHA-512"]},
                                "content": {"type": "string", "pattern": HEX64},
                            },
                        },
                    },
                },
            },
        },
    },
}
PURL = re.compile(
    r"^pkg:oci/(?P<name>[a-z0-9._-]+)@sha256%3A(?P<hex>[0-9a-f]{64})"
    r"\?repository_url=(?P<repo>[^&]+)(?:&tag=(?P<tag>[^&]+))?$"
)


def sbom(bundle: CollectedBundle, kind: str) -> tuple[str, dict[str, Any]]:
    result = run_airgap("verify", bundle.path, "--key", bundle.key.public, "--sbom", kind)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    return result.stdout, json.loads(result.stdout)


def provider_files(bundle: CollectedBundle) -> dict[str, bytes]:
    """Every provider metadata and components file, read from the tar independently."""
    wanted = {path for p in bundle.manifest.providers for path in (p.metadata, p.components)}
    with tarfile.open(bundle.path) as tar:
        found = {}
        for name in wanted:
            extracted = tar.extractfile(name)
            assert extracted is not None
            found[name] = extracted.read()
    assert len(found) == 10
    return found


def check_purl(purl: str, image: ImageRecord) -> None:
    match = PURL.match(purl)
    assert match, purl
    ref = parse_reference(image.reference)
    assert match["name"] == ref.repository.rsplit("/", 1)[1]
    assert f"sha256:{match['hex']}" == image.digest
    assert unquote(match["repo"]) == ref.name
    assert (unquote(match["tag"]) if match["tag"] else None) == ref.tag


@pytest.mark.e2e
def test_spdx_document(capi_bundle: CollectedBundle) -> None:
    _, document = sbom(capi_bundle, "spdx")
    jsonschema.validate(document, SPDX_SCHEMA)
    assert document["spdxVersion"] == "SPDX-2.3"
    assert document["creationInfo"]["created"] == capi_bundle.manifest.created
    packages = document["packages"]
    assert len(packages) == len(capi_bundle.manifest.images) == 5
    for image, package in zip(capi_bundle.manifest.images, packages, strict=True):
        assert package["name"] == parse_reference(image.reference).name
        assert package["checksums"] == [
            {"algorithm": "SHA256", "checksumValue": image.digest.split(":", 1)[1]}
        ]
        (purl,) = [
            r["referenceLocator"] for r in package["externalRefs"] if r["referenceType"] == "purl"
        ]
        assert f"@sha256%3A{image.digest.split(':', 1)[1]}" in purl
        check_purl(purl, image)
    files = {f["fileName"]: f for f in document["files"]}
    contents = provider_files(capi_bundle)
    assert set(files) == {f"./{name}" for name in contents}
    for name, data in contents.items():
        assert {"algorithm": "SHA256", "checksumValue": hashlib.sha256(data).hexdigest()} in (
            files[f"./{name}"]["checksums"]
        )
    ids = [p["SPDXID"] for p in packages] + [f["SPDXID"] for f in document["files"]]
    assert len(set(ids)) == len(ids) == 15
    described = {
        r["relatedSpdxElement"]
        for r in document["relationships"]
        if r["spdxElementId"] == "SPDXRef-DOCUMENT" and r["relationshipType"] == "DESCRIBES"
    }
    assert described == set(ids)


@pytest.mark.integration
def test_spdx_files_carry_sha1_when_the_bytes_are_at_hand(capi_bundle: CollectedBundle) -> None:
    """SPDX 2.3 requires a SHA1 per file; given the verified bundle, it is there."""
    verified = verify_bundle(capi_bundle.path, [load_public_key(capi_bundle.key.public)])
    manifest = verified.require_verified()
    document = spdx(manifest, verified.manifest_bytes, capi_bundle.path.name, verified.read)
    jsonschema.validate(document, SPDX_SCHEMA)
    contents = provider_files(capi_bundle)
    for entry in document["files"]:
        data = contents[entry["fileName"][2:]]
        assert entry["checksums"] == [
            {"algorithm": "SHA1", "checksumValue": hashlib.sha1(data).hexdigest()},  # noqa: S324
            {"algorithm": "SHA256", "checksumValue": hashlib.sha256(data).hexdigest()},
        ]


@pytest.mark.e2e
def test_cyclonedx_document(capi_bundle: CollectedBundle) -> None:
    _, document = sbom(capi_bundle, "cyclonedx")
    jsonschema.validate(document, CYCLONEDX_SCHEMA)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.5"
    components = document["components"]
    containers = [c for c in components if c["type"] == "container"]
    assert len(containers) == 5
    for image, component in zip(capi_bundle.manifest.images, containers, strict=True):
        assert component["name"] == parse_reference(image.reference).name
        check_purl(component["purl"], image)
        assert component["hashes"] == [{"alg": "SHA-256", "content": image.digest.split(":", 1)[1]}]
    files = {c["name"]: c for c in components if c["type"] == "file"}
    contents = provider_files(capi_bundle)
    assert set(files) == set(contents)
    for name, data in contents.items():
        assert files[name]["hashes"] == [
            {"alg": "SHA-256", "content": hashlib.sha256(data).hexdigest()}
        ]
    refs = [c["bom-ref"] for c in components]
    assert len(set(refs)) == len(refs) == 15


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["spdx", "cyclonedx"])
def test_sbom_is_deterministic(capi_bundle: CollectedBundle, kind: str) -> None:
    first, _ = sbom(capi_bundle, kind)
    second, _ = sbom(capi_bundle, kind)
    assert first == second


@pytest.mark.unit
def test_purl_of_a_digest_pinned_image() -> None:
    digest = "sha256:" + "ab" * 32
    image = ImageRecord(
        reference=f"registry.k8s.io/cluster-api/cluster-api-controller@{digest}",
        digest=digest,
        media_type="application/vnd.oci.image.index.v1+json",
        platforms=["linux/amd64"],
        size=1,
    )
    purl = image_purl(image)
    assert purl == (
        f"pkg:oci/cluster-api-controller@sha256%3A{'ab' * 32}"
        "?repository_url=registry.k8s.io/cluster-api/cluster-api-controller"
    )
    check_purl(purl, image)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["spdx", "cyclonedx"])
def test_no_sbom_for_a_bundle_that_fails(
    capi_bundle: CollectedBundle, tmp_path: Path, kind: str
) -> None:
    provider = capi_bundle.manifest.providers[0]
    bundle = tamper.flip_byte(capi_bundle.path, tmp_path / "x.tar", provider.components)
    result = run_airgap("verify", bundle, "--key", capi_bundle.key.public, "--sbom", kind)
    assert result.returncode == 1
    assert result.stdout == ""  # the file the user redirects to stays empty
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "no SBOM written" in lines[0]
    assert provider.components in lines[0]
