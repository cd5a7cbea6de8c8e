"""The have-list: which digests a disconnected registry already holds (pure format).

``airgap status BUNDLE --export-have have.json`` writes one on the disconnected side;
``airgap collect SPEC --have have.json`` reads it on the connected side and carries only
what is not listed, as a delta bundle that relies on the rest. It travels the other way
across the gap, so it is small (digests only, keyed by the source repository the bundle
names, never a registry address, credential or file name) and unsigned: a have-list
that lies can only make the next bundle incomplete, which ``import`` detects (it checks
that the target holds every digest the bundle relies on before pushing anything).

Keys are source repositories (``registry.k8s.io/cluster-api/cluster-api-controller``),
not target ones, so a list made against ``--registry mirror/capi`` means the same thing
to collect, which knows nothing of the mirror.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from airgap.core.errors import InputError
from airgap.core.limits import MAX_HAVE_LIST_BYTES
from airgap.core.names import digest_problem, shown
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import Fields, JSONShapeError
from airgap.oci.reference import parse_reference

KIND = "airgap-have-list"
VERSION = 1
_KEYS = ("kind", "version", "created", "bundle", "repositories")


@dataclass(frozen=True)
class HaveList:
    """Source repository -> the digests (manifests and blobs) the target holds for it."""

    repositories: dict[str, frozenset[str]]
    created: str
    bundle: str | None = None  # sha256 of the signed manifest of the bundle checked against

    def to_bytes(self) -> bytes:
        """Deterministic JSON, repositories and digests sorted."""
        document: dict[str, object] = {"kind": KIND, "version": VERSION, "created": self.created}
        if self.bundle:
            document["bundle"] = self.bundle
        document["repositories"] = {
            name: sorted(self.repositories[name]) for name in sorted(self.repositories)
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    @property
    def digests(self) -> int:
        return sum(len(held) for held in self.repositories.values())

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> HaveList:
        """Parse a have-list: at most ``MAX_HAVE_LIST_BYTES``, every key known, every
        repository a normalised image name and every digest well-formed; a mistake is
        one InputError naming the field."""
        try:
            document = Fields(jsonsafe.loads(data, where, max_bytes=MAX_HAVE_LIST_BYTES), where)
            for key in document.names():
                if key not in _KEYS:
                    raise JSONShapeError(f"{where}: unknown key {key[:60]!r}")
            if document.raw("kind") != KIND:
                raise JSONShapeError(f"{where}: not an airgap have-list (kind: {KIND} missing)")
            version = document.raw("version")
            if version != VERSION or isinstance(version, bool):
                raise JSONShapeError(
                    f"{where}: unsupported have-list version {shown(version)} (airgap {VERSION})"
                )
            bundle = document.optional_text("bundle")
            if bundle is not None:
                _check_digest(bundle, document.path("bundle"))
            held = document.obj("repositories")
            repositories = {
                _repository(name, held.path(name)): _digests(held, name) for name in held.names()
            }
            return cls(repositories, document.text("created"), bundle)
        except JSONShapeError as exc:
            raise InputError(str(exc)) from None


def _repository(name: str, where: str) -> str:
    try:
        parsed = parse_reference(name)
    except InputError:
        parsed = None
    if parsed is None or parsed.name != name or "@" in name:
        raise JSONShapeError(f"{where}: {shown(name)} is not a normalised repository name")
    return name


def _digests(held: Fields, name: str) -> frozenset[str]:
    values = held.texts(name)
    for number, digest in enumerate(values):
        _check_digest(digest, f"{held.path(name)}[{number}]")
    return frozenset(values)


def _check_digest(digest: str, where: str) -> None:
    problem = digest_problem(digest)
    if problem:
        raise JSONShapeError(f"{where}: {problem}")
