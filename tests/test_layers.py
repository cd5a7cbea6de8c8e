"""airgap's packages form layers: a package never imports one that imports it back, and
``mirror`` (pushing) and ``configmaps`` (the operator's objects) share only what lies
below them (``rewrite``); ``importing`` is the one package that builds on both.

Read from the source (every ``import`` statement, also those inside functions), so a
deferred import cannot hide a cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import airgap

ROOT = Path(airgap.__file__).parent


def _packages() -> set[str]:
    return {path.parent.name for path in ROOT.glob("*/__init__.py")}


def _package_of(module: str, packages: set[str]) -> str | None:
    parts = module.split(".")
    if parts[0] != "airgap" or len(parts) < 2 or parts[1] not in packages:
        return None
    return parts[1]


def _imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "airgap":  # from airgap import mirror
                yield from (f"airgap.{alias.name}" for alias in node.names)
            else:
                yield node.module


def package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the modules of the first that import the second."""
    packages = _packages()
    edges: dict[str, dict[str, list[str]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("airgap", *path.relative_to(ROOT).with_suffix("").parts))
        source = _package_of(module, packages)
        if source is None:
            continue
        for name in _imported(ast.parse(path.read_text(), str(path))):
            target = _package_of(name, packages)
            if target is not None and target != source:
                edges.setdefault(source, {}).setdefault(target, []).append(module)
    return edges


def test_the_reader_sees_the_packages_and_their_imports() -> None:
    edges = package_imports()
    assert {"mirror", "configmaps", "rewrite", "importing", "verify"} <= _packages()
    assert {"mirror", "configmaps", "rewrite"} <= set(edges["importing"])
    assert "rewrite" in edges["mirror"] and "rewrite" in edges["configmaps"]


def test_no_two_packages_import_each_other() -> None:
    edges = package_imports()
    cycles = [
        f"{a} <-> {b} ({edges[a][b][0]}, {edges[b][a][0]})"
        for a in edges
        for b in edges[a]
        if a < b and a in edges.get(b, {})
    ]
    assert cycles == []


def test_mirror_and_configmaps_share_only_what_lies_below_them() -> None:
    edges = package_imports()
    assert "configmaps" not in edges.get("mirror", {})
    assert "mirror" not in edges.get("configmaps", {})
    below = {"rewrite", "verify", "bundle", "providers", "content", "registry"}
    for lower in below:
        assert not {"mirror", "configmaps", "importing"} & set(edges.get(lower, {})), lower
