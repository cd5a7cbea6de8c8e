"""Inventory documents for compliance tooling: SPDX 2.3 JSON and CycloneDX 1.5 JSON.

Images become packages identified by ``pkg:oci`` purls (digest in the version, as the
purl spec has it: ``pkg:oci/NAME@sha256%3AHEX?repository_url=...&tag=...``); provider
and content files (cert-manager, the operator, templates) become files with their
sha256; signatures, attestations and SBOMs carried with an image are packages related
to it (SPDX) or properties of it (CycloneDX). Output is deterministic for a given bundle.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from airgap import __version__
from airgap.bundle.format import FileRecord, ImageRecord
from airgap.bundle.manifest import BundleManifest
from airgap.oci.reference import parse_reference


def image_purl(image: ImageRecord) -> str:
    ref = parse_reference(image.reference)
    name = ref.repository.rsplit("/", 1)[-1].lower()
    qualifiers = [f"repository_url={quote(ref.name, safe='/:')}"]
    if ref.tag:
        qualifiers.append(f"tag={quote(ref.tag, safe='')}")
    return f"pkg:oci/{name}@{quote(image.digest, safe='')}?{'&'.join(qualifiers)}"


def _provider_files(manifest: BundleManifest) -> list[FileRecord]:
    """Every release file: providers' metadata and components, then content files
    (cert-manager, the operator's manifest and chart, cluster templates)."""
    wanted = {path for p in manifest.providers for path in (p.metadata, p.components)}
    wanted |= {path for content in manifest.contents for path in content.files}
    return [f for f in manifest.files if f.path in wanted]


def _document_id(manifest_bytes: bytes) -> str:
    return hashlib.sha256(manifest_bytes).hexdigest()


def spdx(
    manifest: BundleManifest,
    manifest_bytes: bytes,
    name: str,
    read: Callable[[str], bytes] | None = None,
) -> dict[str, Any]:
    """SPDX 2.3 JSON. SPDX requires a SHA1 for every file, which only the files' bytes
    give: pass ``read`` (``VerifiedBundle.read``) to include it next to the SHA256."""
    doc_id = _document_id(manifest_bytes)
    packages = []
    for number, image in enumerate(manifest.images, 1):
        ref = parse_reference(image.reference)
        packages.append(
            {
                "SPDXID": f"SPDXRef-Image-{number}",
                "name": ref.name,
                "versionInfo": ref.tag or image.digest,
                "downloadLocation": "NOASSERTION",
                "filesAnalyzed": False,
                "primaryPackagePurpose": "CONTAINER",
                "checksums": [
                    {"algorithm": "SHA256", "checksumValue": image.digest.split(":", 1)[1]}
                ],
                "externalRefs": [
                    {
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": image_purl(image),
                    }
                ],
            }
        )
    attached, relationships = _spdx_attached(manifest)
    packages += attached
    files = []
    for number, record in enumerate(_provider_files(manifest), 1):
        checksums = [{"algorithm": "SHA256", "checksumValue": record.sha256}]
        if read is not None:
            sha1 = hashlib.sha1(read(record.path), usedforsecurity=False).hexdigest()
            checksums.insert(0, {"algorithm": "SHA1", "checksumValue": sha1})
        files.append(
            {
                "SPDXID": f"SPDXRef-File-{number}",
                "fileName": f"./{record.path}",
                "checksums": checksums,
            }
        )
    described = [p["SPDXID"] for p in packages] + [f["SPDXID"] for f in files]
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"https://airgap.invalid/spdx/{name}-{doc_id}",
        "creationInfo": {"created": manifest.created, "creators": [f"Tool: airgap-{__version__}"]},
        "packages": packages,
        "files": files,
        "relationships": [
            {
                "spdxElementId": "SPDXRef-DOCUMENT",
                "relationshipType": "DESCRIBES",
                "relatedSpdxElement": element,
            }
            for element in described
        ]
        + relationships,
    }


def _spdx_attached(manifest: BundleManifest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Signatures, attestations and SBOMs carried with the images: one package each,
    related to its image (SPDX 2.3 has no relationship for a signature: OTHER, said in
    the comment)."""
    images = {image.reference: f"SPDXRef-Image-{n}" for n, image in enumerate(manifest.images, 1)}
    packages, relationships = [], []
    for number, artifact in enumerate(manifest.artifacts, 1):
        spdx_id = f"SPDXRef-Attached-{number}"
        how = f"cosign tag {artifact.tag}" if artifact.tag else f"the {artifact.via}"
        comment = f"{artifact.kind} attached to {artifact.subject} through {how}"
        packages.append(
            {
                "SPDXID": spdx_id,
                "name": f"{parse_reference(artifact.image).name} {artifact.kind}",
                "versionInfo": artifact.digest,
                "downloadLocation": "NOASSERTION",
                "filesAnalyzed": False,
                "primaryPackagePurpose": "OTHER",
                "checksums": [
                    {"algorithm": "SHA256", "checksumValue": artifact.digest.split(":", 1)[1]}
                ],
                "comment": comment
                + (f" (artifact type {artifact.artifact_type})" if artifact.artifact_type else ""),
            }
        )
        relationships.append(
            {
                "spdxElementId": spdx_id,
                "relationshipType": "OTHER",
                "relatedSpdxElement": images[artifact.image],
                "comment": comment,
            }
        )
    return packages, relationships


def _cyclonedx_attached(manifest: BundleManifest, image: ImageRecord) -> dict[str, Any]:
    """An image's signatures, attestations and SBOMs as CycloneDX properties
    (``airgap:signature`` = ``DIGEST on SUBJECT via WAY``)."""
    properties = [
        {
            "name": f"airgap:{artifact.kind}",
            "value": f"{artifact.digest} on {artifact.subject} via {artifact.tag or artifact.via}",
        }
        for artifact in manifest.artifacts
        if artifact.image == image.reference
    ]
    return {"properties": properties} if properties else {}


def cyclonedx(manifest: BundleManifest, manifest_bytes: bytes, name: str) -> dict[str, Any]:
    doc_id = _document_id(manifest_bytes)
    components: list[dict[str, Any]] = []
    for image in manifest.images:
        ref = parse_reference(image.reference)
        purl = image_purl(image)
        components.append(
            {
                "type": "container",
                "bom-ref": purl,
                "name": ref.name,
                "version": ref.tag or image.digest,
                "purl": purl,
                "hashes": [{"alg": "SHA-256", "content": image.digest.split(":", 1)[1]}],
                **_cyclonedx_attached(manifest, image),
            }
        )
    for record in _provider_files(manifest):
        components.append(
            {
                "type": "file",
                "bom-ref": f"file:{record.path}",
                "name": record.path,
                "hashes": [{"alg": "SHA-256", "content": record.sha256}],
            }
        )
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'airgap:' + doc_id)}",
        "version": 1,
        "metadata": {
            "timestamp": manifest.created,
            "tools": {
                "components": [{"type": "application", "name": "airgap", "version": __version__}]
            },
            "component": {"type": "application", "name": name, "bom-ref": f"bundle:{doc_id}"},
        },
        "components": components,
    }
