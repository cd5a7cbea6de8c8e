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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any, TypeVar

from airgap.core.errors import BundleError
from airgap.core.limits import MAX_JSON_DEPTH
from airgap.core.names import digest_problem
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError

FORMAT_VERSION = 1
MANIFEST_NAME = "airgap-bundle.json"
SIGNATURE_NAME = "airgap-bundle.json.sig"
IMAGES_DIR = "images"
PROVIDERS_DIR = "providers"
TRUST_DIR = "trust"
INSTALLER_DIR = "installer"  # collect --with-installer: airgap's offline installer


BLOB_PREFIX = f"{IMAGES_DIR}/blobs/sha256/"
_PREFIX_LEN = len(BLOB_PREFIX)


class FileRecord:
    """One member the manifest lists: its path, sha256 (64 hex digits) and size.

    Immutable, compared and hashed by those three values, like the frozen dataclass it
    was. A bundle holds one per blob (6,000 for 2,000 images), so a blob's record keeps
    its digest as 32 raw bytes and derives both texts from them: ``path`` is
    ``images/blobs/sha256/<sha256>`` whenever that is what the manifest says. Any other
    record (a provider file, a hostile entry whose name and digest differ, a digest
    not in lowercase hex) keeps the texts exactly as given."""

    __slots__ = ("_digest", "_path", "size")
    _digest: bytes | str  # 32 raw bytes, or the text as given
    _path: str | None  # None: BLOB_PREFIX + the digest's hex
    size: int

    def __init__(self, path: str, sha256: str, size: int) -> None:
        raw = _raw_digest(sha256)
        derived = raw is not None and path.startswith(BLOB_PREFIX) and path[_PREFIX_LEN:] == sha256
        object.__setattr__(self, "_digest", sha256 if raw is None else raw)
        object.__setattr__(self, "_path", None if derived else path)
        object.__setattr__(self, "size", size)

    @property
    def path(self) -> str:
        path = self._path
        if path is None:
            return BLOB_PREFIX + self._digest.hex()  # type: ignore[union-attr]
        return path

    @property
    def sha256(self) -> str:
        digest = self._digest
        return digest if isinstance(digest, str) else digest.hex()

    @property
    def blob_named(self) -> bool:
        """Whether its path is ``images/blobs/sha256/`` and its own sha256 (which is
        then 64 lowercase hex digits)."""
        return self._path is None

    @property
    def key(self) -> bytes | str:
        """Its path as ``member_key`` gives it, without making the path's text."""
        return self._digest if self._path is None else member_key(self._path)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}

    def _values(self) -> tuple[str, str, int]:
        return self.path, self.sha256, self.size

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not FileRecord:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"FileRecord(path={self.path!r}, sha256={self.sha256!r}, size={self.size!r})"

    def __reduce__(self) -> tuple[type[FileRecord], tuple[str, str, int]]:
        return FileRecord, self._values()


class FileIndex(Mapping[str, FileRecord]):
    """The records of a manifest by path, as ``{f.path: f for f in files}`` gives them
    (a path listed twice: its last record), without an entry per blob of the bundle:
    only the other records are indexed (provider and content files, the layout's
    own); a blob's name, looked up only to explain a finding, is searched for."""

    __slots__ = ("_files", "_named")

    def __init__(self, files: Sequence[FileRecord]) -> None:
        self._files = files
        self._named: dict[bytes | str, FileRecord] = {r.key: r for r in files if not r.blob_named}

    def __getitem__(self, name: str) -> FileRecord:
        key = member_key(name)
        if type(key) is bytes:  # a blob's name: the last record listed under it
            for record in reversed(self._files):
                if record.key == key:
                    return record
        elif key in self._named:
            return self._named[key]
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(record.path for record in self._files))

    def __len__(self) -> int:
        return len({record.key for record in self._files})


def _raw_digest(sha256: str) -> bytes | None:
    """The 32 bytes a sha256 in lowercase hex stands for; None for any other text
    (kept as it is: ``bytes.fromhex`` also takes capitals and spaces)."""
    if len(sha256) != 64:
        return None
    try:
        raw = bytes.fromhex(sha256)
    except ValueError:
        return None
    return raw if raw.hex() == sha256 else None


def member_key(name: str) -> bytes | str:
    """A member name as a compact key: a blob's name (``images/blobs/sha256/`` and 64
    lowercase hex digits) as its digest's 32 bytes, any other name as itself. Two names
    have the same key exactly when they are the same name."""
    if len(name) == 84 and name.startswith(BLOB_PREFIX):
        raw = _raw_digest(name[_PREFIX_LEN:])
        if raw is not None:
            return raw
    return name


@dataclass(frozen=True)
class ProviderImageRecord:
    """Where an image-based provider came from: the image its manifests were read from
    (``/capi-operator-manifests/PROFILE/``, by digest, carried in the bundle), the
    profiles read, and what their metadata.yaml said (the clusterctl profile's).

    Each profile carried apart (``profileFiles``: ``profiles/NAME/metadata.yaml`` and
    ``manifests.yaml`` beside the components, per profile, in ``profiles`` order) and
    the one the components file is (``clusterctlProfile``): both absent in a bundle
    written before profiles were carried apart, whose components file is every
    profile read, concatenated."""

    reference: str  # registry/repository@sha256:...
    profiles: list[str]
    name: str  # metadata.yaml name, e.g. cluster-api-provider-aws
    install_order: int
    attribute_type: str | None = None
    attribute_version: str | None = None
    ocp_platform: str | None = None
    self_image_ref: str | None = None
    clusterctl_profile: str | None = None
    profile_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProviderRecord:
    """One provider release in the bundle: the operator kind and clusterctl label import
    emits it under, and where its files are."""

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
    # what image discovery could not resolve (a cluster template's variable), one line
    # each; absent when there is none
    warnings: list[str] = field(default_factory=list)
    # charts: one line per .prov carried, saying what was checked (its package digest)
    # and what was not (its OpenPGP signature); absent when there is none
    provenance: list[str] = field(default_factory=list)
    # charts: how the chart is rendered (values, release, capabilities) as canonical
    # JSON (content.chartrender.RenderSettings): signed with the rest; absent otherwise
    render: str | None = None


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """One image as the bundle holds it, named in the layout's ``index.json`` by
    ``reference``; the digest is what import pushes and every output pins."""

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


# (JSON key, attribute, type as written, optional) of each field of a record class
_Spec = tuple[str, str, str, bool]
# FileRecord is no dataclass (its storage is compact); its fields read like one's
_FILE_SPECS: tuple[_Spec, ...] = (
    ("path", "path", "str", False),
    ("sha256", "sha256", "str", False),
    ("size", "size", "int", False),
)
_SPECS: dict[type, tuple[_Spec, ...]] = {FileRecord: _FILE_SPECS}


def _specs(cls: type) -> tuple[_Spec, ...]:
    """The fields of a record class, worked out once per class (not per entry)."""
    specs = _SPECS.get(cls)
    if specs is None:
        specs = tuple(
            (
                _camel_key(f.name),
                f.name,
                str(f.type),
                f.default is not MISSING or f.default_factory is not MISSING,
            )
            for f in dataclasses.fields(cls)
        )
        _SPECS[cls] = specs
    return specs


def _record(cls: type[_Record], item: Fields) -> _Record:
    """A record from its JSON object: each field read as the type it declares, a
    missing required field or an unknown key refused."""
    specs = _specs(cls)
    for key in item.names():
        if not any(key == spec[0] for spec in specs):
            raise JSONShapeError(f"{item.where}: unknown key {key[:60]!r}")
    values: dict[str, Any] = {}
    for key, name, kind, optional in specs:
        if optional and not item.has(key):
            continue
        values[name] = _READERS[kind](item, key)
    return cls(**values)


def _entry_converter() -> Callable[[list[tuple[str, Any]]], FileRecord | ImageRecord | None]:
    """What makes a well-formed ``files`` or ``images`` entry, exactly as collect
    writes one (these keys in this order, each of its type), its record as it is
    decoded: a 2,000-image manifest's 8,000 entries never exist as dicts, nor their
    parse beside the records. Any other object stays a dict (a malformed entry is
    read, and refused, as before); a media type or platform is one text for all, and a
    size that repeats one int (``_shared_size``)."""
    shared: dict[str, str] = {}
    sizes: dict[int, int] = {}

    def convert(pairs: list[tuple[str, Any]]) -> FileRecord | ImageRecord | None:
        if len(pairs) == 3:
            return _file_entry(pairs, sizes)
        if len(pairs) == 5:
            return _image_entry(pairs, shared, sizes)
        return None

    return convert


_FILE_KEYS = ("path", "sha256", "size")
_IMAGE_KEYS = ("reference", "digest", "mediaType", "platforms", "size")


_SHARED_SIZES = 256


def _shared_size(size: int, sizes: dict[int, int]) -> int:
    """One int for a size that repeats (images of one shape have configs and manifests
    of the same sizes), among the first ``_SHARED_SIZES`` sizes met: bounded, for a
    bundle whose sizes all differ."""
    known = sizes.get(size)
    if known is not None:
        return known
    if len(sizes) < _SHARED_SIZES:
        sizes[size] = size
    return size


def _file_entry(pairs: list[tuple[str, Any]], sizes: dict[int, int]) -> FileRecord | None:
    (k1, path), (k2, sha256), (k3, size) = pairs
    if (k1, k2, k3) != _FILE_KEYS or type(path) is not str or type(sha256) is not str:
        return None
    if type(size) is not int or size < 0:
        return None
    return FileRecord(path, sha256, _shared_size(size, sizes))


def _image_entry(
    pairs: list[tuple[str, Any]], shared: dict[str, str], sizes: dict[int, int]
) -> ImageRecord | None:
    (k1, reference), (k2, digest), (k3, media_type), (k4, platforms), (k5, size) = pairs
    if (k1, k2, k3, k4, k5) != _IMAGE_KEYS or type(size) is not int or size < 0:
        return None
    if type(reference) is not str or type(digest) is not str or type(media_type) is not str:
        return None
    if type(platforms) is not list or any(type(p) is not str for p in platforms):
        return None
    for number, platform in enumerate(platforms):
        platforms[number] = shared.setdefault(platform, platform)
    media_type = shared.setdefault(media_type, media_type)
    return ImageRecord(reference, digest, media_type, platforms, _shared_size(size, sizes))


def _entry_json(record: FileRecord | ImageRecord) -> dict[str, Any]:
    """The object a converted entry was decoded from: the same keys, order, values."""
    if isinstance(record, FileRecord):
        return record.to_json()
    values = (record.reference, record.digest, record.media_type, record.platforms, record.size)
    return dict(zip(_IMAGE_KEYS, values, strict=True))


def _restore_entries(document: Any) -> Any:
    """The parsed manifest with every record ``_entry_converter`` made outside its
    own top-level list (``files``, ``images``) turned back into the dict it was decoded
    from: only those lists' entries are records, everything else reads, and is refused,
    exactly as the plain parse. A record hid its lists from the depth check: if any is
    restored, the depth is checked again, as the plain parse checked it."""
    if isinstance(document, FileRecord | ImageRecord):
        document = _entry_json(document)
    if not isinstance(document, dict):
        return document
    kept = {
        id(value): kind
        for key, kind in (("files", FileRecord), ("images", ImageRecord))
        if isinstance(value := document.get(key), list)
    }
    restored = False
    stack: list[Any] = [document]
    while stack:
        item = stack.pop()
        pairs = list(item.items() if isinstance(item, dict) else enumerate(item))
        for key, value in pairs:
            if isinstance(value, FileRecord | ImageRecord):
                if kept.get(id(item)) is not type(value):
                    item[key] = value = _entry_json(value)
                    restored = True
                else:
                    continue
            if isinstance(value, dict | list):
                stack.append(value)
    if restored and jsonsafe.depth_exceeds(document, MAX_JSON_DEPTH):
        raise JSONShapeError(f"{MANIFEST_NAME}: nested deeper than {MAX_JSON_DEPTH} levels")
    return document


def _records(cls: type[_Record], document: Fields, key: str) -> list[_Record]:
    """The records of a list that grows with the images (files, images, artifacts),
    each entry's parsed JSON dropped once its record is made: a 2,000-image manifest's
    6,000 file objects need not all be alive beside their records."""
    entries = document.items(key)
    where = document.path(key)
    records: list[_Record] = []
    shared: dict[object, object] = {}
    for number, entry in enumerate(entries):
        if isinstance(entry, cls):  # an entry made its record as it was decoded
            records.append(entry)
            continue
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
