"""A small in-memory OCI registry on loopback that has the referrers API.

Debian's docker-registry (distribution 2.8) answers ``GET /v2/NAME/referrers/DIGEST``
with 404: it predates distribution-spec 1.1. No registry packaged for Debian has the
API, so this server stands in for one (zot, distribution 3, Harbor, the clouds): the
pull and push endpoints airgap uses (monolithic uploads, mounts, manifests by tag and
digest) and the referrers API as the spec words it: an image index of the descriptors
of every manifest whose ``subject`` is the digest, ``artifactType`` set from the
manifest (or its config's media type) and its annotations copied, paged with
``Link: <…>; rel="next"`` past ``page_size``, and ``OCI-Subject`` on a push with a
subject (or 404 for every referrers request with ``referrers=False``; it never checks
that an index's children exist, so a stale referrers tag can be made). Every request
is recorded for the tests to look at.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
_ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs|referrers)/(?P<ref>[^/]+)$")
_UPLOAD = re.compile(r"^/v2/(?P<name>.+)/blobs/uploads/(?P<id>[^/]*)$")


@dataclass
class _Repository:
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # digest -> data, type
    tags: dict[str, str] = field(default_factory=dict)
    blobs: set[str] = field(default_factory=set)


class OciServer:
    """``OciServer()`` listens at once; ``host`` is ``127.0.0.1:PORT`` (plain HTTP)."""

    def __init__(self, *, page_size: int = 100, referrers: bool = True) -> None:
        self.page_size = page_size
        self.referrers = referrers  # False: answer 404, as a registry without the API
        self.referrers_body: bytes | None = None  # a hostile answer instead of the listing
        self.blobs: dict[str, bytes] = {}
        self.repositories: dict[str, _Repository] = {}
        self.requests: list[tuple[str, str]] = []
        self._uploads: dict[str, bytearray] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_HEAD(self) -> None:
                server._handle(self, "HEAD")

            def do_PUT(self) -> None:
                server._handle(self, "PUT")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_DELETE(self) -> None:
                server._handle(self, "DELETE")

            def do_PATCH(self) -> None:
                server._handle(self, "PATCH")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- handling -----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        body = _read_body(handler)
        with self._lock:
            self.requests.append((method, handler.path))
            status, headers, payload = self._route(method, parts.path, query, body, handler)
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if method != "HEAD":
            handler.wfile.write(payload)

    def _route(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: bytes,
        handler: BaseHTTPRequestHandler,
    ) -> tuple[int, dict[str, str], bytes]:
        if path == "/v2/":
            return 200, {"Content-Type": "application/json"}, b"{}"
        upload = _UPLOAD.match(path)
        if upload:
            return self._upload(method, upload.group("name"), upload.group("id"), query, body)
        route = _ROUTE.match(path)
        if route is None:
            return 404, {}, b"404 page not found"
        name, kind, ref = route.group("name"), route.group("kind"), route.group("ref")
        repository = self.repositories.setdefault(name, _Repository())
        if kind == "blobs":
            data = self.blobs.get(ref)
            if data is None or ref not in repository.blobs:
                return 404, {}, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}'
            return 200, {"Docker-Content-Digest": ref}, data
        if kind == "referrers" and not self.referrers:
            return 404, {}, b"404 page not found"
        if kind == "referrers" and self.referrers_body is not None:
            return 200, {"Content-Type": OCI_INDEX}, self.referrers_body
        if kind == "referrers":
            return self._referrers(name, repository, ref, query)
        if method == "PUT":
            return self._put_manifest(repository, ref, body, handler.headers["Content-Type"])
        digest = repository.tags.get(ref, ref)
        stored = repository.manifests.get(digest)
        if stored is None:
            return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
        data, media_type = stored
        return 200, {"Content-Type": media_type, "Docker-Content-Digest": digest}, data

    def _upload(
        self, method: str, name: str, upload: str, query: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        repository = self.repositories.setdefault(name, _Repository())
        if method == "POST":
            mount = query.get("mount")
            source = self.repositories.get(query.get("from", ""))
            if mount and source is not None and mount in source.blobs:
                repository.blobs.add(mount)
                return 201, {"Location": f"/v2/{name}/blobs/{mount}"}, b""
            session = uuid.uuid4().hex
            self._uploads[session] = bytearray()
            return 202, {"Location": f"/v2/{name}/blobs/uploads/{session}"}, b""
        if upload not in self._uploads:
            return 404, {}, b'{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN"}]}'
        if method == "DELETE":
            del self._uploads[upload]
            return 204, {}, b""
        self._uploads[upload] += body
        if method == "PATCH":
            return 202, {"Location": f"/v2/{name}/blobs/uploads/{upload}"}, b""
        data = bytes(self._uploads.pop(upload))
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if query.get("digest") != digest:
            return 400, {}, b'{"errors":[{"code":"DIGEST_INVALID"}]}'
        self.blobs[digest] = data
        repository.blobs.add(digest)
        return 201, {"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest}, b""

    def _put_manifest(
        self, repository: _Repository, ref: str, data: bytes, media_type: str
    ) -> tuple[int, dict[str, str], bytes]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if ref.startswith("sha256:") and ref != digest:
            return 400, {}, b'{"errors":[{"code":"DIGEST_INVALID"}]}'
        repository.manifests[digest] = (data, media_type)
        if not ref.startswith("sha256:"):
            repository.tags[ref] = digest
        headers = {"Docker-Content-Digest": digest, "Location": f"/v2/manifests/{digest}"}
        subject = json.loads(data).get("subject")
        if isinstance(subject, dict):
            headers["OCI-Subject"] = str(subject.get("digest"))
        return 201, headers, b""

    def _referrers(
        self, name: str, repository: _Repository, digest: str, query: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        found = []
        for manifest_digest, (data, media_type) in sorted(repository.manifests.items()):
            document = json.loads(data)
            subject = document.get("subject")
            if not isinstance(subject, dict) or subject.get("digest") != digest:
                continue
            descriptor: dict[str, Any] = {
                "mediaType": media_type,
                "digest": manifest_digest,
                "size": len(data),
            }
            artifact_type = document.get("artifactType") or document.get("config", {}).get(
                "mediaType"
            )
            if artifact_type:
                descriptor["artifactType"] = artifact_type
            if document.get("annotations"):
                descriptor["annotations"] = document["annotations"]
            found.append(descriptor)
        page = int(query.get("page", "0"))
        chunk = found[page * self.page_size : (page + 1) * self.page_size]
        headers = {"Content-Type": OCI_INDEX}
        if (page + 1) * self.page_size < len(found):
            headers["Link"] = f'</v2/{name}/referrers/{digest}?page={page + 1}>; rel="next"'
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": chunk}
        return 200, headers, json.dumps(index).encode()


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body: Content-Length bytes, or chunked transfer encoding."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        data = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(data)
            data += handler.rfile.read(size)
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""
