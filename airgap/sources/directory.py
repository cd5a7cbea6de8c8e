"""Releases laid out as directories: an HTTP(S) server's index pages, or a local
``file://`` repository as clusterctl's overrides layout has it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import httpx

from airgap.core.errors import AirgapError, InputError, NotFoundError
from airgap.core.inputfile import open_small
from airgap.core.limits import MAX_RELEASE_FILE_BYTES
from airgap.core.names import file_name_problem, version_problem
from airgap.net.httpclient import (
    ResponseTooLarge,
    read_body,
    redact_url,
    send,
)
from airgap.sources.releases import (
    _YAML_SUFFIXES,
    LATEST,
    _copy_from,
    _Located,
    check_filename,
    check_version,
    did_you_mean,
    download,
    write_atomically,
)
from airgap.sources.semver import highest

# An anchor's attributes stop at the next "<" or ">", so each character is looked at a
# bounded number of times whatever the page holds (a lazy ``[^>]*?`` started at every
# "<a" of a long run without ">" would be quadratic).
_ANCHOR_RE = re.compile(r"<a\s([^<>]*+)>", re.IGNORECASE)


_HREF_RE = re.compile(r"""href\s*+=\s*+(?:"([^"]*+)"|'([^']*+)'|([^\s"'<>]++))""", re.IGNORECASE)


# A directory index page: a few hundred links at most.
MAX_INDEX_PAGE_BYTES = 1 << 20


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
