"""Autouse isolation for every test: skopeo's config files and airgap's cache in temp dirs.

Registered as a plugin from tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os

import pytest

from tests.harness import skopeo


@pytest.fixture(scope="session", autouse=True)
def _skopeo_sandbox(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Isolate skopeo from the host's auth files, registries.conf and policy, and keep
    airgap's cache (the blob index) out of the user's home."""
    skopeo.configure(tmp_path_factory.mktemp("skopeo"))
    os.environ["AIRGAP_CACHE_DIR"] = str(tmp_path_factory.mktemp("airgap-cache"))
    # periodic progress lines off a terminal (every 5 s by default) only where a test
    # asks for them (tests/test_progress.py): a slow failure elsewhere is still one line
    os.environ.setdefault("AIRGAP_PROGRESS_INTERVAL", "3600")


@pytest.fixture(autouse=True)
def _airgap_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh cache per test: blob-index hints from another test's registry (a port
    may be reused) would add mount attempts to tests that count requests."""
    monkeypatch.setenv("AIRGAP_CACHE_DIR", str(tmp_path_factory.mktemp("airgap-cache")))
