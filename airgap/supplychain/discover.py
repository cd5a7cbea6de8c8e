"""Find what upstream attached to an image's manifests, for collect to carry.

For every subject (the image's manifest or index, each child manifest kept, and the
source index a platform filter rewrote) collect asks both places cosign and the OCI
distribution spec put them:

- cosign's tag schema: ``sha256-HEX.sig``, ``.att`` and ``.sbom`` in the subject's
  repository;
- the referrers API (``GET /v2/NAME/referrers/DIGEST``), or, where the registry has
  none (404), the index under the referrers tag ``sha256-HEX``.

Asking for four tags per subject that are nearly always absent made collecting many
small images many times slower than with ``--no-signatures``. So each
repository's tags are listed once (``GET /v2/NAME/tags/list``) and only the tags it
lists are fetched; a registry found without the referrers API is not asked again. A
listing that fails or comes back empty (a registry without the listing, or one that
hides it) changes nothing: every tag is then asked for directly, as before.

buildx attestation manifests inside an index need no request: they are children the
image already carries, linked to their subject by annotations. Everything is fetched as
exact bytes; signature payloads and Sigstore bundles (a few kilobytes each) are fetched
whole so that collect can verify signatures before it signs the bundle, everything else
is streamed into the bundle with the image's layers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

from airgap.core.errors import AirgapError
from airgap.core.limits import MAX_SIGNATURE_LAYERS, MAX_SIGNATURE_PAYLOAD_BYTES
from airgap.core.parallel import run_parallel
from airgap.oci.manifest import Descriptor, Manifest, attestation_subject
from airgap.registry.client import Registry
from airgap.supplychain.formats import (
    TAG_KINDS,
    Kind,
    Via,
    classify,
    cosign_tag,
    is_signature_layer,
    referrers_tag,
)


@dataclass
class Attached:
    """One artifact attached to a subject: its manifests as exact bytes (the artifact's
    own first, then the children of an artifact index) and the payloads read whole."""

    subject: str
    kind: Kind
    via: Via
    manifests: list[Manifest]
    tag: str | None = None
    artifact_type: str | None = None
    payloads: dict[str, bytes] = field(default_factory=dict)  # digest -> bytes

    @property
    def top(self) -> Manifest:
        return self.manifests[0]

    def blobs(self) -> list[Descriptor]:
        seen: dict[str, Descriptor] = {}
        for manifest in self.manifests:
            for blob in manifest.blobs():
                seen.setdefault(blob.digest, blob)
        return list(seen.values())


@dataclass(frozen=True, slots=True)
class Subject:
    """A manifest to look for attachments of, and where its image lives (slots: collect
    makes one per image, thousands at once)."""

    digest: str
    registry: Registry
    repository: str
    what: str


def index_attestations(manifests: list[Manifest]) -> Iterator[Attached]:
    """buildx attestation manifests among the children of the indexes in ``manifests``
    (already carried as children: this only links them to their subject)."""
    by_digest = {m.digest: m for m in manifests}
    for manifest in manifests:
        if not manifest.is_index:
            continue
        for entry in manifest.json.get("manifests", []):
            subject = attestation_subject(entry)
            child = by_digest.get(str(entry.get("digest")))
            if subject is None or child is None:
                continue
            yield Attached(subject, Kind.ATTESTATION, Via.INDEX, [child])


_ATTACHED_TAG_PREFIX = "sha256-"  # cosign_tag's and referrers_tag's, for any sha256


class _Lookups:
    """What one discovery learns once and reuses: each repository's tag listing and
    which registries have no referrers API. Shared by the discovery threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listing_locks: dict[tuple[int, str], threading.Lock] = {}
        self._listings: dict[tuple[int, str], frozenset[str] | None] = {}
        self._without_api: set[int] = set()

    def may_have(self, subject: Subject, tag: str) -> bool:
        """False only when the repository's listing is known and lacks ``tag``."""
        listing = self._listing(subject)
        return listing is None or tag in listing

    def _listing(self, subject: Subject) -> frozenset[str] | None:
        key = (id(subject.registry), subject.repository)
        with self._lock:
            if key in self._listings:
                return self._listings[key]
            lock = self._listing_locks.setdefault(key, threading.Lock())
        with lock:  # one listing per repository, whichever thread asks first
            with self._lock:
                if key in self._listings:
                    return self._listings[key]
            listing = _list_tags(subject)
            with self._lock:  # the lock is not needed again: one less per repository
                self._listings[key] = listing
                del self._listing_locks[key]
            return listing

    def has_api(self, registry: Registry) -> bool:
        return id(registry) not in self._without_api

    def no_api(self, registry: Registry) -> None:
        self._without_api.add(id(registry))


def _list_tags(subject: Subject) -> frozenset[str] | None:
    """The repository's tags, or None when they cannot be relied on: the listing failed
    or is empty (the repository holds at least the image just read, so an empty listing
    means the registry does not list, not that there is nothing).

    Only the tags ``may_have`` is asked about are kept: cosign's and the referrers
    tags all start with ``sha256-``, and most repositories have none, so most
    listings are the one empty frozenset rather than a set of their tags each (one
    per image of a 2,000-image collect, held to the end of the discovery)."""
    try:
        tags = subject.registry.list_tags(subject.repository, what=subject.what)
    except AirgapError:
        return None
    if not tags:
        return None
    return frozenset(tag for tag in tags if tag.startswith(_ATTACHED_TAG_PREFIX))


def discover(subjects: list[Subject], concurrency: int) -> list[list[Attached]]:
    """What is attached to each subject, in the order given (each list deduplicated)."""
    lookups = _Lookups()
    jobs = [partial(_discover, subject, lookups) for subject in subjects]
    return run_parallel(jobs, concurrency)


def _discover(subject: Subject, lookups: _Lookups) -> list[Attached]:
    found: dict[str, Attached] = {}
    for attached in [*_tagged(subject, lookups), *_referrers(subject, lookups)]:
        found.setdefault(attached.top.digest, attached)
    return list(found.values())


def _tagged(subject: Subject, lookups: _Lookups) -> Iterator[Attached]:
    """cosign's ``sha256-HEX.sig|.att|.sbom`` tags."""
    for suffix, kind in TAG_KINDS.items():
        tag = cosign_tag(subject.digest, suffix)
        if not lookups.may_have(subject, tag):
            continue
        manifest = subject.registry.find_manifest(subject.repository, tag, what=subject.what)
        if manifest is not None:
            yield _complete(subject, Attached(subject.digest, kind, Via.TAG, [manifest], tag=tag))


def _referrers(subject: Subject, lookups: _Lookups) -> Iterator[Attached]:
    """The referrers API, or the referrers tag where the registry has no API."""
    registry, repository, what = subject.registry, subject.repository, subject.what
    listed = None
    if lookups.has_api(registry):
        listed = registry.get_referrers(repository, subject.digest, what=what)
        if listed is None:
            lookups.no_api(registry)
    if listed is None:
        tag = referrers_tag(subject.digest)
        fallback = (
            registry.find_manifest(repository, tag, what=what)
            if lookups.may_have(subject, tag)
            else None
        )
        listed = fallback.children() if fallback is not None and fallback.is_index else []
    for descriptor in listed:
        # a referrers tag can name what was deleted since (the spec leaves its upkeep
        # to clients): skip it, as anything whose subject is not this one
        manifest = registry.find_manifest(repository, descriptor.digest, what=what)
        if manifest is None or _subject_of(manifest) != subject.digest:
            continue
        artifact_type = _artifact_type(manifest)
        kind = classify(artifact_type, _annotations(manifest))
        attached = Attached(
            subject.digest, kind, Via.REFERRERS, [manifest], artifact_type=artifact_type
        )
        yield _complete(subject, attached)


def _complete(subject: Subject, attached: Attached) -> Attached:
    """The children of an artifact index, and a signature's payloads read whole."""
    top = attached.top
    for child in top.children():
        attached.manifests.append(
            subject.registry.get_manifest(subject.repository, child.digest, what=subject.what)
        )
    if attached.kind is not Kind.SIGNATURE or top.is_index:
        return attached
    layers = top.blobs()[1:] if top.json.get("config") else top.blobs()
    if len(layers) > MAX_SIGNATURE_LAYERS:
        raise AirgapError(
            f"{subject.what}: signature manifest {top.digest} has {len(layers)} layers, "
            f"more than the {MAX_SIGNATURE_LAYERS} airgap reads"
        )
    for layer in layers:
        if is_signature_layer(layer.media_type) and layer.size <= MAX_SIGNATURE_PAYLOAD_BYTES:
            attached.payloads[layer.digest] = subject.registry.fetch_small_blob(
                subject.repository, layer.digest, layer.size, what=subject.what
            )
    return attached


def _subject_of(manifest: Manifest) -> str | None:
    subject = manifest.json.get("subject")
    digest = subject.get("digest") if isinstance(subject, dict) else None
    return digest if isinstance(digest, str) else None


def _artifact_type(manifest: Manifest) -> str | None:
    """``artifactType``, else the config's media type, as the referrers API lists it."""
    document = manifest.json
    declared = document.get("artifactType")
    if isinstance(declared, str) and declared:
        return declared
    config = document.get("config")
    media_type = config.get("mediaType") if isinstance(config, dict) else None
    return media_type if isinstance(media_type, str) and media_type else None


def _annotations(manifest: Manifest) -> dict[str, str]:
    annotations = manifest.json.get("annotations")
    if not isinstance(annotations, dict):
        return {}
    return {str(k): v for k, v in annotations.items() if isinstance(v, str)}
