"""Releases of a GitHub or GitHub Enterprise repository, read through its REST API."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from airgap.core.errors import AirgapError, HTTPStatusError, InputError, NotFoundError
from airgap.core.limits import MAX_API_JSON_BYTES
from airgap.net.httpclient import (
    redact_url,
    send,
    status_error,
)
from airgap.sources.releases import (
    _YAML_SUFFIXES,
    GITHUB_API,
    GITHUB_API_VERSION,
    LATEST,
    MAX_RELEASE_PAGES,
    TOKEN_HINT,
    _json,
    _Located,
    _same_origin,
    check_filename,
    check_version,
    did_you_mean,
    download,
    token_allowed,
)
from airgap.sources.semver import highest


class GitHubSource(_Located):
    """Releases of a GitHub or GitHub Enterprise repository, read through the REST API.

    The API (not the web download URLs) is used so that "latest" can be resolved, drafts
    and pre-releases skipped, and ``GITHUB_TOKEN`` applied to raise the rate limit. The
    token goes to the API origin only, and only when that origin is one the token is
    meant for (``token_allowed``); asset downloads redirect to another host
    (objects.githubusercontent.com), and httpx drops Authorization on such redirects.
    """

    def __init__(
        self,
        *,
        url: str,
        owner: str,
        repo: str,
        api_base: str,
        client: httpx.Client,
        token: str | None = None,
        pinned_version: str | None = None,
        pinned_file: str | None = None,
    ) -> None:
        self._url = url
        self.owner = owner
        self.repo = repo
        self.api_base = api_base.rstrip("/")
        self._client = client
        self._token = token
        self._pinned_version = pinned_version
        self._pinned_file = pinned_file
        self._asset_cache: dict[str, dict[str, str]] = {}

    @classmethod
    def from_url(
        cls,
        url: str,
        match: re.Match[str],
        client: httpx.Client,
        env: Mapping[str, str],
    ) -> GitHubSource:
        parts = urlsplit(url)
        owner, repo = unquote(match.group("owner")), unquote(match.group("repo"))
        pinned_version, pinned_file = _github_pinned(match.group("rest") or "", url)
        host = (parts.hostname or "").lower()
        netloc = host if parts.port is None else f"{host}:{parts.port}"
        base_url = f"{parts.scheme.lower()}://{netloc}/{owner}/{repo}/releases"
        override = env.get("GITHUB_API_URL", "").strip()
        if override:
            api_base = override
        elif host in ("github.com", "www.github.com"):
            api_base = GITHUB_API
        else:  # GitHub Enterprise serves its API under /api/v3 on the same host
            api_base = f"{parts.scheme.lower()}://{netloc}/api/v3"
        token = env.get("GITHUB_TOKEN", "").strip() or None
        if token and not token_allowed(api_base, env):
            token = None  # a spec names hosts; the user's token is not theirs to have
        return cls(
            url=base_url,
            owner=owner,
            repo=repo,
            api_base=api_base,
            client=client,
            token=token,
            pinned_version=pinned_version,
            pinned_file=pinned_file,
        )

    def list_releases(self) -> list[dict[str, Any]]:
        """All releases, following ``Link: rel="next"`` pagination."""
        next_url: str | None = f"{self._repo_api()}/releases?per_page=100"
        seen: set[str] = set()
        releases: list[dict[str, Any]] = []
        while next_url and next_url not in seen and len(seen) < MAX_RELEASE_PAGES:
            seen.add(next_url)
            response = self._api_get(next_url, f"list releases of {self.url}")
            page = _json(response, f"list releases of {self.url}")
            if not isinstance(page, list):
                raise AirgapError(
                    f"list releases of {self.url}: GET {redact_url(next_url)}: "
                    "expected a JSON list of releases"
                )
            # only what choosing a version needs: a thousand pages of full release
            # objects (notes, asset lists) would not fit in memory
            releases.extend(
                {key: item.get(key) for key in ("tag_name", "draft", "prerelease")}
                for item in page
                if isinstance(item, dict)
            )
            link = response.links.get("next", {}).get("url")
            next_url = str(response.url.join(link)) if link else None
        return releases

    def resolve_version(self, version: str) -> str:
        if version != LATEST:
            return check_version(version, self.url)
        tags = [
            release["tag_name"]
            for release in self.list_releases()
            if isinstance(release.get("tag_name"), str)
            and not release.get("draft")
            and not release.get("prerelease")
        ]
        best = highest(tags)
        if best is None:
            raise AirgapError(
                f"{self.url}: no release is a semantic version that is neither "
                "a draft nor a pre-release; give an exact version"
            )
        return best

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        check_version(version, self.url)
        check_filename(filename, self.url)
        what = f"release {version} of {self.url}"
        assets = self._assets(version)
        url = assets.get(filename)
        if url is not None:
            headers = self._headers(url)
            headers["Accept"] = "application/octet-stream"
            download(
                self._client, url, dest, what=f"download {filename} of {what}", headers=headers
            )
            return
        listing = ", ".join(sorted(assets)) or "none"
        release_url = f"{self._repo_api()}/releases/tags/{version}"
        raise NotFoundError(
            f"{what} has no file {filename} (GET {redact_url(release_url)}; files: {listing})",
            404,
        )

    def list_files(self, version: str) -> list[str]:
        check_version(version, self.url)
        return sorted(self._assets(version))

    def _assets(self, version: str) -> dict[str, str]:
        """Asset name -> API download URL of one release, asked once per version (a
        release's files are fetched one by one, and templates are listed first)."""
        cached = self._asset_cache.get(version)
        if cached is not None:
            return cached
        what = f"release {version} of {self.url}"
        release_url = f"{self._repo_api()}/releases/tags/{version}"
        try:
            release = _json(self._api_get(release_url, what), what)
        except NotFoundError as exc:
            hint = did_you_mean(version, self._tags())
            raise NotFoundError(f"release {version} not found: {exc}{hint}", exc.status) from None
        assets = release.get("assets") if isinstance(release, dict) else None
        found: dict[str, str] = {}
        for asset in assets if isinstance(assets, list) else []:
            if isinstance(asset, dict) and isinstance(asset.get("name"), str):
                url = asset.get("url")
                if isinstance(url, str) and url:
                    found.setdefault(asset["name"], url)
        self._asset_cache[version] = found
        return found

    def _tags(self) -> list[str]:
        """Every release tag, for a suggestion; none when they cannot be listed."""
        try:
            releases = self.list_releases()
        except AirgapError:
            return []
        return [str(r["tag_name"]) for r in releases if isinstance(r.get("tag_name"), str)]

    def _repo_api(self) -> str:
        return f"{self.api_base}/repos/{self.owner}/{self.repo}"

    def _headers(self, url: str) -> dict[str, str]:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": GITHUB_API_VERSION,
        }
        if self._token and _same_origin(url, self.api_base):
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _api_get(self, url: str, what: str) -> httpx.Response:
        client = self._client
        response = send(
            client,
            lambda: client.build_request("GET", url, headers=self._headers(url)),
            body_limit=MAX_API_JSON_BYTES,
        )
        status = response.status_code
        if status < 400:
            return response
        if status in (403, 429) and response.headers.get("x-ratelimit-remaining") == "0":
            raise HTTPStatusError(
                f"{what}: GET {redact_url(url)}: HTTP {status} GitHub API rate limit exceeded "
                f"({TOKEN_HINT})",
                status,
            )
        raise status_error(response, what)


def _github_pinned(rest: str, url: str) -> tuple[str | None, str | None]:
    """Version and file named by a clusterctl-style GitHub URL after ``/releases``."""
    segments = [unquote(part) for part in rest.strip("/").split("/") if part]
    if not segments:
        return None, None
    if len(segments) == 3 and segments[0] == "download":
        return segments[1], segments[2]
    if len(segments) == 2 and segments[1].endswith(_YAML_SUFFIXES):
        return segments[0], segments[1]  # clusterctl: releases/{latest,VERSION}/FILE
    raise InputError(
        f"unsupported GitHub releases URL {redact_url(url)!r}: use "
        "https://HOST/OWNER/REPO/releases[/VERSION/FILE]"
    )
