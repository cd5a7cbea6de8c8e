"""Helm's version constraints, for chart dependencies (pure).

``Chart.yaml`` dependencies name a version *constraint* in the syntax of Masterminds
semver, which Helm uses: ``||`` between alternatives, commas or spaces between
conditions that must all hold, operators ``= != > < >= <= ~ ^``, wildcards ``x X *``
in any position, and hyphen ranges ``1.2 - 1.4.5``. As there, pre-releases satisfy a
constraint only when one of its conditions names a pre-release; ``~1.2.3`` means
``>=1.2.3 <1.3.0`` and ``^1.2.3`` means ``>=1.2.3 <2.0.0`` (``^0.2.3``: ``<0.3.0``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from airgap.core.errors import InputError
from airgap.sources.semver import Version, try_parse

_CONDITION_RE = re.compile(
    r"^(?P<op>!=|>=|<=|=>|=<|>|<|=|~>|~|\^)?\s*v?"
    r"(?P<major>\d+|[xX*])(?:\.(?P<minor>\d+|[xX*]))?(?:\.(?P<patch>\d+|[xX*]))?"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_HYPHEN_RE = re.compile(r"^(\S+)\s+-\s+(\S+)$")
_OP_SPACE_RE = re.compile(r"(!=|>=|<=|=>|=<|~>|[<>=~^])\s+")
MAX_CONSTRAINT = 256


def _version(major: int, minor: int, patch: int, pre: tuple[str, ...] = ()) -> Version:
    text = f"{major}.{minor}.{patch}" + (f"-{'.'.join(pre)}" if pre else "")
    parsed = try_parse(text)
    if parsed is None:  # a pre-release semver refuses (``1-.``, ``1.2.3-01``), as Helm does
        raise InputError(f"invalid pre-release in version constraint: {text[:80]!r}")
    return parsed


def _bounds(text: str) -> tuple[list[tuple[str, Version]], bool]:
    """One condition as ``(op, version)`` pairs that must all hold, and whether it
    names a pre-release."""
    match = _CONDITION_RE.match(text)
    if not match:
        raise InputError(f"invalid version constraint {text[:80]!r}")
    raw_op = match.group("op") or "="
    op = {"=>": ">=", "=<": "<=", "~>": "~"}.get(raw_op, raw_op)
    parts = [match.group("major"), match.group("minor"), match.group("patch")]
    wild = [p is None or p in ("x", "X", "*") for p in parts]
    major, minor, patch = (0 if w else int(p) for p, w in zip(parts, wild, strict=True))
    pre = tuple(match.group("pre").split(".")) if match.group("pre") else ()
    if wild[0]:
        return [], False  # any version
    low = _version(major, minor, patch, pre)
    # where a wildcard range ends: 1.x -> 2.0.0, 1.2.x -> 1.3.0
    above = _version(major + 1, 0, 0) if wild[1] else _version(major, minor + 1, 0)
    ranged = wild[1] or wild[2]
    named = bool(pre)
    if op == "=":
        return ([(">=", low), ("<", above)] if ranged else [("=", low)]), named
    if op == "!=":
        return ([("!range", low), ("!range-high", above)] if ranged else [("!=", low)]), named
    if op == ">":
        return ([(">=", above)] if ranged else [(">", low)]), named
    if op == "<=":
        return ([("<", above)] if ranged else [("<=", low)]), named
    if op in (">=", "<"):
        return [(op, low)], named
    if op == "~":
        return [(">=", low), ("<", above if wild[1] else _version(major, minor + 1, 0))], named
    # ^: the leftmost non-zero part stays
    if major > 0 or wild[1]:
        high = _version(major + 1, 0, 0)
    elif minor > 0 or wild[2]:
        high = _version(0, minor + 1, 0)
    else:
        high = _version(0, 0, patch + 1)
    return [(">=", low), ("<", high)], named


def _holds(op: str, have: Version, want: Version) -> bool:
    return {
        "=": have == want,
        "!=": have != want,
        ">": have > want,
        "<": have < want,
        ">=": have >= want,
        "<=": have <= want,
    }[op]


def _conjunction(text: str) -> tuple[list[tuple[str, Version]], bool]:
    hyphen = _HYPHEN_RE.match(text.strip())
    if hyphen:
        low, _ = _bounds(f">={hyphen.group(1)}")
        high, _ = _bounds(f"<={hyphen.group(2)}")
        return low + high, "-" in hyphen.group(1).lstrip("v").split("+")[0][1:]
    bounds: list[tuple[str, Version]] = []
    pre = False
    joined = _OP_SPACE_RE.sub(r"\1", text)  # ">= 1.2" is one condition
    tokens = [token for token in re.split(r"[\s,]+", joined) if token]
    if not tokens:
        raise InputError(f"invalid version constraint {text[:80]!r}")
    for token in tokens:
        found, named = _bounds(token)
        bounds += found
        pre = pre or named
    return bounds, pre


def satisfies(version: str, constraint: str) -> bool:
    """Whether ``version`` meets Helm's ``constraint``; InputError for a bad constraint."""
    if len(constraint) > MAX_CONSTRAINT:
        raise InputError(f"version constraint longer than {MAX_CONSTRAINT} characters")
    have = try_parse(version)
    if have is None:
        return False
    for alternative in constraint.split("||"):
        bounds, pre = _conjunction(alternative)
        if have.is_prerelease and not pre:
            continue
        if _all_hold(have, bounds):
            return True
    return False


def _all_hold(have: Version, bounds: list[tuple[str, Version]]) -> bool:
    index = 0
    while index < len(bounds):
        op, want = bounds[index]
        if op == "!range":  # != with a wildcard: outside [low, high)
            high = bounds[index + 1][1]
            if want <= have < high:
                return False
            index += 2
            continue
        if not _holds(op, have, want):
            return False
        index += 1
    return True


def best(versions: Iterable[str], constraint: str) -> str | None:
    """The highest of ``versions`` meeting ``constraint``, as written; None if none."""
    found: list[tuple[Version, str]] = []
    for text in versions:
        parsed = try_parse(text)
        if parsed is not None and satisfies(text, constraint):
            found.append((parsed, text))
    return max(found)[1] if found else None
