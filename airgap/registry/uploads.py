"""Blob uploads to a registry: mounts, upload sessions, monolithic and chunked PUTs,
resumed where the registry says it stands.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from airgap.core.errors import (
    AirgapError,
    DigestMismatchError,
    HTTPStatusError,
)
from airgap.net import http1frames
from airgap.registry.auth import repository_scope
from airgap.registry.session import RegistrySession

CHUNK = 1 << 20


@dataclass(frozen=True)
class UploadSession:
    """An open upload session (the 202 to ``POST blobs/uploads/``): where the bytes go,
    and the smallest PATCH the registry takes (``OCI-Chunk-Min-Length``, 0: none)."""

    repository: str
    location: str
    minimum: int


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


class BlobUploads(RegistrySession):
    """Pushing blobs: cross-repository mounts, upload sessions, their bytes."""

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
