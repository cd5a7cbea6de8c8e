"""The tiers plugin (tests/harness/tiers.py): every test chooses unit, integration or e2e;
unit tests stay in process; a missing tool skips with its name, and fails where the whole
suite must run (AIRGAP_TEST_REQUIRE_ALL=1, CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import registry
from tests.harness.tiers import REQUIRE_ALL, need_tool

pytestmark = pytest.mark.unit

CONFTEST = 'pytest_plugins = ["tests.harness.tiers"]\n'
INI = """
[pytest]
markers =
    unit: u
    integration: i
    e2e: e
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project with the tiers plugin and markers registered, CI unset."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(REQUIRE_ALL, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def test_a_test_without_a_tier_stops_the_collection_even_when_deselected(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_x="import pytest\n@pytest.mark.unit\ndef test_a(): pass\ndef test_b(): pass\n"
    )
    result = inner.runpytest_inprocess("-m", "unit")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x.py::test_b: no tier mark*"])


def test_a_test_in_two_tiers_is_refused(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_x="import pytest\npytestmark = pytest.mark.unit\n"
        "@pytest.mark.e2e\ndef test_a(): pass\n"
    )
    result = inner.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x.py::test_a: more than one tier mark (e2e, unit)*"])


def test_a_unit_test_asking_for_a_registry_is_refused(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_x="import pytest\n@pytest.fixture\ndef plain_registry(): return 1\n"
        "@pytest.mark.unit\ndef test_a(plain_registry): pass\n"
    )
    result = inner.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_a: marked unit but starts servers (plain_registry)*"])


def test_a_unit_test_may_not_start_a_process_or_listen(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_x="import socket, subprocess, pytest\n"
        "pytestmark = pytest.mark.unit\n"
        "def test_process(): subprocess.run(['true'], check=True)\n"
        "def test_listen():\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0)); s.listen()\n"
        "def test_pure(): assert sorted([2, 1]) == [1, 2]\n"
    )
    result = inner.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*a unit test may not start a process: mark it integration or e2e*",
            "*a unit test may not listen on a socket: mark it integration or e2e*",
        ]
    )


SKIPPING = (
    "import pytest\npytestmark = pytest.mark.integration\n"
    "def test_a(): pytest.skip('docker-registry not installed: run scripts/bootstrap.sh')\n"
)


def test_a_skip_is_a_skip_with_its_reason_in_a_partial_run(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_x=SKIPPING)
    result = inner.runpytest_inprocess("-ra")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*docker-registry not installed: run scripts/bootstrap.sh"])


@pytest.mark.parametrize(("name", "value"), [(REQUIRE_ALL, "1"), ("CI", "true")])
def test_a_skip_fails_where_everything_must_run(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    inner.makepyfile(test_x=SKIPPING)
    result = inner.runpytest_inprocess("-ra")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*skipped, but AIRGAP_TEST_REQUIRE_ALL=1 or CI is set*docker-registry not installed*"]
    )


def test_a_missing_tool_is_a_skip_naming_it() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"^no-such-tool not installed: run scripts/"):
        need_tool("no-such-tool")
    assert need_tool("sh") == need_tool("sh", "/nonexistent/sh")


def test_a_registry_without_docker_registry_skips_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(registry, "REGISTRY_BINARY", "docker-registry")
    with pytest.raises(pytest.skip.Exception, match="^docker-registry not installed: run scripts/"):
        registry.RegistryServer(tmp_path / "registry")
