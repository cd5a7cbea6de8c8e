"""Hostile inputs against what airgap trusts: the bundle file, names, credentials.

Issue 11, families 1-3: a bundle edited after it was verified (keeping size and times),
forged cache entries, names from registries and bundles that are paths, symlinks in the
output tree, credentials offered to hosts they were not given for. Every case runs the
real CLI (or the real client) against real servers on loopback, and ends the way every
hostile input must: exit 1 or 2, exactly one line on stderr, no traceback, nothing
written outside the output directory, no credential anywhere.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import httpx
import pytest

from airgap.bundle.manifest import BundleManifest
from airgap.core import fsutil
from airgap.core.errors import AirgapError, DigestMismatchError
from airgap.core.fsutil import OutputSymlink, SecretBytes, UnsafeOutputPath
from airgap.net.httpclient import build_client, ssl_context
from airgap.oci.manifest import Manifest
from airgap.providers.types import ProviderType
from airgap.registry.client import Registry
from airgap.registry.credentials import Credentials
from airgap.sources.forurl import source_for
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.images import TestImage
from tests.harness.pki import Pki
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

PREFIX = "capi"


# -- shared checks ------------------------------------------------------------------------


def hostile_outcome(
    result: subprocess.CompletedProcess[str], *needles: str, secrets: tuple[str, ...] = ()
) -> str:
    """Exit 1 or 2, one line on stderr naming ``needles``, no traceback, no secret."""
    code = result.returncode if result.returncode in (1, 2) else 1
    line = assert_clean_failure(result, code, *needles)
    for secret in secrets:
        assert secret not in result.stdout + result.stderr, "a credential was echoed"
    return line


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path below ``root`` (not following symlinks) with its bytes or link target."""
    found: dict[str, bytes | str] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[relative] = path.read_bytes()
        else:
            found[relative] = "dir"
    return found


def import_cli(
    bundle: Path,
    key: Path,
    registry: RegistryServer,
    *extra: str | Path,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return run_airgap(
        "import",
        bundle,
        "--key",
        key,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "-q",
        *extra,
        env=env,
    )


def registry_get(registry: RegistryServer, path: str) -> httpx.Response:
    return httpx.get(f"{registry.url}/v2/{path}", timeout=10)


def repositories(registry: RegistryServer) -> list[str]:
    return list(registry_get(registry, "_catalog").json().get("repositories") or [])


def holds_blob(registry: RegistryServer, digest: str) -> bool:
    return any(
        httpx.head(f"{registry.url}/v2/{repo}/blobs/{digest}", timeout=10).status_code == 200
        for repo in repositories(registry)
    )


def tags(registry: RegistryServer) -> dict[str, list[str]]:
    return {
        repo: sorted(registry_get(registry, f"{repo}/tags/list").json().get("tags") or [])
        for repo in repositories(registry)
    }


# -- family 1: a bundle edited after verification --------------------------------------------


def edit_in_place(bundle: Path, member: str, old: bytes | None = None, new: bytes = b"") -> None:
    """Change member bytes inside the tar the way a raw device edit would: same size,
    mtime and atime set back (only ctime moves, which no copy onto another disk keeps)."""
    span = tamper.spans(bundle)[member]
    stat = bundle.stat()
    with bundle.open("r+b") as handle:
        handle.seek(span.data)
        data = bytearray(handle.read(span.size))
        if old is None:
            data[len(data) // 2] ^= 0x01
        else:
            at = data.index(old)
            assert len(new) == len(old)
            data[at : at + len(old)] = new
        handle.seek(span.data)
        handle.write(bytes(data))
    os.utime(bundle, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = bundle.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ino,
    )


def forge_cache_entries(bundle: Path, directories: list[Path]) -> None:
    """Everything a cache-writing attacker could plant: the removed verification cache's
    entry for this exact file (its stat identity and member offsets), in every place it
    was ever looked up, plus junk. None of it may be read."""
    stat = bundle.stat()
    members = {name: [span.data, span.size] for name, span in tamper.spans(bundle).items()}
    manifest = tamper.read_members(bundle)[0].data
    entry = {
        "identity": {
            "device": stat.st_dev,
            "inode": stat.st_ino,
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "ctime_ns": stat.st_ctime_ns,
        },
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
        "members": members,
        "verified": True,
    }
    key = hashlib.sha256(str(bundle.resolve()).encode()).hexdigest()
    for directory in directories:
        for place in (directory, directory / "airgap" / "verified"):
            place.mkdir(parents=True, exist_ok=True)
            (place / f"{key}.json").write_text(json.dumps(entry))
            (place / "verified").write_text("all bundles are verified\n")


@pytest.fixture
def bundle_copy(capi_bundle: CollectedBundle, tmp_path: Path) -> Path:
    copy = tmp_path / "usb" / "capi.tar"
    copy.parent.mkdir()
    shutil.copyfile(capi_bundle.path, copy)
    return copy


def components_member(capi_bundle: CollectedBundle) -> str:
    return capi_bundle.manifest.providers[0].components


def blob_roles(bundle: Path) -> tuple[set[str], dict[str, int]]:
    """(manifest members, layer member -> size) of a bundle's image layout."""
    members = {m.name: m.data for m in tamper.read_members(bundle)}
    manifests: set[str] = set()
    layers: dict[str, int] = {}
    for name, data in members.items():
        if "/blobs/" not in name:
            continue
        try:
            parsed = Manifest.from_bytes(data)
        except AirgapError:  # not JSON: a layer
            continue
        if not {"layers", "manifests"} & set(parsed.json):
            continue  # an image config
        blobs = parsed.blobs()
        manifests.add(name)
        for blob in blobs[1:]:  # after the config
            member = f"images/blobs/sha256/{blob.digest.split(':', 1)[1]}"
            layers[member] = blob.size
    return manifests, {name: size for name, size in layers.items() if name not in manifests}


@pytest.mark.e2e
def test_components_edited_after_an_import_are_refused_and_forged_caches_change_nothing(
    capi_bundle: CollectedBundle,
    bundle_copy: Path,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    registry = registry_factory("plain")
    key = capi_bundle.key.public
    out = tmp_path / "out"
    first = import_cli(bundle_copy, key, registry, "--output-dir", out)
    assert first.returncode == 0, first.stderr
    before, pushed = snapshot(out), tags(registry)

    member = components_member(capi_bundle)
    text = bundle_copy.read_bytes()
    assert b"image: " in text
    edit_in_place(bundle_copy, member, b"image: ", b"image:\t")
    caches = [tmp_path / "cache-dir", tmp_path / "xdg-cache", tmp_path / "home" / ".cache"]
    forge_cache_entries(bundle_copy, caches)
    env = {
        "AIRGAP_CACHE_DIR": str(caches[0]),
        "XDG_CACHE_HOME": str(caches[1]),
        "HOME": str(tmp_path / "home"),
    }

    again = import_cli(bundle_copy, key, registry, "--output-dir", out, env=env)
    hostile_outcome(again, member)
    assert snapshot(out) == before  # nothing tampered (or at all) written
    assert tags(registry) == pushed

    elsewhere = tmp_path / "configmaps-out"
    configmaps = run_airgap(
        "configmaps",
        bundle_copy,
        "--key",
        key,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--output-dir",
        elsewhere,
        env=env,
    )
    hostile_outcome(configmaps, member)
    assert not elsewhere.exists()
    verify = run_airgap("verify", bundle_copy, "--key", key, env=env)
    assert verify.returncode == 1 and member in verify.stdout


@pytest.mark.e2e
def test_a_layer_edited_after_an_import_is_never_pushed(
    capi_bundle: CollectedBundle,
    bundle_copy: Path,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    """Blobs are committed under their digest: a registry that already holds a blob
    needs no byte of it (and holds the signed content), one that lacks it refuses the
    altered bytes (DIGEST_INVALID), import names the member, and nothing refers to it."""
    key = capi_bundle.key.public
    holder = registry_factory("plain")
    assert import_cli(bundle_copy, key, holder).returncode == 0
    _, layers = blob_roles(bundle_copy)
    member = max(layers, key=lambda name: layers[name])
    digest = "sha256:" + member.rsplit("/", 1)[1]
    edit_in_place(bundle_copy, member)

    out = tmp_path / "out"
    again = import_cli(bundle_copy, key, holder, "--output-dir", out)
    assert again.returncode == 0, again.stderr  # no byte of the bundle's copy was needed
    assert json.loads((out / "import-report.json").read_text())["changed"] is False
    blob = next(
        httpx.get(f"{holder.url}/v2/{repo}/blobs/{digest}", timeout=10)
        for repo in repositories(holder)
        if httpx.head(f"{holder.url}/v2/{repo}/blobs/{digest}", timeout=10).status_code == 200
    )
    assert "sha256:" + hashlib.sha256(blob.content).hexdigest() == digest

    fresh = registry_factory("plain")
    fresh_out = tmp_path / "fresh-out"
    refused = import_cli(bundle_copy, key, fresh, "--output-dir", fresh_out)
    hostile_outcome(refused, member, "does not match the signed manifest")
    assert not holds_blob(fresh, digest)
    assert not any(tags(fresh).values())
    assert not fresh_out.exists()

    full = import_cli(bundle_copy, key, fresh, "--reverify", "--output-dir", fresh_out)
    hostile_outcome(full, member, "failed verification")
    assert not holds_blob(fresh, digest) and not fresh_out.exists()


@pytest.mark.e2e
def test_an_image_manifest_edited_after_an_import_is_refused_even_with_all_blobs_there(
    capi_bundle: CollectedBundle,
    bundle_copy: Path,
    registry_factory: RegistryFactory,
    tmp_path: Path,
) -> None:
    key = capi_bundle.key.public
    registry = registry_factory("plain")
    assert import_cli(bundle_copy, key, registry).returncode == 0
    pushed = tags(registry)
    manifests, _ = blob_roles(bundle_copy)
    member = sorted(manifests)[0]
    edit_in_place(bundle_copy, member)
    out = tmp_path / "out"
    hostile_outcome(import_cli(bundle_copy, key, registry, "--output-dir", out), member)
    assert not out.exists() and tags(registry) == pushed


@pytest.mark.integration
def test_a_chunked_upload_whose_bytes_do_not_hash_to_the_digest_is_never_committed(
    registry_factory: RegistryFactory, fault_proxy_factory: FaultProxyFactory
) -> None:
    """The chunked path cannot hold back a last byte the way a monolithic stream does:
    the client hashes what the registry accepted and cancels instead of committing."""
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    signed = os.urandom(150 * 1024)
    digest = "sha256:" + hashlib.sha256(signed).hexdigest()
    altered = signed[:-1] + bytes([signed[-1] ^ 1])

    def body(offset: int) -> Iterator[bytes]:
        yield altered[offset:]

    with httpx.Client() as client:
        registry = Registry(proxy.host, client=client, plain_http=True)
        with pytest.raises(DigestMismatchError, match="nothing was committed"):
            registry.upload_blob(
                "hostile/chunked", digest, len(altered), body, what="blob x", chunk_size=64 * 1024
            )
    methods = [r.method for r in proxy.requests if "/blobs/uploads/" in r.path]
    assert methods == ["POST", "PATCH", "PATCH", "PATCH", "DELETE"]
    assert httpx.head(f"{server.url}/v2/hostile/chunked/blobs/{digest}").status_code == 404


# -- family 2: names from the outside are paths ------------------------------------------------

TRAVERSAL_DIGEST = "sha256:../../../../x"


class _EvilRegistry:
    """Just enough of the distribution API on loopback (plain HTTP) to serve one image
    whose manifest names a layer by ``layer_digest``; it records every request path."""

    def __init__(self, layer_digest: str) -> None:
        config = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"}}'
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest,
                        "size": 1,
                    }
                ],
            }
        ).encode()
        self.blobs = {"sha256:" + hashlib.sha256(config).hexdigest(): config}
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.do_GET(body=False)

            def do_GET(self, body: bool = True) -> None:
                owner.paths.append(self.path)
                data, kind = b"{}", "application/json"
                if "/manifests/" in self.path:
                    data, kind = owner.manifest, "application/vnd.oci.image.manifest.v1+json"
                elif "/blobs/" in self.path:
                    digest = self.path.rsplit("/", 1)[1]
                    if digest not in owner.blobs:
                        self.send_response(404)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    data, kind = owner.blobs[digest], "application/octet-stream"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "digest",
    [
        TRAVERSAL_DIGEST,
        "sha256:" + "A" * 64,  # upper case
        "sha256:" + "a" * 63,  # short
        "sha256:" + "a" * 64 + "/../x",
        "md5:" + "a" * 32,
    ],
    ids=["traversal", "uppercase", "short", "suffix", "algorithm"],
)
def test_collect_refuses_a_registry_digest_that_is_not_a_digest(
    digest: str, signing_key: SigningKey, tmp_path: Path
) -> None:
    registry = _EvilRegistry(digest)
    try:
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            f"images: [{registry.host}/evil/app:v1]\n"
            f"registries:\n  '{registry.host}': {{plainHTTP: true}}\n"
        )
        out = tmp_path / "out"
        out.mkdir()
        before = snapshot(tmp_path)
        result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", out / "b.tar")
    finally:
        registry.stop()
    line = hostile_outcome(result, "manifest.layers[0].digest", digest[:12])
    assert result.returncode == 1, line
    assert snapshot(tmp_path) == before  # no bundle, no staging left, nothing beside
    assert not any(".." in path or "/x" in path for path in registry.paths)


def resigned(
    capi_bundle: CollectedBundle, tmp_path: Path, edit: Callable[[BundleManifest], BundleManifest]
) -> Path:
    """The CAPI bundle with its manifest edited by ``edit`` and re-signed with the key
    the importer trusts: what a compromised collect (or stolen key) could produce."""
    return tamper.resign(
        capi_bundle.path, tmp_path / "resigned.tar", capi_bundle.key.private, edit=edit
    )


def _provider_edit(index: int = 1, **changes: Any) -> Callable[[BundleManifest], BundleManifest]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        providers = list(manifest.providers)
        providers[index] = dataclasses.replace(providers[index], **changes)
        return dataclasses.replace(manifest, providers=providers)

    return edit


def _image_edit(**changes: Any) -> Callable[[BundleManifest], BundleManifest]:
    def edit(manifest: BundleManifest) -> BundleManifest:
        images = list(manifest.images)
        images[0] = dataclasses.replace(images[0], **changes)
        return dataclasses.replace(manifest, images=images)

    return edit


HOSTILE_NAMES = {
    "name": _provider_edit(name="x/../../TRAVERSAL"),
    "name-nul": _provider_edit(name="x\0y"),
    "name-long": _provider_edit(name="a" * 64),
    "version": _provider_edit(version="../../../v1"),
    "label": _provider_edit(label="../../TRAVERSAL"),
    "type": _provider_edit(type="../Provider"),
    "components": _provider_edit(components="providers/../../TRAVERSAL.yaml"),
    "image-digest": _image_edit(digest=TRAVERSAL_DIGEST),
    "image-reference": _image_edit(reference="127.0.0.1:5000/../../x:v1"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_a_signed_bundle_naming_a_path_is_refused_and_nothing_leaves_the_output_dir(
    case: str, capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    bundle = resigned(capi_bundle, tmp_path, HOSTILE_NAMES[case])
    workspace = tmp_path / "work"
    out = workspace / "deep" / "out"
    out.mkdir(parents=True)
    before = snapshot(tmp_path)
    key = capi_bundle.key.public
    verify = run_airgap("verify", bundle, "--key", key)
    assert verify.returncode == 1 and "Bundle verified" not in verify.stdout, verify.stdout
    for command in ("configmaps", "import"):
        result = run_airgap(
            command,
            bundle,
            "--key",
            key,
            "--registry",
            f"127.0.0.1:9/{PREFIX}",
            "--output-dir",
            out,
        )
        hostile_outcome(result, "failed verification")
    assert snapshot(tmp_path) == before
    assert not list(tmp_path.parent.glob("TRAVERSAL*"))


@pytest.mark.e2e
@pytest.mark.parametrize("link", ["operator", "clusterctl/cluster-api"])
def test_a_symlinked_directory_in_the_output_dir_is_never_written_through(
    link: str, capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / link).parent.mkdir(parents=True)
    (out / link).symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(tmp_path)
    result = run_airgap(
        *capi_bundle.import_args(f"127.0.0.1:9/{PREFIX}", command="configmaps"),
        "--output-dir",
        out,
    )
    line = hostile_outcome(result, str(out / link), "symbolic link")
    assert result.returncode == 2, line
    assert snapshot(tmp_path) == before  # refused before anything was written
    assert list(elsewhere.iterdir()) == []


@pytest.mark.e2e
def test_import_refuses_a_symlink_in_its_output_dir(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "components").symlink_to(elsewhere, target_is_directory=True)
    registry = registry_factory("plain")
    result = import_cli(capi_bundle.path, capi_bundle.key.public, registry, "--output-dir", out)
    hostile_outcome(result, str(out / "components"), "symbolic link")
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["components"]


@pytest.mark.unit
def test_the_output_writer_stays_in_its_directory(tmp_path: Path) -> None:
    """The last line of defence, whatever reaches it: no path leaves the root, a link at
    a file's name is replaced (its target untouched), the root itself may be a link, a
    failure leaves nothing behind, and secrets are 0600 whatever the umask."""
    root = tmp_path / "root"
    for bad in ("../x", "a/../../x", "/abs", "a//b", "a/./b", "a\0b", "", "a/" + "n" * 256):
        with pytest.raises(UnsafeOutputPath):
            fsutil.write_tree(root, {"ok.txt": b"ok", bad: b"escape"})
    assert not root.exists() or not any(root.rglob("*"))

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    root.mkdir(exist_ok=True)
    (root / "mapping.txt").symlink_to(victim)
    real_root = tmp_path / "real"
    real_root.mkdir()
    (tmp_path / "link-to-root").symlink_to(real_root, target_is_directory=True)
    old_umask = os.umask(0)
    try:
        fsutil.write_tree(root, {"mapping.txt": b"new", "s/secret.yaml": SecretBytes(b"pw")})
        fsutil.write_tree(tmp_path / "link-to-root", {"a/b.txt": b"b"})
    finally:
        os.umask(old_umask)
    assert victim.read_bytes() == b"precious"
    assert not (root / "mapping.txt").is_symlink()
    assert (root / "mapping.txt").read_bytes() == b"new"
    assert (root / "s/secret.yaml").stat().st_mode & 0o777 == 0o600
    assert (root / "mapping.txt").stat().st_mode & 0o777 == 0o644
    assert (real_root / "a/b.txt").read_bytes() == b"b"

    (root / "t").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(OutputSymlink):
        fsutil.write_tree(root, {"fresh.txt": b"x", "t/escape.txt": b"x"})
    assert not (root / "fresh.txt").exists() and not (tmp_path / "escape.txt").exists()
    (root / "taken").mkdir()
    with pytest.raises(AirgapError, match="is a directory"):
        fsutil.write_tree(root, {"fresh.txt": b"x", "taken": b"x"})
    assert not (root / "fresh.txt").exists() and (root / "taken").is_dir()
    assert not [p for p in root.rglob(".*.tmp")]


# -- family 3: credentials go only where they belong ------------------------------------------

USER, SECRET = "alice", "s3cret-Pa55word"
BASIC = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
GITHUB_TOKEN = "ghp_hostile-test-token-0123456789"

# what a _Recorder answers a request with: (status, headers, body)
Respond: TypeAlias = Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


class _Recorder:
    """A loopback HTTP server answering with ``respond(handler) -> (status, headers,
    body)``; it records every request's method, path and Authorization header."""

    def __init__(self, host: str, respond: Respond) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                owner.requests.append((self.command, self.path, self.headers.get("Authorization")))
                status, headers, body = respond(self)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.host = f"{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def authorizations(self) -> list[str]:
        return [auth for _, _, auth in self.requests if auth]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _other_loopback_name() -> str:
    """A second loopback host name: 127.0.0.2 where it can be bound, else localhost
    (another origin than 127.0.0.1 all the same)."""
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
        return "127.0.0.2"
    except OSError:
        return "localhost"


StartServer: TypeAlias = Callable[[str, Respond], _Recorder]


@pytest.fixture
def servers() -> Iterator[StartServer]:
    started: list[_Recorder] = []

    def start(host: str, respond: Respond) -> _Recorder:
        server = _Recorder(host, respond)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _registry_client(host: str, client: httpx.Client) -> Registry:
    return Registry(host, client=client, credentials=Credentials(USER, SECRET), plain_http=True)


@pytest.mark.integration
@pytest.mark.parametrize("foreign_answer", ["accepts", "challenges"])
def test_an_upload_location_on_another_host_gets_no_credentials(
    foreign_answer: str, servers: StartServer
) -> None:
    """The registry (basic auth) hands out an upload Location on another host; that host
    never sees Authorization, and its own 401 challenge (a bearer realm of its choosing)
    is not believed: nothing is sent to that realm either."""
    elsewhere = _other_loopback_name()

    def foreign(handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if handler.path.startswith("/token"):
            return 200, {"Content-Type": "application/json"}, b'{"token": "stolen"}'
        if foreign_answer == "challenges":
            realm = f'Bearer realm="http://{other.host}/token",service="evil"'
            return 401, {"WWW-Authenticate": realm}, b""
        return 201, {}, b""

    other = servers(elsewhere, foreign)

    def registry(handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if handler.headers.get("Authorization") != BASIC:
            return 401, {"WWW-Authenticate": 'Basic realm="registry"'}, b""
        if handler.command == "POST":
            return 202, {"Location": f"http://{other.host}/upload/1?state=x"}, b""
        return 404, {}, b""

    own = servers("127.0.0.1", registry)
    data = b"layer bytes"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with httpx.Client() as client:
        target = _registry_client(own.host, client)
        if foreign_answer == "accepts":
            target.upload_blob("team/app", digest, len(data), lambda _: iter([data]), what="blob")
        else:
            with pytest.raises(AirgapError) as caught:
                target.upload_blob(
                    "team/app", digest, len(data), lambda _: iter([data]), what="blob"
                )
            assert SECRET not in str(caught.value) and "\n" not in str(caught.value)
    assert other.requests and other.authorizations() == []
    assert not any(path.startswith("/token") for _, path, _ in other.requests)
    assert own.authorizations() and set(own.authorizations()) == {BASIC}


@pytest.mark.integration
def test_a_redirect_to_another_host_gets_no_credentials(servers: StartServer) -> None:
    data = b"config bytes"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    storage = servers(_other_loopback_name(), lambda handler: (200, {}, data))

    def registry(handler: BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if handler.headers.get("Authorization") != BASIC:
            return 401, {"WWW-Authenticate": 'Basic realm="registry"'}, b""
        return 307, {"Location": f"http://{storage.host}/blob?sig=abc"}, b""

    own = servers("127.0.0.1", registry)
    with build_client() as client:  # follows redirects, as every airgap client does
        got = _registry_client(own.host, client).fetch_small_blob(
            "team/app", digest, len(data), what="config"
        )
    assert got == data
    assert storage.requests and storage.authorizations() == []
    assert own.authorizations() == [BASIC]


@pytest.mark.integration
def test_credentials_never_go_to_a_plain_http_token_service_on_another_host(
    servers: StartServer,
) -> None:
    challenge = 'Bearer realm="http://token.example.invalid/token",service="registry"'
    own = servers("127.0.0.1", lambda handler: (401, {"WWW-Authenticate": challenge}, b""))
    with httpx.Client() as client, pytest.raises(AirgapError) as caught:
        _registry_client(own.host, client).manifest_digest("team/app", "v1", what="image")
    message = str(caught.value)
    assert "only sent there over HTTPS" in message and SECRET not in message
    assert own.authorizations() == []


def _publish_provider(server: ReleaseServer, source_images: dict[str, TestImage]) -> str:
    owner, repo = server.new_repo("cluster-api-provider-tokentest")
    files = {
        "metadata.yaml": make_metadata([(0, 1, "v1beta1")]).encode(),
        "infrastructure-components.yaml": make_components(
            ProviderType.INFRASTRUCTURE, "tokentest-system", [source_images["app"].reference]
        ).encode(),
    }
    server.add_release(owner, repo, "v0.1.0", files)
    return server.repo_url(owner, repo)


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["enterprise", "github-api-url"])
def test_github_token_is_never_sent_over_plain_http(
    api: str,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
    tmp_path: Path,
) -> None:
    """A spec names a GitHub Enterprise on plain HTTP; the user even lists it (or points
    GITHUB_API_URL at it): the token still stays home, and collect works without it."""
    url = _publish_provider(release_server, source_images)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "providers:\n"
        f"  - {{name: tokentest, type: InfrastructureProvider, version: v0.1.0, url: '{url}'}}\n"
    )
    env = {"GITHUB_TOKEN": GITHUB_TOKEN, "GITHUB_ENTERPRISE_HOSTS": "127.0.0.1"}
    if api == "github-api-url":
        env["GITHUB_API_URL"] = release_server.api_url
    release_server.clear_requests()
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "b.tar", env=env
    )
    assert result.returncode == 0, result.stderr
    assert release_server.requests() and not any(r.has_auth for r in release_server.requests())
    assert GITHUB_TOKEN not in (tmp_path / "b.tar").read_bytes().decode("latin-1")


@pytest.mark.integration
def test_github_token_goes_only_to_hosts_the_user_names(
    tls_release_server: ReleaseServer, pki: Pki
) -> None:
    """Over HTTPS, a GitHub Enterprise host named only by a spec gets no token; listed in
    GITHUB_ENTERPRISE_HOSTS (host or host:port) it does."""
    server = tls_release_server
    owner, repo = server.new_repo("tokenscope")
    server.add_release(owner, repo, "v1.0.0", {"metadata.yaml": b"m"})
    port = urlsplit(server.url).port
    with httpx.Client(verify=ssl_context(str(pki.ca_cert))) as client:
        for listed, expected in (
            ("", None),
            ("ghe.example", None),
            ("127.0.0.1:1", None),
            ("127.0.0.1", f"Bearer {GITHUB_TOKEN}"),
            (f"ghe.example, 127.0.0.1:{port}", f"Bearer {GITHUB_TOKEN}"),
        ):
            server.clear_requests()
            env = {"GITHUB_TOKEN": GITHUB_TOKEN, "GITHUB_ENTERPRISE_HOSTS": listed}
            source_for(server.repo_url(owner, repo), client, env).resolve_version("latest")
            assert [r.authorization for r in server.requests()] == [expected], listed


CREDENTIAL_CASES = {
    "registry-flag": ("import", f"--registry={USER}:{SECRET}@127.0.0.1:9/capi"),
    "registry-flag-url": ("import", f"--registry=https://{USER}:{SECRET}@127.0.0.1:9/capi"),
    "provider-url": ("spec", f"url: 'http://{USER}:{SECRET}@127.0.0.1:9/dir', version: v1.0.0"),
    "provider-url-scheme": ("spec", f"url: 'ftp://{USER}:{SECRET}@127.0.0.1:9/dir'"),
    "provider-url-file": ("spec", f"url: 'file://{USER}:{SECRET}@host/repo'"),
    "mirror": ("mirror", f"{USER}:{SECRET}@mirror.example:5000/k8s"),
    "github-api-url": ("github", f"https://{USER}:{SECRET}@127.0.0.1:9/api/v3"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(CREDENTIAL_CASES))
def test_user_info_in_a_url_is_never_echoed(
    case: str, capi_bundle: CollectedBundle, signing_key: SigningKey, tmp_path: Path
) -> None:
    kind, value = CREDENTIAL_CASES[case]
    spec = tmp_path / "spec.yaml"
    env: dict[str, str] = {}
    if kind == "import":
        result = run_airgap(
            "import", capi_bundle.path, "--key", capi_bundle.key.public, value, "--dry-run"
        )
    else:
        provider = "{name: odd, type: InfrastructureProvider, version: v1.0.0, url: 'https://github.com/o/r/releases'}"
        if kind == "spec":
            provider = f"{{name: odd, type: InfrastructureProvider, {value}}}"
            if "version" not in value:
                provider = provider[:-1] + ", version: v1.0.0}"
        text = f"providers:\n  - {provider}\n"
        if kind == "mirror":
            text += f"registries:\n  registry.k8s.io: {{mirror: '{value}'}}\n"
        if kind == "github":
            env = {"GITHUB_API_URL": value}
        spec.write_text(text)
        result = run_airgap(
            "collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "b.tar", env=env
        )
    hostile_outcome(result, secrets=(SECRET,))
    assert not (tmp_path / "b.tar").exists()


@pytest.mark.e2e
def test_secret_templates_are_0600_whatever_the_umask(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    old = os.umask(0)
    try:
        result = run_airgap(
            *capi_bundle.import_args(f"127.0.0.1:9/{PREFIX}", command="configmaps"),
            "--output-dir",
            out,
        )
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    secrets = sorted((out / "operator" / "02-provider-configmaps" / "secrets").iterdir())
    assert secrets
    for path in out.rglob("*"):
        if path.is_file():
            expected = 0o600 if path.parent.name == "secrets" else 0o644
            assert path.stat().st_mode & 0o777 == expected, path
