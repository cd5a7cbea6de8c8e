"""Documents nobody reads, set aside before the composer sees them (pure).

Why: ``yamlload.iter_documents`` with ``kinds`` builds only the documents of those kinds
(workloads, Namespaces, Lists), but libyaml still hands every event of every other
document to Python, one object each, for the composer to skip; in a components file
those are the CRDs, most of its bytes. A document whose top-level ``kind`` can be read
off its text for certain, and is none of the wanted ones, needs none of that: libyaml's
own parser checks its syntax without making an object (``raw_parse``: the same scanner
and parser, so the same errors), and the stream the composer reads holds blank lines in
its place, so every line and column number it reports is still the file's.

"For certain" is narrow on purpose; anything else is composed as before:

- the stream: no directive, no document marker with anything after it, no ``...``, no
  line break but ``\\n`` (YAML 1.1 also breaks lines at CR, NEL, LS and PS), no BOM;
- the document: a block mapping whose every line at column 0 is a plain key (``name:``)
  or a comment, exactly one of them ``kind: Word``, and Word not wanted;
- nothing a bound of the composer watches that libyaml's parser would let through: no
  tag (a ``!`` where a node could start: the composer refuses one outside YAML's core
  schema, which libyaml's parser alone never looks at), no
  anchor or alias (``&`` or ``*`` that could start a token), no two block indicators
  in a row (``- - x``, ``- ? x``), and nesting provably within ``MAX_COMPONENTS_DEPTH``:
  at most one level per column of indentation and a few for the line's own indicator,
  plus as many as brackets could open (counted over any stretch, quoted or not: an
  upper bound, which also keeps libyaml's per-token work in flow collections small).

Each check is a scan ``re`` or ``str`` runs in C (a pattern starting with a literal, a
substring search, ``bytes.translate``). On the benchmark's five realistic providers
(3.4 MB) 97% of the bytes are set aside: the skim takes 0.021 s and libyaml's check of
what it set aside 0.023 s, and ``parse_components`` of all five 0.057 s, against
0.097 s when the composer skipped every event itself.

Such a document is one the composer would have skipped without raising: it holds no
tag, no alias to expand or anchor to repeat, and nesting within the bound. What the skim holds is
bounded too: a stream of more than ``MAX_DOCUMENTS`` documents, or a document of more
than ``MAX_TOP_LINES`` lines at column 0, is left to the composer (one document at a
time) rather than listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from operator import sub

from airgap.core.limits import MAX_COMPONENTS_DEPTH

_ODD_CHARACTERS = ("\r", "\x85", "\u2028", "\u2029", "\ufeff")
# each pattern starts with a literal, which ``re`` scans for quickly: a line's start is
# the "\n" before it (the first line is matched on its own, or a newline put in front)
_ODD_LINE = r"(?:%|---[ \t]*[^ \t\n]|\.\.\.)"  # a directive, marker with content, or end
_ODD_START = re.compile(_ODD_LINE)  # matched at the text's start only
_ODD_STREAM = re.compile(r"\n" + _ODD_LINE)
_MARKER_LINE = r"---[ \t]*(?=\n|\Z)"
_FIRST_MARKER = re.compile(_MARKER_LINE)  # matched at the text's start only
_MARKER = re.compile(r"\n" + _MARKER_LINE)
_TOP_LINE = re.compile(r"\n([^ #\n][^\n]*)")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*:(?:[ \t].*)?")
_KIND_VALUE = re.compile(r"kind:[ \t]+([A-Za-z][A-Za-z0-9]*)(?:[ \t]+#.*)?[ \t]*")
_CHAINS = tuple(  # two block indicators in a row: "- - x", "- ? x", "? - x", ...
    re.compile(rf"{first}[ \t]+[-?:](?:[ \t\n]|$)") for first in ("-", r"\?", ":")
)
_SIGN_FOLLOWS = " \t\n[{,:"  # what may come before an anchor or alias
_NODE_STARTS = "\n[{,-:?"  # what may come before a node's first token (blanks aside)
_NOT_A_NAME = " \t\n[]{},"  # what may not come right after its & or *
_NOT_A_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = bytes.maketrans(b"[]{}", b"\x02\x00\x02\x00")
MAX_BRACKETS = 4096  # brackets in one document worth bounding; more: composed instead
MAX_TOP_LINES = 1000  # lines at column 0 of one document (real ones have a handful)
MAX_DOCUMENTS = 10_000  # documents in one stream (a components file has ~100)
_LINE_LEVELS = 4  # the root mapping, a "- key:" entry's two levels, and its value
_FEW_BRACKETS = 4  # openings so few that their count is bound enough, without the scan


@dataclass(frozen=True)
class Skimmed:
    """A stream with some documents blanked: ``text`` for the composer, and where each
    blanked document is in ``source`` (the skimmed text itself, not a copy)."""

    text: str
    source: str
    blanked: list[tuple[int, int, int]]  # (the line it starts on, 0-based; start; end)

    def set_aside(self) -> Iterator[tuple[int, str]]:
        """Each blanked document, with the line it starts on, one at a time."""
        for line, start, end in self.blanked:
            yield line, self.source[start:end]


def skim(text: str, wanted: frozenset[str]) -> Skimmed | None:
    """``text`` with every document that is certainly of a kind outside ``wanted``
    blanked, or None when none is (or the stream is not plain enough to tell)."""
    if (
        any(odd in text for odd in _ODD_CHARACTERS)
        or _ODD_START.match(text)
        or _ODD_STREAM.search(text)
    ):
        return None
    pieces: list[str] = []
    blanked: list[tuple[int, int, int]] = []
    start = line = 0
    for number, (begin, finish) in enumerate(_markers(text)):
        if number > MAX_DOCUMENTS:  # a stream of tiny documents: composed one at a time
            return None
        document = text[start:begin]
        lines = document.count("\n")
        if _certainly_unwanted(document, wanted):
            pieces.append("\n" * lines)
            blanked.append((line, start, begin))
        else:
            pieces.append(document)
        del document
        if finish < 0:
            break
        after = min(finish + 1, len(text))  # the marker line with its line break
        pieces.append(text[begin:after])
        line += lines + text.count("\n", begin, after)
        start = after
    if not blanked:
        return None
    return Skimmed("".join(pieces), text, blanked)


def _markers(text: str) -> Iterator[tuple[int, int]]:
    """Where each marker line starts and ends (its line break not included), then
    (the text's end, -1)."""
    first = _FIRST_MARKER.match(text)
    if first:
        yield 0, first.end()
    for found in _MARKER.finditer(text):
        yield found.start() + 1, found.end()
    yield len(text), -1


def _certainly_unwanted(document: str, wanted: frozenset[str]) -> bool:
    kinds = []
    for number, found in enumerate(_TOP_LINE.finditer("\n" + document)):
        line = found.group(1)
        if number >= MAX_TOP_LINES or not _PLAIN_KEY.fullmatch(line):
            return False
        if line.startswith("kind:"):
            kinds.append(line)
    if len(kinds) != 1:
        return False
    kind = _KIND_VALUE.fullmatch(kinds[0])
    if kind is None or kind.group(1) in wanted:
        return False
    if _has_anchor_or_alias(document) or any(chain.search(document) for chain in _CHAINS):
        return False
    if _may_have_tag(document):
        return False
    flow = _flow_bound(document)
    if flow is None:
        return False
    deepest = MAX_COMPONENTS_DEPTH - _LINE_LEVELS - flow  # leading spaces allowed
    return deepest >= 0 and "\n" + " " * (deepest + 1) not in document


def _has_anchor_or_alias(document: str) -> bool:
    """Whether an ``&`` or ``*`` could start a token: after a space, a line break or a
    flow indicator, and followed by a name character (quoted or not: an upper bound)."""
    for sign in "&*":
        at = document.find(sign)
        while at != -1:
            before = document[at - 1] if at else "\n"
            after = document[at + 1 : at + 2]
            if before in _SIGN_FOLLOWS and after and after not in _NOT_A_NAME:
                return True
            at = document.find(sign, at + 1)
    return False


def _may_have_tag(document: str) -> bool:
    """Whether a ``!`` could start a tag: where a node could start, after a line break,
    a flow or block indicator and any blanks (quoted or inside a scalar too: an upper
    bound). CEL's ``self.a != b`` and ``'!has(x)'`` in CRDs do not count."""
    at = document.find("!")
    while at != -1:
        before = at - 1
        while before >= 0 and document[before] in " \t":  # back to the last non-blank
            before -= 1
        if before < 0 or document[before] in _NODE_STARTS:
            return True
        at = document.find("!", at + 1)
    return False


def _flow_bound(document: str) -> int | None:
    """The most flow collections ``document``'s brackets could hold open at once: the
    largest excess of openings over closings in any stretch (quoted ones counted too:
    an upper bound); None when there are too many brackets to bother."""
    openings = document.count("[") + document.count("{")
    if openings <= _FEW_BRACKETS:  # no more can be open than were opened
        return openings
    # each bracket as 2 (opening) or 0 (closing), everything else deleted, in C
    steps = document.encode().translate(_STEP, _NOT_A_BRACKET)
    if len(steps) > MAX_BRACKETS:
        return None
    depths = list(accumulate(step - 1 for step in steps))
    lowest = accumulate(depths, min, initial=0)  # the lowest depth before each bracket
    deepest: int = max(map(sub, depths, lowest))
    return deepest
