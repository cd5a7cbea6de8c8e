"""Helm provenance files (``.prov``) signed by a real GnuPG, as ``helm package --sign``
writes them.

Helm's message block is ``Chart.yaml``, YAML's document end ``...``, then
``files: {NAME-VERSION.tgz: sha256:HEX}``, clearsigned with SHA-512; GnuPG dash-escapes
every line that starts with ``-`` (a YAML list in Chart.yaml), which a reader must undo.
The key is a throw-away Ed25519 key without passphrase in its own ``GNUPGHOME``.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.harness.tiers import need_tool

__all__ = ["export_public_key", "gnupg_home", "message_block", "sign_provenance"]

USER_ID = "airgap chart signer <charts@example.invalid>"


@contextmanager
def gnupg_home(directory: Path) -> Iterator[Path]:
    """A GNUPGHOME holding one signing key; its gpg-agent is stopped on exit."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _gpg(directory, "--quick-generate-key", USER_ID, "ed25519", "sign", "1d")
    try:
        yield directory
    finally:
        subprocess.run(
            ["gpgconf", "--homedir", str(directory), "--kill", "gpg-agent"],
            capture_output=True,
            check=False,
            timeout=30,
        )


def message_block(chart_yaml: str, package_name: str, package: bytes) -> str:
    """What Helm signs (``provenance.messageBlock``)."""
    digest = hashlib.sha256(package).hexdigest()
    return f"{chart_yaml.rstrip(chr(10))}\n\n...\nfiles:\n  {package_name}: sha256:{digest}\n"


def sign_provenance(home: Path, chart_yaml: str, package_name: str, package: bytes) -> bytes:
    """A ``.prov`` for ``package`` as ``helm package --sign`` writes it."""
    text = message_block(chart_yaml, package_name, package)
    return _gpg(home, "--clearsign", "--digest-algo", "SHA512", input=text.encode())


def export_public_key(home: Path, directory: Path, *, armor: bool = True) -> Path:
    """The signing key's public half as a keyring file (``gpg --export``)."""
    path = directory / ("pubring.asc" if armor else "pubring.gpg")
    path.write_bytes(_gpg(home, "--export", *(["--armor"] if armor else [])))
    return path


def _gpg(home: Path, *args: str, input: bytes | None = None) -> bytes:
    result = subprocess.run(
        [need_tool("gpg"), "--homedir", str(home), "--batch", "--yes",
         "--pinentry-mode", "loopback", "--passphrase", "", *args],
        input=input,
        capture_output=True,
        check=False,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout
