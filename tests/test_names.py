"""How outside values are quoted in messages (``airgap.core.names``): briefly."""

from __future__ import annotations

import pytest

from airgap.core.names import shown

pytestmark = pytest.mark.unit


def test_shown_quotes_and_cuts_long_text() -> None:
    assert shown("v1.9.4") == "'v1.9.4'"
    assert shown("x" * 81) == repr("x" * 80) + "..."
    assert shown("a\nb") == "'a\\nb'"  # one line whatever the text holds


def test_shown_abridges_any_parsed_value() -> None:
    assert shown("v1") == "'v1'"
    assert shown(None) == "None"
    assert shown(-3) == "-3"
    long_list = shown(["x" * 100] * 3000)
    assert len(long_list) <= 83 and long_list.startswith("['xxx")
    assert len(shown({"k": list(range(10_000))})) <= 83
    assert len(shown(10**120)) <= 83


def test_shown_drops_user_info_before_cutting() -> None:
    """Cut first, a long URL could keep ``user:pa`` and lose the ``@`` that marks it."""
    url = "https://" + "m" * 70 + ".example/x:secretpassword@host/path"
    assert "secret" not in shown(url)
    assert shown("git+https://user:token@example.com/repo") == "'git+https://example.com/repo'"
