"""Plain-text tables and sizes for human output (stable, greppable, no colour codes).

What a table shows often comes from a bundle nobody has verified yet (``inspect``,
``diff``, a failed ``verify``): every cell goes through ``printable``, so a manifest
field holding terminal escape sequences (colours, cursor moves that hide lines, a title
or clipboard write) is shown as backslash escapes, never obeyed by the terminal."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

TABLE_WIDTH = 100  # what a table may take unless --wide: fits a terminal split in two
ELLIPSIS = "…"


def printable(text: str) -> str:
    """``text`` safe to print on one line: control characters, and bytes that were not
    UTF-8 in a tar header (surrogate escapes), become backslash escapes."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def plural(count: int, noun: str) -> str:
    """``1 provider``, ``2 providers``: the summaries' counts (nouns that take an s)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def short_digest(digest: str) -> str:
    """``sha256:0123456789ab``: the first 12 hex digits, as docker shows image IDs."""
    algorithm, separator, hexits = digest.partition(":")
    return f"{algorithm}:{hexits[:12]}" if separator else digest[:12]


def shorten_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters in the middle, keeping more of the end (a
    reference's tag) than of the start (its registry)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1) // 3
    tail = width - 1 - head
    return f"{text[:head]}{ELLIPSIS}{text[len(text) - tail :]}"


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    max_width: int | None = None,
    shrink: Sequence[tuple[int, int]] = (),
) -> str:
    """Aligned columns; with ``max_width``, cells are cut in the middle until every line
    fits: ``shrink`` lists ``(column, floor)`` steps, each narrowing its column down to
    ``floor`` before the next step starts. ``rows`` is read twice (widths, then lines):
    it may make its rows anew on each pass rather than hold them (one per image)."""
    widths = [len(printable(h)) for h in headers]
    for row in rows:
        widths = [max(w, len(printable(cell))) for w, cell in zip(widths, row, strict=True)]
    if max_width is not None:
        widths = _fit(widths, max_width, shrink)
    lines = itertools.chain((headers,), rows)
    return "\n".join(
        "  ".join(
            shorten_middle(printable(cell), width).ljust(width)
            for cell, width in zip(line, widths, strict=True)
        ).rstrip()
        for line in lines
    )


def _fit(widths: list[int], max_width: int, shrink: Sequence[tuple[int, int]]) -> list[int]:
    widths = list(widths)
    excess = sum(widths) + 2 * (len(widths) - 1) - max_width
    for column, floor in shrink:
        if excess <= 0:
            break
        cut = min(excess, max(widths[column] - max(floor, 1), 0))
        widths[column] -= cut
        excess -= cut
    return widths
