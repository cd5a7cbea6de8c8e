"""The prune plan: what ``airgap prune`` would delete, as JSON (pure format).

It is written on one run and read back on another, perhaps after a person edited it, so
reading it is as strict as reading anything from outside: bounded, every field typed,
every repository a plain name below the plan's own prefix, every digest well-formed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from airgap.core.errors import InputError
from airgap.core.names import digest_problem, shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError
from airgap.oci.reference import parse_reference

KIND = "airgap-prune-plan"
VERSION = 1
MAX_PLAN_BYTES = 64 * 1024 * 1024
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Drop:
    """One manifest a tag (or several) named at plan time, to delete with the manifests
    below it (an index's children, after it); ``size``: the bytes only these drops hold
    (manifests, and blobs no kept manifest references), what garbage collection frees."""

    repository: str
    digest: str
    tags: tuple[str, ...]
    manifests: tuple[str, ...]  # the digest itself first, then its children
    size: int


@dataclass(frozen=True)
class PrunePlan:
    registry: str  # HOST/PREFIX, as --registry names it
    created: str
    keep: tuple[str, ...]  # sha256 of each kept bundle's signed manifest
    kept: dict[str, frozenset[str]]  # repository -> the digests kept bundles need there
    drops: tuple[Drop, ...]
    # repositories beside the prefix that could not be read: what they share with the
    # drops is counted as freed, so the sizes are upper bounds
    unread: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(drop.size for drop in self.drops)

    def to_bytes(self) -> bytes:
        document = {
            "kind": KIND,
            "version": VERSION,
            "created": self.created,
            "registry": self.registry,
            "keep": list(self.keep),
            "totalBytes": self.total,
            "drop": [
                {
                    "repository": d.repository,
                    "digest": d.digest,
                    "tags": list(d.tags),
                    "manifests": list(d.manifests),
                    "bytes": d.size,
                }
                for d in self.drops
            ],
            "kept": {name: sorted(self.kept[name]) for name in sorted(self.kept)},
            "unread": list(self.unread),
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> PrunePlan:
        try:
            fields = Fields(jsonsafe.loads(data, where, max_bytes=MAX_PLAN_BYTES), where)
            if fields.text("kind") != KIND or fields.integer("version") != VERSION:
                raise InputError(f"{where}: not an airgap prune plan (version {VERSION})")
            registry = fields.text("registry")
            prefix = registry.partition("/")[2]
            drops = tuple(_drop(item, prefix) for item in fields.objects("drop"))
            kept_fields = fields.obj("kept")
            kept = {
                _repository(name, prefix, kept_fields.path(name)): frozenset(
                    _digest(d, kept_fields.path(name)) for d in kept_fields.texts(name)
                )
                for name in kept_fields.names()
            }
            keep = tuple(_digest(d, fields.path("keep")) for d in fields.texts("keep"))
            unread = tuple(fields.texts("unread"))
            return cls(registry, fields.text("created"), keep, kept, drops, unread)
        except JSONShapeError as exc:
            raise InputError(str(exc)) from None


def _drop(item: Fields, prefix: str) -> Drop:
    repository = _repository(item.text("repository"), prefix, item.path("repository"))
    tags = tuple(item.texts("tags"))
    for tag in tags:
        if not _TAG.fullmatch(tag):
            raise InputError(f"{item.path('tags')}: {shown(tag)} is not a tag")
    manifests = tuple(_digest(d, item.path("manifests")) for d in item.texts("manifests"))
    return Drop(
        repository,
        _digest(item.text("digest"), item.path("digest")),
        tags,
        manifests,
        item.integer("bytes"),
    )


def _digest(digest: str, where: str) -> str:
    problem = digest_problem(digest)
    if problem:
        raise InputError(f"{where}: {problem}")
    return digest


def under(repository: str, prefix: str) -> bool:
    """Whether ``repository`` is below ``prefix`` (path components, not characters:
    ``capi2/x`` is not below ``capi``)."""
    return repository.startswith(prefix + "/")


def _repository(name: str, prefix: str, where: str) -> str:
    """A repository name as the plan may hold it: well-formed, below the prefix."""
    try:
        parse_reference(f"example.invalid/{name}:x")
    except InputError:
        raise InputError(f"{where}: {shown(name)} is not a repository name") from None
    if not prefix or not under(name, prefix):
        raise InputError(f"{where}: {shown(name)} is not below the plan's prefix {prefix}")
    return name
