"""The bundle manifest: what a bundle holds, in one signed JSON document.

A bundle is an uncompressed tar. Its first member is ``airgap-bundle.json`` (this
manifest), its second ``airgap-bundle.json.sig`` (a detached Ed25519 signature over the
manifest's exact bytes); every other member is listed in ``files`` with its sha256 and
size, so one signature covers everything. Layers are already compressed, and an
uncompressed tar can be read member by member with seeks, which is what lets import
push straight from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any, TypeVar

from airgap import jsonsafe
from airgap.errors import BundleError
from airgap.jsonsafe import Fields, JSONShapeError
from airgap.limits import MAX_BUNDLE_MANIFEST_BYTES
from airgap.names import digest_problem

FORMAT_VERSION = 1
MANIFEST_NAME = "airgap-bundle.json"
SIGNATURE_NAME = "airgap-bundle.json.sig"
IMAGES_DIR = "images"
PROVIDERS_DIR = "providers"
TRUST_DIR = "trust"


@dataclass(frozen=True, slots=True)  # one per member or image: no __dict__ each
class FileRecord:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ProviderImageRecord:
    """Where an image-based provider came from: the image its manifests were read from
    (``/capi-operator-manifests/PROFILE/``, by digest, carried in the bundle), the
    profiles read, and what their metadata.yaml said (the first profile's)."""

    reference: str  # registry/repository@sha256:...
    profiles: list[str]
    name: str  # metadata.yaml name, e.g. cluster-api-provider-aws
    install_order: int
    attribute_type: str | None = None
    attribute_version: str | None = None
    ocp_platform: str | None = None
    self_image_ref: str | None = None


@dataclass(frozen=True)
class ProviderRecord:
    name: str
    type: str  # the operator kind: CoreProvider, InfrastructureProvider, ...
    version: str
    contract: str
    label: str  # clusterctl local-repository label: cluster-api, infrastructure-docker, ...
    source: str
    metadata: str  # bundle path of metadata.yaml
    components: str  # bundle path of the components file
    images: list[str] = field(default_factory=list)
    image: ProviderImageRecord | None = None  # set when read from a provider image


@dataclass(frozen=True)
class ContentRecord:
    """Content carried besides providers: cert-manager, the Cluster API operator, a
    provider version's cluster templates (``airgap.content.kinds`` says which kinds
    exist, where their files live and which files they may hold)."""

    kind: str  # certManager, operator, templates
    name: str  # cert-manager, cluster-api-operator, or the provider's label (templates)
    version: str
    source: str
    files: list[str]  # bundle paths, all in the kind's directory
    images: list[str] = field(default_factory=list)
    # what image discovery could not resolve (a chart template's expression, a
    # template's variable), one line each; absent when there is none
    warnings: list[str] = field(default_factory=list)
    # charts: one line per .prov carried, saying what was checked (its package digest)
    # and what was not (its OpenPGP signature); absent when there is none
    provenance: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ImageRecord:
    reference: str  # the normalised original reference, also its ref.name in the layout
    digest: str  # digest of the top manifest or index stored in the bundle
    media_type: str
    platforms: list[str]
    size: int  # manifests + unique blobs of this image, in bytes
    source_digest: str | None = None  # set when a platform filter rewrote the index
    kept_whole: str | None = None  # why a platform filter left it whole ("pinned by digest")
    # delta bundles: digests of this image's manifests and blobs the bundle relies on
    # without carrying them (each one listed in ``DeltaRecord.needs``); absent otherwise
    needs: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NeedRecord:
    """A manifest or blob a delta bundle relies on without carrying it: import finds it
    in the target registry (where the base bundle, or the have-list, says it is)."""

    digest: str
    size: int
    media_type: str  # a manifest media type (asked for as a manifest) or the blob's


@dataclass(frozen=True)
class DeltaRecord:
    """What a delta bundle relies on: the base it was made against (the sha256 of the
    base bundle's signed manifest bytes) and/or the have-list it was made from (the
    sha256 of that file), and every digest it does not carry. A bundle made against
    neither is not a delta and has no such record."""

    needs: list[NeedRecord]
    base: str | None = None
    have_list: str | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.base:
            document["base"] = self.base
        if self.have_list:
            document["haveList"] = self.have_list
        document["needs"] = [_camel(asdict(need)) for need in self.needs]
        return document

    @classmethod
    def from_fields(cls, item: Fields) -> DeltaRecord:
        for key in item.names():
            if key not in ("base", "haveList", "needs"):
                raise JSONShapeError(f"{item.where}: unknown key {key[:60]!r}")
        return cls(
            needs=[_record(NeedRecord, need) for need in item.objects("needs")],
            base=item.optional_text("base"),
            have_list=item.optional_text("haveList"),
        )


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """A signature, attestation or SBOM attached upstream to one of an image's
    manifests, carried byte for byte: its manifest (``digest``) and every blob it names
    are blobs of the layout. ``airgap.supplychain.formats`` names kinds and ways."""

    image: str  # the reference of the image record it belongs to
    subject: str  # the manifest it is attached to: the image's, a child's, or its source index
    kind: str  # signature, attestation, sbom, other
    via: str  # tag (cosign's sha256-HEX.sig), referrers (a manifest with subject), index
    digest: str  # the artifact's manifest
    media_type: str
    size: int
    tag: str | None = None  # the tag it was found under (via tag)
    artifact_type: str | None = None


@dataclass(frozen=True)
class TrustRecord:
    """Trust material collect checked signatures with, carried so verify can check
    them again offline: ``fulcioRoots`` (PEM certificates) or ``rekorKeys`` (PEM
    public keys), one file each under ``trust/``."""

    kind: str
    path: str


@dataclass(frozen=True)
class BundleManifest:
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
            ("providers", (_camel(asdict(p)) for p in self.providers)),
            ("images", (_image_json(i) for i in self.images)),
            ("files", (asdict(f) for f in self.files)),
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
            document = Fields(
                jsonsafe.loads(data, MANIFEST_NAME, max_bytes=MAX_BUNDLE_MANIFEST_BYTES),
                MANIFEST_NAME,
            )
            version = document.raw("formatVersion")
            if version != FORMAT_VERSION or isinstance(version, bool):
                raise BundleError(
                    f"unsupported bundle format version {version!r} (airgap {FORMAT_VERSION})"
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


def _image_json(image: ImageRecord) -> dict[str, Any]:
    document = _camel(asdict(image))
    if not image.needs:  # only delta bundles have the key: whole bundles read as before
        document.pop("needs", None)
    return document


def _optional_delta(item: Fields | None) -> DeltaRecord | None:
    return DeltaRecord.from_fields(item) if item is not None else None


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        head, *rest = key.split("_")
        out[head + "".join(part.title() for part in rest)] = (
            _camel(value) if isinstance(value, dict) else value  # a nested record
        )
    return out


def _camel_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_Record = TypeVar(
    "_Record",
    FileRecord,
    ProviderRecord,
    ImageRecord,
    ContentRecord,
    ProviderImageRecord,
    NeedRecord,
    ArtifactRecord,
    TrustRecord,
)
# How each field type a record declares is read (annotations are strings here).
_READERS: dict[str, Callable[[Fields, str], Any]] = {
    "str": Fields.text,
    "str | None": Fields.optional_text,
    "int": Fields.integer,
    "list[str]": Fields.texts,
    "ProviderImageRecord | None": lambda item, key: _record(ProviderImageRecord, item.obj(key)),
}


def _record(cls: type[_Record], item: Fields) -> _Record:
    """A record from its JSON object: each field read as the type it declares, a
    missing required field or an unknown key refused."""
    fields = {_camel_key(f.name): f for f in dataclasses.fields(cls)}
    for key in item.names():
        if key not in fields:
            raise JSONShapeError(f"{item.where}: unknown key {key[:60]!r}")
    values: dict[str, Any] = {}
    for key, spec in fields.items():
        optional = spec.default is not MISSING or spec.default_factory is not MISSING
        if optional and not item.has(key):
            continue
        values[spec.name] = _READERS[str(spec.type)](item, key)
    return cls(**values)


def _records(cls: type[_Record], document: Fields, key: str) -> list[_Record]:
    """The records of a list that grows with the images (files, images, artifacts),
    each entry's parsed JSON dropped once its record is made: a 2,000-image manifest's
    6,000 file objects need not all be alive beside their records."""
    entries = document.items(key)
    where = document.path(key)
    records = []
    shared: dict[object, object] = {}
    for number, entry in enumerate(entries):
        if isinstance(entry, dict):
            _share_values(entry, shared)
        records.append(_record(cls, Fields(entry, f"{where}[{number}]")))
        entries[number] = None
    return records


# values that repeat from entry to entry (media types, platforms, kinds, sizes)
_SHARED_KEYS = ("mediaType", "kind", "via", "size")


def _share_values(entry: dict[str, Any], shared: dict[object, object]) -> None:
    """One object for each repeated value of the entries of a list: the parser makes a
    new string (and int) for every occurrence, ~250 bytes an image kept as long as the
    manifest is. Only equal values of the same type are shared (``True == 1``)."""
    for key in _SHARED_KEYS:
        value = entry.get(key)
        if type(value) in (str, int):
            entry[key] = shared.setdefault((type(value), value), value)
    platforms = entry.get("platforms")
    if isinstance(platforms, list):
        for number, value in enumerate(platforms):
            if type(value) is str:
                platforms[number] = shared.setdefault((str, value), value)


def blob_member(digest: str) -> str:
    """The tar member name of a blob in the bundle's OCI layout; only ever made from a
    well-formed digest (``sha256:../../x`` would be a path)."""
    problem = digest_problem(digest)
    if problem:
        raise BundleError(f"no bundle member for {problem}")
    algorithm, _, hexpart = digest.partition(":")
    return f"{IMAGES_DIR}/blobs/{algorithm}/{hexpart}"
