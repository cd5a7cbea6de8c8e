"""Ed25519 keys and detached signatures over the exact bytes of a bundle manifest.

Keys are PEM (PKCS#8 private, SubjectPublicKeyInfo public) so openssl and other tools
can read them. A key is named by its fingerprint, ``SHA256:`` plus the unpadded base64
of the sha256 of the raw public key, as ssh names keys.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from airgap.core.errors import InputError, SignatureError
from airgap.core.fsutil import check_replaceable, require_directory_of, write_atomic
from airgap.core.inputfile import read_small

MAX_KEY_BYTES = 64 * 1024  # a PEM Ed25519 key is a few hundred bytes
# an Ed25519 SubjectPublicKeyInfo (RFC 8410) in DER: this prefix, then the 32-byte key
_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
_PEM_PUBLIC = (b"-----BEGIN PUBLIC KEY-----", b"-----END PUBLIC KEY-----")


def fingerprint(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes_raw()
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def public_key_path(private_path: Path) -> Path:
    """``signing.key`` -> ``signing.pub``; ``mykey`` -> ``mykey.pub``."""
    return (
        private_path.with_suffix(".pub")
        if private_path.suffix == ".key"
        else Path(f"{private_path}.pub")
    )


def generate_keypair(private_path: Path, *, overwrite: bool = False) -> tuple[Path, str]:
    """Write a new private key (mode 0600) and its public key; refuse to clobber keys."""
    public_path = public_key_path(private_path)
    require_directory_of(private_path)
    for path in (private_path, public_path):
        check_replaceable(path, overwrite=overwrite, what="key")
    from cryptography.hazmat.primitives import serialization  # see load_public_key

    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_atomic(private_path, private_pem, mode=0o600)
    write_atomic(public_path, public_pem, mode=0o644)
    return public_path, fingerprint(key.public_key())


def load_private_key(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives import serialization  # see load_public_key

    data = read_small(path, MAX_KEY_BYTES, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not an unencrypted PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    data = read_small(path, MAX_KEY_BYTES, "public key")
    plain = _plain_ed25519_pem(data)
    if plain is not None:
        return plain
    # cryptography's serialization package loads its SSH, RSA, EC and cipher modules:
    # only for a key file that is not the plain form generate_keypair writes
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path} is not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(f"{path} is not an Ed25519 public key")
    return key


def _plain_ed25519_pem(data: bytes) -> Ed25519PublicKey | None:
    """The key of a PEM ``PUBLIC KEY`` whose one base64 line is exactly an Ed25519
    SubjectPublicKeyInfo (what ``generate_keypair`` writes and ``openssl pkey -pubout``
    prints); None for anything else, which the full PEM parser then decides on."""
    lines = data.strip().splitlines()
    if len(lines) != 3 or (lines[0], lines[2]) != _PEM_PUBLIC:
        return None
    try:
        der = base64.b64decode(lines[1], validate=True)
    except ValueError:
        return None
    if len(der) != len(_ED25519_SPKI_PREFIX) + 32 or not der.startswith(_ED25519_SPKI_PREFIX):
        return None
    return Ed25519PublicKey.from_public_bytes(der[len(_ED25519_SPKI_PREFIX) :])


def sign(key: Ed25519PrivateKey, message: bytes) -> bytes:
    """The detached signature file's content: base64 of the raw signature, newline."""
    return base64.b64encode(key.sign(message)) + b"\n"


def verify(signature_file: bytes, message: bytes, keys: list[Ed25519PublicKey]) -> str:
    """The fingerprint of the trusted key that signed ``message``; else SignatureError."""
    try:
        raw = base64.b64decode(signature_file.strip(), validate=True)
    except ValueError as exc:
        raise SignatureError("bundle signature is not valid base64") from exc
    for key in keys:
        try:
            key.verify(raw, message)
        except InvalidSignature:
            continue
        return fingerprint(key)
    raise SignatureError("bundle signature does not verify with any trusted key")
