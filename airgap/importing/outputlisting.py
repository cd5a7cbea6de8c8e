"""Which files below ``--output-dir`` airgap wrote, so that a later run removes those it
no longer writes.

Why: outputs are named after what a bundle holds and where it goes (a provider's label
and version, a source registry's node config). Import a newer bundle, or into another
target, into the same directory and the files the earlier import wrote for providers,
registries or prefixes that are gone would stay beside the new ones: a containerd
``hosts.toml`` sending quay.io to the old prefix, the components of a provider the
bundle no longer carries. Copied to nodes or applied as a tree, they would configure
what this import did not push. So every write lists its files in ``.airgap-files.json``
and removes what the previous listing names and this write does not.

A file belongs to a part: ``operator`` (the operator's objects and the clusterctl
repository, written by ``configmaps`` and by ``import``) or ``import`` (what only import
writes: components, node configs, the mapping, the report). A write replaces the parts
it writes whole: ``configmaps`` run into an import's directory replaces the operator's
objects and leaves the node configs that import wrote. Only files a listing names are
removed, and only regular files (``fsutil.remove_files``): a file the user added, or a
listing naming a path outside the directory, removes nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path

from airgap.core.errors import AirgapError
from airgap.core.fsutil import UnsafeOutputPath, output_parts, remove_files, write_atomic
from airgap.formats import jsonsafe

LISTING = ".airgap-files.json"
FORMAT = 1
OPERATOR = "operator"
IMPORT = "import"
MAX_LISTING_BYTES = 16 << 20
PARTS = (OPERATOR, IMPORT)  # every part: what an import writes


def read(output_dir: Path) -> dict[str, str]:
    """The earlier listing's files and their parts; empty when there is none, or it is
    unreadable or not airgap's (then nothing is removed)."""
    path = output_dir / LISTING
    try:
        if path.is_symlink() or not path.is_file():
            return {}
        document = jsonsafe.loads(path.read_bytes(), str(path), max_bytes=MAX_LISTING_BYTES)
    except (OSError, AirgapError):
        return {}
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict) or document.get("format") != FORMAT:
        return {}
    return {name: part for name, part in files.items() if _listed(name, part)}


def _listed(name: object, part: object) -> bool:
    if not isinstance(name, str) or part not in PARTS:
        return False
    try:
        output_parts(name)
    except UnsafeOutputPath:
        return False
    return True


def plan(
    earlier: Mapping[str, str], written: Mapping[str, str], replaced: Collection[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """After a write of ``written`` (path -> part) that replaces the parts ``replaced``:
    the listing, and the earlier files to remove (listed in a replaced part, not written
    again) with their parts."""
    stale = {
        name: part for name, part in earlier.items() if part in replaced and name not in written
    }
    kept = {name: part for name, part in earlier.items() if part not in replaced}
    return kept | dict(written), stale


def listing_bytes(files: Mapping[str, str]) -> bytes:
    document = {"format": FORMAT, "files": dict(sorted(files.items()))}
    return json.dumps(document, indent=1).encode() + b"\n"


def prune(output_dir: Path, listing: Mapping[str, str], stale: Mapping[str, str]) -> None:
    """Remove ``stale`` (listed beside ``listing`` until now, so that a run stopped
    before this point leaves them to the next one), then list what is left."""
    if not stale:
        return
    left = remove_files(output_dir, sorted(stale))
    write_atomic(output_dir / LISTING, listing_bytes({**listing, **{n: stale[n] for n in left}}))
