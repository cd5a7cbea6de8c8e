"""What one pass over a bundle's tar found: each member where it lies and its digest, and
what was wrong.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from airgap.bundle.format import FileRecord, member_key
from airgap.bundle.manifest import BundleManifest
from airgap.verify.findings import Failure


class Member:
    """Where a member's bytes live inside the tar, and the sha256 the signed manifest
    gives them: every later read hashes what it uses against it (see VerifiedBundle).

    One per member of a bundle: its name, size and sha256 are its manifest record's
    (``record``, shared, compact), not copies."""

    __slots__ = ("hashed", "offset", "record")
    record: FileRecord
    offset: int
    hashed: bool  # False: located and sized only; its bytes are checked on use

    def __init__(self, name: str, offset: int, size: int, sha256: str, hashed: bool = True):
        self._set(FileRecord(name, sha256, size), offset, hashed)

    @classmethod
    def of(cls, record: FileRecord, offset: int, hashed: bool = True) -> Member:
        """The member a record describes, found at ``offset``."""
        member = cls.__new__(cls)
        member._set(record, offset, hashed)
        return member

    def _set(self, record: FileRecord, offset: int, hashed: bool) -> None:
        object.__setattr__(self, "record", record)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "hashed", hashed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    @property
    def name(self) -> str:
        return self.record.path

    @property
    def size(self) -> int:
        return self.record.size

    @property
    def sha256(self) -> str:
        return self.record.sha256

    def __repr__(self) -> str:
        return (
            f"Member(name={self.name!r}, offset={self.offset}, size={self.size}, "
            f"sha256={self.sha256!r}, hashed={self.hashed})"
        )


class Members(Mapping[str, Member]):
    """The verified members by name.

    Once told the manifest's records (``index``), a member of one is its offset in an
    array beside the record's position, found by bisecting the blob records sorted by
    digest: ~13 bytes a member, where a Member, its offset and a dict entry took ~140
    (6,000 members for 2,000 images). ``members[name]`` makes its Member on demand.
    A member whose record is not indexed is kept in a dict, keyed by ``member_key``."""

    def __init__(self) -> None:
        self._by_key: dict[bytes | str, Member] = {}
        self._files: Sequence[FileRecord] = ()
        self._blobs = array("I")  # positions of the blob-named records, by digest
        self._digests: list[bytes | str] = []  # their digests, in that order
        self._others: dict[bytes | str, int] = {}  # any other record's last position
        self._offsets = array("q")  # each record's member offset; -1: not a member
        self._unhashed = bytearray()
        self._count = 0
        self.listed_twice = False  # some path is listed more than once

    def index(self, files: Sequence[FileRecord]) -> None:
        """Index the manifest's records (before any of their members is added)."""
        positions = [n for n, record in enumerate(files) if record.blob_named]
        positions.sort(key=lambda n: files[n].key)  # stable: equal digests by position
        self._files = files
        self._blobs = array("I", positions)
        self._digests = [files[n].key for n in positions]  # the records' own bytes
        self._others = {r.key: n for n, r in enumerate(files) if not r.blob_named}
        self._offsets = array("q", [-1]) * len(files)
        self._unhashed = bytearray(len(files))
        others = sum(1 for record in files if not record.blob_named)
        self.listed_twice = len(self._others) < others or any(
            files[a].key == files[b].key for a, b in itertools.pairwise(positions)
        )
        if not self.listed_twice:
            self.listed_twice = any(
                type(key) is bytes and self._last_blob(key) is not None for key in self._others
            )

    def listed(self, key: bytes | str) -> FileRecord | None:
        """The record the manifest lists last under this ``member_key``."""
        position = self._position(key)
        return None if position is None else self._files[position]

    def add(self, member: Member) -> None:
        record = member.record
        position = self._position(record.key) if self._files else None
        if position is None or self._files[position] is not record:
            self._by_key[record.key] = member
            return
        if self._offsets[position] < 0:
            self._count += 1
        self._offsets[position] = member.offset
        self._unhashed[position] = not member.hashed

    def keyed(self, key: bytes | str) -> bool:
        """Whether a member of this ``member_key`` is here."""
        position = self._position(key) if self._files else None
        if position is not None and self._offsets[position] >= 0:
            return True
        return key in self._by_key

    def _member(self, key: bytes | str) -> Member | None:
        position = self._position(key) if self._files else None
        if position is not None and self._offsets[position] >= 0:
            record = self._files[position]
            return Member.of(record, self._offsets[position], not self._unhashed[position])
        return self._by_key.get(key)

    def _position(self, key: bytes | str) -> int | None:
        found = self._others.get(key, -1)
        if type(key) is bytes:
            blob = self._last_blob(key)
            if blob is not None:
                found = max(found, blob)
        return None if found < 0 else found

    def _last_blob(self, key: bytes) -> int | None:
        digests = self._digests
        at = bisect.bisect_right(digests, key)
        return self._blobs[at - 1] if at and digests[at - 1] == key else None

    def __getitem__(self, name: str) -> Member:
        member = self._member(member_key(name))
        if member is None:
            raise KeyError(name)
        return member

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.keyed(member_key(name))

    def __iter__(self) -> Iterator[str]:
        for position, offset in enumerate(self._offsets):
            if offset >= 0:
                yield self._files[position].path
        yield from (member.name for member in self._by_key.values())

    def __len__(self) -> int:
        return self._count + len(self._by_key)


@dataclass
class ScanResult:
    """What one pass over the tar learned: where each member is, what failed, and the
    manifest once its signature holds."""

    # the signed manifest's bytes, kept only until it is parsed (a 2,000-image bundle's
    # manifest is ~2 MiB): later readers re-read them at ``manifest_at`` and check them
    # against ``manifest_sha256``
    manifest_bytes: bytes | None = None
    manifest_at: tuple[int, int] | None = None  # (offset, size) of its data in the tar
    manifest_sha256: str = ""
    signature: bytes | None = None
    manifest: BundleManifest | None = None
    members: Members = field(default_factory=Members)
    failures: list[Failure] = field(default_factory=list)
    end_offset: int | None = None  # where the members end (end marker or damage)
    last_member: str = "the start of the archive"
    signer: str | None = None  # set by ``authenticate``
    authenticated: bool | None = None  # None: not asked yet
    # the data (offset, size) of the first member of each name not in ``members`` (failed
    # ones, the head): which part holds a damage (see ``where``). One being hashed is
    # not here (its job knows where it is) unless its hash fails.
    located: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the ``member_key`` of each regular member met so far that is not in ``members``:
    # with it, every name met (a second member of one is refused), no name held twice
    seen: set[bytes | str] = field(default_factory=set)

    def fail(self, kind: str, subject: str, message: str) -> None:
        self.failures.append(Failure(kind, subject, message))

    def add(self, member: Member) -> None:
        """A member that passed: its place is its record's, not kept twice."""
        self.members.add(member)
        self.seen.discard(member.record.key)
        if self.located:
            self.located.pop(member.name, None)

    def met(self, key: bytes | str) -> bool:
        """Whether a regular member of this ``member_key`` came before."""
        return key in self.seen or self.members.keyed(key)

    def where(self, name: str) -> tuple[int, int] | None:
        """Where the tar holds the data of the first member of this name, if anywhere."""
        member = self.members.get(name)
        if member is not None:
            return member.offset, member.size
        return self.located.get(name)
