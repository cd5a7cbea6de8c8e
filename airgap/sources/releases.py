"""Where provider releases come from: GitHub releases, plain HTTP directories, file://.

A provider URL in a spec is the same URL a user would put in clusterctl.yaml, so it is
interpreted the way clusterctl interprets it: ``https://HOST/OWNER/REPO/releases`` is a
GitHub (or GitHub Enterprise) repository read through the releases API, ``file://`` is a
clusterctl local repository, and any other http(s) URL is a directory laid out as
``URL/VERSION/FILE``. Every source streams files to disk (temp file + rename) so that a
half-written components file can never be mistaken for a complete one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import httpx

from airgap.core.errors import AirgapError, HTTPStatusError, InputError, NotFoundError
from airgap.core.fsutil import atomic_writer
from airgap.core.inputfile import open_small
from airgap.core.limits import MAX_API_JSON_BYTES, MAX_RELEASE_FILE_BYTES
from airgap.core.names import file_name_problem, shown, version_problem
from airgap.formats import jsonsafe
from airgap.net.httpclient import (
    ResponseTooLarge,
    iter_body,
    read_body,
    redact_url,
    send,
    status_error,
    stream_get,
    with_retries,
)
from airgap.sources.semver import highest

LATEST = "latest"
GITHUB_API = "https://api.github.com"
GITHUB_API_VERSION = "2022-11-28"
GITHUB_API_HOST = "api.github.com"
ENTERPRISE_HOSTS_ENV = "GITHUB_ENTERPRISE_HOSTS"
TOKEN_HINT = (
    "set GITHUB_TOKEN to raise it; it is sent over HTTPS only, to api.github.com, "
    f"GITHUB_API_URL's host and the hosts listed in {ENTERPRISE_HOSTS_ENV}"
)
# A guard against a server whose "next" links never end; 1000 pages of 100 releases.
MAX_RELEASE_PAGES = 1000

_GITHUB_PATH_RE = re.compile(r"^/(?P<owner>[^/]+)/(?P<repo>[^/]+)/releases(?:/(?P<rest>.*))?$")
_YAML_SUFFIXES = (".yaml", ".yml")
# An anchor's attributes stop at the next "<" or ">", so each character is looked at a
# bounded number of times whatever the page holds (a lazy ``[^>]*?`` started at every
# "<a" of a long run without ">" would be quadratic).
_ANCHOR_RE = re.compile(r"<a\s([^<>]*+)>", re.IGNORECASE)
_HREF_RE = re.compile(r"""href\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'<>]++))""", re.IGNORECASE)
# A directory index page: a few hundred links at most.
MAX_INDEX_PAGE_BYTES = 1 << 20


class ReleaseSource(Protocol):
    """A place provider releases can be read from.

    ``pinned_version`` and ``pinned_file`` are set when the URL itself names a release
    file the way clusterctl URLs do (``.../VERSION/infrastructure-components.yaml``).
    """

    @property
    def url(self) -> str:
        """The source URL without credentials, for messages and bundle records."""
        ...

    @property
    def pinned_version(self) -> str | None: ...

    @property
    def pinned_file(self) -> str | None: ...

    def resolve_version(self, version: str) -> str:
        """Turn ``latest`` into a concrete version; check any other version's syntax."""
        ...

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        """Stream release file ``filename`` of ``version`` to ``dest`` (atomically)."""
        ...

    def list_files(self, version: str) -> list[str] | None:
        """The file names release ``version`` holds, sorted, or None when this kind of
        source cannot say (a plain HTTP directory without an index page)."""
        ...


class SingleFileSource:
    """The ``ReleaseSource`` answers of content that is not a release (an addon
    manifest's URL, a Helm chart): nothing pinned, no versions to resolve (the version
    is taken as given) and no file list. Subclasses give ``url`` and ``fetch``."""

    @property
    def pinned_version(self) -> str | None:
        return None

    @property
    def pinned_file(self) -> str | None:
        return None

    def resolve_version(self, version: str) -> str:
        return version

    def list_files(self, version: str) -> list[str] | None:
        return None


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


def check_version(version: str, where: str) -> str:
    """A version becomes a directory name and a URL segment: refuse anything path-like."""
    if version_problem(version):
        raise InputError(f"{where}: invalid version {shown(version)}")
    return version


def check_filename(filename: str, where: str) -> str:
    """Release file names are single path segments; refuse separators and dot-dirs."""
    if file_name_problem(filename):
        raise InputError(f"{where}: invalid release file name {shown(filename)}")
    return filename


class _Located:
    """What every source reports about where it points: its (redacted) URL and the
    version and file a clusterctl-style URL pins, if any."""

    _url: str
    _pinned_version: str | None = None
    _pinned_file: str | None = None

    @property
    def url(self) -> str:
        return self._url

    @property
    def pinned_version(self) -> str | None:
        return self._pinned_version

    @property
    def pinned_file(self) -> str | None:
        return self._pinned_file


def token_allowed(api_base: str, env: Mapping[str, str]) -> bool:
    """Whether ``GITHUB_TOKEN`` may be sent to the API at ``api_base``: over HTTPS only,
    and only to api.github.com, to ``GITHUB_API_URL``'s host, or to a host the user
    lists in ``GITHUB_ENTERPRISE_HOSTS`` (comma-separated ``HOST`` or ``HOST:PORT``).
    A provider URL in a spec is not enough: a spec may come from anyone."""
    try:
        url = httpx.URL(api_base)
    except httpx.InvalidURL:
        return False
    if url.scheme != "https" or not url.host:
        return False
    host = url.host.lower()
    allowed = {GITHUB_API_HOST}
    override = env.get("GITHUB_API_URL", "").strip()
    if override:
        allowed.add((urlsplit(override).hostname or "").lower())
    listed = env.get(ENTERPRISE_HOSTS_ENV, "").split(",")
    allowed.update(entry.strip().lower() for entry in listed if entry.strip())
    return host in allowed or (url.port is not None and f"{host}:{url.port}" in allowed)


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


class HTTPDirectorySource(_Located):
    """A plain web directory laid out ``URL/VERSION/FILE`` (an internal mirror, say).

    It cannot list its versions, so ``latest`` cannot be resolved here.
    """

    def __init__(self, url: str, client: httpx.Client) -> None:
        self._client = client
        base = url.strip().rstrip("/")
        self._pinned_version: str | None = None
        self._pinned_file: str | None = None
        # Accept a clusterctl-style file URL: BASE/VERSION/FILE.yaml
        head, _, last = base.rpartition("/")
        parent_head, _, parent = head.rpartition("/")
        if (
            last.endswith(_YAML_SUFFIXES)
            and not version_problem(unquote(parent))
            and urlsplit(parent_head).path not in ("", "/")
        ):
            base, self._pinned_version, self._pinned_file = parent_head, unquote(parent), last
        self._base = base
        self._url = redact_url(base)

    def resolve_version(self, version: str) -> str:
        if version == LATEST:
            raise InputError(
                f"{self.url}: cannot resolve version 'latest' from a plain HTTP directory; "
                "give an exact version, or use a GitHub releases or file:// source"
            )
        return check_version(version, self.url)

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        check_version(version, self.url)
        check_filename(filename, self.url)
        download(
            self._client,
            f"{self._base}/{version}/{filename}",
            dest,
            what=f"download {filename} of release {version} from {self.url}",
        )

    def list_files(self, version: str) -> list[str] | None:
        """The files an index page at ``URL/VERSION/`` links to (Apache's, nginx's and
        Python's directory listings), or None when there is no such page: a plain
        directory cannot otherwise say what it holds."""
        check_version(version, self.url)
        url = f"{self._base}/{version}/"
        client = self._client
        try:
            response = send(client, lambda: client.build_request("GET", url), stream=True)
        except AirgapError:
            return None
        try:
            content_type = response.headers.get("Content-Type", "")
            if response.status_code != 200 or "html" not in content_type.lower():
                return None
            page = read_body(response, MAX_INDEX_PAGE_BYTES, what="index page")
        except ResponseTooLarge:
            return None  # not an index page of one release
        except httpx.HTTPError:
            return None
        finally:
            response.close()
        return index_page_files(page.decode("utf-8", errors="replace"))


class LocalRepositorySource(_Located):
    """A clusterctl local repository: ``file://BASE/LABEL`` holding ``VERSION/FILE``.

    Also accepts the full clusterctl URL ``file://BASE/LABEL/VERSION/FILE``, which pins
    version and components file name. Missing directories or files raise NotFoundError,
    like a 404 from a remote source, so callers handle all sources alike.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url.strip())
        if parts.netloc not in ("", "localhost"):
            raise InputError(
                f"file URL {redact_url(url)!r} names host {parts.hostname!r}: "
                "use file:///ABSOLUTE/PATH"
            )
        path = Path(url2pathname(unquote(parts.path)))
        if not path.is_absolute():
            raise InputError(
                f"file URL {redact_url(url)!r} is not absolute: use file:///ABSOLUTE/PATH"
            )
        self._pinned_version: str | None = None
        self._pinned_file: str | None = None
        if path.name.endswith(_YAML_SUFFIXES) and not path.is_dir():
            self._pinned_version, self._pinned_file = path.parent.name, path.name
            path = path.parent.parent
        self.root = path
        self._url = path.as_uri()

    def versions(self) -> list[str]:
        """The version directories of this repository."""
        if not self.root.is_dir():
            raise NotFoundError(f"{self.url}: local repository directory does not exist", 404)
        return sorted(child.name for child in self.root.iterdir() if child.is_dir())

    def resolve_version(self, version: str) -> str:
        if version != LATEST:
            return check_version(version, self.url)
        best = highest(self.versions())
        if best is None:
            raise AirgapError(
                f"{self.url}: no version directory is a semantic version that is not a "
                "pre-release; give an exact version"
            )
        return best

    def list_files(self, version: str) -> list[str]:
        check_version(version, self.url)
        directory = self.root / version
        if not directory.is_dir():
            hint = did_you_mean(version, self.versions())
            raise NotFoundError(f"{self.url}: release {version} ({directory}) not found{hint}", 404)
        return sorted(
            child.name
            for child in directory.iterdir()
            if not file_name_problem(child.name) and child.is_file()
        )

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        check_version(version, self.url)
        check_filename(filename, self.url)
        source = self.root / version / filename
        if not os.path.lexists(source):
            raise NotFoundError(
                f"{self.url}: release {version} has no file {filename} ({source} not found)",
                404,
            )
        # a regular file of at most the release-file bound, as a download is: a FIFO
        # blocked collect for ever, and /dev/zero or a huge file would fill the disk
        fd, size = open_small(source, MAX_RELEASE_FILE_BYTES, "release file")
        with os.fdopen(fd, "rb") as reader:
            write_atomically(dest, _copy_from(reader, size))


def did_you_mean(version: str, tags: list[str]) -> str:
    """``; did you mean v1.9.4?`` when ``version`` is a release's tag but for its ``v``
    (or close to a few), else "" (pure)."""
    if not version.startswith("v") and f"v{version}" in tags:
        close = [f"v{version}"]
    elif version.startswith("v") and version[1:] in tags:
        close = [version[1:]]
    else:
        close = difflib.get_close_matches(version, tags, n=3, cutoff=0.8)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def index_page_files(html: str) -> list[str]:
    """The file names an HTML directory listing links to, sorted (pure): relative links
    that are one path segment and a valid release file name; directories, parents,
    queries (sort links) and absolute links are not files of this release."""
    names: set[str] = set()
    for anchor in _ANCHOR_RE.finditer(html):
        found = _HREF_RE.search(anchor.group(1))
        href = next((group for group in found.groups() if group), "") if found else ""
        if not href or href.startswith(("/", "?", "#", ".")) or "//" in href:
            continue
        name = unquote(href.split("?", 1)[0].split("#", 1)[0])
        if name and not file_name_problem(name):
            names.add(name)
    return sorted(names)


def _copy_from(reader: BinaryIO, size: int, chunk_size: int = 1 << 20) -> Iterable[bytes]:
    """The ``size`` bytes the file had when it was opened, and no more if it grows."""
    while size > 0 and (chunk := reader.read(min(chunk_size, size))):
        size -= len(chunk)
        yield chunk


class _Final(Exception):
    """Carries an error that must not be retried again through ``with_retries``."""

    def __init__(self, error: AirgapError) -> None:
        super().__init__(str(error))
        self.error = error


def download(
    client: httpx.Client,
    url: str,
    dest: Path,
    *,
    what: str,
    headers: dict[str, str] | None = None,
) -> None:
    """Stream ``url`` into ``dest`` atomically, restarting if the body is cut off.

    Connection set-up and retryable statuses are already retried inside ``stream_get``;
    only a transfer that breaks mid-body is started again here.
    """

    def attempt() -> None:
        with ExitStack() as stack:
            try:
                response = stack.enter_context(stream_get(client, url, what=what, headers=headers))
            except AirgapError as exc:
                raise _Final(exc) from None
            if response.is_redirect:  # a client built without follow_redirects
                raise _Final(
                    AirgapError(
                        f"{what}: GET {redact_url(url)}: unexpected redirect "
                        f"(HTTP {response.status_code}); the HTTP client must follow redirects"
                    )
                )
            write_atomically(
                dest, iter_body(response, MAX_RELEASE_FILE_BYTES, what=f"{what}: {dest.name}")
            )

    try:
        with_retries(attempt, what=f"{what}: GET {redact_url(url)}")
    except _Final as final:
        raise final.error from None


def write_atomically(dest: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to a temp file next to ``dest`` and rename it into place."""
    with atomic_writer(dest) as out:
        for chunk in chunks:
            out.write(chunk)


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


def _same_origin(url: str, other: str) -> bool:
    first, second = httpx.URL(url), httpx.URL(other)
    return (first.scheme, first.host, _port(first)) == (second.scheme, second.host, _port(second))


def _port(url: httpx.URL) -> int | None:
    if url.port is not None:
        return url.port
    return {"http": 80, "https": 443}.get(url.scheme)


def _json(response: httpx.Response, what: str) -> Any:
    where = f"{what}: GET {redact_url(response.request.url)}"
    try:
        return jsonsafe.loads(
            response.content, "response", max_bytes=MAX_API_JSON_BYTES, unique_keys=False
        )
    except jsonsafe.JSONShapeError as exc:
        raise AirgapError(f"{where}: {exc}") from None
