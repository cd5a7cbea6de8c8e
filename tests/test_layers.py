"""airgap's packages form layers, and a package imports only from layers below its own.

The contract is ``LAYERS``: each package sits in one layer; packages of one layer are
siblings that never import each other (``mirror`` pushes, ``configmaps`` makes the
operator's objects; both build on ``rewrite`` and neither on the other). The modules at
the top (``airgap.cli``, ``airgap.__main__``) may import anything.

The graph is read from the source, every ``import`` statement included (also those
inside functions, deferred for start-up time), so a deferred import cannot hide an
upward edge. ``docs/design.md`` draws the same layers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import airgap

pytestmark = pytest.mark.unit

ROOT = Path(airgap.__file__).parent

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "core",
        "formats",
        "net oci",
        "sources registry",
        "bundle providers supplychain",
        "content installer",
        "verify",
        "rewrite",
        "mirror configmaps collect serve",
        "importing",
        "prune",
        "cli",
    )
)
TOP_MODULES = {"__init__", "__main__"}


@dataclass(frozen=True)
class Edge:
    """``module`` (file ``path``, line ``line``) imports ``target``."""

    module: str
    path: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.target}"


def _imported(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            # ``from airgap import mirror`` and ``from airgap.net import pacing`` name
            # modules in their names, not in ``node.module``.
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def edges(root: Path) -> Iterator[Edge]:
    """Every import of an ``airgap`` module by a module under ``root`` (an ``airgap``
    package directory)."""
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("airgap", *path.relative_to(root).with_suffix("").parts))
        for target, line in _imported(ast.parse(path.read_text(), str(path))):
            if target == "airgap" or target.startswith("airgap."):
                yield Edge(module, path, line, target)


def layer_of(module: str) -> int | None:
    """The layer of ``airgap.PACKAGE...`` (``None`` for the top modules and for names
    that are not airgap's packages, such as ``airgap.__version__``)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in TOP_MODULES:
        return None
    for index, layer in enumerate(LAYERS):
        if parts[1] in layer:
            return index
    return None


def violations(root: Path) -> list[str]:
    """Every import from a layer to the same layer's siblings or to a layer above."""
    found = []
    for edge in edges(root):
        source, target = layer_of(edge.module), layer_of(edge.target)
        if source is None or target is None:
            continue
        same_package = edge.module.split(".")[1] == edge.target.split(".")[1]
        if target > source or (target == source and not same_package):
            found.append(str(edge))
    return sorted(set(found))


def test_every_package_and_module_has_a_layer() -> None:
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    modules = {path.stem for path in ROOT.glob("*.py")} - TOP_MODULES
    assert packages | modules == set().union(*LAYERS)


def test_every_package_says_what_it_is_for_and_what_it_may_import() -> None:
    for init in sorted(ROOT.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert f"Layer {layer_of('airgap.' + init.parent.name)}:" in doc, init


def test_no_package_imports_upward_or_sideways() -> None:
    assert violations(ROOT) == []


def test_the_reader_sees_deferred_imports() -> None:
    """``airgap.cli`` imports the commands' libraries inside functions (start-up time);
    the contract still sees those edges."""
    found = [e for e in edges(ROOT) if e.module.startswith("airgap.cli.")]
    assert {layer_of(e.target) for e in found} >= {0, 8, 9, 10}


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "airgap"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_upward_import_fails_the_contract(tmp_path: Path) -> None:
    root = _fake_tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/errors.py": "def late():\n    from airgap.net import pacing\n",
            "net/__init__.py": "",
            "net/pacing.py": "from airgap.core import errors\n",
            "mirror/push.py": "import airgap.configmaps.emit\n",
            "configmaps/emit.py": "from airgap.rewrite.mapping import Mapping\n",
        },
    )
    assert violations(root) == [
        f"{root / 'core/errors.py'}:2: airgap.core.errors imports airgap.net",
        f"{root / 'core/errors.py'}:2: airgap.core.errors imports airgap.net.pacing",
        f"{root / 'mirror/push.py'}:1: airgap.mirror.push imports airgap.configmaps.emit",
    ]
