import stat
from pathlib import Path

import pytest

from airgap.bundle.signing import (
    fingerprint,
    generate_keypair,
    load_private_key,
    load_public_key,
    sign,
    verify,
)
from airgap.core.errors import InputError, SignatureError

pytestmark = pytest.mark.unit


def test_keygen_writes_private_0600_and_public(tmp_path: Path) -> None:
    public, print_ = generate_keypair(tmp_path / "signing.key")
    assert public == tmp_path / "signing.pub"
    assert stat.S_IMODE((tmp_path / "signing.key").stat().st_mode) == 0o600
    assert print_.startswith("SHA256:")
    assert fingerprint(load_public_key(public)) == print_


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "k.key")
    with pytest.raises(InputError, match="already exists"):
        generate_keypair(tmp_path / "k.key")


def test_sign_and_verify_with_trusted_key(tmp_path: Path) -> None:
    generate_keypair(tmp_path / "a.key")
    generate_keypair(tmp_path / "b.key")
    a_private = load_private_key(tmp_path / "a.key")
    a_public, b_public = load_public_key(tmp_path / "a.pub"), load_public_key(tmp_path / "b.pub")
    signature = sign(a_private, b"manifest bytes")
    assert verify(signature, b"manifest bytes", [b_public, a_public]) == fingerprint(a_public)
    with pytest.raises(SignatureError):
        verify(signature, b"manifest bytez", [a_public])
    with pytest.raises(SignatureError):
        verify(signature, b"manifest bytes", [b_public])


def test_wrong_key_files_give_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(InputError, match="junk.pem"):
        load_private_key(tmp_path / "junk.pem")
    with pytest.raises(InputError, match="missing.pub"):
        load_public_key(tmp_path / "missing.pub")


def test_a_public_key_reads_the_same_in_its_plain_form_and_any_other(tmp_path: Path) -> None:
    """The one-line PEM that keygen writes is read without cryptography's serialization
    package (start-up); other layouts of the same key (CRLF, base64 split over lines)
    go to the full parser and give the same key; a PEM of another key type is refused."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

    public, print_ = generate_keypair(tmp_path / "k.key")
    pem = public.read_bytes()
    begin, body, end = pem.strip().splitlines()
    variants = {
        "crlf.pub": pem.replace(b"\n", b"\r\n"),
        "split.pub": b"\n".join([begin, body[:20], body[20:], end]) + b"\n",
    }
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        assert fingerprint(load_public_key(tmp_path / name)) == print_, name
    other = generate_private_key(SECP256R1()).public_key()
    (tmp_path / "ec.pub").write_bytes(
        other.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    with pytest.raises(InputError, match="not an Ed25519 public key"):
        load_public_key(tmp_path / "ec.pub")
    (tmp_path / "short.pub").write_bytes(b"\n".join([begin, body[:-8] + b"AAAA", end]))
    with pytest.raises(InputError, match="short.pub"):
        load_public_key(tmp_path / "short.pub")
