"""Checks over what the verified members say: the OCI layout and the providers.

These run after the scan, reading only members whose sha256 already matched the signed
manifest, so anything they parse is exactly what was signed.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from airgap.bundle.format import IMAGES_DIR, BundleManifest, ProviderRecord, blob_member
from airgap.errors import AirgapError, InputError
from airgap.oci import REF_NAME_ANNOTATION, Manifest
from airgap.providers.metadata import parse_metadata
from airgap.providers.types import ProviderType
from airgap.verify.findings import Failure

MAX_MANIFEST_BYTES = 4 << 20
INDEX_MEMBER = f"{IMAGES_DIR}/index.json"
ReadMember = Callable[[str], bytes]


def check_layout(manifest: BundleManifest, read: ReadMember, present: set[str]) -> list[Failure]:
    """Every listed image is named in index.json, and its whole tree is present."""
    failures: list[Failure] = []
    if INDEX_MEMBER not in present:
        return [Failure("layout", INDEX_MEMBER, "missing or failed verification")]
    try:
        index = json.loads(read(INDEX_MEMBER))
        named = {
            entry["annotations"][REF_NAME_ANNOTATION]: entry
            for entry in index.get("manifests", [])
            if REF_NAME_ANNOTATION in (entry.get("annotations") or {})
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return [Failure("layout", INDEX_MEMBER, f"does not parse: {exc}")]
    for image in manifest.images:
        entry = named.get(image.reference)
        if entry is None:
            failures.append(Failure("image", image.reference, "is not named in images/index.json"))
            continue
        if entry.get("digest") != image.digest:
            failures.append(
                Failure(
                    "image",
                    image.reference,
                    f"index.json names {entry.get('digest')}, the manifest says {image.digest}",
                )
            )
            continue
        failures.extend(_walk(image.reference, image.digest, image.media_type, read, present))
    return failures


def _walk(
    reference: str, digest: str, media_type: str, read: ReadMember, present: set[str]
) -> list[Failure]:
    """Parse a manifest and check that every blob it needs is present and verified."""
    member = blob_member(digest)
    if member not in present:
        return [Failure("image", reference, f"manifest {digest} is missing or corrupt")]
    data = read(member)
    try:
        parsed = Manifest.from_bytes(data, media_type)
    except AirgapError as exc:
        return [Failure("image", reference, f"manifest {digest} does not parse: {exc}")]
    failures: list[Failure] = []
    for child in parsed.children():
        failures.extend(_walk(reference, child.digest, child.media_type, read, present))
    for blob in parsed.blobs():
        if blob_member(blob.digest) not in present:
            failures.append(
                Failure("image", reference, f"blob {blob.digest} is missing or corrupt")
            )
    return failures


def check_providers(manifest: BundleManifest, read: ReadMember, present: set[str]) -> list[Failure]:
    """Each provider's metadata declares its contract; all share the core's contract."""
    failures: list[Failure] = []
    listed = {image.reference for image in manifest.images}
    for provider in manifest.providers:
        failures.extend(_check_provider(provider, read, present))
        for image in provider.images:
            if image not in listed:
                failures.append(
                    Failure(
                        "provider",
                        _name(provider),
                        f"needs image {image}, which the bundle does not hold",
                    )
                )
    failures.extend(_check_contracts(manifest.providers))
    return failures


def _name(provider: ProviderRecord) -> str:
    return f"{provider.type}/{provider.name} {provider.version}"


def _check_provider(provider: ProviderRecord, read: ReadMember, present: set[str]) -> list[Failure]:
    for member in (provider.metadata, provider.components):
        if member not in present:
            return [Failure("provider", _name(provider), f"{member} is missing or corrupt")]
    try:
        metadata = parse_metadata(read(provider.metadata).decode(), provider.metadata)
    except (InputError, UnicodeDecodeError) as exc:
        return [Failure("provider", _name(provider), f"metadata does not parse: {exc}")]
    declared = metadata.contract_for(provider.version)
    if declared is None:
        return [
            Failure(
                "provider",
                _name(provider),
                f"{provider.metadata} declares no contract for {provider.version}",
            )
        ]
    if declared != provider.contract:
        return [
            Failure(
                "provider",
                _name(provider),
                f"metadata says contract {declared}, the manifest says {provider.contract}",
            )
        ]
    return []


def _check_contracts(providers: list[ProviderRecord]) -> list[Failure]:
    """The operator's golden rule: every provider speaks the core provider's contract."""
    cores = [p for p in providers if p.type == ProviderType.CORE.kind]
    if not cores:
        return []
    contracts = {p.contract for p in cores}
    failures = []
    if len(contracts) > 1:
        failures.append(
            Failure(
                "provider",
                "CoreProvider",
                f"core provider versions disagree on contract: {sorted(contracts)}",
            )
        )
    core = cores[0]
    for provider in providers:
        if provider.contract not in contracts:
            failures.append(
                Failure(
                    "provider",
                    _name(provider),
                    f"contract {provider.contract} differs from the core "
                    f"provider's {core.contract}",
                )
            )
    return failures
