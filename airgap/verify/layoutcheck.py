"""Checks over what the verified members say: the OCI layout and the providers.

These run after the scan, reading only members whose sha256 already matched the signed
manifest, so anything they parse is exactly what was signed. ``present`` maps each such
member to its size; a member the manifest lists but that is not present failed the scan.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from airgap.bundle.format import (
    IMAGES_DIR,
    PROVIDERS_DIR,
    FileIndex,
    ImageRecord,
    ProviderRecord,
    blob_member,
)
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError, InputError
from airgap.core.limits import MAX_MANIFEST_BYTES, MAX_METADATA_BYTES
from airgap.core.names import digest_problem, shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields
from airgap.oci.manifest import (
    INDEX_TYPES,
    OCI_INDEX,
    REF_NAME_ANNOTATION,
    Descriptor,
    Manifest,
    digest_hex,
)
from airgap.oci.reference import parse_reference
from airgap.providers.contract import ContractMember, contract_problems
from airgap.providers.metadata import parse_metadata
from airgap.providers.types import ProviderType
from airgap.verify.findings import Failure

INDEX_MEMBER = f"{IMAGES_DIR}/index.json"
LAYOUT_MEMBER = f"{IMAGES_DIR}/oci-layout"
ReadMember = Callable[[str], bytes]
ReadChunks = Callable[[str], Iterator[bytes]]
_MALFORMED = (AirgapError, ValueError, KeyError, TypeError, AttributeError)


@dataclass
class _Layout:
    """What the layout walk needs, and the manifests already parsed (by digest)."""

    manifest: BundleManifest
    read: ReadMember
    present: Mapping[str, int]
    # digest -> an index, or why a manifest cannot be had; an image manifest that parsed
    # is not kept (one per image of the bundle): one reached again is read again
    parsed: dict[str, Manifest | str] = field(default_factory=dict)
    needs: dict[str, int] = field(default_factory=dict)  # a delta's needs: digest -> size
    chunks: ReadChunks | None = None
    _listed: set[str] | None = None

    def listed(self, member: str) -> bool:
        """Whether the manifest lists a member (asked only to explain a failure)."""
        if self._listed is None:
            self._listed = {f.path for f in self.manifest.files}
        return member in self._listed

    def absent(self, member: str) -> str:
        """Why a member is not among the verified ones."""
        if self.listed(member):
            return "is missing or damaged"
        return "is not in the bundle"


def check_layout(
    manifest: BundleManifest,
    read: ReadMember,
    present: Mapping[str, int],
    chunks: ReadChunks | None = None,
) -> list[Failure]:
    """The layout is an OCI layout; every listed image is named in index.json with the
    manifest's digest; every manifest and index reachable from index.json parses and
    every blob it references is present with the size its descriptor says. With
    ``chunks`` (a member's bytes in pieces, checked at their end), index.json is read
    a piece at a time while it is what collect writes."""
    layout = _Layout(manifest, read, present)
    layout.chunks = chunks
    layout.needs = {need.digest: need.size for need in manifest.needs}
    failures = _check_oci_layout(layout)
    entries = _index_entries(layout)
    if isinstance(entries, Failure):
        return [*failures, entries]
    named: dict[str, _Entry] = {}
    for number, entry in enumerate(entries, 1):
        name = entry[0]
        if not name:
            failures.append(Failure("layout", INDEX_MEMBER, f"entry {number} has no ref.name"))
            continue
        if name in named:
            failures.append(Failure("layout", INDEX_MEMBER, f"names {name} more than once"))
            continue
        named[name] = entry
    del entries
    images = {image.reference: image for image in manifest.images}
    for image in manifest.images:
        failures.extend(_check_image(image, _descriptor(named.get(image.reference)), layout))
    for name, entry in named.items():
        if name not in images:
            failures.append(
                Failure("layout", INDEX_MEMBER, f"names {name}, which the manifest does not list")
            )
            failures.extend(_walk(name, Descriptor(*entry[1:]), layout, set()))
    return failures


# An index.json entry as the layout check uses it: (its ref.name or None, media type,
# digest, size). One per image, so a tuple (texts shared with the image records where
# equal), not a Descriptor with its annotations.
_Entry = tuple[str | None, str, str, int]


def _descriptor(entry: _Entry | None) -> Descriptor | None:
    return None if entry is None else Descriptor(*entry[1:])


def _check_oci_layout(layout: _Layout) -> list[Failure]:
    if LAYOUT_MEMBER not in layout.present:
        if not layout.manifest.images:
            return []
        return [Failure("layout", LAYOUT_MEMBER, layout.absent(LAYOUT_MEMBER))]
    if layout.present[LAYOUT_MEMBER] > MAX_MANIFEST_BYTES:
        return [Failure("layout", LAYOUT_MEMBER, "is implausibly large")]
    try:
        document = jsonsafe.loads(
            layout.read(LAYOUT_MEMBER), LAYOUT_MEMBER, max_bytes=MAX_MANIFEST_BYTES
        )
        Fields(document, LAYOUT_MEMBER).text("imageLayoutVersion")
    except _MALFORMED as exc:
        return [Failure("layout", LAYOUT_MEMBER, f"does not parse: {exc}")]
    return []


def _index_entries(layout: _Layout) -> list[_Entry] | Failure:
    if INDEX_MEMBER not in layout.present:
        if not layout.manifest.images and not layout.listed(INDEX_MEMBER):
            return []
        return Failure("layout", INDEX_MEMBER, layout.absent(INDEX_MEMBER))
    if layout.present[INDEX_MEMBER] > MAX_MANIFEST_BYTES:
        return Failure("layout", INDEX_MEMBER, "is implausibly large")
    try:
        if layout.chunks is not None:
            quick = _quick_entries(layout.chunks(INDEX_MEMBER), layout.manifest)
            if quick is not None:
                return quick
            data = layout.read(INDEX_MEMBER)
        else:
            data = layout.read(INDEX_MEMBER)
            quick = _quick_entries(_pieces(data), layout.manifest)
            if quick is not None:
                return quick
        # read for its entries, as the compact reading above reads it: the same findings
        index = Manifest.from_bytes(data, shape=False)
        if not index.is_index:
            raise AirgapError(f"it is a {index.media_type}, not an image index")
        return [
            (entry.annotations.get(REF_NAME_ANNOTATION), entry.media_type, entry.digest, entry.size)
            for entry in index.children()
        ]
    except _MALFORMED as exc:
        return Failure("layout", INDEX_MEMBER, f"does not parse: {exc}")


_ENTRY_KEYS = ("mediaType", "digest", "size", "annotations")


def _pieces(data: bytes) -> Iterator[bytes]:
    step = jsonsafe.STREAM_CHUNK
    return (data[i : i + step] for i in range(0, len(data), step))


def _quick_entries(chunks: Iterator[bytes], manifest: BundleManifest) -> list[_Entry] | None:
    """index.json's entries when it is exactly what collect writes (an index whose
    entries have these four keys, well formed), each made a compact ``_Entry`` as it
    is decoded: a 2,000-image index never exists as 2,000 dicts with their
    annotations. None for anything else, which the full parse then reads and judges
    (with its messages)."""
    images = manifest.images
    at = [0]  # the image an entry is expected to be (collect writes them in order)

    def entry(pairs: list[tuple[str, Any]]) -> _Entry | None:
        if len(pairs) != 4:
            return None
        (k1, media_type), (k2, digest), (k3, size), (k4, annotations) = pairs
        if (k1, k2, k3, k4) != _ENTRY_KEYS or type(media_type) is not str:
            return None
        if type(digest) is not str or digest_problem(digest) or type(size) is not int:
            return None
        if size < 0 or type(annotations) is not dict:
            return None
        if not all(type(value) is str for value in annotations.values()):
            return None
        name = annotations.get(REF_NAME_ANNOTATION)
        image = _image_at(images, at, digest)
        if image is not None:  # its image record's texts, not copies of them
            name = image.reference if name == image.reference else name
            media_type = image.media_type if media_type == image.media_type else media_type
            digest = image.digest
        return (name, media_type, digest, size)

    parsed = jsonsafe.loads_streamed(chunks, max_bytes=MAX_MANIFEST_BYTES, convert=entry)
    if not isinstance(parsed, dict):
        return None
    others = [value for key, value in parsed.items() if key != "manifests"]
    if _holds_tuple(others):
        return None  # an entry's shape elsewhere: as decoded, its depth counts in full
    declared = parsed.get("mediaType")
    kind = declared if isinstance(declared, str) and declared else None
    if kind is None and "manifests" in parsed:
        kind = OCI_INDEX
    manifests = parsed.get("manifests")
    if kind is None or kind.split(";")[0].strip() not in INDEX_TYPES:
        return None
    if not isinstance(manifests, list) or not all(type(e) is tuple for e in manifests):
        return None
    return manifests


def _image_at(images: list[ImageRecord], at: list[int], digest: str) -> ImageRecord | None:
    """The image record at ``at`` (or the one before: an entry decoded again) if it has
    this digest; ``at`` moves past it. Only to share texts: None costs memory alone."""
    number = at[0]
    for candidate in (number, number - 1):
        if 0 <= candidate < len(images) and images[candidate].digest == digest:
            at[0] = candidate + 1
            return images[candidate]
    at[0] = number + 1
    return None


def _holds_tuple(values: list[Any]) -> bool:
    """Whether anything ``_quick_entries`` converted is among these parsed values."""
    stack = list(values)
    while stack:
        item = stack.pop()
        if type(item) is tuple:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_image(image: ImageRecord, entry: Descriptor | None, layout: _Layout) -> list[Failure]:
    if entry is None:
        return [Failure("image", image.reference, f"is not named in {INDEX_MEMBER}")]
    if entry.digest != image.digest:
        return [
            Failure(
                "image",
                image.reference,
                f"{INDEX_MEMBER} names {entry.digest}, the manifest says {image.digest}",
            )
        ]
    pinned = _pinned_digest(image.reference)
    if pinned and pinned != image.digest:
        # every reference import writes (components, mapping, digest mirrors) names the
        # pinned digest; a filtered index in its place would resolve nowhere
        return [
            Failure(
                "image",
                image.reference,
                f"is pinned by digest but the bundle holds {image.digest} (a filtered index?); "
                "collect it again to keep the pinned index whole",
            )
        ]
    failures = _walk(image.reference, entry, layout, set(), frozenset(image.needs))
    if not failures and image.media_type in INDEX_TYPES:
        failures.extend(_check_platforms(image, layout))
    return failures


def _pinned_digest(reference: str) -> str | None:
    """The digest a reference is pinned by (``…@sha256:…``), if any."""
    try:
        return parse_reference(reference).digest
    except InputError:
        return None  # an unparsable reference is not this check's finding


def _check_platforms(image: ImageRecord, layout: _Layout) -> list[Failure]:
    """The platforms the manifest claims (policy relies on them) are in the index."""
    top = layout.parsed.get(image.digest)
    if not isinstance(top, Manifest):
        return []
    have = {child.platform for child in top.children() if child.platform}
    claimed = [p for p in image.platforms if p not in have]
    if not claimed:
        return []
    return [
        Failure(
            "image",
            image.reference,
            f"the manifest claims platforms {', '.join(claimed)} its index does not hold",
        )
    ]


def _parse(descriptor: Descriptor, layout: _Layout) -> Manifest | str:
    """The manifest a descriptor points at, or why it cannot be had; parsed once."""
    problem = _blob_problem(descriptor, layout, "manifest")
    if problem:
        return problem
    member = blob_member(descriptor.digest)
    size = descriptor.size  # _blob_problem checked the member has exactly this size
    if size > MAX_MANIFEST_BYTES:
        return f"manifest {descriptor.digest} is implausibly large ({size} bytes)"
    known = layout.parsed.get(descriptor.digest)
    if known is not None:
        return known
    outcome: Manifest | str
    try:
        parsed = Manifest.from_bytes(layout.read(member), descriptor.media_type or None)
        parsed.children()  # both raise on malformed descriptors
        parsed.blobs()
        outcome = parsed
    except _MALFORMED as exc:
        outcome = f"manifest {descriptor.digest} does not parse: {exc}"
    if isinstance(outcome, str) or outcome.is_index:
        layout.parsed[descriptor.digest] = outcome
    return outcome


def _walk(
    reference: str,
    descriptor: Descriptor,
    layout: _Layout,
    visited: set[str],
    relied: frozenset[str] = frozenset(),
) -> list[Failure]:
    """Parse a manifest and check that every blob it needs is present and verified,
    or (a delta) one of the image's needs, which the bundle does not carry."""
    if descriptor.digest in visited:
        return []
    visited.add(descriptor.digest)
    if descriptor.digest in relied:
        return _relied_problem(reference, descriptor, layout)
    parsed = _parse(descriptor, layout)
    if isinstance(parsed, str):
        return [Failure("image", reference, parsed)]
    failures: list[Failure] = []
    for child in parsed.children():
        failures.extend(_walk(reference, child, layout, visited, relied))
    for blob in parsed.blobs():
        if blob.digest in visited:
            continue
        visited.add(blob.digest)
        if blob.digest in relied:
            failures.extend(_relied_problem(reference, blob, layout))
            continue
        problem = _blob_problem(blob, layout)
        if problem:
            failures.append(Failure("image", reference, problem))
    return failures


def _relied_problem(reference: str, descriptor: Descriptor, layout: _Layout) -> list[Failure]:
    """A piece a delta relies on: listed in its needs with the descriptor's size (the
    delta check refuses one that is carried as well)."""
    size = layout.needs.get(descriptor.digest)
    if size is None or size == descriptor.size:
        return []  # not in delta.needs: check_delta names it
    return [
        Failure(
            "image",
            reference,
            f"relies on {descriptor.digest} of {descriptor.size} bytes, delta.needs says {size}",
        )
    ]


def _blob_problem(blob: Descriptor, layout: _Layout, kind: str = "blob") -> str | None:
    """Why the member a descriptor names is unusable (bad digest, absent, wrong size)."""
    try:
        member = blob_member(f"sha256:{digest_hex(blob.digest)}")
    except AirgapError as exc:
        return str(exc)
    size = layout.present.get(member)
    if size is None:
        return f"{kind} {blob.digest} {layout.absent(member)}"
    if size != blob.size:
        return f"{kind} {blob.digest} is {size} bytes, its descriptor says {blob.size}"
    return None


def check_providers(
    manifest: BundleManifest, read: ReadMember, present: Mapping[str, int]
) -> list[Failure]:
    """Each provider's files are where clusterctl looks for them, its metadata declares
    a contract for its version, and every provider is compatible with the core
    provider's contract (``airgap.providers.contract``)."""
    failures: list[Failure] = []
    listed = {image.reference for image in manifest.images}
    files = FileIndex(manifest.files)  # no path text per blob
    for provider in manifest.providers:
        failures.extend(_check_provider(provider, read, present, files))
        failures.extend(_check_provider_image(provider))
        failures.extend(_check_profile_files(provider, read, present))
        for image in provider.images:
            if image not in listed:
                failures.append(
                    Failure(
                        "provider",
                        _name(provider),
                        f"needs image {image}, which the bundle does not hold",
                    )
                )
    failures.extend(_check_contracts(manifest.providers))
    return failures


# a profile name as the ClusterAPI resource (operator.openshift.io/v1alpha1) accepts it
_PROFILE_RE = re.compile(r"[a-zA-Z0-9_-]{1,255}")


def _name(provider: ProviderRecord) -> str:
    return f"{provider.type}/{provider.name} {provider.version}"


def _check_provider_image(provider: ProviderRecord) -> list[Failure]:
    """An image-based provider names the image its manifests came from by digest, carries
    it among its images, and names the profiles read as the ClusterAPI resource allows."""
    image = provider.image
    if image is None:
        return []
    problems: list[str] = []
    try:
        pinned = parse_reference(image.reference).digest is not None
    except InputError:
        pinned = False
    if not pinned:
        problems.append(f"its source image {image.reference[:200]!r} is not a digest reference")
    elif image.reference not in provider.images:
        problems.append(f"its source image {image.reference} is not among its images")
    if not image.profiles or len(set(image.profiles)) != len(image.profiles):
        problems.append("its image profiles are empty or repeated")
    problems += [
        f"invalid image profile {name[:60]!r}"
        for name in image.profiles
        if not _PROFILE_RE.fullmatch(name)
    ]
    return [Failure("provider", _name(provider), problem) for problem in problems]


PROFILES_DIR = "profiles"  # as providers.imagesource writes them
PROFILE_FILES = ("metadata.yaml", "manifests.yaml")


def _check_profile_files(
    provider: ProviderRecord, read: ReadMember, present: Mapping[str, int]
) -> list[Failure]:
    """Each profile an image-based provider carries is there apart, where collect
    writes it (``profiles/NAME/metadata.yaml`` and ``manifests.yaml`` beside the
    components), its metadata parses, and the components file is one of them. A bundle
    written before profiles were carried apart has neither key: nothing to check."""
    image = provider.image
    if image is None or (not image.profile_files and image.clusterctl_profile is None):
        return []
    directory = f"{PROVIDERS_DIR}/{provider.label}/{provider.version}/{PROFILES_DIR}"
    expected = [f"{directory}/{name}/{file}" for name in image.profiles for file in PROFILE_FILES]
    if image.profile_files != expected:
        return [Failure("provider", _name(provider), f"its profile files are not {expected}")]
    if image.clusterctl_profile not in image.profiles:
        return [
            Failure(
                "provider",
                _name(provider),
                f"its clusterctl profile {shown(image.clusterctl_profile)} is not carried",
            )
        ]
    from airgap.providers.imagesource import parse_profile_metadata

    for path in expected:
        if path not in present:
            return [Failure("provider", _name(provider), f"{path} is not in the bundle")]
        if path.endswith(PROFILE_FILES[0]):
            if present[path] > MAX_METADATA_BYTES:
                return [Failure("provider", _name(provider), f"{path} is implausibly large")]
            try:
                parse_profile_metadata(read(path).decode(), path)
            except (InputError, UnicodeDecodeError) as exc:
                return [Failure("provider", _name(provider), f"metadata does not parse: {exc}")]
    return []


def _check_provider(
    provider: ProviderRecord, read: ReadMember, present: Mapping[str, int], files: Container[str]
) -> list[Failure]:
    directory = f"{PROVIDERS_DIR}/{provider.label}/{provider.version}"
    for member in (provider.metadata, provider.components):
        if posixpath.dirname(member) != directory:
            return [Failure("provider", _name(provider), f"{member} is not in {directory}/")]
        if member not in present:
            why = "is missing or damaged" if member in files else "is not in the bundle"
            return [Failure("provider", _name(provider), f"{member} {why}")]
    if present[provider.metadata] > MAX_METADATA_BYTES:
        return [Failure("provider", _name(provider), f"{provider.metadata} is implausibly large")]
    try:
        metadata = parse_metadata(read(provider.metadata).decode(), provider.metadata)
        declared = metadata.contract_for(provider.version)
    except (InputError, UnicodeDecodeError) as exc:
        return [Failure("provider", _name(provider), f"metadata does not parse: {exc}")]
    if declared is None:
        return [
            Failure(
                "provider",
                _name(provider),
                f"{provider.metadata} declares no contract for {provider.version} "
                f"(release series: {metadata.describe_series() or 'none'})",
            )
        ]
    if declared != provider.contract:
        return [
            Failure(
                "provider",
                _name(provider),
                f"{provider.metadata} says contract {declared}, "
                f"the manifest says {provider.contract}",
            )
        ]
    return []


def _check_contracts(providers: list[ProviderRecord]) -> list[Failure]:
    """clusterctl's rule, from the one table collect also applies: every provider is
    compatible with the core provider's contract (a v1beta2 core accepts v1beta1)."""
    members = [
        ContractMember(_name(p), p.contract, p.type == ProviderType.CORE.kind) for p in providers
    ]
    return [
        Failure("provider", problem.subject, problem.message)
        for problem in contract_problems(members)
    ]
