"""Bounded YAML for small documents (specs, policies, metadata, chart values): a size
cap, then the one bounded composer (``airgap.formats.yamlcomposer``) with a depth cap and
a cap on the nodes a document stands for, aliases expanded.

Bounds are reported as ``YAMLBoundsError``, one line naming the file and, where it
applies, the line; a tag outside YAML's core schema as an InputError at its line; any
other malformed YAML raises ``yaml.YAMLError`` as usual, for the caller's own message.

Building objects from the nodes has hazards of its own, which ``BoundedConstructor``
meets: integers and floats longer than ``MAX_NUMBER_CHARS`` characters are refused
before conversion (``int()`` refuses more than 4,300 digits with a ValueError, and a
sexagesimal ``1:1:1:…`` makes PyYAML multiply ever larger integers), and a value PyYAML
cannot build (a date ``2020-13-45``) is a ``ConstructorError`` at its line, like every
other malformed YAML, never a bare ValueError.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from airgap.core.errors import InputError
from airgap.core.limits import MAX_YAML_DEPTH, MAX_YAML_NODES, describe_size
from airgap.formats.yamlcomposer import (
    BoundedComposer,
    DepthExceeded,
    ForeignTagError,
    NodesExceeded,
    foreign_tag_message,
    line_of,
    nested_deeper_than,
)

MAX_NUMBER_CHARS = 128


class _Composer(Reader, Scanner, Parser, BoundedComposer, Resolver):
    """PyYAML's pure-Python scanner and parser (``yaml.SafeLoader``'s: the same marks
    and messages), composed by the bounded composer."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        BoundedComposer.__init__(self)
        Resolver.__init__(self)


_FastComposer: type[Any] = _Composer
try:  # libyaml's scanner and parser where present (PyYAML's wheels include it)
    from yaml._yaml import CParser

    class _CComposer(BoundedComposer, CParser, Resolver):
        """libyaml's scanner and parser (C), composed by the bounded composer."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            BoundedComposer.__init__(self)
            Resolver.__init__(self)

    _FastComposer = _CComposer
except ImportError:  # pragma: no cover
    pass


class YAMLBoundsError(InputError):
    """A YAML document is larger, deeper or expands to more nodes than allowed."""


def located(source: object, node: yaml.Node | None, key: str, message: str) -> str:
    """``FILE:LINE: KEY: message``: the one form a mistake in a hand-written YAML file
    (spec, policy) is reported in, so the user can jump to the line to fix."""
    line = line_of(node.start_mark) if node is not None else ""
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


def _too_deep(where: str, mark: Any, max_depth: int) -> YAMLBoundsError:
    return YAMLBoundsError(f"{where}{line_of(mark)}: YAML nested deeper than {max_depth} levels")


def _bounded_node(
    composer: type[Any], text: str, where: str, max_bytes: int, max_depth: int, max_nodes: int
) -> yaml.Node | None:
    """The one document of ``text`` composed within the bounds, each bound exceeded a
    YAMLBoundsError naming ``where``."""
    if utf8_length(text, max_bytes) > max_bytes:
        raise YAMLBoundsError(f"{where}: larger than the {describe_size(max_bytes)} limit")
    loader = composer(text)
    loader.max_depth = max_depth
    loader.scalars_nest = False
    loader.max_total_nodes = loader.max_alias_nodes = loader.max_built_nodes = max_nodes
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    except ForeignTagError as exc:
        raise InputError(foreign_tag_message(where, exc)) from None
    except DepthExceeded as exc:
        raise _too_deep(where, exc.problem_mark, max_depth) from None
    except NodesExceeded:
        raise YAMLBoundsError(
            f"{where}: YAML expands to more than {max_nodes} nodes (through aliases?)"
        ) from None
    except yaml.MarkedYAMLError as exc:
        if not nested_deeper_than(exc, max_depth):
            raise
        raise _too_deep(where, exc.problem_mark, max_depth) from None
    finally:
        loader.dispose()


def safe_load(
    text: str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> Any:
    """``yaml.safe_load`` of a small document, within the bounds: libyaml's parser where
    present and a bounded safe constructor (every import and verify reads each
    provider's metadata.yaml through here)."""
    root = _bounded_node(_FastComposer, text, where, max_bytes, max_depth, max_nodes)
    return None if root is None else construct(root)


def compose(
    text: str,
    where: str,
    *,
    max_bytes: int,
    max_depth: int = MAX_YAML_DEPTH,
    max_nodes: int = MAX_YAML_NODES,
) -> yaml.Node | None:
    """The node tree of a small document (with line numbers), within the bounds."""
    return _bounded_node(_Composer, text, where, max_bytes, max_depth, max_nodes)
