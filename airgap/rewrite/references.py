"""Rewrite image references in components YAML, changing nothing else (pure).

The text is edited in place, line by line, rather than parsed and re-dumped: documents,
order, comments, quoting and clusterctl variables all stay as they were. Only the value of
an ``image:`` key that names a bundle image is replaced; an image written as a variable
with a default (``${CAPD_IMAGE:=registry.k8s.io/…}``) keeps its variable and gets a new
default.

Every pattern here runs in time linear in the line: an ``image:`` line padded with tens
of thousands of spaces, or a value full of unclosed ``${A:=``, is handled as fast as a
normal one (the single regular expression this replaced backtracked quadratically).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from airgap.core.errors import InputError
from airgap.oci.reference import parse_reference

# ``image:`` (optionally a list item, optionally a quoted key) up to the value; every
# quantifier is possessive: what it gives back could never let the rest match.
_IMAGE_LEAD = re.compile(r"""\s*+(?:-\s++)?["']?image["']?\s*+:\s*+""")
_QUOTES = frozenset("\"'")
# what a plain scalar cannot start with: the new value of an unquoted one is quoted
# (an IPv6 registry, [::1]:5000/x, would otherwise start a flow sequence)
_FLOW_INDICATORS = frozenset("[]{},#&*!|>'\"%@`")
_VALUE_END = re.compile(r"""["'#]""")
# A default stops at ``$`` and ``}``: each attempt scans up to the next ``${`` at most.
_DEFAULT_VAR = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:=|=|:-)(?P<default>[^}$]*+)\}"
)
_ANY_VAR = re.compile(r"\$\{[^}$]*+\}")

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


def split_image_line(body: str) -> tuple[str, str, str, str] | None:
    """``(lead, quote, value, trail)`` of an ``image: VALUE`` line (without its line
    break), or None: the value is one scalar without quotes or ``#`` inside, optionally
    quoted, followed only by spaces and a comment."""
    lead = _IMAGE_LEAD.match(body)
    if lead is None:
        return None
    start = lead.end()
    rest = body[start:]
    if not rest:
        return None
    quote = rest[0] if rest[0] in _QUOTES else ""
    offset = len(quote)
    end = _VALUE_END.search(rest, offset)
    stop = end.start() if end else len(rest)
    if quote:
        if end is None or rest[stop] != quote:
            return None
        value, trail = rest[offset:stop], rest[stop + 1 :]
    else:
        if end is not None and rest[stop] in _QUOTES:
            return None
        value = rest[:stop].rstrip()
        trail = rest[len(value) :]
    if not value or value[0].isspace() or not _is_trail(trail):
        return None
    return body[:start], quote, value, trail


def _needs_quotes(value: str) -> bool:
    """Whether an unquoted ``value`` would not read back as a string: ``[::1]:5000/x``
    is a YAML flow sequence, also once clusterctl has put ``${VAR:=[::1]:5000/x}``'s
    default in its place (it substitutes the text before parsing it)."""
    substituted = _DEFAULT_VAR.sub(lambda m: m.group("default"), value)
    return value[:1] in _FLOW_INDICATORS or substituted[:1] in _FLOW_INDICATORS


def _is_trail(trail: str) -> bool:
    """Only spaces, then optionally a comment."""
    rest = trail.lstrip()
    return not rest or rest[0] == "#"


def rewrite_images(text: str, lookup: Lookup) -> tuple[str, list[tuple[str, str]]]:
    """Rewrite ``text``; also return the (old, new) pairs that were replaced."""
    changes: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        if "image" not in line:  # most lines: no need to look closer
            continue
        body = line.rstrip("\r\n")
        parts = split_image_line(body)
        if parts is None:
            continue
        lead, quote, value, trail = parts
        new = _rewrite_value(value, lookup)
        if new is None or new == value:
            continue
        ending = line[len(body) :]
        if not quote and _needs_quotes(new):
            quote = '"'
        lines[number] = f"{lead}{quote}{new}{quote}{trail}{ending}"
        changes.append((value, new))
    return "".join(lines), changes
