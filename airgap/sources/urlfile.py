"""One file at a URL, as a release source (addon manifests).

An addon manifest is not a release: it is whatever an ``https://``, ``http://`` or
``file://`` URL serves. This source fits the ``ReleaseSource`` shape so addon manifests
travel the one content path (``content.fetch``): it has no versions to list and no files
to list, and ``fetch`` downloads the URL itself, through the same bounded, retried,
atomic download as release files (at most ``MAX_RELEASE_FILE_BYTES``), or reads a local
regular file within the same bound. Credentials in the URL go only to its host (the
HTTP client's own rule); messages show the URL without them.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from airgap.core.errors import InputError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_RELEASE_FILE_BYTES
from airgap.core.redact import redact_url
from airgap.sources.releases import SingleFileSource, download, write_atomically


class URLFileSource(SingleFileSource):
    """The file one URL names; ``fetch`` ignores version and file name."""

    def __init__(self, url: str, client: httpx.Client) -> None:
        self._raw = url.strip()
        self._client = client
        scheme = urlsplit(self._raw).scheme.lower()
        if scheme not in ("http", "https", "file"):
            raise InputError(
                f"unsupported manifest URL {redact_url(self._raw)!r}: "
                "use https://, http:// or file://"
            )
        self._scheme = scheme

    @property
    def url(self) -> str:
        return redact_url(self._raw)

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        """Download the URL (or copy the local file) to ``dest`` atomically."""
        if self._scheme == "file":
            path = Path(unquote(urlsplit(self._raw).path))
            data = read_small(path, MAX_RELEASE_FILE_BYTES, "manifest")
            write_atomically(dest, [data])
            return
        download(self._client, self._raw, dest, what=f"download manifest {self.url}")
