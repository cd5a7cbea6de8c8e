"""Bundle specs written from text, for tests of what the spec parser accepts."""

from __future__ import annotations

from pathlib import Path

from airgap.collect.spec import BundleSpec, parse_spec


def spec_of(text: str, tmp_path: Path) -> BundleSpec:
    """Parse ``text`` as ``tmp_path/spec.yaml`` (written there: relative paths in a spec
    resolve against its directory, as for a real spec file)."""
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return parse_spec(text, path)
