"""Rewrite image references in components YAML, changing nothing else (pure).

The text is edited in place, line by line, rather than parsed and re-dumped: documents,
order, comments, quoting and clusterctl variables all stay as they were. Only the value of
an ``image:`` key that names a bundle image is replaced; an image written as a variable
with a default (``${CAPD_IMAGE:=registry.k8s.io/…}``) keeps its variable and gets a new
default.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from airgap.errors import InputError
from airgap.reference import parse_reference

_IMAGE_LINE = re.compile(
    r"""^(?P<lead>\s*(?:-\s+)?["']?image["']?\s*:\s*)"""
    r"""(?P<quote>["']?)(?P<value>[^"'#\s][^"'#]*?)(?P=quote)(?P<trail>\s*(?:#.*)?)$"""
)
_DEFAULT_VAR = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:=|=|:-)(?P<default>[^}]*)\}"
)
_ANY_VAR = re.compile(r"\$\{[^}]*\}")

Lookup = Callable[[str], str | None]  # normalised source reference -> replacement


def _normalised(text: str) -> str | None:
    try:
        return str(parse_reference(text))
    except InputError:
        return None


def _rewrite_value(value: str, lookup: Lookup) -> str | None:
    """The new value for an ``image:`` value, or None to leave it alone."""
    whole = _DEFAULT_VAR.fullmatch(value)
    if whole:  # ${VAR:=image}: rewrite the default, keep the variable
        replacement = _rewrite_value(whole.group("default"), lookup)
        if replacement is None:
            return None
        return f"${{{whole.group('name')}{whole.group('op')}{replacement}}}"
    if _ANY_VAR.search(value):  # partial substitution: rewrite what it resolves to
        resolved = _DEFAULT_VAR.sub(lambda m: m.group("default"), value)
        if _ANY_VAR.search(resolved):
            return None
        normalised = _normalised(resolved)
        return lookup(normalised) if normalised else None
    normalised = _normalised(value)
    return lookup(normalised) if normalised else None


def rewrite_images(text: str, lookup: Lookup) -> tuple[str, list[tuple[str, str]]]:
    """Rewrite ``text``; also return the (old, new) pairs that were replaced."""
    changes: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        match = _IMAGE_LINE.match(body)
        if not match:
            continue
        new = _rewrite_value(match.group("value"), lookup)
        if new is None or new == match.group("value"):
            continue
        ending = line[len(body) :]
        quote = match.group("quote")
        lines[number] = f"{match.group('lead')}{quote}{new}{quote}{match.group('trail')}{ending}"
        changes.append((match.group("value"), new))
    return "".join(lines), changes
