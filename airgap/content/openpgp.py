"""OpenPGP clearsigned messages checked against a keyring, for Helm ``.prov`` files (pure).

Just enough of RFC 4880 (and RFC 9580's v4 Ed25519) to do what ``helm verify`` does
with a keyring: read the armored signature of a clearsigned message, find the signer's
key in a keyring (armored or binary public keys and subkeys), and check the signature
over the canonical text with ``cryptography``. Supported: v4 signatures of type 0x01
(canonical text) by RSA (1, 3), EdDSA on Ed25519 (22) and Ed25519 (27) keys, with
SHA-256, SHA-384 or SHA-512. Anything else is refused in one line, never guessed at.

Not done, as ``helm verify`` does not either: key expiry, revocation and the binding
signatures of subkeys (the keyring is the user's statement of whom to trust).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.core.errors import AirgapError, InputError

MAX_KEYRING_BYTES = 1 << 20
MAX_PACKETS = 10_000
_TEXT_SIGNATURE = 0x01
_RSA = (1, 3)
_EDDSA_LEGACY = 22
_ED25519 = 27
_ED25519_OID = bytes.fromhex("2b06010401da470f01")
_HASHES: dict[int, type[hashes.HashAlgorithm]] = {
    8: hashes.SHA256,
    9: hashes.SHA384,
    10: hashes.SHA512,
}
_HASH_NAMES = {8: "sha256", 9: "sha384", 10: "sha512"}
_ISSUER_KEY_ID = 16
_ISSUER_FINGERPRINT = 33
_KNOWN_SUBPACKETS = frozenset({2, 3, 4, 5, 9, 11, 16, 20, 21, 22, 23, 25, 27, 28, 30, 33})


@dataclass(frozen=True)
class PublicKey:
    """An OpenPGP v4 public key or subkey, as much of it as checking a chart's ``.prov``
    needs."""

    fingerprint: str  # v4: hex of SHA-1 over the key packet
    algorithm: int
    material: tuple[int, int] | bytes  # RSA (n, e), or the 32-byte Ed25519 point

    @property
    def key_id(self) -> str:
        return self.fingerprint[-16:]


@dataclass(frozen=True)
class _Signature:
    """A v4 signature packet's parts that verification needs; ``issuers`` picks the key
    without trying each."""

    algorithm: int
    hash_algorithm: int
    trailer: bytes  # what is hashed after the text
    left16: bytes
    values: tuple[bytes, ...]
    issuers: frozenset[str]  # key IDs and fingerprints (hex, upper case)


def read_keyring(data: bytes, where: str) -> list[PublicKey]:
    """The v4 public keys and subkeys of an armored or binary keyring."""
    if len(data) > MAX_KEYRING_BYTES:
        raise InputError(f"{where}: larger than {MAX_KEYRING_BYTES >> 10} KiB")
    if data.lstrip().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----"):
        data = _dearmor(data.decode("ascii", "replace"), "PUBLIC KEY BLOCK", where)
    keys = [
        key
        for tag, body in _packets(data, where)
        if tag in (6, 14)
        for key in [_public_key(body)]
        if key is not None
    ]
    if not keys:
        raise InputError(f"{where}: no OpenPGP v4 RSA or Ed25519 public key")
    return keys


def verify_clearsigned(lines: list[str], armored: str, keys: list[PublicKey], where: str) -> str:
    """Check the signature ``armored`` over the clearsigned text ``lines`` (dash-escaping
    already undone); the signer's fingerprint, or AirgapError naming ``where``."""
    signature = _signature(_dearmor(armored, "SIGNATURE", where), where)
    candidates = [
        key
        for key in keys
        if not signature.issuers
        or key.fingerprint in signature.issuers
        or key.key_id in signature.issuers
    ]
    if not candidates:
        issuer = ", ".join(sorted(signature.issuers))
        raise AirgapError(f"{where}: signed by key {issuer}, which the keyring lacks")
    text = "\r\n".join(line.rstrip(" \t") for line in lines).encode("utf-8")
    digest = hashlib.new(_HASH_NAMES[signature.hash_algorithm], text + signature.trailer).digest()
    if digest[:2] != signature.left16:
        raise AirgapError(f"{where}: the OpenPGP signature does not match the signed text")
    for key in candidates:
        if _compatible(key.algorithm, signature.algorithm) and _holds(key, signature, digest):
            return key.fingerprint
    raise AirgapError(f"{where}: the OpenPGP signature does not verify with the keyring")


def _compatible(key: int, signature: int) -> bool:
    """RSA signs with RSA; an Ed25519 key signs as EdDSA (22) or Ed25519 (27)."""
    ed25519 = {_EDDSA_LEGACY, _ED25519}
    return key == signature or (key in ed25519 and signature in ed25519)


def _holds(key: PublicKey, signature: _Signature, digest: bytes) -> bool:
    try:
        if key.algorithm in _RSA and isinstance(key.material, tuple):
            n, e = key.material
            public = rsa.RSAPublicNumbers(e, n).public_key()
            value = signature.values[0].rjust((n.bit_length() + 7) // 8, b"\0")
            algorithm = _HASHES[signature.hash_algorithm]()
            public.verify(value, digest, padding.PKCS1v15(), utils.Prehashed(algorithm))
            return True
        if isinstance(key.material, bytes):
            if signature.algorithm == _EDDSA_LEGACY:
                raw = b"".join(v.rjust(32, b"\0") for v in signature.values[:2])
            else:
                raw = signature.values[0]
            Ed25519PublicKey.from_public_bytes(key.material).verify(raw, digest)
            return True
    except (InvalidSignature, ValueError):
        return False
    return False


# --- parsing -------------------------------------------------------------------------------


class _Reader:
    """Bounded reads from a packet body; running off the end is a malformed packet."""

    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.at, self.where = data, 0, where

    def take(self, count: int) -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise InputError(f"{self.where}: truncated OpenPGP packet")
        chunk = self.data[self.at : self.at + count]
        self.at += count
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def mpi(self) -> bytes:
        bits = self.number(2)
        return self.take((bits + 7) // 8)

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.at)


def _dearmor(text: str, label: str, where: str) -> bytes:
    begin, end = f"-----BEGIN PGP {label}-----", f"-----END PGP {label}-----"
    lines = [line.strip() for line in text.replace("\r\n", "\n").split("\n")]
    try:
        start, stop = lines.index(begin), lines.index(end)
    except ValueError:
        raise InputError(f"{where}: no armored PGP {label}") from None
    body = lines[start + 1 : stop]
    blank = body.index("") if "" in body else -1  # armor headers end at the blank line
    payload = [line for line in body[blank + 1 :] if line and not line.startswith("=")]
    try:
        return base64.b64decode("".join(payload), validate=True)
    except ValueError:
        raise InputError(f"{where}: the armored PGP {label} is not base64") from None


def _packets(data: bytes, where: str) -> list[tuple[int, bytes]]:
    reader = _Reader(data, where)
    packets: list[tuple[int, bytes]] = []
    while reader.at < len(data):
        if len(packets) >= MAX_PACKETS:
            raise InputError(f"{where}: more than {MAX_PACKETS} OpenPGP packets")
        head = reader.byte()
        if not head & 0x80:
            raise InputError(f"{where}: not OpenPGP data")
        if head & 0x40:  # new format
            tag, first = head & 0x3F, reader.byte()
            if first < 192:
                length = first
            elif first < 224:
                length = ((first - 192) << 8) + reader.byte() + 192
            elif first == 255:
                length = reader.number(4)
            else:
                raise InputError(f"{where}: partial-length OpenPGP packets are not supported")
        else:
            tag, kind = (head >> 2) & 0x0F, head & 0x03
            length = reader.number(1 << kind) if kind < 3 else len(data) - reader.at
        packets.append((tag, reader.take(length)))
    return packets


def _public_key(body: bytes) -> PublicKey | None:
    """A v4 RSA or Ed25519 key packet; None for any other key (not usable here)."""
    reader = _Reader(body, "public key")
    try:
        if reader.byte() != 4:
            return None
        reader.take(4)  # creation time
        algorithm = reader.byte()
        material: tuple[int, int] | bytes
        if algorithm in _RSA:
            n = int.from_bytes(reader.mpi(), "big")
            material = (n, int.from_bytes(reader.mpi(), "big"))
        elif algorithm == _EDDSA_LEGACY:
            oid = reader.take(reader.byte())
            point = reader.mpi()
            if oid != _ED25519_OID or len(point) != 33 or point[0] != 0x40:
                return None
            material = point[1:]
        elif algorithm == _ED25519:
            material = reader.take(32)
        else:
            return None
    except InputError:
        return None
    packet = b"\x99" + len(body).to_bytes(2, "big") + body  # a v4 fingerprint is SHA-1
    fingerprint = hashlib.sha1(packet, usedforsecurity=False).hexdigest()
    return PublicKey(fingerprint.upper(), algorithm, material)


def _signature(data: bytes, where: str) -> _Signature:
    packets = [body for tag, body in _packets(data, where) if tag == 2]
    if len(packets) != 1:
        raise InputError(f"{where}: expected one OpenPGP signature, found {len(packets)}")
    reader = _Reader(packets[0], where)
    version, kind, algorithm, hash_algorithm = reader.take(4)
    if version != 4 or kind != _TEXT_SIGNATURE:
        raise InputError(f"{where}: not a v4 OpenPGP text signature (v{version}, type {kind})")
    if hash_algorithm not in _HASHES or algorithm not in (*_RSA, _EDDSA_LEGACY, _ED25519):
        raise InputError(
            f"{where}: unsupported OpenPGP algorithm (key {algorithm}, hash {hash_algorithm})"
        )
    hashed = reader.take(reader.number(2))
    unhashed = reader.take(reader.number(2))
    issuers = _issuers(hashed, where, hashed_area=True) | _issuers(unhashed, where)
    left16 = reader.take(2)
    if algorithm in _RSA:
        values: tuple[bytes, ...] = (reader.mpi(),)
    elif algorithm == _EDDSA_LEGACY:
        values = (reader.mpi(), reader.mpi())
    else:
        values = (reader.take(64),)
    signed = packets[0][: 6 + len(hashed)]
    trailer = signed + b"\x04\xff" + len(signed).to_bytes(4, "big")
    return _Signature(algorithm, hash_algorithm, trailer, left16, values, frozenset(issuers))


def _issuers(area: bytes, where: str, *, hashed_area: bool = False) -> set[str]:
    reader = _Reader(area, where)
    found: set[str] = set()
    while reader.at < len(area):
        first = reader.byte()
        if first < 192:
            length = first
        elif first < 255:
            length = ((first - 192) << 8) + reader.byte() + 192
        else:
            length = reader.number(4)
        packet = _Reader(reader.take(length), where)
        kind = packet.byte()
        critical, kind = kind & 0x80, kind & 0x7F
        if hashed_area and critical and kind not in _KNOWN_SUBPACKETS:
            raise InputError(f"{where}: unknown critical OpenPGP subpacket {kind}")
        if kind == _ISSUER_KEY_ID:
            found.add(packet.rest().hex().upper())
        elif kind == _ISSUER_FINGERPRINT:
            packet.byte()  # key version
            found.add(packet.rest().hex().upper())
    return found
