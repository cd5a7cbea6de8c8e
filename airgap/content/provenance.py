"""Helm provenance files (``NAME-VERSION.tgz.prov``): the digest they promise (pure).

``helm package --sign`` writes an OpenPGP clearsigned message whose text is the chart's
``Chart.yaml``, YAML's document end marker ``...`` on a line of its own, and
``files: {NAME-VERSION.tgz: sha256:HEX}``; ``helm verify`` checks the signature against
a keyring, then that digest. airgap always checks the second half: the provenance
names this package and promises its sha256. The signature is checked only when the
spec entry gives a keyring (``airgap.content.openpgp``); otherwise it travels byte for
byte, NOT verified, and the record says so (``PROVENANCE_NOTE``).

The file is hostile input: bounded in size, lines and headers, UTF-8, the clearsign
frame required, the digest section parsed with the bounded YAML loader.
"""

from __future__ import annotations

import re

from airgap.content.openpgp import PublicKey, verify_clearsigned
from airgap.core.errors import DigestMismatchError, InputError, utf8_text
from airgap.core.limits import MAX_PROVENANCE_BYTES
from airgap.formats.yamlload import load_single

PROVENANCE_NOTE = "package sha256 matched, OpenPGP signature not checked (no keyring)"
VERIFIED_NOTE = "package sha256 matched, OpenPGP signature verified (key {})"
_BEGIN = "-----BEGIN PGP SIGNED MESSAGE-----"
_SIGNATURE = "-----BEGIN PGP SIGNATURE-----"
_END = "-----END PGP SIGNATURE-----"
_SEPARATOR = "\n...\n"  # Helm's split between Chart.yaml and the sums (parseMessageBlock)
_MAX_HEADERS = 16
_HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,63}: [\x20-\x7e]{1,200}$")
_SHA256 = re.compile(r"^sha256:([0-9a-f]{64})$")


def check_provenance(
    data: bytes,
    names: tuple[str, ...],
    sha256: str,
    where: str,
    keyring: list[PublicKey] | None = None,
) -> str:
    """Refuse a provenance file whose ``files`` entry for the package (under any of
    ``names``: Helm signs the file name the package had) is missing or is not
    ``sha256:<sha256>``, or, given a ``keyring``, whose signature no key of it made;
    ``where`` names the chart and the file in every message. The inventory line: what
    was checked."""
    lines, armored = _clearsigned(data, where)
    note = PROVENANCE_NOTE
    if keyring is not None:
        note = VERIFIED_NOTE.format(verify_clearsigned(lines, armored, keyring, where))
    sums = _sums("\n".join(lines), where)
    found = [name for name in names if name in sums]
    if not found:
        listed = ", ".join(sorted(str(k)[:80] for k in sums)[:5]) or "none"
        raise InputError(f"{where}: names no digest for {names[0]} (files: {listed})")
    value = sums[found[0]]
    match = _SHA256.match(value) if isinstance(value, str) else None
    if match is None:
        raise InputError(f"{where}: the digest of {found[0]} is not sha256:<64 hex digits>")
    if match.group(1) != sha256.removeprefix("sha256:"):
        raise DigestMismatchError(
            f"{where}: promises sha256:{match.group(1)} for {found[0]}, but the package's "
            f"sha256 is {sha256.removeprefix('sha256:')}"
        )
    return note


def _clearsigned(data: bytes, where: str) -> tuple[list[str], str]:
    """The clearsigned text's lines, dash-escaping undone (RFC 4880 section 7), as Go's
    ``clearsign.Decode`` gives them to Helm, and the armored signature."""
    if len(data) > MAX_PROVENANCE_BYTES:
        raise InputError(f"{where}: larger than {MAX_PROVENANCE_BYTES >> 10} KiB")
    lines = utf8_text(data, where, InputError).replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if start == len(lines) or lines[start].rstrip() != _BEGIN:
        raise InputError(f"{where}: not an OpenPGP clearsigned message (no {_BEGIN} line)")
    blank = start + 1
    while blank < len(lines) and lines[blank].strip():
        if blank - start > _MAX_HEADERS or not _HEADER.match(lines[blank].rstrip()):
            raise InputError(f"{where}: malformed armor header on line {blank + 1}")
        blank += 1
    text = [line.rstrip(" \t") for line in lines[blank + 1 :]]
    if _SIGNATURE not in text:
        raise InputError(f"{where}: no {_SIGNATURE} block after the signed text")
    signature = text.index(_SIGNATURE)
    body = [line[2:] if line.startswith("- ") else line for line in text[:signature]]
    if _END not in text[signature:]:
        raise InputError(f"{where}: the signature block has no {_END} line")
    end = text.index(_END, signature)
    return body, "\n".join(text[signature : end + 1])


def _sums(text: str, where: str) -> dict[object, object]:
    """``files`` of the part after the first ``...`` line (Helm's SumCollection)."""
    parts = text.split(_SEPARATOR)
    if len(parts) < 2:
        raise InputError(f"{where}: no '...' line between Chart.yaml and the file digests")
    document = load_single(parts[1], where, pure=True)
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict):
        raise InputError(f"{where}: no files: mapping of package digests")
    return files
