"""HTTP ``Range`` requests on a blob (RFC 9110 section 14), pure.

One byte range is served as ``206 Partial Content``: ``bytes=START-END``,
``bytes=START-`` and ``bytes=-SUFFIX``. What is not a valid single range is ignored
(the whole blob, ``200``), as the RFC allows: several ranges, other units, garbage. A
valid range that starts past the end cannot be satisfied (``416``).
"""

from __future__ import annotations

import re

_RANGE_RE = re.compile(r"^bytes=(\d{0,19})-(\d{0,19})$")


class Unsatisfiable(Exception):
    """The range starts at or past the end of the blob (answer 416)."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(first, last)`` byte offsets, both inclusive, or None for the whole blob."""
    if header is None:
        return None
    match = _RANGE_RE.match(header.strip().replace(" ", ""))
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text:  # a suffix: the last N bytes
        if not last_text:
            return None
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            raise Unsatisfiable(header)
        return max(0, size - suffix), size - 1
    first = int(first_text)
    last = int(last_text) if last_text else size - 1
    if last_text and last < first:
        return None  # invalid: ignored
    if first >= size:
        raise Unsatisfiable(header)
    return first, min(last, size - 1)
