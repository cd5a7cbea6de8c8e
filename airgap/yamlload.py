"""Fast, bounded, one-pass YAML loading for large streams: provider components (pure).

``airgap.yamlsafe`` guards small documents (specs, policies, metadata) with a bounds pass
over the events before loading; for megabytes of components that would parse twice, so
this module enforces the same kind of bounds while composing, in a single pass.

A provider's components are megabytes of YAML and airgap reads them on every collect,
import and configmaps, so the loader matters: PyYAML's pure-Python scanner takes about a
second per megabyte, libyaml's (the ``yaml.cyaml`` binding, in PyYAML's wheels) a tenth
of that. The events libyaml produces are composed here in Python, not by libyaml's own
composer, for two reasons: the composer is where the bounds are enforced, and libyaml's
composer recurses in C (a few hundred thousand nested ``[`` crash the process). Composing
in Python over libyaml's events costs no more than libyaml's composer does.

Bounds (``airgap.limits``), each failing with one line naming the file, line and column:

- nesting deeper than ``MAX_COMPONENTS_DEPTH`` collections (real manifests stay below
  40; the limit also caps libyaml's per-token work, which grows with flow nesting);
- aliases that would expand to more than ``MAX_COMPONENTS_ALIAS_NODES`` nodes in all
  ("billion laughs": nine levels of ten aliases are a few hundred bytes that expand to
  10⁹ nodes for whoever walks the result), and aliases to an ancestor (a cycle);
- integers and floats longer than ``MAX_NUMBER_CHARS`` characters (a sexagesimal
  ``1:1:1:…`` of megabytes makes PyYAML multiply ever larger integers, and ``int()``
  refuses more than 4300 digits with a ValueError).

Without libyaml the pure-Python loader runs with the same bounds and gives the same
documents (a test checks both on realistic components).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from yaml.nodes import Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from airgap.errors import InputError
from airgap.limits import MAX_COMPONENTS_ALIAS_NODES, MAX_COMPONENTS_DEPTH

MAX_NUMBER_CHARS = 128

try:  # libyaml's scanner and parser; absent when PyYAML was built without it
    from yaml._yaml import CParser

    HAVE_LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML's wheels include libyaml
    HAVE_LIBYAML = False


class _BoundedComposer(Composer):
    """PyYAML's composer, counting depth and what aliases expand to."""

    max_depth = MAX_COMPONENTS_DEPTH
    max_alias_nodes = MAX_COMPONENTS_ALIAS_NODES

    if TYPE_CHECKING:  # provided by the parser and resolver this is mixed with

        def peek_event(self) -> Any: ...
        def get_event(self) -> Any: ...
        def descend_resolver(self, parent: Node | None, index: object) -> None: ...
        def ascend_resolver(self) -> None: ...

    def __init__(self) -> None:
        Composer.__init__(self)
        self._depth = 0
        self._total = 0  # nodes composed plus nodes aliases stand for
        self._aliased = 0  # nodes aliases stand for, over the whole stream
        self._weights: dict[str, int] = {}  # completed anchor -> nodes it stands for

    def compose_document(self) -> Node | None:
        node: Node | None = Composer.compose_document(self)
        self._weights = {}
        return node

    def compose_node(self, parent: Node | None, index: object) -> Node:
        event: Any = self.peek_event()
        anchor = event.anchor
        if isinstance(event, AliasEvent):
            return self._alias(event)
        if anchor is not None and anchor in self.anchors:
            raise ComposerError(
                f"found duplicate anchor {anchor!r}; first occurrence",
                self.anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )
        self._depth += 1
        if self._depth > self.max_depth:
            raise ComposerError(
                None, None, f"nested deeper than {self.max_depth} levels", event.start_mark
            )
        start = self._total
        self._total += 1
        self.descend_resolver(parent, index)
        node: Node
        if isinstance(event, ScalarEvent):
            node = self.compose_scalar_node(anchor)
        elif isinstance(event, SequenceStartEvent):
            node = self.compose_sequence_node(anchor)
        elif isinstance(event, MappingStartEvent):
            node = self.compose_mapping_node(anchor)
        self.ascend_resolver()
        self._depth -= 1
        if anchor is not None:
            self._weights[anchor] = self._total - start
        return node

    def _alias(self, event: Any) -> Node:
        self.get_event()
        anchor = event.anchor
        if anchor not in self.anchors:
            raise ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
        weight = self._weights.get(anchor)
        if weight is None:  # still being composed: the alias is inside its own anchor
            raise ComposerError(
                None, None, f"alias *{anchor} refers to its own ancestor", event.start_mark
            )
        self._total += weight
        self._aliased += weight
        if self._aliased > self.max_alias_nodes:
            raise ComposerError(
                None,
                None,
                f"aliases expand to more than {self.max_alias_nodes} nodes",
                event.start_mark,
            )
        node: Node = self.anchors[anchor]
        return node


class _BoundedConstructor(SafeConstructor):
    """SafeConstructor refusing absurdly long numbers before converting them."""

    def construct_yaml_int(self, node: ScalarNode) -> int:
        self._short(node, "integer")
        value: int = SafeConstructor.construct_yaml_int(self, node)
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        self._short(node, "float")
        value: float = SafeConstructor.construct_yaml_float(self, node)
        return value

    @staticmethod
    def _short(node: ScalarNode, what: str) -> None:
        if len(node.value) > MAX_NUMBER_CHARS:
            raise ConstructorError(
                None, None, f"{what} longer than {MAX_NUMBER_CHARS} characters", node.start_mark
            )


_BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", _BoundedConstructor.construct_yaml_int
)
_BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:float", _BoundedConstructor.construct_yaml_float
)


class PureLoader(Reader, Scanner, Parser, _BoundedComposer, _BoundedConstructor, Resolver):
    """PyYAML's pure-Python scanner and parser, bounded."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        _BoundedConstructor.__init__(self)
        Resolver.__init__(self)


DEFAULT_LOADER: type[Any] = PureLoader
if HAVE_LIBYAML:

    class FastLoader(_BoundedComposer, CParser, _BoundedConstructor, Resolver):
        """libyaml's scanner and parser (C), composed and constructed as PureLoader."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            Resolver.__init__(self)

    DEFAULT_LOADER = FastLoader


def iter_documents(text: str, source: str, *, pure: bool = False) -> Iterator[Any]:
    """Each document of a YAML stream in turn, ``None`` for empty ones; one document is
    in memory at a time. ``pure`` forces the pure-Python scanner (for tests).

    Raises InputError ``SOURCE:LINE:COLUMN: malformed YAML: …`` (or a bound exceeded).
    """
    loader: Any = None
    try:
        # the pure Reader checks every character up front: construction may fail too
        loader = (PureLoader if pure else DEFAULT_LOADER)(text)
        while loader.check_data():
            yield loader.get_data()
    except yaml.YAMLError as exc:
        raise InputError(f"{source}{_where(exc)}: malformed YAML: {_problem(exc)}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2020-13-45
        raise InputError(f"{source}: malformed YAML: {_one_line(str(exc))}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_documents(text: str, source: str, *, pure: bool = False) -> list[Any]:
    """Every non-empty document of a YAML stream."""
    return [doc for doc in iter_documents(text, source, pure=pure) if doc is not None]


def load_single(text: str, source: str, *, pure: bool = False) -> Any:
    """The one document of a YAML file (None if empty); more than one is an error."""
    documents = list(iter_documents(text, source, pure=pure))
    if len(documents) > 1:
        raise InputError(f"{source}: expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return ""
    return f":{mark.line + 1}:{mark.column + 1}"


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if isinstance(problem, str) and problem:
        if isinstance(context, str) and context and context_mark is not None:
            # "while scanning a simple key at line 3, could not find expected ':'"
            return _one_line(f"{context} at line {context_mark.line + 1}, {problem}")
        return _one_line(problem)
    reason = getattr(exc, "reason", None)  # ReaderError: a forbidden character
    if isinstance(reason, str) and reason:
        return _one_line(reason)
    return _one_line(str(exc)) or "invalid YAML"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
