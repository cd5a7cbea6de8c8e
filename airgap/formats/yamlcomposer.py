"""The one bounded YAML composer: PyYAML's composer, counting as it builds.

Every YAML airgap reads from outside goes through ``BoundedComposer``: small documents
(specs, policies, metadata, chart values: ``airgap.formats.yamlsafe``) and streams of
megabytes (provider components: ``airgap.formats.yamlload``). It enforces, in the one pass
that builds the nodes:

- a nesting depth (PyYAML's composer and constructor recurse once per level, libyaml's
  composer in C, and deep nesting ends in RecursionError or a crash);
- what aliases expand to ("billion laughs": a few hundred bytes standing for 10⁹ nodes)
  and aliases to an ancestor (a cycle), and, where set, the nodes composed plus what
  aliases stand for (``max_total_nodes``);
- the nodes built into objects (documents being skipped build none);
- a tag outside YAML's core schema on any node, built or skipped (``foreign_tag``): a
  language-specific tag (``!!python/object/apply:os.system``) or an application's own
  (``!custom``) is hostile or broken input that Kubernetes' decoder would refuse.

With ``skip_kinds``, a document whose top-level ``kind`` is none of them is read to its
end without building nodes (bounds still enforced): in components most bytes are CRDs.

libyaml 0.2.6 has a nesting limit of its own, 1,000 levels, which its scanner can reach
first (it looks up to 1,024 characters ahead for a simple key). A document it stops
there is nested deeper than any bound airgap sets (all below 1,000), so readers report
it as that bound (``nested_deeper_than``), at the place libyaml stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode

from airgap.core.limits import (
    MAX_COMPONENTS_ALIAS_NODES,
    MAX_COMPONENTS_BUILT_NODES,
    MAX_COMPONENTS_DEPTH,
)
from airgap.core.names import shown

LIBYAML_NESTING_LIMIT = 1000  # libyaml's default; nothing in airgap changes it
_LIBYAML_NESTING = "exceeded maximum nesting depth"  # its problem, scanner and parser alike


class DepthExceeded(ComposerError):
    """A document nests deeper than the composer's ``max_depth``."""


class NodesExceeded(ComposerError):
    """A document's nodes, with aliases expanded, are more than ``max_total_nodes``."""


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


def line_of(mark: Any) -> str:
    """``:LINE`` of a mark (PyYAML's or libyaml's), or nothing."""
    return f":{mark.line + 1}" if mark is not None else ""


def foreign_tag_message(where: object, exc: ForeignTagError) -> str:
    """``WHERE:LINE: YAML tag ... is outside YAML's core schema``: one line, as a spec
    mistake is reported."""
    return f"{where}{line_of(exc.problem_mark)}: {exc.problem}"


def nested_deeper_than(exc: yaml.YAMLError, bound: int) -> bool:
    """Whether ``exc`` is libyaml's own nesting limit stopping a document, which is then
    nested deeper than ``bound`` (one of airgap's, all below libyaml's)."""
    return (
        isinstance(exc, yaml.MarkedYAMLError)
        and exc.problem == _LIBYAML_NESTING
        and bound < LIBYAML_NESTING_LIMIT
    )


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


class Restart(Exception):
    """A document being skipped turned out to need its nodes after all (a second
    ``kind`` key, or an alias as a key): the stream is parsed again without skipping."""


SKIPPED: Any = object()  # compose_document's answer for a document it skipped
# the keys of a document that say which object it defines (``<<`` may merge them in)
HEAD_KEYS = frozenset({"apiVersion", "kind", "metadata", "<<"})


class Head:
    """compose_document's answer for a document it skipped but for its ``keep_keys``:
    the root mapping holding only those pairs (and those read before the skip began)."""

    def __init__(self, node: MappingNode) -> None:
        self.node = node


_STR = "tag:yaml.org,2002:str"


def _error(problem: str, event: Any) -> ComposerError:
    return ComposerError(None, None, problem, event.start_mark)


def too_deep_problem(bound: int) -> str:
    return f"nested deeper than {bound} levels"


class BoundedComposer(Composer):
    """PyYAML's composer, counting depth and what aliases expand to; with
    ``skip_kinds``, a document whose top-level ``kind`` is none of them is read to its
    end without building nodes (bounds still enforced)."""

    max_depth = MAX_COMPONENTS_DEPTH
    max_alias_nodes = MAX_COMPONENTS_ALIAS_NODES
    max_built_nodes = MAX_COMPONENTS_BUILT_NODES
    max_total_nodes: float = float("inf")  # composed plus what aliases stand for
    # whether a scalar counts as a level of nesting (components' bound) or only
    # collections do (small documents' bound, as their readers have always counted)
    scalars_nest = True
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

    def compose_document(self) -> Node | Head | None:  # type: ignore[override]
        self.get_event()  # DOCUMENT-START
        node: Node | Head | None
        if self.skip_kinds is not None and self.check_event(MappingStartEvent):
            node = self._compose_root(self.skip_kinds)
        else:
            node = self.compose_node(None, None)
        self.get_event()  # DOCUMENT-END
        self.anchors = {}
        self._weights = {}
        return node

    def _compose_root(self, kinds: frozenset[str]) -> Node | Head:
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
                    raise Restart
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
            return Head(node) if self.keep_keys else SKIPPED
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
                        raise _error(too_deep_problem(self.max_depth), event)
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
        if self._depth > self.max_depth and (
            self.scalars_nest or not isinstance(event, ScalarEvent)
        ):
            raise DepthExceeded(None, None, too_deep_problem(self.max_depth), event.start_mark)
        start = self._total
        self._total += 1
        if self._total > self.max_total_nodes:
            raise self._too_many_nodes(event)
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

    def _too_many_nodes(self, event: Any) -> NodesExceeded:
        return NodesExceeded(
            None, None, f"more than {self.max_total_nodes} nodes", event.start_mark
        )

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
        if self._total > self.max_total_nodes:
            raise self._too_many_nodes(event)
        self._aliased += weight
        if self._aliased > self.max_alias_nodes:
            raise ComposerError(
                None,
                None,
                f"aliases expand to more than {self.max_alias_nodes} nodes",
                event.start_mark,
            )
