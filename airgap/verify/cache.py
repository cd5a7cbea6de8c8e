"""Remembering that a bundle file was fully verified, so re-imports need not re-hash it.

The cache stands in for content hashing only: a bundle counts as unchanged when its
device, inode, size, mtime and ctime are what they were after a full verification, the
same change detection git, rsync and restic rely on (any write moves ctime, which users
cannot set back). The signature, tar head and layout checks still run every time, and
``airgap verify`` itself never uses the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from airgap.bundle.format import BundleManifest
from airgap.bundle.reader import read_head
from airgap.errors import AirgapError
from airgap.fsutil import write_atomic
from airgap.verify.scan import Member, ScanResult


@dataclass(frozen=True)
class FileIdentity:
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        stat = path.stat()
        return cls(stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def default_directory() -> Path:
    explicit = os.environ.get("AIRGAP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airgap" / "verified"


class VerificationCache:
    """One JSON entry per bundle path, written only after a clean full verification."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or default_directory()

    def _entry(self, path: Path) -> Path:
        key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()
        return self.directory / f"{key}.json"

    def lookup(self, path: Path) -> ScanResult | None:
        """The scan result of the last full verification, if the file is unchanged."""
        try:
            entry = json.loads(self._entry(path).read_text())
            if FileIdentity(**entry["identity"]) != FileIdentity.of(path):
                return None
            head = read_head(path)
            if hashlib.sha256(head.manifest_bytes).hexdigest() != entry["manifest_sha256"]:
                return None
            members = {
                name: Member(name, offset, size)
                for name, (offset, size) in entry["members"].items()
            }
            return ScanResult(
                manifest_bytes=head.manifest_bytes,
                signature=head.signature,
                manifest=BundleManifest.from_bytes(head.manifest_bytes),
                members=members,
            )
        except (OSError, ValueError, KeyError, TypeError, AirgapError):
            return None  # no entry, a stale or unreadable one: verify in full

    def store(self, path: Path, identity: FileIdentity, result: ScanResult) -> None:
        if result.failures or result.manifest_bytes is None:
            return
        if FileIdentity.of(path) != identity:
            return  # the file changed while it was being verified
        entry = {
            "identity": asdict(identity),
            "manifest_sha256": hashlib.sha256(result.manifest_bytes).hexdigest(),
            "members": {m.name: [m.offset, m.size] for m in result.members.values()},
        }
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_atomic(self._entry(path), json.dumps(entry).encode(), mode=0o600)
        except OSError:
            pass  # a cache that cannot be written only costs time
