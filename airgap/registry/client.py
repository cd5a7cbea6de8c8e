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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin

import httpx

from airgap.core.errors import (
    AirgapError,
    DigestMismatchError,
    HTTPStatusError,
    NetworkError,
    NotFoundError,
    TLSError,
)
from airgap.core.limits import (
    MAX_API_JSON_BYTES,
    MAX_MANIFEST_BYTES,
    MAX_REFERRER_PAGES,
    MAX_REFERRERS,
    MAX_SMALL_BODY_BYTES,
)
from airgap.formats import jsonsafe
from airgap.formats.jsonsafe import JSONShapeError
from airgap.net import fasthttp, http1frames, httpclient
from airgap.oci.manifest import MANIFEST_ACCEPT, OCI_INDEX, Descriptor, Manifest
from airgap.oci.reference import is_loopback_host
from airgap.registry.auth import NO_AUTH, Authenticator, parse_challenge, repository_scope
from airgap.registry.credentials import Credentials, CredentialSource

CHUNK = 1 << 20
BodyFactory = Callable[[], Iterable[bytes]]


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


@dataclass(frozen=True)
class UploadSession:
    """An open upload session (the 202 to ``POST blobs/uploads/``): where the bytes go,
    and the smallest PATCH the registry takes (``OCI-Chunk-Min-Length``, 0: none)."""

    repository: str
    location: str
    minimum: int


class Registry:
    """Talks the distribution API to one registry endpoint."""

    def __init__(
        self,
        host: str,
        *,
        client: httpx.Client,
        credentials: CredentialSource | None = None,
        plain_http: bool | None = None,
        policy: httpclient.RetryPolicy = httpclient.DEFAULT_RETRY,
        display_name: str | None = None,
    ) -> None:
        self.host = host
        self.display_name = display_name or host
        # Loopback registries without an explicit setting: HTTPS first, then plain HTTP,
        # as docker does (but never skipping certificate verification).
        self._probe_scheme = plain_http is None and is_loopback_host(host)
        self.base_url = f"{'http' if plain_http else 'https'}://{host}"
        self._client = client
        self._policy = policy
        self._auth = Authenticator(host, client, credentials, policy)
        self._ping_lock = threading.Lock()
        self._ping_error: AirgapError | None = None
        self._self_mount = True  # False once the registry refused a same-repository mount

    @property
    def plain_http(self) -> bool:
        """Whether this endpoint speaks plain HTTP (settled by the first request)."""
        return self.base_url.startswith("http://")

    def presented_credentials(self) -> Credentials | None:
        """The credentials this registry asks for and gets, so that others who read
        from it (the operator's OCI source) can be handed the same."""
        self.ping()
        return self._auth.presented

    # -- plumbing -------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return f"{self.base_url}/v2/{path}"

    def ping(self) -> None:
        """Learn which auth scheme the registry wants (once per endpoint).

        A failure is remembered: the threads queued behind the first one fail at once
        instead of each retrying an unreachable registry in turn."""
        with self._ping_lock:
            if self._auth.known:
                return
            if self._ping_error is not None:
                raise self._ping_error
            try:
                response = self._ping_response()
            except AirgapError as exc:
                self._ping_error = exc
                raise
            if response.status_code == 401 and self._is_own(response.url):
                # a challenge from where a redirect led is not believed (as in _send):
                # its realm would be handed this registry's credentials
                header = response.headers.get("WWW-Authenticate", "")
                self._auth.learn(parse_challenge(header) if header else NO_AUTH)
            elif response.status_code < 400 or response.status_code == 404:
                self._auth.learn(NO_AUTH)
            else:
                raise httpclient.status_error(response, f"registry {self.display_name}")

    def _ping_response(self) -> httpx.Response:
        if self._probe_scheme:
            self._probe_scheme = False
            try:
                return self._get_base(httpclient.RetryPolicy(attempts=1))
            except TLSError:
                raise
            except NetworkError:
                self.base_url = f"http://{self.host}"
        return self._get_base(self._policy)

    def _get_base(self, policy: httpclient.RetryPolicy) -> httpx.Response:
        url = self._url("")
        response = httpclient.send(
            self._client, lambda: self._client.build_request("GET", url), policy=policy
        )
        response.close()
        return response

    def _send(
        self,
        method: str,
        url: str,
        scopes: tuple[str, ...],
        *,
        what: str,
        headers: dict[str, str] | None = None,
        body: BodyFactory | None = None,
        stream: bool = False,
        ok: tuple[int, ...] = (200,),
        missing_ok: bool = False,
        body_limit: int = MAX_SMALL_BODY_BYTES,
    ) -> httpx.Response | None:
        """Send with auth and retries; raise a typed error for any status not in ``ok``.

        ``url`` is a path below ``/v2/`` or an absolute upload location."""
        self.ping()
        # credentials belong to this registry's origin: an upload Location on another
        # host (or scheme, or port) gets none, and its challenges are not believed; a
        # path below /v2/ is on it by construction (no URL parsed twice per request)
        own = True
        if url.startswith(("http://", "https://")):
            own = self._is_own(url)
        else:
            url = self._url(url)
        refresh = False
        for _ in range(2):
            request_headers = dict(headers or {})
            try:
                authorization = self._auth.header(scopes, refresh=refresh) if own else None
            except HTTPStatusError as exc:  # the token service refused: say what we were doing
                raise type(exc)(f"{what}: {exc}", exc.status) from None
            if authorization:
                request_headers["Authorization"] = authorization

            def build(h: dict[str, str] = request_headers) -> httpx.Request:
                content = body() if body else None
                if isinstance(content, httpx.SyncByteStream):
                    # a stream the transport may send its own way (a FileBody, by
                    # sendfile): given as the request's stream, not wrapped by httpx
                    request = self._client.build_request(method, url, headers=h)
                    request.stream = content
                    return request
                return self._client.build_request(method, url, headers=h, content=content)

            response = httpclient.send(
                self._client, build, policy=self._policy, stream=stream, body_limit=body_limit
            )
            if response.status_code in ok:
                return response
            answered_by_us = own and self._is_own(response.url)  # not a redirect target
            if response.status_code == 401 and not refresh and answered_by_us:
                header = response.headers.get("WWW-Authenticate")
                if header:
                    self._auth.learn(parse_challenge(header))
                response.close()
                refresh = True
                continue
            if response.status_code == 404 and missing_ok:
                response.close()
                return None
            try:
                if response.status_code in (401, 403) and answered_by_us:
                    raise self._auth.denied(response.status_code, what, scopes)
                raise httpclient.status_error(response, what)
            finally:
                response.close()
        raise AssertionError("unreachable")

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

    def blob_size(self, repository: str, digest: str, *, what: str) -> int | None:
        """Size of a blob the registry already has in ``repository``, else None."""
        response = self._send(
            "HEAD",
            f"{repository}/blobs/{digest}",
            (repository_scope(repository, "pull"),),
            what=what,
            missing_ok=True,
        )
        if response is None:
            return None
        length = response.headers.get("Content-Length", "0").strip()
        if not http1frames.is_length(length.encode()):  # ASCII digits only, int()-safe
            raise AirgapError(
                f"{what}: registry {self.display_name} answered HEAD {repository}/blobs/"
                f"{digest} with an invalid Content-Length {length[:40]!r}"
            )
        return int(length)

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

    def mount_blob(self, repository: str, digest: str, source: str, *, what: str) -> bool:
        """Ask the registry to link a blob from another repository; True if it did (a
        session it opened instead is cancelled)."""
        session = self.mount_or_start(repository, digest, source, what=what)
        if session is None:
            return True
        self.cancel_upload(session)
        return False

    def mount_or_start(
        self, repository: str, digest: str, source: str, *, what: str
    ) -> UploadSession | None:
        """``POST blobs/uploads/?mount=DIGEST&from=SOURCE``: None when the registry linked
        the blob (201), else the upload session it opened instead (202).

        The distribution spec defines the 202 as the answer of a registry that "does not
        support cross-repository mounting or is unable to mount the requested blob":
        "the upload session has begun and the client MAY proceed with the upload". So a
        failed mount is not a request wasted: the bytes go into that session, where
        cancelling it and opening another would cost two more requests."""
        scopes: tuple[str, ...] = (repository_scope(repository, "pull,push"),)
        if source != repository:
            scopes += (repository_scope(source, "pull"),)
        url = f"{repository}/blobs/uploads/?mount={digest}&from={source}"
        response = self._send("POST", url, scopes, what=what, ok=(201, 202))
        assert response is not None
        response.close()
        if response.status_code == 201:
            return None
        return self._session(repository, response, what)

    def find_or_start(self, repository: str, digest: str, *, what: str) -> UploadSession | None:
        """None when ``repository`` already holds the blob, else an upload session for it.

        One request where the registry allows it: a mount from the repository itself.
        distribution (2.8 and 3) stats the blob in the source repository, the same one
        here, and links it again (201) if it is there, else opens a session (202), as for
        any mount it cannot make; HEAD then POST asks the same in two. A registry may
        refuse the form (one answers 400 to a mount whose source is its target): any
        error status falls back to HEAD + POST, and the registry is not asked that way
        again. A registry that ignores mount parameters answers 202 whatever it holds; the
        pusher notices that on a mount that had to succeed and asks first from then on."""
        if self._self_mount:
            try:
                return self.mount_or_start(repository, digest, repository, what=what)
            except HTTPStatusError:
                self._self_mount = False
        if self.blob_size(repository, digest, what=what) is not None:
            return None
        return self.start_upload(repository, what=what)

    def cancel_upload(self, session: UploadSession) -> None:
        """Abandon an upload session (best effort: an abandoned session expires anyway)."""
        with contextlib.suppress(AirgapError):
            self._send(
                "DELETE",
                session.location,
                (repository_scope(session.repository, "pull,push"),),
                what="cancel upload",
                ok=(200, 202, 204),
                missing_ok=True,
            )

    def _is_own(self, url: str | httpx.URL) -> bool:
        """Whether ``url`` is on this registry's origin (scheme, host and port): the only
        place its credentials are sent."""
        try:
            return _origin(httpx.URL(str(url))) == _origin(httpx.URL(self.base_url))
        except httpx.InvalidURL:
            return False

    def _location(self, location: str) -> str:
        try:
            return urljoin(self.base_url + "/", location)
        except ValueError:  # e.g. a malformed IPv6 host
            raise AirgapError(
                f"registry {self.display_name} gave an invalid Location header"
            ) from None

    def upload_blob(
        self,
        repository: str,
        digest: str,
        size: int,
        body: Callable[[int], Iterable[bytes]],
        *,
        what: str,
        chunk_size: int | None = None,
        session: UploadSession | None = None,
    ) -> None:
        """Upload a blob: one streamed PUT, or PATCH chunks when the registry wants them.

        ``body(offset)`` yields the blob's bytes from ``offset`` to the end; it is called
        again for every attempt so nothing is ever buffered whole (a ``FileBody`` goes
        by ``sendfile``). What is committed is checked against ``digest`` either way:
        by the registry for the one PUT (``?digest=``, refused with DIGEST_INVALID),
        here for PATCH chunks, whose hash is only known to this side before the commit.
        ``session`` is one already open for this blob in ``repository`` (a mount
        answered with 202), else one is opened.
        """
        scopes = (repository_scope(repository, "pull,push"),)
        if session is None:
            session = self.start_upload(repository, what=what)
        if chunk_size is None and session.minimum == 0:
            try:
                self._put_monolithic(session.location, digest, size, body, scopes, what)
                return
            except HTTPStatusError as exc:
                if exc.status not in (400, 413, 416):
                    raise
                self.cancel_upload(session)  # do not leave the refused session open
                session = self.start_upload(repository, what=what)
        self._put_chunked(
            session.location,
            digest,
            size,
            body,
            scopes,
            what,
            max(chunk_size or 8 * CHUNK, session.minimum),
        )

    def _session(self, repository: str, response: httpx.Response, what: str) -> UploadSession:
        location = self._session_location(response, what)
        return UploadSession(repository, location, self._chunk_minimum(response, what))

    def _session_location(self, response: httpx.Response, what: str) -> str:
        """Where an upload session's bytes go: its Location, which must be there."""
        location = response.headers.get("Location", "").strip()
        if not location:
            raise AirgapError(
                f"{what}: registry {self.display_name} opened an upload session "
                f"(HTTP {response.status_code}) without a Location header"
            )
        try:
            return str(httpx.URL(self._location(location)))
        except httpx.InvalidURL:
            raise AirgapError(
                f"{what}: registry {self.display_name} gave an invalid upload Location"
            ) from None

    def _chunk_minimum(self, response: httpx.Response, what: str) -> int:
        """OCI-Chunk-Min-Length: the smallest PATCH the registry takes (0: no minimum)."""
        text = response.headers.get("OCI-Chunk-Min-Length", "").strip()
        if not text:
            return 0
        if not text.isascii() or not text.isdigit() or len(text) > 12:
            raise AirgapError(
                f"{what}: registry {self.display_name} sent an invalid "
                f"OCI-Chunk-Min-Length {text[:40]!r}"
            )
        return int(text)

    def start_upload(self, repository: str, *, what: str) -> UploadSession:
        """Open an upload session; its Location says where the bytes go."""
        scopes = (repository_scope(repository, "pull,push"),)
        start = self._send("POST", f"{repository}/blobs/uploads/", scopes, what=what, ok=(202,))
        assert start is not None
        start.close()
        return self._session(repository, start, what)

    def _put_monolithic(
        self,
        location: str,
        digest: str,
        size: int,
        body: Callable[[int], Iterable[bytes]],
        scopes: tuple[str, ...],
        what: str,
    ) -> None:
        url = httpx.URL(location).copy_add_param("digest", digest)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        response = self._send(
            "PUT",
            str(url),
            scopes,
            what=what,
            headers=headers,
            body=lambda: body(0),
            ok=(201, 204),
        )
        assert response is not None
        response.close()

    def _put_chunked(
        self,
        location: str,
        digest: str,
        size: int,
        body: Callable[[int], Iterable[bytes]],
        scopes: tuple[str, ...],
        what: str,
        chunk_size: int,
    ) -> None:
        offset = 0
        # the hash of every byte the registry has accepted so far: the session is only
        # committed (PUT ?digest=) if it is the digest, whatever the body source did
        algorithm = digest.partition(":")[0]
        accepted = hashlib.new(algorithm if algorithm in ("sha256", "sha512") else "sha256")
        attempts: list[Any] = []
        while offset < size:
            length = min(chunk_size, size - offset)
            first = offset

            def piece(
                start: int = first, length: int = length, base: Any = accepted
            ) -> Iterator[bytes]:
                hasher = base.copy()
                attempts[:] = [hasher]  # each retry of the PATCH starts again from base
                for chunk in _limit(body(start), length):
                    hasher.update(chunk)
                    yield chunk

            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Length": str(length),
                "Content-Range": f"{first}-{first + length - 1}",
            }
            response = self._send(
                "PATCH", location, scopes, what=what, headers=headers, body=piece, ok=(202,)
            )
            assert response is not None
            response.close()
            if response.headers.get("Location"):
                location = self._session_location(response, what)
            accepted = attempts[0]
            offset += length
        if f"{algorithm}:{accepted.hexdigest()}" != digest:
            with contextlib.suppress(AirgapError):  # an abandoned session expires anyway
                self._send(
                    "DELETE", location, scopes, what=what, ok=(200, 202, 204), missing_ok=True
                )
            raise DigestMismatchError(
                f"{what}: the {size} bytes read for it do not hash to {digest}; "
                "the upload was cancelled, nothing was committed"
            )
        url = httpx.URL(location).copy_add_param("digest", digest)
        response = self._send(
            "PUT",
            str(url),
            scopes,
            what=what,
            headers={"Content-Length": "0"},
            body=lambda: [b""],
            ok=(201, 204),
        )
        assert response is not None
        response.close()


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


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host.lower(), url.port or default


def _limit(chunks: Iterable[bytes], length: int) -> Iterator[bytes]:
    """At most ``length`` bytes of ``chunks``."""
    remaining = length
    for chunk in chunks:
        if remaining <= 0:
            break
        if len(chunk) > remaining:
            chunk = chunk[:remaining]
        remaining -= len(chunk)
        yield chunk
