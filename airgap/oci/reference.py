"""Image reference parsing and normalisation (pure, no I/O).

Follows docker/distribution's reference grammar and docker's normalisation so that the
names users write (``nginx``, ``quay.io/x/y:v1``, ``host:5000/a@sha256:...``) map to
one canonical form: ``docker.io/library/nginx:latest``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace

from airgap.core.errors import InputError
from airgap.core.names import shown

DOCKER_HUB = "docker.io"
DOCKER_HUB_API_HOST = "registry-1.docker.io"
DEFAULT_TAG = "latest"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[a-f0-9]{64}$|^sha512:[a-f0-9]{128}$")
_HOST_RE = re.compile(
    r"^(?:\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*)(?::[0-9]+)?$"
)


@dataclass(frozen=True, order=True, slots=True)
class Reference:
    """A normalised image reference: ``registry/repository[:tag][@digest]``."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    @property
    def name(self) -> str:
        """``registry/repository`` without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def identifier(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def with_digest(self, digest: str) -> Reference:
        return replace(self, digest=digest)

    def with_location(self, registry: str, repository: str) -> Reference:
        return replace(self, registry=registry, repository=repository)


def is_loopback_host(host: str) -> bool:
    """Loopback registries may be spoken to over plain HTTP, as docker does."""
    bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if bare.startswith("[") and "]" in bare:
        bare = bare[1 : bare.index("]")]
    elif host.startswith("["):
        bare = host[1 : host.index("]")]
    return bare == "localhost" or bare == "::1" or bare.startswith("127.")


def _looks_like_host(component: str) -> bool:
    return (
        "." in component
        or ":" in component
        or component == "localhost"
        or (component.startswith("["))
    )


def parse_reference(text: str) -> Reference:
    """Parse and normalise ``text``; raise InputError naming the reference if invalid."""
    original = text
    text = text.strip()
    if not text:
        raise InputError("empty image reference")
    digest: str | None = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise InputError(f"invalid digest in image reference {shown(original)}")
    registry, _, rest = text.partition("/")
    if not rest or not _looks_like_host(registry):
        registry, rest = DOCKER_HUB, text
    elif not _HOST_RE.match(registry):
        raise InputError(f"invalid registry host in image reference {shown(original)}")
    if registry in ("index.docker.io", DOCKER_HUB_API_HOST):
        registry = DOCKER_HUB
    tag: str | None = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise InputError(f"invalid tag in image reference {shown(original)}")
    if registry == DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    if not _REPOSITORY_RE.match(rest):
        raise InputError(f"invalid repository name in image reference {shown(original)}")
    if tag is None and digest is None:
        tag = DEFAULT_TAG
    # one string for a registry or tag that repeats (2,000 images from one registry,
    # one tag: collect holds every reference to the end)
    registry = sys.intern(registry)
    tag = sys.intern(tag) if tag is not None else None
    return Reference(registry=registry, repository=rest, tag=tag, digest=digest)


def api_host(registry: str) -> str:
    """The host that actually serves the distribution API for ``registry``."""
    return DOCKER_HUB_API_HOST if registry == DOCKER_HUB else registry
