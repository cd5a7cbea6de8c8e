"""Fast, bounded, one-pass YAML loading for large streams: provider components (pure).

``airgap.formats.yamlsafe`` guards small documents (specs, policies, metadata) with a bounds pass
over the events before loading; for megabytes of components that would parse twice, so
this module enforces the same kind of bounds while composing, in a single pass.

A provider's components are megabytes of YAML and airgap reads them on every collect,
import and configmaps, so the loader matters: PyYAML's pure-Python scanner takes about a
second per megabyte, libyaml's (the ``yaml.cyaml`` binding, in PyYAML's wheels) a tenth
of that. The events libyaml produces are composed here in Python, not by libyaml's own
composer, for two reasons: the composer is where the bounds are enforced, and libyaml's
composer recurses in C (a few hundred thousand nested ``[`` crash the process). Composing
in Python over libyaml's events costs no more than libyaml's composer does.

Bounds (``airgap.core.limits``), each failing with one line naming the file, line and column:

- nesting deeper than ``MAX_COMPONENTS_DEPTH`` collections (real manifests stay below
  40; the limit also caps libyaml's per-token work, which grows with flow nesting);
- aliases that would expand to more than ``MAX_COMPONENTS_ALIAS_NODES`` nodes in all
  ("billion laughs": nine levels of ten aliases are a few hundred bytes that expand to
  10⁹ nodes for whoever walks the result), and aliases to an ancestor (a cycle);
- more than ``MAX_COMPONENTS_BUILT_NODES`` nodes built into objects in all (~400 bytes
  of memory each; documents being skipped build none, and the workloads, Namespaces and
  Lists components are read for hold a few hundred): 16 MiB of one Deployment would
  otherwise take ~2 GB and a minute;
- integers and floats longer than ``MAX_NUMBER_CHARS`` characters (a sexagesimal
  ``1:1:1:…`` of megabytes makes PyYAML multiply ever larger integers, and ``int()``
  refuses more than 4300 digits with a ValueError);
- a tag outside YAML's core schema on any node, built or skipped
  (``airgap.formats.yamlsafe.foreign_tag``): ``SOURCE:LINE: YAML tag ... is outside ...``.

Without libyaml the pure-Python loader runs with the same bounds and gives the same
documents (a test checks both on realistic components). A flow collection nested a
thousand levels deep meets libyaml 0.2.6's own limit before the composer sees level 101
(``airgap.formats.yamlsafe``): it is reported as the same bound, where libyaml stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from airgap.core.errors import InputError
from airgap.core.limits import (
    MAX_COMPONENTS_ALIAS_NODES,
    MAX_COMPONENTS_BUILT_NODES,
    MAX_COMPONENTS_DEPTH,
)
from airgap.core.names import shown
from airgap.formats.yamlsafe import (
    BoundedConstructor,
    ForeignTagError,
    foreign_tag,
    foreign_tag_message,
    nested_deeper_than,
    one_line,
)
from airgap.formats.yamlskim import skim

try:  # libyaml's scanner and parser; absent when PyYAML was built without it
    from yaml._yaml import CParser

    HAVE_LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML's wheels include libyaml
    HAVE_LIBYAML = False


_SCALAR, _START, _ALIAS, _END = 1, 2, 3, 4
_SKIP_KIND: dict[type, int] = {
    ScalarEvent: _SCALAR,
    MappingStartEvent: _START,
    SequenceStartEvent: _START,
    AliasEvent: _ALIAS,
    MappingEndEvent: _END,
    SequenceEndEvent: _END,
}


def _skip_kind(event: Any) -> int:
    """The branch of ``_skip_node`` for an event of a class not in ``_SKIP_KIND``."""
    if isinstance(event, AliasEvent):
        return _ALIAS
    if isinstance(event, ScalarEvent):
        return _SCALAR
    if isinstance(event, (SequenceStartEvent, MappingStartEvent)):
        return _START
    return _END


class _Restart(Exception):
    """A document being skipped turned out to need its nodes after all (a second
    ``kind`` key, or an alias as a key): the stream is parsed again without skipping."""


_SKIPPED: Any = object()  # compose_document's answer for a document it skipped
# the keys of a document that say which object it defines (``<<`` may merge them in)
HEAD_KEYS = frozenset({"apiVersion", "kind", "metadata", "<<"})


class _Head:
    """compose_document's answer for a document it skipped but for its ``keep_keys``:
    the root mapping holding only those pairs (and those read before the skip began)."""

    def __init__(self, node: MappingNode) -> None:
        self.node = node


_STR = "tag:yaml.org,2002:str"


def _error(problem: str, event: Any) -> ComposerError:
    return ComposerError(None, None, problem, event.start_mark)


def _too_deep(bound: int) -> str:
    return f"nested deeper than {bound} levels"


class _BoundedComposer(Composer):
    """PyYAML's composer, counting depth and what aliases expand to; with
    ``skip_kinds``, a document whose top-level ``kind`` is none of them is read to its
    end without building nodes (bounds still enforced)."""

    max_depth = MAX_COMPONENTS_DEPTH
    max_alias_nodes = MAX_COMPONENTS_ALIAS_NODES
    max_built_nodes = MAX_COMPONENTS_BUILT_NODES
    skip_kinds: frozenset[str] | None = None
    keep_keys: frozenset[str] = frozenset()  # of a skipped root: composed all the same

    if TYPE_CHECKING:  # provided by the parser and resolver this is mixed with

        def peek_event(self) -> Any: ...
        def get_event(self) -> Any: ...
        def check_event(self, *choices: type) -> bool: ...
        def descend_resolver(self, parent: Node | None, index: object) -> None: ...
        def ascend_resolver(self) -> None: ...
        def resolve(self, kind: type, value: Any, implicit: Any) -> str: ...

    def __init__(self) -> None:
        Composer.__init__(self)
        self._depth = 0
        self._total = 0  # nodes composed plus nodes aliases stand for
        self._aliased = 0  # nodes aliases stand for, over the whole stream
        self._built = 0  # nodes built (not skipped), over the whole stream
        self._weights: dict[str, int] = {}  # completed anchor -> nodes it stands for
        self._open: set[str] = set()  # anchors of collections being skipped

    def compose_document(self) -> Node | _Head | None:  # type: ignore[override]
        self.get_event()  # DOCUMENT-START
        node: Node | _Head | None
        if self.skip_kinds is not None and self.check_event(MappingStartEvent):
            node = self._compose_root(self.skip_kinds)
        else:
            node = self.compose_node(None, None)
        self.get_event()  # DOCUMENT-END
        self.anchors = {}
        self._weights = {}
        return node

    def _compose_root(self, kinds: frozenset[str]) -> Node | _Head:
        """The top-level mapping, pair by pair, until an explicit ``kind`` outside
        ``kinds`` is seen; then the rest is skipped (an explicit key always wins over
        merged ones, so only another ``kind`` key could change it: that restarts)."""
        event: Any = self.get_event()
        if foreign_tag(event.tag):
            raise ForeignTagError(event.tag, event.start_mark)
        self._depth += 1
        self._total += 1
        self.descend_resolver(None, None)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(MappingNode, None, event.implicit)
        node = MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
        if event.anchor is not None:
            self.anchors[event.anchor] = node
        skipping = False
        while not self.check_event(MappingEndEvent):
            if skipping:
                upcoming = self.peek_event()
                if self._is_kind_key(upcoming):
                    raise _Restart
                if isinstance(upcoming, ScalarEvent) and upcoming.value in self.keep_keys:
                    key = self.compose_node(node, None)
                    node.value.append((key, self.compose_node(node, key)))
                    continue
                self._skip_node()
                self._skip_node()
                continue
            key = self.compose_node(node, None)
            value = self.compose_node(node, key)
            node.value.append((key, value))
            if isinstance(key, ScalarNode) and key.tag == _STR and key.value == "kind":
                kind = value.value if isinstance(value, ScalarNode) and value.tag == _STR else None
                skipping = kind not in kinds
        node.end_mark = self.get_event().end_mark
        self.ascend_resolver()
        self._depth -= 1
        if skipping:
            return _Head(node) if self.keep_keys else _SKIPPED
        return node

    def _is_kind_key(self, event: Any) -> bool:
        if isinstance(event, AliasEvent):
            return True  # it may stand for "kind": not worth finding out
        if not isinstance(event, ScalarEvent) or event.value != "kind":
            return False
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(ScalarNode, event.value, event.implicit)
        return bool(tag == _STR)

    def _skip_node(self) -> None:
        """Consume one node's events, building nothing, with every bound kept.

        Most of a components file is skipped here (its CRDs), one event at a time, so
        the loop is kept tight: the event's exact class picks the branch (anything else
        goes through ``isinstance``), counts stay in locals, and anchors, rare in real
        manifests, are looked at only when an event has one."""
        open_collections: list[tuple[str | None, int]] = []  # (anchor, total at start)
        get_event = self.get_event
        limit = self.max_depth - self._depth
        total = self._total
        try:
            while True:
                event: Any = get_event()
                kind = _SKIP_KIND.get(event.__class__) or _skip_kind(event)
                if kind == _SCALAR:
                    total += 1
                    if event.tag is not None and foreign_tag(event.tag):
                        raise ForeignTagError(event.tag, event.start_mark)
                    if event.anchor is not None:
                        self._new_anchor(event)
                        self._weights[event.anchor] = 1
                elif kind == _START:
                    if event.tag is not None and foreign_tag(event.tag):
                        raise ForeignTagError(event.tag, event.start_mark)
                    if event.anchor is not None:
                        self._new_anchor(event)
                        self._open.add(event.anchor)
                    if len(open_collections) + 1 > limit:
                        raise _error(_too_deep(self.max_depth), event)
                    open_collections.append((event.anchor, total))
                    total += 1
                    continue
                elif kind == _ALIAS:
                    self._total = total
                    self._count_alias(event)
                    total = self._total
                else:  # the end of a collection
                    anchor, start = open_collections.pop()
                    if anchor is not None:
                        self._weights[anchor] = total - start
                        self._open.discard(anchor)
                if not open_collections:
                    return
        finally:
            self._total = total

    def _new_anchor(self, event: Any) -> None:
        anchor = event.anchor
        if anchor is not None and (
            anchor in self.anchors or anchor in self._weights or anchor in self._open
        ):
            raise _error(f"found duplicate anchor {shown(anchor)}", event)

    def compose_node(self, parent: Node | None, index: object) -> Node:
        event: Any = self.peek_event()
        anchor = event.anchor
        if isinstance(event, AliasEvent):
            return self._alias(event)
        if foreign_tag(event.tag):
            raise ForeignTagError(event.tag, event.start_mark)
        if anchor is not None and anchor in self.anchors:
            raise ComposerError(
                f"found duplicate anchor {shown(anchor)}; first occurrence",
                self.anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )
        self._depth += 1
        if self._depth > self.max_depth:
            raise _error(_too_deep(self.max_depth), event)
        start = self._total
        self._total += 1
        self._built += 1
        if self._built > self.max_built_nodes:
            raise _error(f"more than {self.max_built_nodes} nodes to build", event)
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
        self._count_alias(event)
        node: Node = self.anchors[event.anchor]
        return node

    def _count_alias(self, event: Any) -> None:
        anchor = event.anchor
        weight = self._weights.get(anchor)
        if weight is None:
            if anchor in self.anchors or anchor in self._open:  # inside its own anchor
                raise _error(f"alias *{anchor[:80]} refers to its own ancestor", event)
            raise _error(f"found undefined alias {shown(anchor)}", event)
        self._total += weight
        self._aliased += weight
        if self._aliased > self.max_alias_nodes:
            raise ComposerError(
                None,
                None,
                f"aliases expand to more than {self.max_alias_nodes} nodes",
                event.start_mark,
            )


class PureLoader(Reader, Scanner, Parser, _BoundedComposer, BoundedConstructor, Resolver):
    """PyYAML's pure-Python scanner and parser, bounded."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        BoundedConstructor.__init__(self)
        Resolver.__init__(self)


DEFAULT_LOADER: type[Any] = PureLoader
if HAVE_LIBYAML:

    class FastLoader(_BoundedComposer, CParser, BoundedConstructor, Resolver):
        """libyaml's scanner and parser (C), composed and constructed as PureLoader."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _BoundedComposer.__init__(self)
            BoundedConstructor.__init__(self)
            Resolver.__init__(self)

    DEFAULT_LOADER = FastLoader


def iter_documents(
    text: str,
    source: str,
    *,
    pure: bool = False,
    kinds: frozenset[str] | None = None,
    on_document: Callable[[int, Any], None] | None = None,
) -> Generator[Any, None, None]:
    """Each document of a YAML stream in turn, ``None`` for empty ones; one document is
    in memory at a time. ``pure`` forces the pure-Python scanner (for tests).

    With ``kinds``, only mappings whose ``kind`` is one of them are built into Python
    objects and yielded; every other document is still parsed whole (and bounded), but
    skipped as nodes: in components most bytes are CRDs, and building their schemas
    into dicts is a third of the parse. ``kind`` is read from the nodes as the
    constructor would read it (merge keys applied, the last ``kind`` key winning). A
    document whose text shows its kind for certain (``airgap.formats.yamlskim``) and it is not
    one of them never reaches the composer: libyaml's parser alone checks it.

    ``on_document(line, head)`` is called for every document, yielded or not, with the
    line it starts on and the document (for one skipped: a mapping of its
    ``HEAD_KEYS`` only, enough to say which object it defines); no document is then set
    aside by the skim, whose documents the composer never sees.

    Raises InputError ``SOURCE:LINE:COLUMN: malformed YAML: …`` (or a bound exceeded).
    """
    loader: Any = None
    done = 0  # documents read (yielded or skipped)
    try:
        if kinds is not None and not pure and HAVE_LIBYAML and on_document is None:
            text = _skimmed(text, kinds)
        try:
            # the pure Reader checks every character up front: construction may fail too
            loader = (PureLoader if pure else DEFAULT_LOADER)(text)
            loader.skip_kinds = kinds
            if on_document is not None:
                loader.keep_keys = HEAD_KEYS
            for document in _documents(loader, kinds, 0, on_document):
                done += 1
                if document is not _SKIPPED:
                    yield document
        except _Restart:  # an odd document: read everything again, building all nodes
            loader.dispose()
            loader = (PureLoader if pure else DEFAULT_LOADER)(text)
            for document in _documents(loader, kinds, done, on_document):
                if document is not _SKIPPED:
                    yield document
    except ForeignTagError as exc:
        raise InputError(foreign_tag_message(source, exc)) from None
    except yaml.YAMLError as exc:
        problem = _problem(exc)
        bound = _BoundedComposer.max_depth
        if nested_deeper_than(exc, bound):  # libyaml's own limit came first
            problem = _too_deep(bound)
        raise InputError(f"{source}{_where(exc)}: malformed YAML: {problem}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date 2020-13-45
        raise InputError(f"{source}: malformed YAML: {one_line(str(exc))}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _skimmed(text: str, kinds: frozenset[str]) -> str:
    """``text`` with the documents ``yamlskim`` finds certainly unwanted blanked, each
    checked first by libyaml's parser alone (no objects); an error it finds is reported
    at the document's place in the file."""
    skimmed = skim(text, kinds)
    if skimmed is None:
        return text
    for line, document in skimmed.set_aside():
        try:
            CParser(document).raw_parse()
        except yaml.MarkedYAMLError as exc:
            exc.context_mark = _moved(exc.context_mark, line)
            exc.problem_mark = _moved(exc.problem_mark, line)
            raise
    return skimmed.text


def _moved(mark: Any, lines: int) -> Any:
    """``mark`` (libyaml's, read-only) ``lines`` further down."""
    if mark is None:
        return None
    return yaml.Mark(mark.name, mark.index, mark.line + lines, mark.column, None, 0)


def _documents(
    loader: Any,
    kinds: frozenset[str] | None,
    start: int,
    on_document: Callable[[int, Any], None] | None = None,
) -> Iterator[Any]:
    """Documents from number ``start`` on: built, or _SKIPPED; each (or its head) handed
    to ``on_document`` with its line first."""
    index = 0
    while loader.check_node():
        node = loader.get_node()
        index += 1
        if index <= start:
            continue
        if isinstance(node, _Head):
            if on_document is not None:
                on_document(node.node.start_mark.line + 1, loader.construct_document(node.node))
            yield _SKIPPED
        elif node is _SKIPPED or (kinds is not None and _kind(loader, node) not in kinds):
            if on_document is not None and node is not _SKIPPED:
                on_document(node.start_mark.line + 1, loader.construct_document(node))
            yield _SKIPPED
        else:
            document = loader.construct_document(node)
            if on_document is not None:
                on_document(node.start_mark.line + 1, document)
            yield document


def _kind(loader: SafeConstructor, node: Node | None) -> str | None:
    """The ``kind`` a mapping node would have as a dict (None if it is no mapping)."""
    if not isinstance(node, MappingNode):
        return None
    loader.flatten_mapping(node)  # merge keys, as construct_mapping applies them
    kind = None
    for key, value in node.value:
        if (
            isinstance(key, ScalarNode) and key.tag == _STR and key.value == "kind"
        ):  # the last one wins, as in a dict
            kind = value.value if isinstance(value, ScalarNode) and value.tag == _STR else None
    return kind


_STR = "tag:yaml.org,2002:str"


def load_documents(text: str, source: str, *, pure: bool = False) -> list[Any]:
    """Every non-empty document of a YAML stream."""
    return [doc for doc in iter_documents(text, source, pure=pure) if doc is not None]


def load_single(text: str, source: str, *, pure: bool = False) -> Any:
    """The one document of a YAML file (None if empty); more than one is an error."""
    documents = list(iter_documents(text, source, pure=pure))
    if len(documents) > 1:
        raise InputError(f"{source}: expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


def load_first(text: str, source: str, *, pure: bool = False) -> Any:
    """The first document of a YAML file (None if empty), the rest neither read nor
    checked: how Helm reads ``Chart.yaml`` and ``values.yaml`` (sigs.k8s.io/yaml, whose
    go-yaml "decodes the first document found"). cloud-provider-aws's chart writes its
    ``Chart.yaml`` between two ``---``, which is two documents."""
    documents = iter_documents(text, source, pure=pure)
    try:
        return next(documents, None)
    finally:
        documents.close()  # the loader is disposed of now, not when collected


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
            return one_line(f"{context} at line {context_mark.line + 1}, {problem}")
        return one_line(problem)
    reason = getattr(exc, "reason", None)  # ReaderError: a forbidden character
    if isinstance(reason, str) and reason:
        return one_line(reason)
    return one_line(str(exc)) or "invalid YAML"
