"""Which repositories of a target registry hold which blobs, remembered across imports.

Importing the same bundle under a second prefix would otherwise upload every blob again:
within one import airgap mounts a blob from the repository it just pushed it to, but a
new prefix has no such repository. This index, one small JSON file per target registry
under the user's cache directory, remembers the repositories earlier imports left each
blob in, so the pusher can ask the registry to mount it from there instead.

It is a hint, never trusted for correctness: a mount is content-addressed (the registry
links the blob with that digest it already holds, or answers with an upload session), so
a stale, forged or corrupt entry costs one failed mount and an upload, never a wrong
blob. A file that does not parse, is too large, or names another registry is ignored.
It holds digests and repository names only, never a credential.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path

from airgap.core.errors import AirgapError
from airgap.core.fsutil import write_atomic
from airgap.core.inputfile import read_small
from airgap.core.limits import MiB
from airgap.formats import jsonsafe
from airgap.oci.reference import parse_reference

FORMAT_VERSION = 1
MAX_INDEX_BYTES = 32 * MiB
MAX_BLOBS = 100_000  # the least recently seen are forgotten first
MAX_HOLDERS = 4  # repositories remembered per blob, most recent first
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def cache_dir() -> Path:
    """``$AIRGAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/airgap``, else ``~/.cache/airgap``."""
    explicit = os.environ.get("AIRGAP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "airgap"


def index_path(registry: str, directory: Path | None = None) -> Path:
    """``blobs/HOST-HASH.json``: readable, and distinct for hosts that sanitise alike."""
    digest = hashlib.sha256(registry.encode()).hexdigest()[:16]
    name = f"{_UNSAFE.sub('-', registry)[:64]}-{digest}.json"
    return (directory or cache_dir()) / "blobs" / name


def _valid_repository(name: object) -> bool:
    if not isinstance(name, str) or not 0 < len(name) <= 255:
        return False
    try:
        return parse_reference(f"registry.invalid/{name}:probe").repository == name
    except AirgapError:
        return False


class BlobIndex:
    """Blob digest -> repositories known to hold it, for one target registry."""

    def __init__(self, registry: str, path: Path, blobs: dict[str, list[str]]) -> None:
        self.registry = registry
        self.path = path
        self._blobs = blobs
        self._lock = threading.Lock()
        self._changed = False

    @classmethod
    def load(cls, registry: str, directory: Path | None = None) -> BlobIndex | None:
        """The index for ``registry`` (empty if there is none worth reading), or None if
        there is no cache directory to keep one in (no home directory)."""
        try:
            path = index_path(registry, directory)
        except (RuntimeError, KeyError):  # Path.home() without HOME or a passwd entry
            return None
        return cls(registry, path, _read(path, registry))

    def holders(self, digest: str, *, exclude: str = "") -> list[str]:
        """Repositories that held ``digest`` when last seen, most recent first."""
        with self._lock:
            found = list(self._blobs.get(digest, ()))
        return [repo for repo in found if repo != exclude and _valid_repository(repo)]

    def learn(self, digest: str, repository: str) -> None:
        """``repository`` holds ``digest`` (pushed, mounted or found there)."""
        with self._lock:
            holders = self._blobs.pop(digest, [])
            if holders[:1] == [repository]:
                self._blobs[digest] = holders  # re-inserted: now the most recent
                return
            self._blobs[digest] = [repository, *(r for r in holders if r != repository)][
                :MAX_HOLDERS
            ]
            while len(self._blobs) > MAX_BLOBS:
                del self._blobs[next(iter(self._blobs))]
            self._changed = True

    def forget(self, digest: str, repository: str) -> None:
        """A mount from ``repository`` failed: it does not hold ``digest`` (any more)."""
        with self._lock:
            holders = self._blobs.get(digest)
            if holders and repository in holders:
                holders.remove(repository)
                if not holders:
                    del self._blobs[digest]
                self._changed = True

    def save(self) -> bool:
        """Write the index atomically (mode 0600) if it changed; False if it could not be
        written (a cache that cannot be written only costs uploads next time)."""
        with self._lock:
            if not self._changed:
                return True
            document = {
                "formatVersion": FORMAT_VERSION,
                "registry": self.registry,
                "blobs": self._blobs,
            }
            data = json.dumps(document, separators=(",", ":")).encode() + b"\n"
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_atomic(self.path, data, 0o600)
        except OSError:
            return False
        self._changed = False
        return True


def _read(path: Path, registry: str) -> dict[str, list[str]]:
    """The blobs of a well-formed index file for ``registry``; anything else is empty."""
    if not path.exists():
        return {}
    try:
        data = read_small(path, MAX_INDEX_BYTES, "blob index")
        document = jsonsafe.loads(data, str(path), max_bytes=MAX_INDEX_BYTES)
    except (AirgapError, OSError):
        return {}
    if not isinstance(document, dict) or document.get("formatVersion") != FORMAT_VERSION:
        return {}
    blobs = document.get("blobs")
    if document.get("registry") != registry or not isinstance(blobs, dict):
        return {}
    found: dict[str, list[str]] = {}
    for digest, holders in list(blobs.items())[-MAX_BLOBS:]:
        if isinstance(holders, list):
            names = [h for h in holders[:MAX_HOLDERS] if isinstance(h, str)]
            if names:
                found[digest] = names
    return found
