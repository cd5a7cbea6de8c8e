"""Bounded JSON: a size cap, a depth cap, and typed field access with one-line errors.

Every JSON document airgap reads comes from outside (the signed bundle manifest, the
layout's ``index.json``, image manifests, registry and GitHub API answers). ``loads``
refuses one that is too large or nested too deep before anything walks it, and
``Fields`` hands out values of the type asked for or says which field is wrong, so a
hostile document ends in one line naming the field, never in a traceback.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

from airgap.errors import AirgapError
from airgap.limits import MAX_JSON_DEPTH, describe_size


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
        raise JSONShapeError(f"{where}: key {exc.key!r} appears twice in one object") from None
    except ValueError as exc:  # a NaN or Infinity constant
        raise JSONShapeError(f"{where}: not valid JSON ({exc})") from None
    if _depth_exceeds(value, max_depth):
        raise JSONShapeError(f"{where}: nested deeper than {max_depth} levels")
    return value


def dumps_indented(document: list[tuple[str, Any]]) -> bytes:
    """``json.dumps(dict(document), indent=2).encode() + b"\\n"``, byte for byte, without
    the whole document as Python objects at once: a value given as an iterator is a
    list dumped one item at a time. (With ``indent`` json has no C encoder: it holds a
    string per token and, given a list, every item's dict: ~9 KiB per image of a
    2,000-image bundle manifest, beside the text.) A JSON text has no raw newline
    inside a string, so a nested value is its own ``indent=2`` dump with every line
    indented to its depth."""
    out = io.BytesIO()
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
    return out.getvalue()


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


def _depth_exceeds(value: Any, max_depth: int) -> bool:
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
