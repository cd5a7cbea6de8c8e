"""Where each bundle image goes in the disconnected registry (pure).

``registry.k8s.io/cluster-api/controller:v1.9.4`` with target ``registry.local:5000/capi``
becomes ``registry.local:5000/capi/cluster-api/controller:v1.9.4``: the source host is
dropped, the path kept, the prefix added. ``keep_registry`` keeps the source host as the
first path element so two registries with the same paths cannot collide; without it a
collision is an error, never a silent overwrite.

A registry that refuses deep paths (Quay-style ``org/repo`` only) gets its repositories
flattened (``--max-path-depth N``, ``Target.max_depth``): at most N path components below
the host, the last ones joined by ``-`` (``capi/k8s/cluster-api-controller`` with N = 2
becomes ``capi/k8s-cluster-api-controller``). Every repository import writes or names is
made by ``Target.repository``, so the images, the rewritten references and the artifacts
import pushes beside them all follow one rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from airgap.core.errors import InputError
from airgap.core.names import shown
from airgap.core.redact import has_userinfo, without_userinfo
from airgap.oci.reference import Reference, parse_reference

_HOST_PATH_RE = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class Target:
    """The target registry and repository prefix, from ``--registry HOST[/PREFIX]``."""

    host: str
    prefix: str
    max_depth: int | None = None  # --max-path-depth: path components below the host

    def repository(self, *parts: str) -> str:
        """``PREFIX/PARTS…`` as a repository of this target (flattened to ``max_depth``)."""
        return flatten_path([*self.prefix.split("/"), *"/".join(parts).split("/")], self.max_depth)

    def check_depth(self) -> None:
        """Refuse a ``max_depth`` that leaves no room below the prefix."""
        used = len(self.prefix.split("/")) if self.prefix else 0
        if self.max_depth is not None and self.max_depth <= used:
            raise InputError(
                f"--max-path-depth {self.max_depth}: the prefix of --registry {self} "
                f"already has {used} path component{'s' if used != 1 else ''}, leaving no "
                "room for a repository"
            )

    @classmethod
    def parse(cls, text: str) -> Target:
        text = split_scheme(text)[1].rstrip("/")
        if has_userinfo(text):  # never repeated: it holds a password
            raise InputError(
                f"--registry {shown(without_userinfo(text))}: credentials do not belong in the "
                "registry name; use --username with --password-stdin, or a credentials file"
            )
        host, _, prefix = text.partition("/")
        if not host:
            raise InputError(f"--registry {shown(text)}: expected HOST[:PORT][/PREFIX]")
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in port:
            digits = port.rpartition(":")[2]  # empty ("HTTPS://…"): the probe below says
            number = digits.lstrip("0")  # what the port is, and int()-safe once short
            if digits and not (
                digits.isascii()
                and digits.isdigit()
                and 0 < len(number) <= 5
                and int(number) < 65536
            ):
                raise InputError(f"--registry {shown(text)}: the port must be 1 to 65535")
        probe = f"{host}/{prefix + '/' if prefix else ''}probe:v1"
        try:
            parse_reference(probe)
        except InputError as exc:
            raise InputError(f"--registry {shown(text)} is not a valid registry/prefix") from exc
        return cls(host=host, prefix=prefix)

    def __str__(self) -> str:
        return f"{self.host}/{self.prefix}" if self.prefix else self.host


def flatten_path(parts: list[str], depth: int | None) -> str:
    """``parts`` as a repository path of at most ``depth`` components: the first
    ``depth - 1`` kept, the rest joined by ``-`` (deterministic, and readable: a
    repository's own name stays in it)."""
    parts = [part for part in parts if part]
    if depth is None or len(parts) <= depth:
        return "/".join(parts)
    return "/".join([*parts[: depth - 1], "-".join(parts[depth - 1 :])])


def split_scheme(registry: str) -> tuple[str, str]:
    """``--registry`` as ``(scheme, HOST[:PORT][/PREFIX])``: ``https`` or ``http`` when it
    is written as a URL, else ``""``."""
    text = registry.strip()
    scheme = (
        "https" if text.startswith("https://") else "http" if text.startswith("http://") else ""
    )
    return scheme, text.removeprefix("https://").removeprefix("http://")


def host_path_element(host: str) -> str:
    """A registry host as a repository path element (``h:5000`` -> ``h-5000``)."""
    return _HOST_PATH_RE.sub("-", host.lower()).strip("-._")


def target_repository(source: Reference, target: Target, keep_registry: bool) -> str:
    parts = [host_path_element(source.registry)] if keep_registry else []
    return target.repository(*parts, source.repository)


def unflattened_repository(source: Reference, target: Target, keep_registry: bool) -> str:
    """Where ``source`` would go without ``--max-path-depth``: what a registry-wide node
    mirror (``PREFIX/PATH`` for ``SOURCE/PATH``) resolves it to."""
    return target_repository(source, replace(target, max_depth=None), keep_registry)


@dataclass(frozen=True)
class Mapping:
    """Where one bundle image goes on the target: the same tag and digest under the
    target's host and prefix."""

    source: Reference
    target: Reference  # same tag and digest as the bundle holds

    def pinned(self, digest: str) -> str:
        """The target reference pinned by digest: ``repo:tag@sha256:…``."""
        return str(self.target.with_digest(digest))


def map_images(
    references: list[str], target: Target, *, keep_registry: bool = False
) -> list[Mapping]:
    """Map every reference; refuse two source repositories landing in one target one."""
    mappings: list[Mapping] = []
    owners: dict[str, str] = {}
    for text in references:
        source = parse_reference(text)
        repository = target_repository(source, target, keep_registry)
        owner = owners.setdefault(repository, source.name)
        if owner != source.name:
            flattened = repository != unflattened_repository(source, target, keep_registry)
            hint = (
                f"flattened to --max-path-depth {target.max_depth}; rename one, or allow "
                "a greater depth"
                if flattened
                else "use --keep-source-registry to keep the source registry in target paths"
            )
            raise InputError(
                f"{owner} and {source.name} would both be pushed to "
                f"{target.host}/{repository} ({hint})"
            )
        mappings.append(Mapping(source, source.with_location(target.host, repository)))
    return mappings


def tag_owners(mappings: list[Mapping]) -> set[Reference]:
    """The source references whose tag is pushed to the target.

    A tag-only reference owns its tag. One pinned by digest (``repo:tag@sha256:…``) is
    resolved by its digest everywhere (runtimes ignore the tag then), so it pushes its
    tag only when no other reference claims it: a platform-filtered ``repo:tag`` next to
    a whole ``repo:tag@…`` must not move the tag back and forth on every import.
    """
    claimed: dict[tuple[str, str], Reference] = {}
    for pinned in (False, True):
        for mapping in mappings:
            target = mapping.target
            if target.tag and bool(target.digest) == pinned:
                claimed.setdefault((target.name, target.tag), mapping.source)
    return set(claimed.values())
