"""Which release source a provider URL stands for, read as clusterctl reads it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from airgap.core.errors import InputError
from airgap.core.redact import redact_url
from airgap.sources.directory import HTTPDirectorySource, LocalRepositorySource
from airgap.sources.github import GitHubSource
from airgap.sources.releases import _GITHUB_PATH_RE, ReleaseSource


def source_for(
    url: str, client: httpx.Client, env: Mapping[str, str] | None = None
) -> ReleaseSource:
    """The release source a provider URL stands for.

    ``env`` defaults to the process environment (``GITHUB_TOKEN``, ``GITHUB_API_URL``).
    """
    environment = os.environ if env is None else env
    text = url.strip()
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return LocalRepositorySource(text)
    if scheme not in ("http", "https") or not parts.hostname:
        raise InputError(
            f"unsupported provider URL {redact_url(text)!r}: "
            "use https://HOST/OWNER/REPO/releases, an http(s) directory or file:///PATH"
        )
    match = _GITHUB_PATH_RE.match(parts.path.rstrip("/"))
    if match:
        return GitHubSource.from_url(text, match, client, environment)
    return HTTPDirectorySource(text, client)
