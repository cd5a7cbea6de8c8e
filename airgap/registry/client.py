"""A distribution-spec registry client: pull and push manifests and blobs.

One ``Registry`` per endpoint (host + TLS settings). It owns HTTP for registries:
authentication (ping, bearer tokens per scope, basic), retries, streaming blob
transfer with hashing, monolithic and chunked uploads and cross-repository mounts.
Manifests travel as exact bytes in both directions.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import httpx

from airgap.core.errors import (
    AirgapError,
    DigestMismatchError,
    HTTPStatusError,
    NotFoundError,
)
from airgap.core.limits import (
    MAX_API_JSON_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_REFERRER_PAGES,
    MAX_REFERRERS,
)
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import JSONShapeError
from airgap.net import fasthttp, http1frames, httpclient
from airgap.oci.manifest import MANIFEST_ACCEPT, OCI_INDEX, Descriptor, Manifest
from airgap.registry.auth import repository_scope
from airgap.registry.uploads import BlobUploads

_buffers = threading.local()


def _read_buffer() -> memoryview:
    """This thread's buffer for blob bodies (``http1frames.READ_BYTES``), made once: the
    download threads of a collect reuse theirs for every blob."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(http1frames.READ_BYTES))
    return view


def bytes_body(data: bytes) -> Callable[[int], Iterator[bytes]]:
    """A blob held in memory as ``Registry.upload_blob``'s body: its bytes from an
    offset, for the first attempt and for every retry."""

    def body(offset: int) -> Iterator[bytes]:
        yield data[offset:]

    return body


class BlobSink(Protocol):
    """Where a downloaded blob goes: a file, or a region of the bundle being written.

    A sink whose ``write`` is done with the bytes when it returns (it writes or copies
    them, keeps no reference) says so with a true ``takes_views`` attribute: it is then
    handed views of one reused buffer instead of a new bytes object per read."""

    def seek(self, position: int, whence: int = 0, /) -> int: ...
    def truncate(self, size: int | None = None, /) -> int: ...
    def write(self, data: bytes, /) -> int: ...


class Registry(BlobUploads):
    """Talks the distribution API to one registry endpoint."""

    # -- plumbing -------------------------------------------------------------------

    # -- manifests ------------------------------------------------------------------

    def get_manifest(self, repository: str, reference: str, *, what: str) -> Manifest:
        """Fetch a manifest by tag or digest, checking that its bytes match the digest."""
        response = self._send(
            "GET",
            f"{repository}/manifests/{reference}",
            (repository_scope(repository, "pull"),),
            what=what,
            headers={"Accept": MANIFEST_ACCEPT},
            body_limit=MAX_MANIFEST_BYTES,
        )
        assert response is not None
        data = response.content
        content_type = response.headers.get("Content-Type")
        try:
            manifest = Manifest.from_bytes(data, content_type)
            manifest.children()  # every descriptor typed before anything relies on it
            manifest.blobs()
        except AirgapError as exc:
            raise AirgapError(
                f"{what}: registry {self.display_name} served a malformed manifest for "
                f"{repository}:{reference}: {exc}"
            ) from None
        expected = reference if reference.startswith("sha256:") else None
        served = response.headers.get("Docker-Content-Digest", "")
        if expected is None and served.startswith("sha256:"):
            expected = served
        if expected and expected != manifest.digest:
            raise DigestMismatchError(
                f"{what}: registry {self.display_name} served a manifest whose digest "
                f"{manifest.digest} does not match {expected}"
            )
        return manifest

    def find_manifest(self, repository: str, reference: str, *, what: str) -> Manifest | None:
        """A manifest by tag or digest, or None when the registry has none (404): for
        what may or may not be there, such as cosign's ``sha256-HEX.sig`` tags."""
        try:
            return self.get_manifest(repository, reference, what=what)
        except NotFoundError:
            return None

    def get_referrers(self, repository: str, digest: str, *, what: str) -> list[Descriptor] | None:
        """The referrers API (``GET /v2/NAME/referrers/DIGEST``): descriptors of the
        manifests whose ``subject`` is ``digest``, every page (``Link: rel="next"``), at
        most ``MAX_REFERRERS``. None when the registry has no referrers API: 404, as the
        distribution spec has it, or 400/405/501 from one that does not know the route."""
        found: list[Descriptor] = []
        try:
            for response in self._pages(
                f"{repository}/referrers/{digest}",
                repository,
                what=what,
                headers={"Accept": OCI_INDEX},
                listing=f"the referrers of {repository}@{digest}",
                no_route_ok=True,
            ):
                found.extend(self._referrers_page(response, repository, digest, what))
                if len(found) > MAX_REFERRERS:
                    raise AirgapError(
                        f"{what}: registry {self.display_name} lists more than "
                        f"{MAX_REFERRERS} referrers of {repository}@{digest}"
                    )
        except _NoRoute:
            return None
        return found

    def _pages(
        self,
        url: str,
        repository: str,
        *,
        what: str,
        listing: str,
        headers: dict[str, str] | None = None,
        no_route_ok: bool = False,
        scope: str | None = None,
    ) -> Iterator[httpx.Response]:
        """The answers of a paged listing (``Link: rel="next"``), at most
        ``MAX_REFERRER_PAGES`` of them. A missing first page (404) ends it empty; with
        ``no_route_ok`` instead, a first page missing or refused with 400/405/501 (a route the
        registry does not know) raises ``_NoRoute``; else those are errors as any other."""
        for page in range(MAX_REFERRER_PAGES):
            try:
                response = self._send(
                    "GET",
                    url,
                    (scope or repository_scope(repository, "pull"),),
                    what=what,
                    headers=headers,
                    missing_ok=page == 0,
                    body_limit=MAX_MANIFEST_BYTES,
                )
            except HTTPStatusError as exc:
                if page == 0 and no_route_ok and exc.status in (400, 405, 501):
                    raise _NoRoute from None
                raise
            if response is None:  # the first page only (missing_ok)
                if no_route_ok:
                    raise _NoRoute
                return
            yield response
            link = _next_link(response.headers.get("Link", ""))
            if not link:
                return
            url = self._location(link)
        raise AirgapError(
            f"{what}: registry {self.display_name} pages {listing} over more than "
            f"{MAX_REFERRER_PAGES} answers"
        )

    def _referrers_page(
        self, response: httpx.Response, repository: str, digest: str, what: str
    ) -> list[Descriptor]:
        try:
            # an API answer read for its descriptors, never stored: its shape is not held
            # to a stored manifest's (some registries leave schemaVersion out of it)
            kind = response.headers.get("Content-Type")
            index = Manifest.from_bytes(response.content, kind, shape=False)
            if not index.is_index:
                raise AirgapError(f"it is a {index.media_type}, not an image index")
            return index.children()
        except AirgapError as exc:
            raise AirgapError(
                f"{what}: registry {self.display_name} answered the referrers of "
                f"{repository}@{digest} with a malformed index: {exc}"
            ) from None

    def supports_referrers(self, repository: str, digest: str, *, what: str) -> bool:
        """Whether the registry has the referrers API (it lists the referrers of any
        digest, an empty index for one it does not know)."""
        return self.get_referrers(repository, digest, what=what) is not None

    def manifest_digest(self, repository: str, reference: str, *, what: str) -> str | None:
        """HEAD a manifest: its digest if present, None if missing."""
        response = self._send(
            "HEAD",
            f"{repository}/manifests/{reference}",
            (repository_scope(repository, "pull"),),
            what=what,
            headers={"Accept": MANIFEST_ACCEPT},
            missing_ok=True,
        )
        if response is None:
            return None
        return response.headers.get("Docker-Content-Digest") or None

    def list_tags(self, repository: str, *, what: str) -> list[str]:
        """``GET /v2/NAME/tags/list``, every page (``Link: rel="next"``), at most
        ``MAX_REFERRER_PAGES`` pages of 1,000; an unknown repository (404) has none."""
        found: list[str] = []
        for response in self._pages(
            f"{repository}/tags/list?n=1000",
            repository,
            what=what,
            listing=f"the tags of {repository}",
        ):
            found += _tags(response, f"{what}: registry {self.display_name}")
        return found

    def list_repositories(self, *, what: str) -> list[str]:
        """``GET /v2/_catalog``, every page (``Link: rel="next"``), at most
        ``MAX_REFERRER_PAGES`` pages of 1,000 (``airgap prune`` lists its prefix)."""
        found: list[str] = []
        for response in self._pages(
            "_catalog?n=1000", "", what=what, listing="the catalog", scope=CATALOG_SCOPE
        ):
            found += _repositories(response, f"{what}: registry {self.display_name}")
        return found

    def delete_manifest(self, repository: str, reference: str, *, what: str) -> bool:
        """``DELETE /v2/NAME/manifests/REFERENCE`` (a digest, or a tag where the registry
        deletes tags): True once deleted, False when it is not there (404). Never a blob:
        the registry's garbage collection frees those."""
        response = self._send(
            "DELETE",
            f"{repository}/manifests/{reference}",
            (repository_scope(repository, "delete"),),
            what=what,
            ok=(200, 202, 204),
            missing_ok=True,
        )
        if response is None:
            return False
        response.close()
        return True

    def has_tag(self, repository: str, tag: str, *, what: str) -> bool:
        """Whether the tag listing names ``tag``: a registry lists a tag whose manifest
        it lost (its blob or revision gone), which tells that loss apart from a manifest
        never pushed."""
        return tag in self.list_tags(repository, what=what)

    def put_manifest(
        self, repository: str, reference: str, manifest: Manifest, *, what: str
    ) -> None:
        """Push manifest bytes unchanged under a tag or its digest."""
        response = self._send(
            "PUT",
            f"{repository}/manifests/{reference}",
            (repository_scope(repository, "pull,push"),),
            what=what,
            headers={"Content-Type": manifest.media_type},
            body=lambda: [manifest.data],
            ok=(200, 201, 202),
        )
        assert response is not None
        served = response.headers.get("Docker-Content-Digest")
        if served and served != manifest.digest:
            raise DigestMismatchError(
                f"{what}: registry {self.display_name} stored the manifest as {served}, "
                f"expected {manifest.digest}"
            )

    # -- blobs ----------------------------------------------------------------------

    def download_blob(
        self,
        repository: str,
        digest: str,
        size: int,
        sink: BlobSink,
        *,
        what: str,
        on_bytes: Callable[[int], None] | None = None,
    ) -> None:
        """Stream a blob into ``sink``, hashing as it goes; retried from the start if the
        connection drops. Raises DigestMismatchError if the bytes are not ``digest``."""

        views = getattr(sink, "takes_views", False) is True

        def opened() -> contextlib.closing[httpx.Response]:
            sink.seek(0)
            sink.truncate()
            response = self._send(
                "GET",
                f"{repository}/blobs/{digest}",
                (repository_scope(repository, "pull"),),
                what=what,
                stream=True,
            )
            assert response is not None
            return contextlib.closing(response)

        def consume(response: httpx.Response) -> None:
            hasher = hashlib.sha256()
            received = 0

            def take(chunk: bytes | memoryview) -> None:
                nonlocal received
                received += len(chunk)
                if received > size:
                    raise DigestMismatchError(
                        f"{what}: registry {self.display_name} served more than the "
                        f"{size} bytes of blob {digest}"
                    )
                hasher.update(chunk)
                sink.write(chunk)  # type: ignore[arg-type]  # a view only if takes_views
                if on_bytes:
                    on_bytes(len(chunk))

            try:
                read_into = fasthttp.body_reader(response) if views else None
                if read_into is not None:
                    view = _read_buffer()
                    while count := read_into(view):
                        take(view[:count])
                else:
                    for chunk in response.iter_raw():
                        take(chunk)
            except httpx.TransportError:
                if on_bytes and received:
                    on_bytes(-received)  # progress: these bytes are fetched again
                raise
            actual = "sha256:" + hasher.hexdigest()
            if actual != digest or received != size:
                raise DigestMismatchError(
                    f"{what}: registry {self.display_name} served blob {digest} with "
                    f"digest {actual} and size {received} (expected size {size})"
                )

        httpclient.transfer(
            opened,
            consume,
            policy=self._policy,
            what=f"{what}: registry {self.display_name}: blob {digest}",
        )

    def fetch_small_blob(self, repository: str, digest: str, size: int, *, what: str) -> bytes:
        """A small blob (an image config) into memory, digest-checked."""
        buffer = io.BytesIO()
        self.download_blob(repository, digest, size, buffer, what=what)
        return buffer.getvalue()


class _NoRoute(Exception):
    """A listing's first page refused as a route the registry does not know."""


CATALOG_SCOPE = "registry:catalog:*"


def _tags(response: httpx.Response, who: str) -> list[str]:
    """The ``tags`` of a tags/list answer; anything else is the registry's error."""
    try:  # bounded in depth as every answer is: a nested list is no tag list
        document = jsonsafe.loads(response.content, "tags/list", max_bytes=MAX_API_JSON_BYTES)
    except JSONShapeError:
        document = None
    tags = document.get("tags") if isinstance(document, dict) else None
    if tags is None and isinstance(document, dict):
        return []  # a repository without tags answers {"name": ..., "tags": null}
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise AirgapError(f"{who} answered tags/list with something else than a tag list")
    return tags


def _repositories(response: httpx.Response, who: str) -> list[str]:
    """The ``repositories`` of a _catalog answer; anything else is the registry's error."""
    try:
        document = jsonsafe.loads(response.content, "_catalog", max_bytes=MAX_API_JSON_BYTES)
    except JSONShapeError:
        document = None
    names = document.get("repositories") if isinstance(document, dict) else None
    if names is None and isinstance(document, dict):
        return []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise AirgapError(f"{who} answered _catalog with something else than a repository list")
    return names


def _next_link(header: str) -> str | None:
    """The target of ``Link: <URL>; rel="next"``, if the header has one."""
    for part in header.split(","):
        target, _, params = part.partition(";")
        target = target.strip()
        if target.startswith("<") and target.endswith(">") and 'rel="next"' in params:
            return target[1:-1]
    return None
