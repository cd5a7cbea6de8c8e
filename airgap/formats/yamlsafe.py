"""Bounded YAML for small documents: a size cap, a depth cap and an alias-expansion cap.

PyYAML's composer and constructor recurse once per nesting level (deep nesting ends in
RecursionError, and libyaml's composer in a crash), and aliases let a few hundred bytes
stand for billions of nodes. ``check_bounds`` walks the parser's event stream, which
needs no recursion, and stops as soon as a document nests too deep or, counting every
alias as the nodes it stands for, grows too large, before any tree is built. Use it in
front of any ``yaml`` load of outside text; ``safe_load`` does both for small documents.

libyaml 0.2.6 (in PyYAML 6.0.4's wheels) has a nesting limit of its own, 1,000 levels,
which its scanner can reach first: looking up to 1,024 characters ahead for a simple key,
it reads a thousand ``[`` before the first event leaves the parser. A document it stops
there is nested deeper than any bound airgap sets (all below 1,000), so it is reported as
that bound (``nested_deeper_than``), at the place libyaml stopped: the same message
whichever PyYAML is installed.

Building objects from the nodes has hazards of its own, which ``BoundedConstructor``
meets: integers and floats longer than ``MAX_NUMBER_CHARS`` characters are refused
before conversion (``int()`` refuses more than 4,300 digits with a ValueError, and a
sexagesimal ``1:1:1:…`` makes PyYAML multiply ever larger integers), and a value PyYAML
cannot build (a date ``2020-13-45``) is a ``ConstructorError`` at its line, like every
other malformed YAML, never a bare ValueError.

Tags: a node may carry an explicit tag, and only those of YAML's core schema (``!!str``,
``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!seq``, ``!!map``, and the
non-specific ``!``) are accepted anywhere airgap reads YAML (``foreign_tag``): a
language-specific tag (``!!python/object/apply:os.system``) or an application's own
(``!custom``) is hostile or broken input that Kubernetes' decoder would refuse on the far
side. The safe loaders would refuse most of them only when building objects, and the
documents nobody builds (a components file's CRDs) not at all; so the event walk here and
the composer of ``airgap.formats.yamlload`` check every node's tag as they meet it.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from airgap.core.errors import InputError
from airgap.core.limits import MAX_YAML_DEPTH, MAX_YAML_NODES, describe_size
from airgap.core.names import shown

_EventLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
LIBYAML_NESTING_LIMIT = 1000  # libyaml's default; nothing in airgap changes it
_LIBYAML_NESTING = "exceeded maximum nesting depth"  # its problem, scanner and parser alike
MAX_NUMBER_CHARS = 128


class YAMLBoundsError(InputError):
    """A YAML document is larger, deeper or expands to more nodes than allowed."""


_CORE_PREFIX = "tag:yaml.org,2002:"
CORE_SCHEMA = ("str", "int", "float", "bool", "null", "seq", "map")
CORE_TAGS = frozenset({"!", *(_CORE_PREFIX + name for name in CORE_SCHEMA)})


def foreign_tag(tag: str | None) -> bool:
    """Whether an event's or node's explicit tag is outside YAML's core schema (None:
    no tag written, resolved from the value as usual)."""
    return tag is not None and tag not in CORE_TAGS


def tag_problem(tag: str) -> str:
    """What is wrong with a foreign tag, the tag shown as it is usually written."""
    written = "!!" + tag[len(_CORE_PREFIX) :] if tag.startswith(_CORE_PREFIX) else tag
    return (
        f"YAML tag {shown(written)} is outside YAML's core schema "
        f"({', '.join('!!' + name for name in CORE_SCHEMA)})"
    )


class ForeignTagError(yaml.MarkedYAMLError):
    """A node carries a tag outside YAML's core schema (``foreign_tag``); raised by the
    composers at the node, so that every reader reports it at its line."""

    def __init__(self, tag: str, mark: Any) -> None:
        super().__init__(None, None, tag_problem(tag), mark)


def foreign_tag_message(where: object, exc: ForeignTagError) -> str:
    """``WHERE:LINE: YAML tag ... is outside YAML's core schema``: one line, as a spec
    mistake is reported."""
    return f"{where}{_line(exc.problem_mark)}: {exc.problem}"


def check_bounds(
    text: str,
    where: str,
    *,
    max_bytes: int | None = None,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int | None = MAX_YAML_NODES,
) -> None:
    """Raise YAMLBoundsError if ``text`` is over ``max_bytes`` (in UTF-8), nests deeper
    than ``max_depth``, or (unless ``max_nodes`` is None) holds more than ``max_nodes``
    nodes with aliases expanded; InputError ``WHERE:LINE: ...`` if a node carries a
    tag outside YAML's core schema.

    Malformed YAML raises ``yaml.YAMLError`` as usual, for the caller's own message."""
    if max_bytes is not None and utf8_length(text, max_bytes) > max_bytes:
        raise YAMLBoundsError(f"{where}: larger than the {describe_size(max_bytes)} limit")
    try:
        _walk_events(text, where, max_depth, max_nodes)
    except ForeignTagError as exc:
        raise InputError(foreign_tag_message(where, exc)) from None
    except yaml.MarkedYAMLError as exc:
        if not nested_deeper_than(exc, max_depth):
            raise
        raise _too_deep(where, exc.problem_mark, max_depth) from None


def nested_deeper_than(exc: yaml.YAMLError, bound: int) -> bool:
    """Whether ``exc`` is libyaml's own nesting limit stopping a document, which is then
    nested deeper than ``bound`` (one of airgap's, all below libyaml's)."""
    return (
        isinstance(exc, yaml.MarkedYAMLError)
        and exc.problem == _LIBYAML_NESTING
        and bound < LIBYAML_NESTING_LIMIT
    )


def _too_deep(where: str, mark: Any, max_depth: int) -> YAMLBoundsError:
    return YAMLBoundsError(f"{where}{_line(mark)}: YAML nested deeper than {max_depth} levels")


def _line(mark: Any) -> str:
    """``:LINE`` of a mark (PyYAML's or libyaml's), or nothing."""
    return f":{mark.line + 1}" if mark is not None else ""


def _walk_events(text: str, where: str, max_depth: int, max_nodes: int | None) -> None:
    """check_bounds' pass over the events: depth, nodes with aliases expanded, and
    every tag written."""
    depth = 0
    nodes = 0
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for
    open_anchors: list[tuple[str | None, int]] = []  # per open collection: anchor, start
    for event in yaml.parse(text, Loader=_EventLoader):
        tag = getattr(event, "tag", None)
        if tag is not None and foreign_tag(tag):
            raise ForeignTagError(tag, event.start_mark)
        if isinstance(event, yaml.AliasEvent):
            nodes += sizes.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, _OPENS):
            nodes += 1
            depth += 1
            if depth > max_depth:
                raise _too_deep(where, event.start_mark, max_depth)
            open_anchors.append((event.anchor, nodes))
        elif isinstance(event, _CLOSES):
            depth -= 1
            anchor, start = open_anchors.pop()
            if anchor:
                sizes[anchor] = nodes - start + 1
        if max_nodes is not None and nodes > max_nodes:
            raise YAMLBoundsError(
                f"{where}: YAML expands to more than {max_nodes} nodes (through aliases?)"
            )


def located(source: object, node: yaml.Node | None, key: str, message: str) -> str:
    """``FILE:LINE: KEY: message``: the one form a mistake in a hand-written YAML file
    (spec, policy) is reported in, so the user can jump to the line to fix."""
    line = _line(node.start_mark) if node is not None else ""
    where = f" {key}:" if key else ""
    return f"{source}{line}:{where} {message}"


def utf8_length(text: str, limit: int) -> int:
    """``text``'s length in UTF-8 bytes, exact wherever it matters against ``limit``
    (a file's bytes and its decoded text must meet the same cap)."""
    if len(text) > limit or len(text) * 4 <= limit:
        return len(text)  # over for sure (bytes >= characters), or surely under
    return len(text.encode("utf-8", "surrogatepass"))


class BoundedConstructor(SafeConstructor):
    """SafeConstructor refusing absurdly long numbers before converting them."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        self._short(node, "integer")
        value: int = SafeConstructor.construct_yaml_int(self, node)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        self._short(node, "float")
        value: float = SafeConstructor.construct_yaml_float(self, node)
        return value

    @staticmethod
    def _short(node: yaml.ScalarNode, what: str) -> None:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise ConstructorError(
                None, None, f"{what} longer than {MAX_NUMBER_CHARS} characters", node.start_mark
            )


BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", BoundedConstructor.construct_yaml_int
)
BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:float", BoundedConstructor.construct_yaml_float
)


class _CheckedConstructor(BoundedConstructor):
    """BoundedConstructor whose every failure is a ConstructorError at the node's line.

    Why not in ``airgap.formats.yamlload``'s loaders too: this wraps every node's construction, a
    cost components of megabytes would pay per node; ``iter_documents`` turns such an
    error into its own message instead. Small documents (metadata, policies) use this."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as exc:  # not a YAMLError
            problem = one_line(str(exc)) or type(exc).__name__
            raise ConstructorError(
                None, None, f"invalid {node.tag.rsplit(':', 1)[-1]}: {problem}", node.start_mark
            ) from None


def one_line(text: str) -> str:
    """A parser's problem for a one-line message: whitespace runs as one space, cut."""
    return " ".join(text.split())[:300]


def construct(root: yaml.Node) -> Any:
    """The objects of a composed document (``compose``); any value PyYAML cannot build
    is a ConstructorError at its line."""
    return _CheckedConstructor().construct_document(root)


def safe_load(
    text: str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> Any:
    """``yaml.safe_load`` of a small document, after ``check_bounds``."""
    check_bounds(text, where, max_bytes=max_bytes, max_depth=max_depth, max_nodes=max_nodes)
    # libyaml's parser where present (check_bounds has just parsed the same text with
    # it), a bounded safe constructor: the same values, without the pure-Python scanner
    # (every import and verify reads each provider's metadata.yaml through here)
    root = yaml.compose(text, Loader=_EventLoader)
    return None if root is None else construct(root)


def compose(
    text: str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> yaml.Node | None:
    """``yaml.compose`` (the node tree, with line numbers) after ``check_bounds``."""
    check_bounds(text, where, max_bytes=max_bytes, max_depth=max_depth, max_nodes=max_nodes)
    return yaml.compose(text, Loader=yaml.SafeLoader)
