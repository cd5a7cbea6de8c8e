"""Verify a bundle end to end and hand back what was verified.

``verify_bundle`` is the one code path for ``airgap verify``, ``airgap import`` and
``airgap configmaps``: they all act only on a ``VerifiedBundle``, whose members are
read by offset from the tar that was just hashed.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest
from airgap.errors import BundleError, SignatureError
from airgap.signing import fingerprint
from airgap.signing import verify as verify_signature
from airgap.verify.cache import FileIdentity, VerificationCache
from airgap.verify.content import check_layout, check_providers
from airgap.verify.findings import Failure
from airgap.verify.scan import Member, ScanResult, scan

READ_CHUNK = 1 << 20
ED25519_SIGNATURE_BYTES = 64


@dataclass
class VerifiedBundle:
    """The outcome of verification, and random access to the verified members."""

    path: Path
    manifest: BundleManifest | None
    signer: str | None
    members: dict[str, Member]
    failures: list[Failure] = field(default_factory=list)
    manifest_bytes: bytes = b""  # the signed bytes, exactly as in the tar
    from_cache: bool = False  # content hashes taken from the verification cache

    @property
    def verified(self) -> bool:
        return not self.failures and self.manifest is not None

    def read(self, name: str) -> bytes:
        """A small member's bytes (manifests, metadata, components)."""
        member = self.members[name]
        with self.path.open("rb") as handle:
            handle.seek(member.offset)
            data = handle.read(member.size)
        if len(data) != member.size:
            raise BundleError(f"{self.path}: {name} is truncated")
        return data

    def stream(self, name: str, start: int = 0) -> Iterator[bytes]:
        """A member's bytes from ``start`` in chunks, for pushing without extraction."""
        member = self.members[name]
        with self.path.open("rb") as handle:
            handle.seek(member.offset + start)
            remaining = member.size - start
            while remaining > 0:
                chunk = handle.read(min(READ_CHUNK, remaining))
                if not chunk:
                    raise BundleError(f"{self.path}: {name} is truncated")
                remaining -= len(chunk)
                yield chunk

    def require_verified(self) -> BundleManifest:
        """The manifest, or a BundleError summarising why the bundle is refused."""
        if self.verified and self.manifest is not None:
            return self.manifest
        first = self.failures[0] if self.failures else None
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        raise BundleError(f"{self.path} failed verification: {first}{more}")


def verify_bundle(
    path: Path, keys: list[Ed25519PublicKey] | None, *, cache: VerificationCache | None = None
) -> VerifiedBundle:
    """Scan, check the signature (unless ``keys`` is None: explicitly unsigned), then
    check the layout and providers against the verified members.

    With a ``cache``, an unchanged file that was fully verified before is not hashed
    again; everything else is checked as usual."""
    cached = cache.lookup(path) if cache else None
    identity = FileIdentity.of(path) if cache and cached is None and path.is_file() else None
    result = cached or scan(path)
    signer = _check_signature(result, keys)
    bundle = VerifiedBundle(
        path,
        result.manifest,
        signer,
        result.members,
        result.failures,
        result.manifest_bytes or b"",
    )
    if result.manifest is not None:
        present = {name: member.size for name, member in result.members.items()}
        bundle.failures.extend(check_layout(result.manifest, bundle.read, present))
        bundle.failures.extend(check_providers(result.manifest, bundle.read, present))
    bundle.from_cache = cached is not None
    if cache and identity and bundle.verified:
        cache.store(path, identity, result)
    return bundle


def _check_signature(result: ScanResult, keys: list[Ed25519PublicKey] | None) -> str | None:
    if keys is None or result.manifest_bytes is None or result.signature is None:
        return None
    try:
        raw = base64.b64decode(result.signature.strip(), validate=True)
    except ValueError:
        result.fail("signature", SIGNATURE_NAME, "is not valid base64")
        return None
    if len(raw) != ED25519_SIGNATURE_BYTES:
        result.fail("signature", SIGNATURE_NAME, f"is {len(raw)} bytes, not an Ed25519 signature")
        return None
    try:
        return verify_signature(result.signature, result.manifest_bytes, keys)
    except SignatureError:
        trusted = ", ".join(fingerprint(key) for key in keys)
        result.fail(
            "signature",
            SIGNATURE_NAME,
            f"does not verify {MANIFEST_NAME} with any trusted key ({trusted}): the "
            "manifest or its signature was altered, or an untrusted key signed it",
        )
        return None
