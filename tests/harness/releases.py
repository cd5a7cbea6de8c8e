"""A fake GitHub (Enterprise) releases service on loopback, plus realistic release files.

Release sources are tested against a real HTTP server laid out like GitHub: web
downloads at ``/OWNER/REPO/releases/download/TAG/FILE`` and the REST API under
``/api/v3`` (GitHub Enterprise style, so ``http://127.0.0.1:PORT/OWNER/REPO/releases``
maps to ``http://127.0.0.1:PORT/api/v3`` with no environment variable). Asset downloads
redirect, as on github.com, to a second server on a *different host* (127.0.0.2 when
available): that is what proves a token sent to the API never follows the redirect.
A plain directory tree is served under ``/plain/`` for the HTTP-directory source.

Every request is recorded (server, method, path, Authorization) for assertions. The
server is session-scoped; tests make their own repositories with ``new_repo()``.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
import yaml

from airgap.providers.types import ProviderType
from tests.harness.pki import Pki

__all__ = [
    "Asset",
    "RecordedRequest",
    "Release",
    "ReleaseServer",
    "make_components",
    "make_metadata",
    "make_release_files",
    "release_server",
]

DEFAULT_PER_PAGE = 30  # GitHub's default when per_page is not given
MAX_PER_PAGE = 100

_LIST_RE = re.compile(r"^/api/v3/repos/([^/]+)/([^/]+)/releases$")
_TAG_RE = re.compile(r"^/api/v3/repos/([^/]+)/([^/]+)/releases/tags/([^/]+)$")
_ASSET_RE = re.compile(r"^/api/v3/repos/([^/]+)/([^/]+)/releases/assets/(\d+)$")
_DOWNLOAD_RE = re.compile(r"^/([^/]+)/([^/]+)/releases/download/([^/]+)/([^/]+)$")


@dataclass
class Asset:
    id: int
    name: str
    data: bytes


@dataclass
class Release:
    id: int
    owner: str
    repo: str
    tag: str
    assets: list[Asset]
    prerelease: bool = False
    draft: bool = False


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it; ``server`` is ``"api"`` or ``"cdn"``."""

    server: str
    method: str
    path: str  # without the query string
    query: str
    authorization: str | None
    accept: str | None

    @property
    def has_auth(self) -> bool:
        return self.authorization is not None


@dataclass
class _Fault:
    prefix: str
    status: int | None  # None: send a truncated body, then drop the connection
    remaining: int
    headers: dict[str, str] = field(default_factory=dict)


class ReleaseServer:
    """Fake GitHub: an API/web server and a separate download ("cdn") server.

    With ``tls=(cert, key)`` the API/web server speaks HTTPS (a GitHub that may be sent
    a token); the download server stays plain HTTP on another address either way."""

    def __init__(self, tls: tuple[Path, Path] | None = None) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        self._repo_ids = itertools.count(1)
        self._releases: dict[tuple[str, str], list[Release]] = {}
        self._assets: dict[int, tuple[Release, Asset]] = {}
        self._page_sizes: dict[tuple[str, str], int] = {}
        self._plain: dict[str, bytes] = {}
        self._indexed: list[str] = []
        self._faults: list[_Fault] = []
        self._requests: list[RecordedRequest] = []
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.url = ""
        self.cdn_url = ""

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> ReleaseServer:
        api = self._serve("127.0.0.1", "api")
        cdn_host = "127.0.0.2" if _can_bind("127.0.0.2") else "127.0.0.1"
        cdn = self._serve(cdn_host, "cdn")
        scheme = "https" if self._tls else "http"
        self.url = f"{scheme}://127.0.0.1:{api.server_address[1]}"
        self.cdn_url = f"http://{cdn_host}:{cdn.server_address[1]}"
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> ReleaseServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, host: str, role: str) -> ThreadingHTTPServer:
        owner = self

        class Handler(_Handler):
            release_server = owner
            server_role = role
            scheme = "https" if owner._tls and role == "api" else "http"

        server = ThreadingHTTPServer((host, 0), Handler)
        if self._tls and role == "api":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, name=f"release-server-{role}", daemon=True
        )
        thread.start()
        self._servers.append(server)
        self._threads.append(thread)
        return server

    # --- content --------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v3"

    def new_repo(self, prefix: str = "repo") -> tuple[str, str]:
        """A fresh ``(owner, repo)`` so tests sharing the server never collide."""
        number = next(self._repo_ids)
        return (f"owner{number}", f"{prefix}-{number}")

    def repo_url(self, owner: str, repo: str) -> str:
        """The provider URL a user would write: ``http://127.0.0.1:PORT/O/R/releases``."""
        return f"{self.url}/{owner}/{repo}/releases"

    def add_release(
        self,
        owner: str,
        repo: str,
        tag: str,
        files: dict[str, bytes],
        prerelease: bool = False,
        draft: bool = False,
    ) -> Release:
        """Publish a release; the newest one is listed first, as GitHub does."""
        with self._lock:
            release = Release(
                id=next(self._ids),
                owner=owner,
                repo=repo,
                tag=tag,
                assets=[],
                prerelease=prerelease,
                draft=draft,
            )
            for name, data in files.items():
                asset = Asset(id=next(self._ids), name=name, data=data)
                release.assets.append(asset)
                self._assets[asset.id] = (release, asset)
            self._releases.setdefault((owner, repo), []).insert(0, release)
            return release

    def set_page_size(self, owner: str, repo: str, size: int) -> None:
        """Cap the page size of one repository's release list to force pagination."""
        with self._lock:
            self._page_sizes[(owner, repo)] = size

    def add_plain(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``/plain/PATH``; returns its URL."""
        path = path.strip("/")
        with self._lock:
            self._plain[path] = data
        return f"{self.url}/plain/{path}"

    def index_plain(self, prefix: str) -> None:
        """Serve directory index pages below ``/plain/PREFIX`` (as Apache's or Python's
        http.server do), so a plain HTTP source can list a release's files."""
        with self._lock:
            self._indexed.append(prefix.strip("/") + "/")

    def plain_url(self, prefix: str) -> str:
        return f"{self.url}/plain/{prefix.strip('/')}"

    def fail_next(
        self,
        prefix: str,
        status: int | None,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path starts with ``prefix`` with
        ``status`` (or, when ``status`` is None, half the body and a dropped connection)."""
        with self._lock:
            self._faults.append(_Fault(prefix, status, times, dict(headers or {})))

    # --- records --------------------------------------------------------------------

    def requests(self, path_prefix: str = "") -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._requests if r.path.startswith(path_prefix)]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # --- internals used by the handler ----------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _take_fault(self, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if path.startswith(fault.prefix) and fault.remaining > 0:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _list(self, owner: str, repo: str) -> tuple[list[Release], int] | None:
        with self._lock:
            releases = self._releases.get((owner, repo))
            if releases is None:
                return None
            return list(releases), self._page_sizes.get((owner, repo), MAX_PER_PAGE)

    def _release_by_tag(self, owner: str, repo: str, tag: str) -> Release | None:
        with self._lock:
            for release in self._releases.get((owner, repo), []):
                if release.tag == tag and not release.draft:
                    return release
        return None

    def _asset(self, owner: str, repo: str, asset_id: int) -> tuple[Release, Asset] | None:
        with self._lock:
            found = self._assets.get(asset_id)
        if found is None or (found[0].owner, found[0].repo) != (owner, repo):
            return None
        return found

    def _download(self, owner: str, repo: str, tag: str, name: str) -> bytes | None:
        with self._lock:
            for release in self._releases.get((owner, repo), []):
                if release.tag == tag:
                    for asset in release.assets:
                        if asset.name == name:
                            return asset.data
        return None

    def _plain_file(self, path: str) -> bytes | None:
        with self._lock:
            return self._plain.get(path)

    def _plain_index_enabled(self, directory: str) -> bool:
        with self._lock:
            return any(directory.startswith(prefix) for prefix in self._indexed)

    def _plain_listing(self, directory: str) -> list[str]:
        """Entries directly below ``directory`` (files, and sub-directories with "/")."""
        with self._lock:
            names = set()
            for path in self._plain:
                if path.startswith(directory):
                    head, slash, _ = path[len(directory) :].partition("/")
                    names.add(head + slash)
            return sorted(names)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    release_server: ReleaseServer
    server_role: str
    scheme: str = "http"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        state = self.release_server
        state._record(
            RecordedRequest(
                server=self.server_role,
                method="GET",
                path=path,
                query=parts.query,
                authorization=self.headers.get("Authorization"),
                accept=self.headers.get("Accept"),
            )
        )
        fault = state._take_fault(path)
        if fault is not None:
            self._fault(fault)
            return
        if self.server_role == "api" and path.startswith("/api/v3/"):
            self._api(path, parse_qs(parts.query))
            return
        match = _DOWNLOAD_RE.match(path)
        if match:
            data = state._download(*match.groups())
            self._bytes(data) if data is not None else self._not_found()
            return
        if path.startswith("/plain/"):
            relative = path[len("/plain/") :]
            if relative.endswith("/") and state._plain_index_enabled(relative):
                self._index_page(state._plain_listing(relative))
                return
            data = state._plain_file(relative)
            self._bytes(data) if data is not None else self._not_found()
            return
        self._not_found()

    # --- API ------------------------------------------------------------------------

    def _api(self, path: str, query: dict[str, list[str]]) -> None:
        state = self.release_server
        if match := _LIST_RE.match(path):
            owner, repo = match.groups()
            listing = state._list(owner, repo)
            if listing is None:
                self._not_found()
                return
            releases, cap = listing
            per_page = min(_int(query, "per_page", DEFAULT_PER_PAGE), MAX_PER_PAGE, cap)
            page = max(_int(query, "page", 1), 1)
            chunk = releases[(page - 1) * per_page : page * per_page]
            last = max(1, -(-len(releases) // per_page))
            links = []
            base = f"{self._base()}/api/v3/repos/{owner}/{repo}/releases"
            if page < last:
                links.append(f'<{base}?per_page={per_page}&page={page + 1}>; rel="next"')
                links.append(f'<{base}?per_page={per_page}&page={last}>; rel="last"')
            if page > 1:
                links.append(f'<{base}?per_page={per_page}&page={page - 1}>; rel="prev"')
                links.append(f'<{base}?per_page={per_page}&page=1>; rel="first"')
            headers = {"Link": ", ".join(links)} if links else {}
            self._json([self._release_json(r) for r in chunk], headers=headers)
        elif match := _TAG_RE.match(path):
            release = state._release_by_tag(*match.groups())
            if release is None:
                self._not_found()
            else:
                self._json(self._release_json(release))
        elif match := _ASSET_RE.match(path):
            owner, repo, asset_id = match.groups()
            found = state._asset(owner, repo, int(asset_id))
            if found is None:
                self._not_found()
                return
            release, asset = found
            if "application/octet-stream" in (self.headers.get("Accept") or ""):
                target = (
                    f"{state.cdn_url}/{quote(owner)}/{quote(repo)}/releases/download/"
                    f"{quote(release.tag)}/{quote(asset.name)}"
                )
                self._send(302, b"", {"Location": target})
            else:
                self._json(self._asset_json(release, asset))
        else:
            self._not_found()

    def _base(self) -> str:
        host = self.headers.get("Host") or "127.0.0.1"  # HTTP/1.1 clients always send Host
        return f"{self.scheme}://{host}"

    def _release_json(self, release: Release) -> dict[str, Any]:
        base = self._base()
        return {
            "id": release.id,
            "tag_name": release.tag,
            "name": release.tag,
            "draft": release.draft,
            "prerelease": release.prerelease,
            "html_url": f"{base}/{release.owner}/{release.repo}/releases/tag/{release.tag}",
            "assets": [self._asset_json(release, asset) for asset in release.assets],
        }

    def _asset_json(self, release: Release, asset: Asset) -> dict[str, Any]:
        base = self._base()
        return {
            "id": asset.id,
            "name": asset.name,
            "size": len(asset.data),
            "content_type": "application/octet-stream",
            "url": f"{base}/api/v3/repos/{release.owner}/{release.repo}/releases/assets/{asset.id}",
            "browser_download_url": (
                f"{base}/{release.owner}/{release.repo}/releases/download/"
                f"{release.tag}/{asset.name}"
            ),
        }

    # --- responses ------------------------------------------------------------------

    def _fault(self, fault: _Fault) -> None:
        if fault.status is not None:
            self._json({"message": f"injected {fault.status}"}, fault.status, fault.headers)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"x" * 100)
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _not_found(self) -> None:
        self._json(
            {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, 404
        )

    def _json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self._send(status, data, {"Content-Type": "application/json", **(headers or {})})

    def _index_page(self, names: list[str]) -> None:
        """An index page like Python's http.server writes: a parent link, sort links
        Apache adds, then one relative link per entry."""
        links = ['<li><a href="../">../</a></li>', '<li><a href="?C=N;O=D">Name</a></li>']
        links += [f'<li><a href="{quote(name)}">{name}</a></li>' for name in names]
        body = "".join(links)
        page = f"<!DOCTYPE HTML><html><body><h1>Index</h1><ul>{body}</ul></body></html>"
        self._send(200, page.encode(), {"Content-Type": "text/html; charset=utf-8"})

    def _bytes(self, data: bytes) -> None:
        self._send(200, data, {"Content-Type": "application/octet-stream"})

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _int(query: dict[str, list[str]], key: str, default: int) -> int:
    try:
        return int(query[key][0])
    except (KeyError, ValueError, IndexError):
        return default


def _can_bind(host: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
        return True
    except OSError:
        return False


# --- realistic release content ---------------------------------------------------------


def make_metadata(series: list[tuple[int, int, str]]) -> str:
    """A clusterctl metadata.yaml with one releaseSeries entry per ``(major, minor, contract)``."""
    lines = [
        "# maps release series of major.minor to cluster-api contract version",
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind: Metadata",
        "releaseSeries:",
    ]
    for major, minor, contract in series:
        lines += [f"  - major: {major}", f"    minor: {minor}", f"    contract: {contract}"]
    return "\n".join(lines) + "\n"


def make_components(
    provider_type: ProviderType,
    namespace: str,
    images: list[str],
    extra_docs: Sequence[str] = (),
) -> str:
    """Multi-document components YAML shaped like a real provider release.

    A Namespace, a CRD stub, a ServiceAccount and a Deployment whose ``manager``
    container runs ``images[0]`` and whose initContainers run ``images[1:]``; args and
    env use clusterctl variables, some with defaults and one required (never in an image,
    so image discovery must succeed without it). ``extra_docs`` are appended verbatim.
    """
    if not images:
        raise ValueError("make_components needs at least the manager image")
    provider_label = f"{provider_type.file_prefix}-{namespace}"
    labels = {"cluster.x-k8s.io/provider": provider_label}
    docs: list[Any] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": labels},
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{namespace}.cluster.x-k8s.io", "labels": labels},
            "spec": {
                "group": f"{namespace}.cluster.x-k8s.io",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [{"name": "v1beta1", "served": True, "storage": True}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "manager", "namespace": namespace, "labels": labels},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": f"{namespace}-controller-manager",
                "namespace": namespace,
                "labels": labels,
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "manager",
                        "containers": [
                            {
                                "name": "manager",
                                "image": images[0],
                                "args": [
                                    "--leader-elect",
                                    "--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}",
                                    "--diagnostics-address=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}",
                                    "--v=${LOG_LEVEL:-2}",
                                    "--topology=${CLUSTER_TOPOLOGY=false}",
                                ],
                                "env": [
                                    {"name": "CREDENTIALS", "value": "${PROVIDER_CREDENTIALS}"},
                                ],
                            }
                        ],
                        "initContainers": [
                            {"name": f"init-{index}", "image": image, "command": ["/init"]}
                            for index, image in enumerate(images[1:], start=1)
                        ],
                    },
                },
            },
        },
    ]
    body = "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in docs)
    text = "# Components for a test provider, generated by tests/harness/releases.py\n" + body
    for extra in extra_docs:
        text += "---\n" + extra.strip("\n") + "\n"
    return text


def make_release_files(
    provider_type: ProviderType,
    namespace: str,
    images: list[str],
    series: list[tuple[int, int, str]],
    components_file: str | None = None,
) -> dict[str, bytes]:
    """``metadata.yaml`` plus the components file, ready for ``add_release``."""
    return {
        "metadata.yaml": make_metadata(series).encode(),
        components_file or provider_type.components_file: make_components(
            provider_type, namespace, images
        ).encode(),
    }


@pytest.fixture(scope="session")
def release_server() -> Iterator[ReleaseServer]:
    """One fake GitHub for the whole session; use ``new_repo()`` for isolation."""
    server = ReleaseServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tls_release_server(pki: Pki) -> Iterator[ReleaseServer]:
    """A fake GitHub whose API speaks HTTPS with the test PKI (trust ``pki.ca_cert``):
    the only kind a ``GITHUB_TOKEN`` may be sent to."""
    server = ReleaseServer(tls=(pki.server_cert, pki.server_key)).start()
    try:
        yield server
    finally:
        server.stop()
