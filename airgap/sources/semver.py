"""Semantic versions as provider release tags use them (pure).

Release tags are ``v``-prefixed semver (``v1.9.4``, ``v1.10.0-rc.1``). "latest" must be
chosen by semver precedence, not by string order (``v1.10.0`` > ``v1.9.9``) and never
pick a pre-release unless asked to, which is what clusterctl does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from airgap.core.errors import InputError
from airgap.core.names import shown

# at most 64 digits: semver sets no bound, but int() refuses 4,300 and no release
# numbers past a date (a 5,000-digit tag from a release listing was a traceback)
_NUMBER = r"0|[1-9][0-9]{0,63}"
_IDENT = r"[0-9A-Za-z-]+"
_SEMVER_RE = re.compile(
    rf"^v?(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_IDENT}(?:\.{_IDENT})*))?"
    rf"(?:\+(?P<build>{_IDENT}(?:\.{_IDENT})*))?$"
)

_NUMERIC_RE = re.compile(rf"^(?:{_NUMBER})$")

# A pre-release identifier's sort key: numeric identifiers sort before alphanumeric ones.
_PreKey = tuple[int, int, str]


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A parsed version; compares by semver precedence (build metadata ignored)."""

    text: str
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    @property
    def series(self) -> tuple[int, int]:
        """``(major, minor)``: what clusterctl's metadata releaseSeries is keyed on."""
        return (self.major, self.minor)

    def _key(self) -> tuple[int, int, int, int, tuple[_PreKey, ...]]:
        pre = tuple(
            (0, int(part), "") if _NUMERIC_RE.match(part) else (1, 0, part)
            for part in self.prerelease
        )
        # A release (no pre-release) sorts after all of its pre-releases.
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text


def try_parse(text: str) -> Version | None:
    """Parse ``text`` or return None when it is not a semantic version."""
    match = _SEMVER_RE.match(text.strip())
    if not match:
        return None
    pre = match.group("pre")
    prerelease = tuple(pre.split(".")) if pre else ()
    if any(part.isdigit() and len(part) > 1 and part[0] == "0" for part in prerelease):
        return None  # semver forbids leading zeros in numeric identifiers
    return Version(
        text=text.strip(),
        major=int(match.group("major")),
        minor=int(match.group("minor")),
        patch=int(match.group("patch")),
        prerelease=prerelease,
        build=match.group("build") or "",
    )


def parse_version(text: str) -> Version:
    """Parse ``text``; raise InputError naming it when it is not a semantic version."""
    version = try_parse(text)
    if version is None:
        raise InputError(f"{shown(text)} is not a semantic version (expected e.g. v1.9.4)")
    return version


def is_prerelease(text: str) -> bool:
    """True for ``v1.10.0-rc.1``; False for releases and for non-semver strings."""
    version = try_parse(text)
    return version is not None and version.is_prerelease


def highest(versions: Iterable[str], include_prerelease: bool = False) -> str | None:
    """The highest semantic version among ``versions`` (as given), or None.

    Strings that are not semantic versions are ignored: release listings and local
    repositories contain other tags and directories that are not provider releases.
    """
    best: Version | None = None
    for text in versions:
        version = try_parse(text)
        if version is None or (version.is_prerelease and not include_prerelease):
            continue
        if best is None or version > best:
            best = version
    return best.text if best is not None else None
