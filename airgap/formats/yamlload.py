"""Fast, bounded, one-pass YAML loading for large streams: provider components (pure).

Small documents (specs, policies, metadata) are read by ``airgap.formats.yamlsafe``;
both compose through the one bounded composer (``airgap.formats.yamlcomposer``), which
enforces the bounds while it composes, in a single pass.

A provider's components are megabytes of YAML and airgap reads them on every collect,
import and configmaps, so the loader matters: PyYAML's pure-Python scanner is an order of
magnitude slower than libyaml's (the ``yaml.cyaml`` binding, in PyYAML's wheels).
The events libyaml produces are composed here in Python, not by libyaml's own
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
  (``airgap.formats.yamlcomposer.foreign_tag``): ``SOURCE:LINE: YAML tag ... is outside ...``.

Without libyaml the pure-Python loader runs with the same bounds and gives the same
documents (a test checks both on realistic components). A flow collection nested a
thousand levels deep meets libyaml 0.2.6's own limit before the composer sees level 101
(``airgap.formats.yamlcomposer``): it is reported as the same bound, where libyaml stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from airgap.core.errors import InputError
from airgap.formats.yamlcomposer import (
    HEAD_KEYS,
    SKIPPED,
    BoundedComposer,
    ForeignTagError,
    Head,
    Restart,
    foreign_tag_message,
    nested_deeper_than,
    too_deep_problem,
)
from airgap.formats.yamlsafe import BoundedConstructor, one_line
from airgap.formats.yamlskim import skim

try:  # libyaml's scanner and parser; absent when PyYAML was built without it
    from yaml._yaml import CParser

    HAVE_LIBYAML = True
except ImportError:  # pragma: no cover - PyYAML's wheels include libyaml
    HAVE_LIBYAML = False


class PureLoader(Reader, Scanner, Parser, BoundedComposer, BoundedConstructor, Resolver):
    """PyYAML's pure-Python scanner and parser, bounded."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        BoundedComposer.__init__(self)
        BoundedConstructor.__init__(self)
        Resolver.__init__(self)


DEFAULT_LOADER: type[Any] = PureLoader
if HAVE_LIBYAML:

    class FastLoader(BoundedComposer, CParser, BoundedConstructor, Resolver):
        """libyaml's scanner and parser (C), composed and constructed as PureLoader."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            BoundedComposer.__init__(self)
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
                if document is not SKIPPED:
                    yield document
        except Restart:  # an odd document: read everything again, building all nodes
            loader.dispose()
            loader = (PureLoader if pure else DEFAULT_LOADER)(text)
            for document in _documents(loader, kinds, done, on_document):
                if document is not SKIPPED:
                    yield document
    except ForeignTagError as exc:
        raise InputError(foreign_tag_message(source, exc)) from None
    except yaml.YAMLError as exc:
        problem = _problem(exc)
        bound = BoundedComposer.max_depth
        if nested_deeper_than(exc, bound):  # libyaml's own limit came first
            problem = too_deep_problem(bound)
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
    """Documents from number ``start`` on: built, or SKIPPED; each (or its head) handed
    to ``on_document`` with its line first."""
    index = 0
    while loader.check_node():
        node = loader.get_node()
        index += 1
        if index <= start:
            continue
        if isinstance(node, Head):
            if on_document is not None:
                on_document(node.node.start_mark.line + 1, loader.construct_document(node.node))
            yield SKIPPED
        elif node is SKIPPED or (kinds is not None and _kind(loader, node) not in kinds):
            if on_document is not None and node is not SKIPPED:
                on_document(node.start_mark.line + 1, loader.construct_document(node))
            yield SKIPPED
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
