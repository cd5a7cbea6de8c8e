"""The bundle manifest: what a bundle holds, signed byte for byte (to_bytes) and read
back within bounds (from_bytes, from_chunks).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from airgap.bundle.format import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    ArtifactRecord,
    ContentRecord,
    DeltaRecord,
    FileRecord,
    ImageRecord,
    NeedRecord,
    ProviderRecord,
    TrustRecord,
    _camel,
    _entry_converter,
    _record,
    _records,
    _restore_entries,
)
from airgap.core.errors import BundleError
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES
from airgap.core.names import shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError


@dataclass(frozen=True)
class BundleManifest:
    """The signed table of contents: every member's sha256 and size, and the records
    that say what each member is. Nothing in a bundle is trusted unless it is listed
    here."""

    created: str
    tool_version: str
    providers: list[ProviderRecord]
    images: list[ImageRecord]
    files: list[FileRecord]
    format_version: int = FORMAT_VERSION
    contents: list[ContentRecord] = field(default_factory=list)
    artifacts: list[ArtifactRecord] = field(default_factory=list)
    trust: list[TrustRecord] = field(default_factory=list)
    delta: DeltaRecord | None = None  # set for a delta bundle (``collect --base/--have``)

    def to_bytes(self) -> bytes:
        """Deterministic JSON: the exact bytes that get signed."""
        document: list[tuple[str, Any]] = [
            ("formatVersion", self.format_version),
            ("created", self.created),
            ("tool", {"name": "airgap", "version": self.tool_version}),
            ("providers", (_provider_json(p) for p in self.providers)),
            ("images", (_image_json(i) for i in self.images)),
            ("files", (f.to_json() for f in self.files)),
        ]
        if self.contents:  # absent otherwise: a providers-only bundle reads as before
            document.append(("contents", (_content_json(c) for c in self.contents)))
        if self.artifacts:  # likewise: a bundle without signatures reads as before
            document.append(("artifacts", (_camel(asdict(a)) for a in self.artifacts)))
        if self.trust:
            document.append(("trust", (_camel(asdict(t)) for t in self.trust)))
        if self.delta is not None:  # absent otherwise: a whole bundle reads as before
            document.append(("delta", self.delta.to_json()))
        return jsonsafe.dumps_indented(document)

    @classmethod
    def from_bytes(cls, data: bytes | str) -> BundleManifest:
        """Parse the manifest: bounded in size and depth, every field of the type the
        format gives it, unknown keys refused; any mistake is one BundleError naming
        the field (``airgap-bundle.json.files[3].size: expected ...``). ``data`` may be
        the bytes already decoded (verify drops the bytes before the parse)."""
        try:
            parsed = jsonsafe.loads(
                data, MANIFEST_NAME, max_bytes=MAX_BUNDLE_MANIFEST_BYTES, convert=_entry_converter()
            )
        except JSONShapeError as exc:
            raise BundleError(f"malformed bundle manifest: {exc}") from None
        return cls._from_document(parsed)

    @classmethod
    def from_chunks(cls, read: Callable[[], Iterator[bytes]], sha256: str) -> BundleManifest:
        """Parse the manifest whose bytes ``read()`` yields, which must have this sha256
        (the bytes the signature was checked on): what ``from_bytes`` gives them, or its
        BundleError, or one saying they changed since. Verify drops the bytes once
        judged and reads them again here, a piece at a time: neither they nor their
        text are held beside the records they become (~2 MiB each for 2,000 images).
        Anything but a plain manifest is read again whole, for ``from_bytes``."""
        hasher = hashlib.sha256()

        def hashed() -> Iterator[bytes]:
            for chunk in read():
                hasher.update(chunk)
                yield chunk

        parsed = jsonsafe.loads_streamed(
            hashed(), max_bytes=MAX_BUNDLE_MANIFEST_BYTES, convert=_entry_converter()
        )
        if parsed is not None and hasher.hexdigest() == sha256:
            return cls._from_document(parsed)
        del parsed
        data = b"".join(read())
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise BundleError(
                f"{MANIFEST_NAME} changed after it was verified (sha256 {actual}, "
                f"verified {sha256})"
            )
        return cls.from_bytes(data)

    @classmethod
    def _from_document(cls, parsed: Any) -> BundleManifest:
        try:
            document = Fields(_restore_entries(parsed), MANIFEST_NAME)
            version = document.raw("formatVersion")
            if version != FORMAT_VERSION or isinstance(version, bool):
                raise BundleError(
                    f"unsupported bundle format version {shown(version)} (airgap {FORMAT_VERSION})"
                )
            return cls(
                created=document.text("created"),
                tool_version=document.obj("tool").text("version"),
                providers=[_record(ProviderRecord, p) for p in document.objects("providers")],
                images=_records(ImageRecord, document, "images"),
                files=_records(FileRecord, document, "files"),
                contents=[_record(ContentRecord, c) for c in document.objects("contents")],
                artifacts=_records(ArtifactRecord, document, "artifacts"),
                trust=[_record(TrustRecord, t) for t in document.objects("trust")],
                delta=_optional_delta(document.optional_obj("delta")),
            )
        except JSONShapeError as exc:
            raise BundleError(f"malformed bundle manifest: {exc}") from None

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def needs(self) -> list[NeedRecord]:
        """What a delta bundle relies on without carrying (empty for a whole bundle)."""
        return self.delta.needs if self.delta is not None else []


def _content_json(content: ContentRecord) -> dict[str, Any]:
    document = _camel(asdict(content))
    if not content.warnings:  # a record without warnings reads and signs as before
        document.pop("warnings", None)
    if not content.provenance:  # likewise a record without a .prov
        document.pop("provenance", None)
    return document


def _provider_json(provider: ProviderRecord) -> dict[str, Any]:
    document = _camel(asdict(provider))
    image = document.get("image")
    if image is not None and not image["profileFiles"]:  # read as before profile files
        image.pop("profileFiles")
    return document


def _image_json(image: ImageRecord) -> dict[str, Any]:
    document = _camel(asdict(image))
    if not image.needs:  # only delta bundles have the key: whole bundles read as before
        document.pop("needs", None)
    return document


def _optional_delta(item: Fields | None) -> DeltaRecord | None:
    return DeltaRecord.from_fields(item) if item is not None else None
