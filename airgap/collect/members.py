"""The members of the bundle collect plans, and their file records: what is
held per image here is what grows collect's peak RSS with the image count.

Provider and content files are members from the staging directory. ``index.json`` is
written there too, a piece at a time, and the small blobs already in memory (image
manifests and configs, attached artifacts' manifests) are spilled one after another
into one staging file: neither is held until the tar is laid out. Each blob is then
planned as its file record, the very one the bundle manifest lists, and its offset in
the spill file (or -1: a blob still to be downloaded); its ``PlannedMember`` is made
only when the plan is iterated, not 6,000 of them held for 2,000 images.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from airgap.bundle.format import IMAGES_DIR, FileRecord, blob_member
from airgap.bundle.writer import PlannedMember, member_span
from airgap.collect.images import ResolvedImage
from airgap.content.fetch import FetchedContent
from airgap.core.errors import AirgapError
from airgap.oci.layout import INDEX_FILE, OCI_LAYOUT_CONTENT, OCI_LAYOUT_FILE, write_index_json
from airgap.providers.fetch import FetchedProvider

# In the staging directory, beside the provider and content files (whose names never
# start with a dot)
STAGED_INDEX = ".index.json"
SPILLED_BLOBS = ".inline-blobs"


class Members(Iterable[PlannedMember]):
    """Every member but the manifest and signature, in tar order: ``head`` (provider and
    content files, the layout's own), the blobs by digest, then ``tail`` (what collect
    adds after: trust material). Iterable any number of times; a blob's member is made
    as it is reached."""

    def __init__(
        self, head: list[PlannedMember], blobs: list[FileRecord], offsets: array[int], spill: Path
    ) -> None:
        self.head = head
        self.blobs = blobs  # the blobs' file records, in digest order
        self.offsets = offsets  # each blob's offset in ``spill``; -1: downloaded later
        self.spill = spill
        self.tail: list[PlannedMember] = []

    def __iter__(self) -> Iterator[PlannedMember]:
        yield from self.head
        spill = self.spill
        for record, offset in zip(self.blobs, self.offsets, strict=True):
            if offset < 0:
                yield PlannedMember(record.path, record.size)
            else:
                yield PlannedMember(record.path, record.size, path=spill, offset=offset)
        yield from self.tail

    def records(self) -> list[FileRecord]:
        """The file record of every member, in tar order (the blobs' are shared)."""
        return [
            *(file_record(m) for m in self.head),
            *self.blobs,
            *(file_record(m) for m in self.tail),
        ]

    def deferred(self) -> set[str]:
        """The digests of the blobs left to be downloaded."""
        return {
            digest_of(record.path)
            for record, offset in zip(self.blobs, self.offsets, strict=True)
            if offset < 0
        }


# Bounds on what is not known before the configs are read: the bundle manifest's record
# of each image (its reference counted apart), of each provider, content and attached
# artifact, of each file (its path counted apart), an index.json entry, and what is
# written once (the manifest's own fields, its signature, oci-layout, the archive's end)
IMAGE_RECORD_BOUND = 1024
RECORD_BOUND = 512
FILE_RECORD_BOUND = 192
INDEX_ENTRY_BOUND = 384
FIXED_BOUND = 6 * 1024


def bundle_bound(
    providers: list[FetchedProvider],
    contents: list[FetchedContent],
    images: list[ResolvedImage],
    staging: Path,
    relied: set[str],
    extra: int = 0,
) -> tuple[int, int]:
    """(an upper bound of the bundle's size, and of the bytes ``plan_members`` stages:
    the spilled small blobs and ``index.json``), from the manifests alone: nothing is
    downloaded to know it (free space is checked before any blob is asked for).
    ``extra``: bytes of further members (trust material)."""
    paths = [path for p in providers for path in (p.metadata_path, p.components_path)]
    paths += [path for content in contents for path in content.files]
    names = {relative(p, staging): p.stat().st_size for p in paths}
    pieces: dict[str, int] = {}
    inline: dict[str, int] = {}
    index = records = 0
    for image in images:
        pieces.update({b.digest: b.size for b in image.blobs()})
        carried = {m.digest: m.size for m in image.carried_manifests()}
        pieces.update(carried)
        inline.update(carried)
        config = image._config_descriptor()
        if config is not None:
            inline[config.digest] = config.size
        for attached in image.attached:
            inline.update({d: len(data) for d, data in attached.payloads.items()})
        index += INDEX_ENTRY_BOUND + len(str(image.reference))
        records += IMAGE_RECORD_BOUND + 2 * len(str(image.reference))
        records += RECORD_BOUND * len(image.attached)
    names.update({blob_member(d): n for d, n in pieces.items() if d not in relied})
    records += sum(FILE_RECORD_BOUND + len(name) for name in names)
    records += sum(RECORD_BOUND + sum(len(i) for i in p.images) for p in providers)
    records += sum(RECORD_BOUND + sum(len(i) for i in c.images) for c in contents)
    size = sum(member_span(name, n) for name, n in names.items()) + extra
    size += member_span(f"{IMAGES_DIR}/{INDEX_FILE}", index) + member_span("", records)
    spilled = sum(n for d, n in inline.items() if d not in relied) + index
    return size + FIXED_BOUND, spilled


def plan_members(
    providers: list[FetchedProvider],
    contents: list[FetchedContent],
    images: list[ResolvedImage],
    staging: Path,
    relied: set[str],
) -> Members:
    """Provider files, content files, the layout's metadata, then blobs by digest
    (spilled from memory, or left to be downloaded), but for those a delta relies on.
    ``index.json`` names every image, carried or not."""
    paths = [
        path for p in providers for path in (p.metadata_path, p.components_path, *p.profile_files)
    ]
    paths += [path for content in contents for path in content.files]
    head = [PlannedMember(relative(p, staging), p.stat().st_size, path=p) for p in paths]
    layout = OCI_LAYOUT_CONTENT
    head.append(PlannedMember(f"{IMAGES_DIR}/{OCI_LAYOUT_FILE}", len(layout), data=layout))
    index = staging / STAGED_INDEX
    with index.open("wb") as out:
        write_index_json(((str(i.reference), i.top.descriptor()) for i in images), out)
    head.append(PlannedMember(f"{IMAGES_DIR}/{INDEX_FILE}", index.stat().st_size, path=index))
    spill = staging / SPILLED_BLOBS
    spilled: dict[str, int] = {}  # digest -> offset in ``spill``
    sizes: dict[str, int] = {}
    inline_sizes: dict[str, int] = {}
    with spill.open("wb") as out:
        for image in images:
            for digest, data in image.inline_blobs().items():
                if digest not in spilled and digest not in relied:
                    spilled[digest] = out.tell()
                    inline_sizes[digest] = len(data)
                    out.write(data)
            sizes.update({b.digest: b.size for b in image.blobs()})
    sizes.update(inline_sizes)
    del inline_sizes
    blobs: list[FileRecord] = []
    offsets = array("q")
    with spill.open("rb") as reader:
        for digest in sorted(sizes.keys() - relied):
            name, size, offset = blob_member(digest), sizes[digest], spilled.get(digest, -1)
            if offset < 0:
                blobs.append(FileRecord(name, digest_of(name).split(":", 1)[1], size))
            else:
                blobs.append(FileRecord(name, _sha256_at(reader, offset, size, spill), size))
            offsets.append(offset)
    return Members(head, blobs, offsets, spill)


def _sha256_at(reader: BinaryIO, offset: int, size: int, spill: Path) -> str:
    data = os.pread(reader.fileno(), size, offset)
    if len(data) != size:
        raise AirgapError(f"{spill}: shorter than the blobs written into it")
    return hashlib.sha256(data).hexdigest()


def relative(path: Path, staging: Path) -> str:
    return path.relative_to(staging).as_posix()


def file_record(member: PlannedMember) -> FileRecord:
    """A member's sha256: hashed if it is a file or in memory; for a blob still to be
    downloaded, its digest (the download is checked against it while streaming)."""
    if member.data is not None:
        return FileRecord(member.name, hashlib.sha256(member.data).hexdigest(), member.size)
    if member.path is not None:
        with member.path.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        return FileRecord(member.name, digest, member.size)
    return FileRecord(member.name, digest_of(member.name).split(":", 1)[1], member.size)


def digest_of(member_name: str) -> str:
    """``images/blobs/sha256/HEX`` -> ``sha256:HEX``."""
    algorithm, hexpart = member_name.rsplit("/", 2)[-2:]
    return f"{algorithm}:{hexpart}"
