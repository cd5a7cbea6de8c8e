"""Split bundles: the parts' names, their sizes, and the signed parts list.

A bundle too large for its medium (a FAT32 stick holds files of at most 4 GiB - 1 byte, a
DVD 4.7 GB) is written as ``NAME.tar.000``, ``NAME.tar.001``, …: consecutive byte ranges
of the very same tar, so ``cat NAME.tar.* > NAME.tar`` rebuilds the single-file bundle
byte for byte. Every part but the last is exactly the part size.

The bundle manifest cannot list the parts: it is the first tar member, inside part 0, and
a part's sha256 would have to cover its own bytes. (It could not anyway: a split bundle
must be the same bytes as the unsplit one.) The parts are described by a detached list
beside them, ``NAME.tar.parts.json``, signed like the manifest
(``NAME.tar.parts.json.sig``). It names the bundle manifest's sha256 and the bundle's
size, so it belongs to exactly one bundle, and every part's size and sha256, so a part
that is missing, short or damaged is named and only that file is copied again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from airgap.core.errors import BundleError, InputError
from airgap.core.limits import describe_size
from airgap.core.names import shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError

PARTS_FORMAT = 1
PARTS_KIND = "airgap-bundle-parts"
PARTS_SUFFIX = ".parts.json"
SIGNATURE_SUFFIX = ".sig"
MIN_DIGITS = 3
# 100,000 parts: 400 TB of 4 GiB parts, and a bound on how many files a hostile parts
# list can make airgap open.
MAX_PARTS = 100_000
MAX_PARTS_LIST_BYTES = 16 << 20
# The smallest part: anything smaller is a mistake (a forgotten unit), not a medium.
MIN_PART_SIZE = 16 << 10

# Media presets: the largest file each one holds.
PRESETS = {
    "fat32": 4 * 1024**3 - 1,  # FAT32's file size limit
    "dvd": 4_700_372_992,  # single-layer DVD±R (2,295,104 sectors of 2048 bytes)
    "bd": 25_025_314_816,  # single-layer BD-R (12,219,392 clusters of 2048 bytes)
}
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
# at most 20 digits each side of the point: 10^20 bytes is past any medium, and a
# 5,000-digit size ended in a traceback from int()
_SIZE_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([a-zA-Z]{0,3})\s*$", re.ASCII)
_PART_RE = re.compile(r"^(?P<base>.+)\.(?P<number>\d{3,})$")


def parse_part_size(text: str) -> int:
    """``4GiB``, ``700MiB``, ``4.7GB``, ``1048576`` or a preset (``fat32``, ``dvd``,
    ``bd``) in bytes; anything else, or less than ``MIN_PART_SIZE``, is an input error."""
    preset = PRESETS.get(text.strip().lower())
    if preset is not None:
        return preset
    match = _SIZE_RE.match(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        presets = ", ".join(PRESETS)
        raise InputError(
            f"--part-size {shown(text)}: expected bytes, a size such as 4GiB, 700MiB or 4.7GB, "
            f"or one of {presets}"
        )
    from fractions import Fraction  # only for --part-size: not on every start-up

    size = int(Fraction(match.group(1)) * unit)  # exact: 4.7GB is 4,700,000,000
    if size < MIN_PART_SIZE:
        raise InputError(
            f"--part-size {shown(text)} is {size} bytes; parts are at least "
            f"{describe_size(MIN_PART_SIZE)}"
        )
    return size


def part_name(bundle: Path, index: int) -> Path:
    """``NAME.tar.000`` for part 0 (at least three digits; more past part 999)."""
    return bundle.with_name(f"{bundle.name}.{index:0{MIN_DIGITS}d}")


def parts_list_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + PARTS_SUFFIX)


def parts_signature_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + PARTS_SUFFIX + SIGNATURE_SUFFIX)


def split_part_name(path: Path) -> tuple[Path, int] | None:
    """``(NAME.tar, 3)`` for ``NAME.tar.003``; None for a name that is not a part's."""
    match = _PART_RE.match(path.name)
    if match is None:
        return None
    return path.with_name(match.group("base")), int(match.group("number"))


def part_sizes(total: int, part_size: int) -> list[int]:
    """The sizes of the parts a ``total``-byte bundle is cut into: all ``part_size``
    but the last."""
    if total <= 0:
        return []
    full, rest = divmod(total, part_size)
    return [part_size] * full + ([rest] if rest else [])


@dataclass(frozen=True)
class PartRecord:
    """One part file of a split bundle: its size and sha256, so a damaged part is named
    by itself."""

    size: int
    sha256: str


@dataclass(frozen=True)
class PartsList:
    """What the signer says the parts are: read before the signature is checked only to
    know how many files to open and how large each must be."""

    bundle: str  # the bundle's file name (NAME.tar), for people reading the list
    size: int  # the whole bundle: the sum of the parts
    part_size: int
    manifest_sha256: str  # binds the list to one bundle manifest
    parts: list[PartRecord]

    def to_bytes(self) -> bytes:
        """Deterministic JSON: the exact bytes that get signed."""
        document = {
            "formatVersion": PARTS_FORMAT,
            "kind": PARTS_KIND,
            "bundle": self.bundle,
            "size": self.size,
            "partSize": self.part_size,
            "manifestSha256": self.manifest_sha256,
            "parts": [
                {"part": number, "size": p.size, "sha256": p.sha256}
                for number, p in enumerate(self.parts)
            ],
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> PartsList:
        """Bounded and strict: every field of its type, unknown keys refused, and the
        parts consistent with the sizes (a list that cannot describe a bundle is refused
        before any file is opened by it)."""
        try:
            document = Fields(jsonsafe.loads(data, where, max_bytes=MAX_PARTS_LIST_BYTES), where)
            _known(
                document,
                {"formatVersion", "kind", "bundle", "size", "partSize", "manifestSha256", "parts"},
            )
            if document.raw("formatVersion") != PARTS_FORMAT or document.text("kind") != PARTS_KIND:
                raise BundleError(f"{where}: not an airgap parts list (format {PARTS_FORMAT})")
            items = document.objects("parts")
            if len(items) > MAX_PARTS:
                raise BundleError(f"{where}: more than {MAX_PARTS} parts")
            parts = []
            for number, item in enumerate(items):
                _known(item, {"part", "size", "sha256"})
                if item.integer("part") != number:
                    raise JSONShapeError(f"{item.path('part')}: expected {number}")
                parts.append(PartRecord(item.integer("size", minimum=1), _hex(item, "sha256")))
            listed = cls(
                bundle=document.text("bundle"),
                size=document.integer("size"),
                part_size=document.integer("partSize", minimum=1),
                manifest_sha256=_hex(document, "manifestSha256"),
                parts=parts,
            )
        except JSONShapeError as exc:
            raise BundleError(f"malformed parts list: {exc}") from None
        # the count first: the sizes of a list claiming 2**70 bytes in parts of 1 would
        # not fit in memory (or in an index), and it names at most MAX_PARTS parts
        count = -(-listed.size // listed.part_size)
        if count != len(parts) or [p.size for p in parts] != part_sizes(
            listed.size, listed.part_size
        ):
            raise BundleError(
                f"{where}: the part sizes do not cut {listed.size} bytes into parts of "
                f"{listed.part_size}"
            )
        return listed


def _known(item: Fields, keys: set[str]) -> None:
    for key in item.names():
        if key not in keys:
            raise JSONShapeError(f"{item.where}: unknown key {key[:60]!r}")


def _hex(item: Fields, key: str) -> str:
    value = item.text(key)
    if not re.fullmatch(r"[0-9a-f]{64}", value):
        raise JSONShapeError(f"{item.path(key)}: expected 64 lowercase hex digits")
    return value
