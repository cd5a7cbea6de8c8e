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
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import urlsplit

import httpx

from airgap.core.errors import AirgapError, InputError
from airgap.core.fsutil import atomic_writer
from airgap.core.limits import MAX_API_JSON_BYTES, MAX_RELEASE_FILE_BYTES
from airgap.core.names import file_name_problem, shown, version_problem
from airgap.formats import jsonsafe
from airgap.net.httpclient import (
    iter_body,
    redact_url,
    stream_get,
    transfer,
)

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


def _copy_from(reader: BinaryIO, size: int, chunk_size: int = 1 << 20) -> Iterable[bytes]:
    """The ``size`` bytes the file had when it was opened, and no more if it grows."""
    while size > 0 and (chunk := reader.read(min(chunk_size, size))):
        size -= len(chunk)
        yield chunk


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

    def consume(response: httpx.Response) -> None:
        if response.is_redirect:  # a client built without follow_redirects
            raise AirgapError(
                f"{what}: GET {redact_url(url)}: unexpected redirect "
                f"(HTTP {response.status_code}); the HTTP client must follow redirects"
            )
        write_atomically(
            dest, iter_body(response, MAX_RELEASE_FILE_BYTES, what=f"{what}: {dest.name}")
        )

    transfer(
        lambda: stream_get(client, url, what=what, headers=headers),
        consume,
        what=f"{what}: GET {redact_url(url)}",
    )


def write_atomically(dest: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to a temp file next to ``dest`` and rename it into place."""
    with atomic_writer(dest) as out:
        for chunk in chunks:
            out.write(chunk)


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
