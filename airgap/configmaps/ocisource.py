"""Provider manifests as OCI artifacts, for the operator's ``fetchConfig.oci`` source.

The answer for components too large for a ConfigMap. Each provider version becomes an
ORAS-style artifact: an empty config and one layer per file, titled with the names the
operator looks for first (``<type>-<name>-<version>-metadata.yaml`` and
``…-components.yaml``), tagged with the version.
"""

from __future__ import annotations

import json

from airgap.configmaps.objects import ProviderVersion
from airgap.oci.manifest import OCI_MANIFEST, TITLE_ANNOTATION, Manifest, sha256_digest
from airgap.registry.client import Registry, bytes_body
from airgap.rewrite.mapping import Target

ARTIFACT_TYPE = "application/vnd.cluster-api.provider.v1"
EMPTY_CONFIG = b"{}"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"  # what oras uses for files


def artifact_repository(target: Target, provider: ProviderVersion) -> str:
    return target.repository("capi-providers", provider.key)


def artifact_files(provider: ProviderVersion) -> dict[str, bytes]:
    stem = provider.configmap_name
    return {
        f"{stem}-metadata.yaml": provider.metadata.encode(),
        f"{stem}-components.yaml": provider.components.encode(),
    }


def artifact_manifest(files: dict[str, bytes], created: str) -> Manifest:
    layers = [
        {
            "mediaType": LAYER_MEDIA_TYPE,
            "digest": sha256_digest(data),
            "size": len(data),
            "annotations": {TITLE_ANNOTATION: name},
        }
        for name, data in files.items()
    ]
    document = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": sha256_digest(EMPTY_CONFIG),
            "size": len(EMPTY_CONFIG),
        },
        "layers": layers,
        "annotations": {"org.opencontainers.image.created": created},
    }
    return Manifest.from_bytes(json.dumps(document, indent=2).encode(), OCI_MANIFEST)


def publish(registry: Registry, target: Target, provider: ProviderVersion, created: str) -> str:
    """Push the artifact (skipping blobs already there); returns the reference the
    operator's ``fetchConfig.oci`` takes: ``host/repo:version``, prefixed ``http://``
    when the registry speaks plain HTTP (the operator's ``parseOCISource`` reads that
    prefix as its only plain-HTTP switch; without it, it speaks HTTPS)."""
    repository = artifact_repository(target, provider)
    files = artifact_files(provider)
    what = f"provider artifact {provider.configmap_name}"
    for data in [EMPTY_CONFIG, *files.values()]:
        digest = sha256_digest(data)
        if registry.blob_size(repository, digest, what=what) is None:
            registry.upload_blob(repository, digest, len(data), bytes_body(data), what=what)
    manifest = artifact_manifest(files, created)
    if registry.manifest_digest(repository, provider.version, what=what) != manifest.digest:
        registry.put_manifest(repository, provider.version, manifest, what=what)
    scheme = "http://" if registry.plain_http else ""
    return f"{scheme}{target.host}/{repository}:{provider.version}"
