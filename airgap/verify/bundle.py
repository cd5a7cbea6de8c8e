"""Verify a bundle end to end and hand back what was verified.

``verify_bundle`` is the one code path for ``airgap verify``, ``airgap import`` and
``airgap configmaps``: they all act only on a ``VerifiedBundle``, whose members are
read by offset from the tar. Every read hashes what it hands out against the signed
manifest, whatever was checked before: a file can change between two reads (another
writer, or a USB disk edited elsewhere keeping size and times), and no earlier check,
no file metadata and no cache can vouch for bytes that were not hashed as they were
used. ``airgap verify`` hashes every member; import and configmaps leave the image
layout's blobs to be hashed while they stream to the registry (``stream``), so blobs
the target already holds need no bytes from the bundle at all.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest
from airgap.errors import BundleError, SignatureError
from airgap.signing import fingerprint
from airgap.signing import verify as verify_signature
from airgap.verify.content import check_layout, check_providers
from airgap.verify.contents import check_contents
from airgap.verify.findings import Failure
from airgap.verify.names import check_names
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
    all_hashed: bool = True  # False: the layout's blobs are left to be hashed on use

    @property
    def verified(self) -> bool:
        return not self.failures and self.manifest is not None

    def read(self, name: str) -> bytes:
        """A small member's bytes (manifests, metadata, components), hashed on every
        read against the signed manifest."""
        member = self.members[name]
        with self.path.open("rb") as handle:
            handle.seek(member.offset)
            data = handle.read(member.size)
        if len(data) != member.size:
            raise BundleError(f"{self.path}: {name} is truncated")
        self._check(member, hashlib.sha256(data).hexdigest())
        return data

    def stream(self, name: str, start: int = 0) -> Iterator[bytes]:
        """A member's bytes from ``start`` in chunks, for pushing without extraction.

        From the start, the bytes are hashed as they go and the last chunk is held back
        until the whole member matched the signed manifest: a receiver (a registry
        upload with its Content-Length) never gets a complete altered member. A stream
        from a later offset (a chunked upload's next piece) cannot be judged alone; the
        registry client checks the digest of everything it sent before committing."""
        member = self.members[name]
        hasher = hashlib.sha256() if start == 0 else None
        held: bytes | None = None
        with self.path.open("rb") as handle:
            handle.seek(member.offset + start)
            remaining = member.size - start
            while remaining > 0:
                chunk = handle.read(min(READ_CHUNK, remaining))
                if not chunk:
                    raise BundleError(f"{self.path}: {name} is truncated")
                remaining -= len(chunk)
                if hasher is None:
                    yield chunk
                    continue
                hasher.update(chunk)
                if held is not None:
                    yield held
                held = chunk
        if hasher is not None:
            self._check(member, hasher.hexdigest())
        if held is not None:
            yield held

    def _check(self, member: Member, actual: str) -> None:
        if actual != member.sha256:
            raise BundleError(
                f"{self.path}: member {member.name} does not match the signed manifest "
                f"(sha256 {actual}, signed {member.sha256}): the bundle changed after "
                "it was signed or verified"
            )

    def require_verified(self) -> BundleManifest:
        """The manifest, or a BundleError summarising why the bundle is refused."""
        if self.verified and self.manifest is not None:
            return self.manifest
        first = self.failures[0] if self.failures else None
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        raise BundleError(f"{self.path} failed verification: {first}{more}")


def verify_bundle(
    path: Path, keys: list[Ed25519PublicKey] | None, *, hash_blobs: bool = True
) -> VerifiedBundle:
    """Scan, check the signature (unless ``keys`` is None: explicitly unsigned), then
    check the layout and providers against the verified members.

    ``hash_blobs=False`` (import, configmaps) hashes every member but the layout's
    blobs; the image manifests among them are hashed when the layout check reads them,
    the others when ``stream`` pushes them."""

    def authenticate(scanned: ScanResult) -> bool:
        # before anything but the manifest's bytes is parsed: an untrusted bundle is
        # judged by its signature alone, and read no further
        scanned.signer = _check_signature(scanned, keys)
        return keys is None or scanned.signer is not None

    result = scan(path, hash_blobs=hash_blobs, authenticate=authenticate)
    signer = result.signer
    bundle = VerifiedBundle(
        path,
        result.manifest,
        signer,
        result.members,
        result.failures,
        result.manifest_bytes or b"",
        all_hashed=hash_blobs,
    )
    if result.manifest is not None:
        present = {name: member.size for name, member in result.members.items()}

        def read(name: str) -> bytes:
            try:
                return bundle.read(name)
            except BundleError as exc:  # altered since signing: the finding comes first
                bundle.failures.append(Failure("member", name, _reason(exc, path)))
                raise

        bundle.failures.extend(check_names(result.manifest))
        bundle.failures.extend(check_layout(result.manifest, read, present))
        bundle.failures.extend(check_providers(result.manifest, read, present))
        bundle.failures.extend(check_contents(result.manifest, read, present))
    return bundle


def _reason(exc: BundleError, path: Path) -> str:
    """A read error's message without the bundle path the report already names."""
    return str(exc).removeprefix(f"{path}: ")


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
