"""Bounded JSON: a size cap, a depth cap, and typed field access with one-line errors.

Every JSON document airgap reads comes from outside (the signed bundle manifest, the
layout's ``index.json``, image manifests, registry and GitHub API answers). ``loads``
refuses one that is too large or nested too deep before anything walks it, and
``Fields`` hands out values of the type asked for or says which field is wrong, so a
hostile document ends in one line naming the field, never in a traceback.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from airgap.core.errors import AirgapError
from airgap.core.limits import MAX_JSON_DEPTH, describe_size
from airgap.core.names import shown


class JSONShapeError(AirgapError):
    """A JSON document is too large, too deep, not JSON, or a field has the wrong type."""


def loads(
    data: bytes | str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    unique_keys: bool = True,
    convert: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """Parse ``data``; ``where`` names it in every message.

    Duplicate keys are refused unless ``unique_keys`` is false: two readers of the same
    signed bytes must never see different values (Go and Python both keep the last).
    ``convert`` may turn an object into something compact as it is decoded (given its
    ``(key, value)`` pairs; None: keep it a dict), so a large list's entries never
    exist as dicts all at once. Duplicate keys are refused in those objects too, and
    what it makes counts as an object in the depth check."""
    hook: Callable[[list[tuple[str, Any]]], Any] | None = _unique_object if unique_keys else None
    if convert is not None:
        hook = _converting(convert, unique_keys)
    if len(data) > max_bytes:
        raise JSONShapeError(
            f"{where}: {len(data)} bytes is over the {describe_size(max_bytes)} limit"
        )
    try:
        value = json.loads(
            data,
            object_pairs_hook=hook,
            parse_constant=_no_constant,
        )
    except RecursionError:
        raise JSONShapeError(f"{where}: nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as exc:
        raise JSONShapeError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except UnicodeDecodeError:
        raise JSONShapeError(f"{where}: not valid JSON (not UTF-8)") from None
    except _DuplicateKey as exc:
        raise JSONShapeError(f"{where}: key {shown(exc.key)} appears twice in one object") from None
    except ValueError as exc:  # a NaN or Infinity constant
        raise JSONShapeError(f"{where}: not valid JSON ({exc})") from None
    if _openings(data) > max_depth and depth_exceeds(value, max_depth):
        raise JSONShapeError(f"{where}: nested deeper than {max_depth} levels")
    return value


def _openings(data: bytes | str) -> int:
    """How many ``{`` and ``[`` the text holds: a bound on how deep it can nest (every
    level opens with one; those inside strings only loosen it), counted in C, so the
    walk of ``depth_exceeds`` is left to the few documents with more of them than the
    depth allowed, not done for every small manifest a command parses."""
    if isinstance(data, str):
        return data.count("{") + data.count("[")
    return data.count(b"{") + data.count(b"[")


STREAM_CHUNK = 64 * 1024
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's, as the json module skips it


class _NotPlain(Exception):
    """The streamed parse met something it leaves to the whole-document parse."""


def loads_streamed(
    chunks: Iterator[bytes],
    *,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    convert: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> dict[str, Any] | None:
    """A JSON object read from UTF-8 ``chunks`` without its whole text: each value of
    the object is decoded on its own, and each item of a value that is a list, from a
    window of the text; with ``convert`` (see ``loads``) a long list's items never all
    exist as dicts, and the document's text never exists at all.

    It yields the value ``loads`` would (duplicate keys refused, the same depth bound),
    or None for anything else, valid or not: another encoding, a BOM, too large, too
    deep, malformed, a duplicate key. The caller then parses the whole document with
    ``loads`` for its value or its message. Every chunk is consumed when it succeeds."""
    hook = _converting(convert, True) if convert is not None else _unique_object
    decoder = json.JSONDecoder(object_pairs_hook=hook, parse_constant=_no_constant)
    window = _Window(chunks, max_bytes)
    try:
        document = _streamed_object(window, decoder, max_depth)
        window.skip_space()
        if not window.at_end():
            return None  # data after the object
    except (_NotPlain, ValueError, RecursionError):  # JSONDecodeError, a duplicate key
        return None
    return document


class _Window:
    """The part of a streamed text being decoded: ``text[pos:]``, refilled on demand."""

    def __init__(self, chunks: Iterator[bytes], max_bytes: int) -> None:
        self._chunks = chunks
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        self._left = max_bytes
        self._first = True
        self.text = ""
        self.pos = 0
        self.done = False

    def more(self) -> None:
        """Read more text into the window (at least as much as it holds, so a value
        longer than a chunk costs linear time), or raise _NotPlain at the end."""
        if self.done:
            raise _NotPlain("the text ended")
        kept = self.text[self.pos :]
        added: list[str] = []
        length = 0
        while not self.done and length <= len(kept):
            chunk = next(self._chunks, None)
            if chunk is not None and self._first and json.detect_encoding(chunk) != "utf-8":
                raise _NotPlain("not plain UTF-8")  # UTF-16/32 or a BOM
            self._first = False
            if chunk is None:
                self.done = True
                piece = self._decoder.decode(b"", final=True)
            else:
                self._left -= len(chunk)
                if self._left < 0:
                    raise _NotPlain("over the size limit")
                piece = self._decoder.decode(chunk)
            added.append(piece)
            length += len(piece)
        self.text = kept + "".join(added)
        self.pos = 0

    def skip_space(self) -> None:
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or self.done:
                return
            self.more()

    def next_is(self, character: str) -> bool:
        """Whether the next character past any space is ``character``, taken if so."""
        self.skip_space()
        if self.pos < len(self.text) and self.text[self.pos] == character:
            self.pos += 1
            return True
        return False

    def closed_by(self, closer: str) -> bool:
        """After an item: True at ``closer`` (taken), False at a comma; else not plain."""
        separator = self.take()
        if separator == closer:
            return True
        if separator != ",":
            raise _NotPlain("no separator")
        return False

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos == len(self.text)

    def take(self) -> str:
        """The next character, consumed."""
        self.skip_space()
        if self.pos == len(self.text):
            raise _NotPlain("the text ended")
        self.pos += 1
        return self.text[self.pos - 1]

    def value(self, decoder: json.JSONDecoder) -> Any:
        """The next JSON value; decoded again with more text whenever it reaches the
        window's end (a number cut short, or an unfinished value)."""
        self.skip_space()
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError:
                self.more()
                continue
            if end == len(self.text) and not self.done:
                self.more()
                continue
            self.pos = end
            return value


def _streamed_object(window: _Window, decoder: json.JSONDecoder, max_depth: int) -> dict[str, Any]:
    if window.take() != "{":
        raise _NotPlain("not an object")
    document: dict[str, Any] = {}
    if window.next_is("}"):
        return document
    while True:
        key = window.value(decoder)
        if not isinstance(key, str) or key in document or window.take() != ":":
            raise _NotPlain("not a key")
        if window.next_is("["):
            document[key] = _streamed_list(window, decoder, max_depth)
        else:
            value = window.value(decoder)
            if depth_exceeds(value, max_depth - 1):
                raise _NotPlain("too deep")
            document[key] = value
        if window.closed_by("}"):
            return document


def _streamed_list(window: _Window, decoder: json.JSONDecoder, max_depth: int) -> list[Any]:
    items: list[Any] = []
    if window.next_is("]"):
        return items
    while True:
        item = window.value(decoder)
        if depth_exceeds(item, max_depth - 2):
            raise _NotPlain("too deep")
        items.append(item)
        if window.closed_by("]"):
            return items


def dumps_indented(document: list[tuple[str, Any]]) -> bytes:
    """``json.dumps(dict(document), indent=2).encode() + b"\\n"``, byte for byte, without
    the whole document as Python objects at once: a value given as an iterator is a
    list dumped one item at a time. (With ``indent`` json has no C encoder: it holds a
    string per token and, given a list, every item's dict: ~9 KiB per image of a
    2,000-image bundle manifest, beside the text.) A JSON text has no raw newline
    inside a string, so a nested value is its own ``indent=2`` dump with every line
    indented to its depth."""
    out = io.BytesIO()
    dump_indented(document, out)
    return out.getvalue()


def dump_indented(document: list[tuple[str, Any]], out: BinaryIO) -> None:
    """``dumps_indented(document)`` written to ``out`` a piece at a time: collect
    writes a 2,000-image ``index.json`` (~0.6 MB) to its staging directory this way,
    never holding its text."""
    out.write(b"{")
    for number, (key, value) in enumerate(document):
        out.write(b",\n  " if number else b"\n  ")
        out.write(json.dumps(key).encode() + b": ")
        if not isinstance(value, Iterator):
            out.write(_nested_dump(value, 1))
            continue
        empty = True
        for item in value:
            out.write(b"[\n    " if empty else b",\n    ")
            out.write(_nested_dump(item, 2))
            empty = False
        out.write(b"[]" if empty else b"\n  ]")
    out.write(b"\n}\n")


def _nested_dump(value: Any, depth: int) -> bytes:
    return json.dumps(value, indent=2).replace("\n", "\n" + "  " * depth).encode()


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return result


def _converting(
    convert: Callable[[list[tuple[str, Any]]], Any], unique_keys: bool
) -> Callable[[list[tuple[str, Any]]], Any]:
    def hook(pairs: list[tuple[str, Any]]) -> Any:
        made = convert(pairs)
        if made is None:
            return _unique_object(pairs) if unique_keys else dict(pairs)
        if unique_keys and len({key for key, _ in pairs}) != len(pairs):
            _unique_object(pairs)  # raises, naming the key
        return made

    return hook


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_SCALARS = (str, int, float, bool, type(None))


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth``, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        elif isinstance(item, _SCALARS):
            continue
        else:  # an object ``convert`` made compact: as deep as the object was
            children = ()
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if not isinstance(child, _SCALARS))
    return False


def describe(value: Any) -> str:
    """What a JSON value is, for messages: ``a string``, ``a list``, ``null`` ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"


class Fields:
    """Typed access to one JSON object; every mistake names the field's path."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise JSONShapeError(f"{where}: expected an object, got {describe(value)}")
        self._data: dict[str, Any] = value
        self.where = where

    def path(self, key: str) -> str:
        return f"{self.where}.{key}"

    def has(self, key: str) -> bool:
        return key in self._data and self._data[key] is not None

    def names(self) -> Iterator[str]:
        """The object's keys."""
        return iter(self._data)

    def raw(self, key: str) -> Any:
        return self._data.get(key)

    def _wrong(self, key: str, expected: str) -> JSONShapeError:
        if key not in self._data:
            return JSONShapeError(f"{self.path(key)}: missing (expected {expected})")
        return JSONShapeError(
            f"{self.path(key)}: expected {expected}, got {describe(self._data[key])}"
        )

    def text(self, key: str) -> str:
        value = self._data.get(key)
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def optional_text(self, key: str, default: str | None = None) -> str | None:
        return self.text(key) if self.has(key) else default

    def integer(self, key: str, *, minimum: int = 0) -> int:
        value = self._data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            wanted = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
            raise self._wrong(key, wanted)
        return value

    def optional_integer(self, key: str, *, minimum: int = 0) -> int | None:
        return self.integer(key, minimum=minimum) if self.has(key) else None

    def obj(self, key: str) -> Fields:
        value = self._data.get(key)
        if not isinstance(value, dict):
            raise self._wrong(key, "an object")
        return Fields(value, self.path(key))

    def optional_obj(self, key: str) -> Fields | None:
        return self.obj(key) if self.has(key) else None

    def items(self, key: str) -> list[Any]:
        """A list (absent or null: empty)."""
        if not self.has(key):
            return []
        value = self._data[key]
        if not isinstance(value, list):
            raise self._wrong(key, "a list")
        return value

    def objects(self, key: str) -> list[Fields]:
        """A list of objects (absent or null: empty)."""
        return [
            Fields(item, f"{self.path(key)}[{number}]")
            for number, item in enumerate(self.items(key))
        ]

    def texts(self, key: str) -> list[str]:
        """A list of strings (absent or null: empty)."""
        values = self.items(key)
        for number, item in enumerate(values):
            if not isinstance(item, str):
                raise JSONShapeError(
                    f"{self.path(key)}[{number}]: expected a string, got {describe(item)}"
                )
        return values

    def text_map(self, key: str) -> dict[str, str]:
        """An object of string values (absent or null: empty)."""
        if not self.has(key):
            return {}
        value = self._data[key]
        if not isinstance(value, dict):
            raise self._wrong(key, "an object of strings")
        for name, item in value.items():
            if not isinstance(item, str):
                raise JSONShapeError(
                    f"{self.path(key)}.{name}: expected a string, got {describe(item)}"
                )
        return dict(value)
