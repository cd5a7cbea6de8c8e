"""Bundle specs written from text, for tests of what the spec parser accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from airgap.collect.spec import BundleSpec, parse_spec
from airgap.core.errors import SpecError


def spec_of(text: str, tmp_path: Path) -> BundleSpec:
    """Parse ``text`` as ``tmp_path/spec.yaml`` (written there: relative paths in a spec
    resolve against its directory, as for a real spec file)."""
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return parse_spec(text, path)


def assert_spec_error(text: str, tmp_path: Path, line: int, needle: str) -> str:
    """Parsing ``text`` fails with a SpecError naming the spec file and ``line`` first,
    then saying ``needle``; returns the message."""
    with pytest.raises(SpecError) as caught:
        spec_of(text, tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'spec.yaml'}:{line}:"), message
    assert needle in message
    return message
