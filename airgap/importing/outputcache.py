"""The output directory's record of what an import wrote, so a re-import can skip
rebuilding outputs that are already there, whole.

Import's outputs (components, operator ConfigMaps and CRs, the clusterctl repository,
node configs, the OpenShift component list) are a pure function of the signed bundle
manifest and the options that change output bytes; rebuilding them means parsing every
provider's components again, most of a re-import's time. So the last file an import
writes into ``--output-dir`` is ``.airgap-outputs.json``: the sha256 of the verified
bundle manifest, those options, and every output file with its sha256 and mode.

Nothing in it is trusted on its own (a cache that trusted file times would
not be): a re-import uses it only when the bundle manifest it has just verified by
signature has that digest, the options are the same, and every listed file, read
again without following links, has that size, hash and mode. Anything else (a file
edited, deleted or made a link, a different option, another bundle, an unreadable or
unknown record) rebuilds everything as a first import does. The variables' values are
secrets: the record holds the names the outputs asked for and a salted hash of their
values, never a value, and is written mode 0600.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airgap import __version__
from airgap.configmaps.variables import VariableValues
from airgap.core.errors import AirgapError
from airgap.core.fsutil import SecretBytes, file_mode, output_parts

RECORD = ".airgap-outputs.json"
FORMAT = 1
MAX_RECORD_BYTES = 16 << 20  # a few hundred files' names and hashes, and references
MAX_OUTPUT_BYTES = 256 << 20  # all listed files together: a few MB in practice
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True, repr=False)
class AskedValues(VariableValues):
    """Variable values that remember which names the outputs asked for: with the same
    bundle those are the same names, so their values are all a re-import compares."""

    asked: set[str] = field(default_factory=set)

    def get(self, name: str) -> str | None:
        self.asked.add(name)
        return super().get(name)


@dataclass(frozen=True)
class PublishedImage:
    """A manifests image import pushed, as a re-import confirms it: its tag resolves
    to this digest."""

    repository: str
    tag: str
    digest: str


@dataclass(frozen=True)
class Recorded:
    """Outputs found whole in the output directory, as the record lists them."""

    files: list[str]  # relative paths, each found whole: its size, mode and sha256
    published: list[PublishedImage]
    missing: dict[str, list[str]]  # the import's missing variables (names only)
    references: dict[str, str]  # the closure's references in ``files`` -> first file
    plain_http: bool  # what the target spoke: the node configs say it


def options_key(
    *,
    bundle_manifest: bytes,
    target: str,
    keep_registry: bool,
    pin: bool,
    namespace: str | None,
    provider_source: str,
    location: Path,
    ca_pem: bytes | None,
    max_path_depth: int | None = None,
) -> dict[str, Any]:
    """What the outputs depend on besides the variables and the target's scheme: the
    bundle manifest's digest, each option that changes output bytes, airgap's version."""
    return {
        "airgap": __version__,
        "bundle": "sha256:" + hashlib.sha256(bundle_manifest).hexdigest(),
        "target": target,
        "keepSourceRegistry": keep_registry,
        "pin": pin,
        "namespace": namespace,
        "providerSource": provider_source,
        # clusterctl.yaml's file:// URLs point there
        "location": str(location),
        "absoluteLocation": str(location.absolute()),
        "caFile": None if ca_pem is None else hashlib.sha256(ca_pem).hexdigest(),
        "maxPathDepth": max_path_depth,
    }


def _values_digest(salt: str, names: Sequence[str], values: VariableValues) -> str:
    pairs = [[name, values.get(name)] for name in names]
    return hashlib.sha256((salt + json.dumps(pairs)).encode()).hexdigest()


def record_bytes(
    key: Mapping[str, Any],
    files: Mapping[str, bytes],
    *,
    asked: set[str],
    values: VariableValues,
    published: Sequence[PublishedImage],
    missing: Mapping[str, list[str]],
    references: Mapping[str, str],
    plain_http: bool,
) -> SecretBytes:
    """The record of an import's outputs (``files``: every output but the report)."""
    salt = secrets.token_hex(16)
    names = sorted(asked)
    document = {
        "format": FORMAT,
        "key": dict(key),
        "plainHTTP": plain_http,
        "variables": {"names": names, "salt": salt, "digest": _values_digest(salt, names, values)},
        "files": {
            path: {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "mode": f"{file_mode(data):o}",
            }
            for path, data in sorted(files.items())
        },
        "manifestsImages": [
            {"repository": p.repository, "tag": p.tag, "digest": p.digest} for p in published
        ],
        "variablesMissing": dict(missing),
        "references": dict(references),
    }
    return SecretBytes(json.dumps(document, indent=1, sort_keys=True).encode() + b"\n")


_UNREADABLE = (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError)


@dataclass(frozen=True)
class Found:
    """A record and every file it lists, read back and matching its hash, size and
    mode (``read``), not yet compared with a key (``matching``)."""

    document: dict[str, Any]
    recorded: Recorded


def load(output_dir: Path, key: Mapping[str, Any], values: VariableValues) -> Recorded | None:
    """The outputs an earlier import with this ``key`` and these variable values left in
    ``output_dir``, every listed file read back and matching its hash, size and mode;
    None (rebuild) when anything differs, is missing or cannot be read."""
    return matching(read(output_dir), key, values)


def read(output_dir: Path) -> Found | None:
    """The record in ``output_dir`` with every file it lists read back, each matching
    its hash, size and mode; None when anything differs, is missing or cannot be read.
    Needs no key: import reads it while it verifies the bundle the key comes from."""
    try:
        with _Reader(output_dir) as reader:
            raw = reader.read(RECORD, MAX_RECORD_BYTES)
            document = json.loads(raw) if raw is not None else None
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                return None
            recorded = _recorded(reader, document)
            return None if recorded is None else Found(document, recorded)
    except (*_UNREADABLE, AirgapError):
        return None  # an unreadable, foreign or hostile record is no record: rebuild


def matching(
    found: Found | None, key: Mapping[str, Any], values: VariableValues
) -> Recorded | None:
    """``found``'s outputs if its record was written with this ``key`` and these
    variable values; else None (rebuild)."""
    if found is None:
        return None
    try:
        return found.recorded if _matches(found.document, key, values) else None
    except (*_UNREADABLE, AirgapError):
        return None


def _matches(document: dict[str, Any], key: Mapping[str, Any], values: VariableValues) -> bool:
    if document.get("format") != FORMAT:
        return False
    if document.get("key") != dict(key):
        return False
    variables = document["variables"]
    names = [str(name) for name in variables["names"]]
    digest = _values_digest(str(variables["salt"]), names, values)
    return secrets.compare_digest(digest, str(variables["digest"]))


def _recorded(reader: _Reader, document: dict[str, Any]) -> Recorded | None:
    listed: dict[str, Any] = document["files"]
    if not listed or sum(int(entry["size"]) for entry in listed.values()) > MAX_OUTPUT_BYTES:
        return None
    for path, entry in listed.items():
        mode = int(str(entry["mode"]), 8)
        if not reader.matches(path, int(entry["size"]), mode, str(entry["sha256"])):
            return None
    return Recorded(
        list(listed),
        [
            PublishedImage(str(item["repository"]), str(item["tag"]), str(item["digest"]))
            for item in document["manifestsImages"]
        ],
        {str(k): [str(name) for name in v] for k, v in document["variablesMissing"].items()},
        {str(k): str(v) for k, v in document["references"].items()},
        bool(document["plainHTTP"]),
    )


def forget(output_dir: Path) -> None:
    """Remove an earlier import's record before outputs it would not describe are
    written (``--provider-source oci``): a record lists only what is whole."""
    with contextlib.suppress(OSError):  # then the hashes still keep it from matching
        (output_dir / RECORD).unlink()


class _Reader:
    """Regular files below one directory, read through directory descriptors opened
    without following links (as ``fsutil.write_tree`` writes them): a link anywhere
    below the output directory is a miss, never followed."""

    def __init__(self, root: Path) -> None:
        self._fds: dict[tuple[str, ...], int] = {
            (): os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        }
        self._buffer = bytearray(_HASH_CHUNK)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *_: object) -> None:
        for fd in self._fds.values():
            os.close(fd)

    def _directory(self, parts: tuple[str, ...]) -> int:
        found = self._fds.get(parts)
        if found is None:
            parent = self._directory(parts[:-1])
            found = self._fds[parts] = os.open(parts[-1], _DIRECTORY_FLAGS, dir_fd=parent)
        return found

    def _open(self, relative: str) -> tuple[int, os.stat_result] | None:
        """A descriptor of the regular file and its status; None when it is missing,
        a link (anywhere on the way) or not a regular file."""
        parts = output_parts(relative)
        try:
            directory = self._directory(tuple(parts[:-1]))
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=directory)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                return None
            raise
        try:
            info = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        return fd, info

    def read(self, relative: str, limit: int) -> bytes | None:
        """The file's bytes if it is a regular file of at most ``limit`` bytes."""
        opened = self._open(relative)
        if opened is None:
            return None
        with os.fdopen(opened[0], "rb") as handle:
            data = handle.read(limit + 1)
        return data if len(data) <= limit else None

    def matches(self, relative: str, size: int, mode: int, sha256: str) -> bool:
        """Whether the file is a regular file of exactly ``size`` bytes, with ``mode``'s
        permission bits and that sha256. Hashed through one reused buffer: a re-import
        needs the outputs' hashes, never their bytes (a few MB of fresh memory, which is
        slow to touch on some VMs, each time)."""
        opened = self._open(relative)
        if opened is None:
            return False
        fd, info = opened
        with os.fdopen(fd, "rb", buffering=0) as handle:
            if info.st_size != size or stat.S_IMODE(info.st_mode) != mode:
                return False
            hasher = hashlib.sha256()
            view = memoryview(self._buffer)
            seen = 0
            while seen <= size:  # one read past the size: a file that grew is no match
                got = handle.readinto(view)
                if not got:
                    break
                hasher.update(view[:got])
                seen += got
        return seen == size and secrets.compare_digest(hasher.hexdigest(), sha256)
