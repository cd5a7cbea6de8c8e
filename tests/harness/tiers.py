"""The three test tiers, and what keeps every test in exactly one of them.

``unit``: pure functions and in-process objects, no server and no subprocess;
``integration``: real servers on loopback driven through the library; ``e2e``: the airgap
command line end to end with the consumers that prove its outputs. ``pytest -m unit`` is
the quick loop and needs none of the external tools; the README's test command runs all
three tiers and sets ``AIRGAP_TEST_REQUIRE_ALL=1``, under which (as under ``CI``) a skip
is a failure: a tool missing there must not quietly shrink the suite.

Registered as a plugin from tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Generator, Iterator
from typing import Any

import pytest

TIERS = ("unit", "integration", "e2e")
REQUIRE_ALL = "AIRGAP_TEST_REQUIRE_ALL"
# fixtures that start real servers (tests/conftest.py and the tests/harness/*_fixtures.py
# plugins): a unit test that asks for one is misfiled
SERVER_FIXTURES = frozenset(
    {
        "plain_registry",
        "secure_registry",
        "token_registry",
        "registry_factory",
        "fault_proxy_factory",
        "source_images",
        "token_images",
        "release_server",
        "tls_release_server",
        "capi_bundle",
        "management_bundle",
        "management_images",
        "delta_bundles",
    }
)


def require_all() -> bool:
    """True where nothing may be skipped: the README's test command, or any CI run."""
    return os.environ.get(REQUIRE_ALL, "") not in ("", "0") or bool(os.environ.get("CI"))


def need_tool(name: str, path: str | None = None) -> str:
    """The path of external tool ``name`` (or of ``path`` when given and executable);
    else skip the test with a reason naming the tool and how to get it."""
    found = path if path and os.access(path, os.X_OK) else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed: run scripts/bootstrap.sh")
    return found


def tier_problems(item: pytest.Item) -> list[str]:
    """Why ``item`` is not filed in exactly one tier (empty when it is)."""
    tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
    if not tiers:
        return [f"{item.nodeid}: no tier mark (pytest.mark.unit, .integration or .e2e)"]
    if len(tiers) > 1:
        return [f"{item.nodeid}: more than one tier mark ({', '.join(tiers)})"]
    servers = SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if tiers == ["unit"] and servers:
        return [f"{item.nodeid}: marked unit but starts servers ({', '.join(sorted(servers))})"]
    return []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before ``-m`` deselects anything: every collected test must choose its tier."""
    problems = [problem for item in items for problem in tier_problems(item)]
    if problems:
        raise pytest.UsageError("tests must be in exactly one tier:\n" + "\n".join(problems))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Under AIRGAP_TEST_REQUIRE_ALL=1 or CI a skip (a tool missing, say) fails the test."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and require_all():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped, but {REQUIRE_ALL}=1 or CI is set: {reason}"


def _refuse(what: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a unit test may not {what}: mark it integration or e2e")

    return refuse


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A unit-marked test that starts a process or listens on a socket fails, so that
    ``pytest -m unit`` stays quick and needs no external tool."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse("start a process"))
        patch.setattr(socket.socket, "listen", _refuse("listen on a socket"))
        yield
