import stat
from pathlib import Path

import pytest

from airgap.errors import InputError, SignatureError
from airgap.signing import (
    fingerprint,
    generate_keypair,
    load_private_key,
    load_public_key,
    sign,
    verify,
)


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
