"""jsonsafe.loads's depth bound: the counted fast path and the walk agree at the edge."""

from __future__ import annotations

import json

import pytest

from airgap.formats.jsonsafe import JSONShapeError, loads

pytestmark = pytest.mark.unit


def nested(depth: int, *, inner: object = 1) -> str:
    """``depth`` levels: lists and objects alternating, ``inner`` at the bottom."""
    text = json.dumps(inner)
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


@pytest.mark.parametrize("as_text", [False, True])
def test_exactly_the_limit_parses_and_one_more_is_refused(as_text: bool) -> None:
    def load(text: str) -> object:
        return loads(text if as_text else text.encode(), "doc", max_bytes=1 << 20, max_depth=8)

    assert load(nested(8)) is not None
    with pytest.raises(JSONShapeError, match="doc: nested deeper than 8 levels"):
        load(nested(9))


def test_brackets_inside_strings_do_not_make_a_shallow_document_deep() -> None:
    # more "{" and "[" than the limit, all inside strings: counted, then walked, accepted
    text = json.dumps({"a": "{[" * 50, "b": ["[[[", "{{{"]})
    assert loads(text.encode(), "doc", max_bytes=1 << 20, max_depth=4)["b"] == ["[[[", "{{{"]


def test_deep_document_with_strings_full_of_brackets_is_still_refused() -> None:
    text = nested(20, inner="{" * 100)
    with pytest.raises(JSONShapeError, match="nested deeper than 16 levels"):
        loads(text.encode(), "doc", max_bytes=1 << 20, max_depth=16)
