"""What ``airgap serve`` answers, from a verified bundle (pure: bytes in, lookups out).

Every image is served under two repository names, so both ways nodes are pointed at a
mirror work:

- its source path, the host dropped (``registry.k8s.io/cluster-api/foo`` ->
  ``cluster-api/foo``): what ``airgap import --registry ADDR`` would have pushed, and
  what containerd asks a ``hosts.toml`` mirror for (with ``?ns=registry.k8s.io``, which
  picks among source registries sharing a path); podman's ``registries.conf`` mirror
  ``location = "ADDR"`` asks for the same;
- its source host as the first path element (``registry.k8s.io/cluster-api/foo``,
  ``mirror.corp-5000/app`` for ``mirror.corp:5000``, as ``import
  --keep-source-registry`` writes it): unique whatever the sources, for a
  ``registries.conf`` mirror ``location = "ADDR/registry.k8s.io"``, containerd's
  ``override_path`` and the catalog.

Tags come from the bundle's signed image references (a tag-only reference owns its tag
over one pinned by digest, as import pushes them); manifests are the exact bytes the
bundle stores, with their own media type; a repository serves the manifests and blobs
of its images only, and what upstream attached to them where cosign and OCI 1.1
clients look (``sha256-HEX.sig``, ``.att``, ``.sbom``; the referrers API and tag).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airgap.bundle.format import blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.oci.manifest import OCI_INDEX, Manifest
from airgap.oci.reference import Reference, parse_reference
from airgap.rewrite.mapping import host_path_element
from airgap.supplychain.formats import Via, referrer_descriptor, referrers_tag


@dataclass(frozen=True)
class StoredManifest:
    """A manifest served from memory, as the bytes verification hashed, so its digest
    holds by construction."""

    digest: str
    media_type: str
    data: bytes


@dataclass
class Repository:
    """One source repository, under both of its served names."""

    source: Reference  # its source registry and repository (no tag)
    tags: dict[str, str] = field(default_factory=dict)  # tag -> manifest digest
    manifests: set[str] = field(default_factory=set)
    blobs: set[str] = field(default_factory=set)
    referrers: dict[str, str] = field(default_factory=dict)  # subject -> its listing's digest

    @property
    def full_name(self) -> str:
        return f"{host_path_element(self.source.registry)}/{self.source.repository}"


class AmbiguousName(Exception):
    """A host-less name that several source registries share, asked without ``ns``."""

    def __init__(self, name: str, choices: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.choices = choices


@dataclass
class Catalog:
    """Every repository, tag and manifest ``serve`` answers for, built once from the
    verified bundle."""

    full: dict[str, Repository] = field(default_factory=dict)  # host-element/path
    by_path: dict[str, list[Repository]] = field(default_factory=dict)  # path only
    manifests: dict[str, StoredManifest] = field(default_factory=dict)

    def repository(self, name: str, ns: str | None = None) -> Repository | None:
        """The repository a request names; ``ns`` is containerd's source host hint."""
        found = self.full.get(name)
        if found is not None:
            return found
        candidates = self.by_path.get(name, [])
        if ns and len(candidates) > 1:
            candidates = [c for c in candidates if c.source.registry == ns.lower()]
        if len(candidates) > 1:
            raise AmbiguousName(name, sorted(c.full_name for c in candidates))
        return candidates[0] if candidates else None

    def names(self) -> list[str]:
        """The catalog: each repository once, by its unique name."""
        return sorted(self.full)


EMPTY_REFERRERS = json.dumps(
    {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}, separators=(",", ":")
).encode()
Read = Callable[[str], bytes]  # a verified member's bytes, by member name


def build_catalog(manifest: BundleManifest, read: Read, carried: set[str]) -> Catalog:
    """The catalog of every image the bundle lists; ``carried`` is the member names the
    bundle holds (a delta bundle leaves some out: those are not served)."""
    catalog = Catalog()
    images = [(parse_reference(image.reference), image) for image in manifest.images]
    for reference, image in images:
        repository = _repository(catalog, reference)
        _walk(catalog, repository, image.digest, image.media_type, read, carried)
    for pinned in (False, True):  # tag-only references first: they own their tags
        for reference, image in images:
            if reference.tag and bool(reference.digest) == pinned:
                repository = _repository(catalog, reference)
                if image.digest in repository.manifests:
                    repository.tags.setdefault(reference.tag, image.digest)
    _attached(catalog, manifest, read, carried)
    return catalog


def _attached(catalog: Catalog, manifest: BundleManifest, read: Read, carried: set[str]) -> None:
    """Signatures, attestations and SBOMs next to their subjects, as import pushes them:
    cosign's ``sha256-HEX.sig|.att|.sbom`` tags, and for referrers an index of their
    descriptors, answered by the referrers API and held by the referrers tag
    ``sha256-HEX`` (for clients that only know the tag schema). Those attached to a
    source index a platform filter rewrote have no subject here."""
    images = {image.reference: image for image in manifest.images}
    listed: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for artifact in manifest.artifacts:
        image = images.get(artifact.image)
        if image is None or artifact.via == Via.INDEX.value:
            continue  # an index's own attestation manifests are served as its children
        if artifact.subject == image.source_digest:
            continue
        repository = _repository(catalog, parse_reference(artifact.image))
        _walk(catalog, repository, artifact.digest, artifact.media_type, read, carried)
        stored = catalog.manifests.get(artifact.digest)
        if stored is None or artifact.digest not in repository.manifests:
            continue  # a delta's: in the base
        if artifact.tag:
            repository.tags.setdefault(artifact.tag, artifact.digest)
        if artifact.via == Via.REFERRERS.value:
            entry = referrer_descriptor(Manifest.from_bytes(stored.data, stored.media_type))
            entries = listed.setdefault((repository.full_name, artifact.subject), [])
            if entry not in entries:
                entries.append(entry)
    for (name, subject), entries in listed.items():
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        data = json.dumps(index, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        catalog.manifests[digest] = StoredManifest(digest, OCI_INDEX, data)
        repository = catalog.full[name]
        repository.manifests.add(digest)
        repository.tags.setdefault(referrers_tag(subject), digest)
        repository.referrers[subject] = digest


def _repository(catalog: Catalog, reference: Reference) -> Repository:
    source = Reference(reference.registry, reference.repository)
    probe = Repository(source)
    found = catalog.full.get(probe.full_name)
    if found is None:
        found = catalog.full[probe.full_name] = probe
        catalog.by_path.setdefault(source.repository, []).append(found)
    return found


def _walk(
    catalog: Catalog,
    repository: Repository,
    digest: str,
    media_type: str,
    read: Read,
    carried: set[str],
) -> None:
    if digest in repository.manifests:
        return
    stored = catalog.manifests.get(digest)
    if stored is None:
        member = blob_member(digest)
        if member not in carried:
            return
        parsed = Manifest.from_bytes(read(member), media_type)
        stored = catalog.manifests[digest] = StoredManifest(digest, parsed.media_type, parsed.data)
    repository.manifests.add(digest)
    parsed = Manifest.from_bytes(stored.data, stored.media_type)
    for child in parsed.children():
        _walk(catalog, repository, child.digest, child.media_type, read, carried)
    repository.blobs.update(blob.digest for blob in parsed.blobs())
