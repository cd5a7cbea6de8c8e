"""Hand-written YAML (a spec, a policy) read as nodes, so that every mistake is ONE line
naming the file, the line and the key path to fix (``spec.yaml:7: providers[1].version:
...``).

A collect can run for an hour and a policy gates what is signed: neither may start on a
typo. The document is composed through the one bounded YAML path (``yamlsafe``) and kept
as nodes, which carry their line; ``LocatedDocument`` finds a node by its key path and
reads typed values from nodes, raising ``SpecError`` in the one located form.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from airgap.core.errors import SpecError
from airgap.core.names import shown
from airgap.formats import yamlsafe

NULL_TAG = "tag:yaml.org,2002:null"
BOOL_TAG = "tag:yaml.org,2002:bool"
STR_TAG = "tag:yaml.org,2002:str"

Keys = dict[str, tuple[Node, Node]]


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def describe(node: Node, *, quote: bool = True) -> str:
    """What a node is, for a type error; its value quoted (briefly) only if ``quote``."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, ScalarNode):
        if node.tag == NULL_TAG:
            return "empty"
        kind = node.tag.rsplit(":", 1)[-1]
        if not quote:
            return "text" if node.tag == STR_TAG else f"a value of type {kind}"
        if node.tag == STR_TAG:
            return f"{shown(node.value)}"
        return f"{kind} {shown(node.value)}"
    return "an unknown node"


def yaml_error(path: Path, exc: yaml.YAMLError, default: str = "") -> SpecError:
    """``FILE:LINE:COLUMN: malformed YAML: problem`` for a document that does not parse
    (``default`` names the problem when the parser gives none)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or default
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    return SpecError(f"{path}{where}: malformed YAML{f': {problem}' if problem else ''}")


def step_path(steps: tuple[str | int, ...]) -> str:
    """``requireSignatures.keys[0]`` for the steps ``requireSignatures``, ``keys``, 0."""
    key = ""
    for step in steps:
        key += f"[{step}]" if isinstance(step, int) else (f".{step}" if key else step)
    return key


class LocatedDocument:
    """One YAML document's nodes and the errors that point into it."""

    def __init__(self, path: Path, root: Node | None = None) -> None:
        self.path = path
        self.root = root

    def error(self, node: Node | None, key: str, message: str) -> SpecError:
        """``FILE:LINE: key: message``, the line being ``node``'s."""
        return SpecError(yamlsafe.located(self.path, node, key, message))

    def at(self, *steps: str | int) -> Node | None:
        """The node at a path of keys and list positions (``requireSignatures``,
        ``keys``, 0), or the nearest one that exists."""
        node = self.root
        for step in steps:
            child: Node | None = None
            if isinstance(node, MappingNode) and isinstance(step, str):
                child = next(
                    (v for k, v in node.value if isinstance(k, ScalarNode) and k.value == step),
                    None,
                )
            elif isinstance(node, SequenceNode) and isinstance(step, int):
                child = node.value[step] if step < len(node.value) else None
            if child is None:
                return node
            node = child
        return node

    def error_at(self, message: str, *steps: str | int) -> SpecError:
        """``FILE:LINE: requireSignatures.keys[0]: message``."""
        return self.error(self.at(*steps), step_path(steps), message)

    def key_error(self, key: str, message: str) -> SpecError:
        """An error pointing at a top-level key itself (an unknown one), not its value."""
        for key_node, _ in self.root.value if isinstance(self.root, MappingNode) else []:
            if isinstance(key_node, ScalarNode) and str(key_node.value) == key:
                return self.error(key_node, "", message)
        return self.error(self.root, "", message)

    # --- typed values -----------------------------------------------------------------

    def mapping(self, node: Node, where: str, allowed: tuple[str, ...] | None) -> Keys:
        """Keys of a mapping node (with key and value nodes); unknown keys are errors."""
        if not isinstance(node, MappingNode):
            # the document itself is described, never quoted: a file given by mistake (a
            # private key, a token file) is not printed, not even in part
            shown_as = describe(node, quote=bool(where))
            raise self.error(node, where, f"must be a mapping, not {shown_as}")
        result: Keys = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == NULL_TAG:
                raise self.error(key_node, where, "keys must be strings")
            key = key_node.value
            path = f"{where}.{key}" if where else key
            if allowed is not None and key not in allowed:
                raise self.error(
                    key_node, path, f"unknown key {shown(key)} (allowed: {', '.join(allowed)})"
                )
            if key in result:
                raise self.error(key_node, path, "duplicate key")
            result[key] = (key_node, value_node)
        return result

    def sequence(self, node: Node, where: str) -> list[Node]:
        if not isinstance(node, SequenceNode):
            raise self.error(node, where, f"must be a list, not {describe(node)}")
        return list(node.value)

    def string(self, node: Node, where: str) -> str:
        """A scalar's text as written: ``1.10`` stays ``1.10``, never the float 1.1."""
        if not isinstance(node, ScalarNode) or node.tag in (NULL_TAG, BOOL_TAG):
            raise self.error(node, where, f"must be a string, not {describe(node)}")
        text = str(node.value).strip()
        if not text:
            raise self.error(node, where, "must not be empty")
        return text

    def required_string(self, parent: Node, keys: Keys, where: str, key: str) -> str:
        entry = keys.get(key)
        if entry is None or is_null(entry[1]):
            raise self.error(
                entry[1] if entry else parent, f"{where}.{key}", "missing required key"
            )
        return self.string(entry[1], f"{where}.{key}")

    def optional_string(
        self, keys: Keys, where: str, key: str, check: Callable[[str], str | None] | None
    ) -> str | None:
        entry = keys.get(key)
        if entry is None or is_null(entry[1]):
            return None
        text = self.string(entry[1], f"{where}.{key}")
        problem = check(text) if check else None
        if problem:
            raise self.error(entry[1], f"{where}.{key}", problem)
        return text

    def boolean(self, keys: Keys, where: str, key: str) -> bool:
        entry = keys.get(key)
        if entry is None or is_null(entry[1]):
            return False
        node = entry[1]
        path = f"{where}.{key}" if where else key
        if not isinstance(node, ScalarNode) or node.tag != BOOL_TAG:
            raise self.error(node, path, f"must be true or false, not {describe(node)}")
        return str(node.value).lower() in ("true", "yes", "on", "y")
