"""``airgap serve`` (issue 16): a verified bundle, or its parts, as a read-only OCI registry.

The pinned world's bundle (tag and digest references, filtered and whole indexes, OCI
and Docker media types) is served after its source registry is stopped; skopeo, podman
(through a registries.conf mirror) and containerd (``ctr --hosts-dir``) pull every image
by its original reference and get the bundle's digests, the source's own wherever no
platform filter applied. The HTTP answers (content types, digests, lengths, ranges,
pagination, the distribution error format) are checked one by one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from airgap.bundle.format import ImageRecord
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.parts import (
    PartRecord,
    PartsList,
    part_name,
    part_sizes,
    parts_list_path,
    parts_signature_path,
)
from airgap.bundle.signing import load_private_key, sign
from airgap.oci.reference import parse_reference
from airgap.rewrite.mapping import host_path_element
from tests.harness import skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
from tests.harness.images import OciLayout
from tests.harness.pinned import PinnedWorld, build_pinned_world
from tests.harness.pki import Pki
from tests.harness.releases import ReleaseServer
from tests.harness.runtimes import Containerd, Podman, missing_runtime
from tests.harness.tamper import blob_data

pytestmark = pytest.mark.e2e

START_TIMEOUT = 60
# SIGTERM is how a server is stopped: exit 0 and a line saying so, not an error
STOPPED = "airgap: stopped serving (SIGTERM)\n"


class Served:
    """A running ``airgap serve`` subprocess and where it listens."""

    def __init__(self, *args: str | Path, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [*AIRGAP, "serve", *map(str, args), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        selector.register(self.process.stdout, selectors.EVENT_READ)
        if not selector.select(START_TIMEOUT):
            self.stop()
            raise AssertionError("airgap serve did not start")
        self.banner = self.process.stdout.readline()
        found = re.search(r" on (https?://[^ ]+)/ ", self.banner)
        if found is None:
            self.stop()
            raise AssertionError(f"no address in {self.banner!r}: {self.process.stderr}")
        self.url = found.group(1)
        self.address = self.url.split("://", 1)[1]

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _, stderr = self.process.communicate(timeout=30)
        return self.process.returncode, stderr


@dataclass(frozen=True)
class World:
    pinned: PinnedWorld
    parts: Path  # the bundle as NAME.tar.000, ... with its signed parts list
    served: Served  # the single-file bundle
    served_parts: Served  # the same bundle from its parts

    @property
    def manifest(self) -> BundleManifest:
        return self.pinned.manifest


def _split(bundle: Path, directory: Path, key: Path, part_size: int) -> Path:
    """The bundle as collect --part-size writes it: parts, parts list, signature."""
    directory.mkdir()
    data = bundle.read_bytes()
    output = directory / bundle.name
    records, offset = [], 0
    for index, size in enumerate(part_sizes(len(data), part_size)):
        piece = data[offset : offset + size]
        part_name(output, index).write_bytes(piece)
        records.append(PartRecord(size, hashlib.sha256(piece).hexdigest()))
        offset += size
    with tarfile.open(bundle) as tar:
        head = tar.extractfile("airgap-bundle.json")
        assert head is not None
        manifest_sha = hashlib.sha256(head.read()).hexdigest()
    listed = PartsList(output.name, len(data), part_size, manifest_sha, records).to_bytes()
    parts_list_path(output).write_bytes(listed)
    parts_signature_path(output).write_bytes(sign(load_private_key(key), listed))
    return output


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    corpus_layout: OciLayout,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    pki: Pki,
) -> Iterator[World]:
    directory = tmp_path_factory.mktemp("serve")
    pinned = build_pinned_world(directory, corpus_layout, release_server, signing_key, pki)
    pinned.source.stop()  # from now on only airgap serve can answer
    parts = _split(pinned.bundle, directory / "parts", signing_key.private, 16 << 10)
    served = Served(pinned.bundle, "--key", signing_key.public)
    try:
        served_parts = Served(parts, "--key", signing_key.public)
    except BaseException:
        served.stop()
        raise
    try:
        yield World(pinned, parts, served, served_parts)
    finally:
        for server in (served, served_parts):
            code, stderr = server.stop()
            assert code == 0 and stderr.endswith(STOPPED) and "Traceback" not in stderr, (
                stderr
            )  # how a server is stopped


def _names(record: ImageRecord) -> tuple[str, str]:
    """The two repository names an image is served as: path, and host-element/path."""
    reference = parse_reference(record.reference)
    return reference.repository, f"{host_path_element(reference.registry)}/{reference.repository}"


def _platform(record: ImageRecord) -> str:
    return record.platforms[0]


# -- the HTTP API --------------------------------------------------------------------------


def test_the_banner_says_what_is_served(world: World) -> None:
    banner = world.served.banner
    assert f"serving {world.pinned.bundle} ({len(world.manifest.images)} images" in banner
    assert "verified, signed by SHA256:" in banner


def test_ping_catalog_and_tags(world: World) -> None:
    with httpx.Client(base_url=world.served.url) as client:
        ping = client.get("/v2/")
        assert ping.status_code == 200 and ping.json() == {}
        assert ping.headers["Docker-Distribution-API-Version"] == "registry/2.0"
        catalog = client.get("/v2/_catalog").json()["repositories"]
        expected = sorted({_names(record)[1] for record in world.manifest.images})
        assert catalog == expected
        page = client.get("/v2/_catalog", params={"n": 1})
        assert page.json()["repositories"] == expected[:1]
        if len(expected) > 1:
            assert page.headers["Link"].startswith("</v2/_catalog?n=1&last=")
        # n that is not a bounded ASCII number is no page size: the whole list (5,000
        # digits once ended the connection with int()'s error, no answer at all)
        for number in ("9" * 5000, "\u0661"):
            whole = client.get("/v2/_catalog", params={"n": number})
            assert whole.status_code == 200 and whole.json()["repositories"] == expected
        for record in world.manifest.images:
            reference = parse_reference(record.reference)
            for name in _names(record):
                tags = client.get(f"/v2/{name}/tags/list").json()
                assert tags["name"] == name
                if reference.tag:
                    assert reference.tag in tags["tags"]


def test_manifests_by_tag_and_digest(world: World) -> None:
    with httpx.Client(base_url=world.served.url) as client:
        for record in world.manifest.images:
            reference = parse_reference(record.reference)
            stored = blob_data(world.pinned.bundle, record.digest)
            media_type = json.loads(stored).get("mediaType", record.media_type)
            for name in _names(record):
                asked = [record.digest] + ([reference.tag] if reference.tag else [])
                for identifier in asked:
                    url = f"/v2/{name}/manifests/{identifier}"
                    got = client.get(url)
                    assert got.status_code == 200, (url, got.text)
                    if identifier == record.digest or not reference.digest:
                        assert got.content == stored, url
                    digest = "sha256:" + hashlib.sha256(got.content).hexdigest()
                    assert got.headers["Docker-Content-Digest"] == digest
                    assert got.headers["Content-Length"] == str(len(got.content))
                    assert got.headers["Content-Type"] == json.loads(got.content).get(
                        "mediaType", media_type
                    )
                    head = client.head(url)
                    assert head.status_code == 200 and head.content == b""
                    assert head.headers["Content-Length"] == str(len(got.content))
                    assert head.headers["Docker-Content-Digest"] == digest


def _a_layer(world: World) -> tuple[str, str, bytes]:
    """A repository name, a layer digest in it, and the layer's bytes."""
    record = next(r for r in world.manifest.images if not r.media_type.endswith("index.v1+json"))
    manifest = json.loads(blob_data(world.pinned.bundle, record.digest))
    if "layers" not in manifest:  # a list: its first image
        child = manifest["manifests"][0]["digest"]
        manifest = json.loads(blob_data(world.pinned.bundle, child))
    digest = max(manifest["layers"], key=lambda layer: layer["size"])["digest"]
    return _names(record)[0], digest, blob_data(world.pinned.bundle, digest)


@pytest.mark.parametrize("which", ["served", "served_parts"])
def test_blobs_whole_and_by_range(world: World, which: str) -> None:
    name, digest, data = _a_layer(world)
    size = len(data)
    assert size > 100
    server: Served = getattr(world, which)
    with httpx.Client(base_url=server.url) as client:
        url = f"/v2/{name}/blobs/{digest}"
        whole = client.get(url)
        assert whole.status_code == 200 and whole.content == data
        assert whole.headers["Docker-Content-Digest"] == digest
        assert whole.headers["Accept-Ranges"] == "bytes"
        head = client.head(url)
        assert head.status_code == 200 and head.headers["Content-Length"] == str(size)
        for asked, first, last in (
            ("bytes=10-19", 10, 19),
            ("bytes=50-", 50, size - 1),
            ("bytes=-7", size - 7, size - 1),
            (f"bytes=0-{size + 100}", 0, size - 1),
        ):
            part = client.get(url, headers={"Range": asked})
            assert part.status_code == 206, asked
            assert part.content == data[first : last + 1], asked
            assert part.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
        refused = client.get(url, headers={"Range": f"bytes={size}-"})
        assert refused.status_code == 416
        assert refused.headers["Content-Range"] == f"bytes */{size}"
        several = client.get(url, headers={"Range": "bytes=0-1,5-6"})  # ignored: whole
        assert several.status_code == 200 and several.content == data


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"] == "application/json"
    errors = response.json()["errors"]
    assert errors[0]["code"] == code and errors[0]["message"], errors


def test_errors_in_the_distribution_format(world: World) -> None:
    name, digest, _ = _a_layer(world)
    missing = "sha256:" + "0" * 64
    with httpx.Client(base_url=world.served.url) as client:
        _error(client.get("/v2/no/such/repo/manifests/v1"), 404, "NAME_UNKNOWN")
        _error(client.get("/v2/no/such/repo/tags/list"), 404, "NAME_UNKNOWN")
        _error(client.get(f"/v2/{name}/manifests/no-such-tag"), 404, "MANIFEST_UNKNOWN")
        _error(client.get(f"/v2/{name}/manifests/{missing}"), 404, "MANIFEST_UNKNOWN")
        _error(client.get(f"/v2/{name}/manifests/{digest}"), 404, "MANIFEST_UNKNOWN")  # a layer
        _error(client.get(f"/v2/{name}/blobs/{missing}"), 404, "BLOB_UNKNOWN")
        _error(client.get("/v2/nothing-here"), 404, "UNSUPPORTED")
        head = client.head(f"/v2/{name}/blobs/{missing}")
        assert head.status_code == 404 and head.content == b""
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            refused = client.request(method, f"/v2/{name}/blobs/uploads/", content=b"x" * 10)
            _error(refused, 405, "UNSUPPORTED")
            assert refused.headers["Allow"] == "GET, HEAD"
        refused = client.put(f"/v2/{name}/manifests/v9", content=b"{}")
        _error(refused, 405, "UNSUPPORTED")
        assert client.get("/v2/").status_code == 200  # still serving after all that


def test_a_bundle_that_fails_verification_is_not_served(world: World, tmp_path: Path) -> None:
    tampered = tmp_path / "pinned.tar"
    data = bytearray(world.pinned.bundle.read_bytes())
    _, _, layer = _a_layer(world)
    data[bytes(data).find(layer) + len(layer) // 2] ^= 0xFF
    tampered.write_bytes(bytes(data))
    result = run_airgap("serve", tampered, "--key", world.pinned.key.public, "--listen", ":0")
    assert_clean_failure(result, 1, "failed verification")
    result = run_airgap("serve", world.pinned.bundle, "--listen", "127.0.0.1:0")
    assert_clean_failure(result, 2, "no trusted key")
    result = run_airgap("serve", world.pinned.bundle, "--no-signature", "--listen", "nowhere")
    assert_clean_failure(result, 2, "--listen")


def test_an_address_that_cannot_be_listened_on_is_one_line(world: World) -> None:
    """A bind that fails makes socketserver close the server before its constructor is
    done: that close once ended in a traceback (the head deadlines' watcher was not made
    yet), instead of the error below."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ("serve", world.pinned.bundle, "--key", world.pinned.key.public, "--listen")
        result = run_airgap(*args, f"127.0.0.1:{port}", timeout=60)
        assert_clean_failure(result, 1, f"cannot listen on 127.0.0.1:{port}", "in use")
        result = run_airgap(*args, "999.1.1.1:5000", timeout=60)
        assert_clean_failure(result, 1, "cannot listen on 999.1.1.1:5000")


def test_tls(world: World, pki: Pki, tmp_path: Path) -> None:
    served = Served(
        world.pinned.bundle,
        "--key",
        world.pinned.key.public,
        "--tls-cert",
        pki.server_cert,
        "--tls-key",
        pki.server_key,
    )
    try:
        assert served.url.startswith("https://")
        name, digest, data = _a_layer(world)
        with httpx.Client(
            base_url=served.url, verify=ssl.create_default_context(cafile=pki.ca_cert)
        ) as client:
            assert client.get(f"/v2/{name}/blobs/{digest}").content == data
            part = client.get(f"/v2/{name}/blobs/{digest}", headers={"Range": "bytes=3-9"})
            assert part.status_code == 206 and part.content == data[3:10]
        certs = tmp_path / "certs"
        certs.mkdir()
        shutil.copyfile(pki.ca_cert, certs / "ca.crt")
        record = world.manifest.images[0]
        raw = skopeo.run(
            [
                "inspect",
                "--raw",
                "--cert-dir",
                str(certs),
                "--no-creds",
                f"docker://{served.address}/{_names(record)[0]}@{record.digest}",
            ]
        )
        assert "sha256:" + hashlib.sha256(raw).hexdigest() == record.digest
    finally:
        code, stderr = served.stop()
    assert code == 0 and stderr.endswith(STOPPED) and "Traceback" not in stderr, stderr


# -- real clients ------------------------------------------------------------------------


def test_skopeo_copies_every_image(world: World, tmp_path: Path) -> None:
    for number, record in enumerate(world.manifest.images):
        for name in _names(record):
            source = f"docker://{world.served_parts.address}/{name}@{record.digest}"
            flags = ["--src-tls-verify=false", "--src-no-creds"]
            raw = skopeo.run(["inspect", "--raw", "--tls-verify=false", "--no-creds", source])
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == record.digest
            copied = tmp_path / f"copy-{number}-{name.count('/')}"
            # dir: keeps any media type byte for byte (oci: would convert Docker lists)
            skopeo.run(["copy", "--all", "--preserve-digests", *flags, source, f"dir:{copied}"])
            top = (copied / "manifest.json").read_bytes()
            assert "sha256:" + hashlib.sha256(top).hexdigest() == record.digest
    _source_digests_unchanged(world)


needs_runtimes = pytest.mark.skipif(missing_runtime() is not None, reason=str(missing_runtime()))


@needs_runtimes
def test_containerd_pulls_every_image_through_hosts_toml(world: World, tmp_path: Path) -> None:
    """hosts.toml as a node would have it: the source host's server (stopped) and
    airgap serve as its pull/resolve mirror, asked with ?ns= for the source host."""
    hosts_dir = tmp_path / "certs.d"
    for host in {parse_reference(r.reference).registry for r in world.manifest.images}:
        (hosts_dir / host).mkdir(parents=True, exist_ok=True)
        (hosts_dir / host / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n'
            f'[host."http://{world.served_parts.address}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
    containerd = Containerd()
    try:
        for record in world.manifest.images:
            containerd.ctr(
                "images",
                "pull",
                "--hosts-dir",
                str(hosts_dir),
                "--platform",
                _platform(record),
                "--snapshotter",
                "native",
                record.reference,
            )
        digests = containerd.image_digests()
    finally:
        containerd.stop()
    for record in world.manifest.images:
        assert digests[record.reference] == record.digest, record.reference
    _source_digests_unchanged(world)


@needs_runtimes
def test_podman_pulls_every_image_through_a_mirror(world: World) -> None:
    """A registries.conf mirror at ADDR/HOST-ELEMENT: the host-first repository names."""
    podman = Podman()
    try:
        drop_ins = podman.config / "registries.conf.d"
        drop_ins.mkdir(exist_ok=True)
        hosts = {parse_reference(r.reference).registry for r in world.manifest.images}
        (drop_ins / "50-serve.conf").write_text(
            "".join(
                f'[[registry]]\nprefix = "{host}"\nlocation = "{host}"\n'
                f"[[registry.mirror]]\n"
                f'location = "{world.served.address}/{host_path_element(host)}"\n'
                "insecure = true\n\n"
                for host in sorted(hosts)
            )
        )
        for record in world.manifest.images:
            podman.podman("pull", "-q", "--platform", _platform(record), record.reference)
            inspected = json.loads(podman.podman("image", "inspect", record.reference).stdout)[0]
            repository = parse_reference(record.reference).name
            assert f"{repository}@{record.digest}" in inspected["RepoDigests"], (
                record.reference,
                inspected["RepoDigests"],
            )
    finally:
        podman.close()


def _source_digests_unchanged(world: World) -> None:
    """Where no platform filter applied, the bundle's digest is the source's own."""
    served = {i.reference: i.digest for i in world.pinned.images.values()}
    for record in world.manifest.images:
        if record.reference in served and record.source_digest is None:
            assert served[record.reference] == record.digest


def test_one_client_cannot_hold_every_connection_slot(world: World) -> None:
    """A host that opens many connections and reads them slowly kept all 128 slots, and
    nobody else was answered: one address holds at most 32, and another is served."""
    host, port = world.served.address.rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(32)]
    try:
        extra = socket.create_connection((host, int(port)), timeout=10)
        with extra:
            extra.sendall(b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n")
            assert extra.recv(1024) == b"", "a 33rd connection from one address was served"
        other = socket.socket()
        try:
            other.bind(("127.0.0.2", 0))
        except OSError:
            other.close()
            pytest.skip("127.0.0.2 cannot be bound here")
        with other:
            other.settimeout(10)
            other.connect((host, int(port)))
            other.sendall(b"GET /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert other.recv(1024).startswith(b"HTTP/1.1 200"), "another address was refused"
    finally:
        for connection in held:
            connection.close()
    deadline = time.monotonic() + 10  # the slots come back as the connections end
    while True:
        try:
            if httpx.get(f"{world.served.url}/v2/", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the slots did not come back"
        time.sleep(0.1)


def test_a_client_trickling_its_request_head_is_cut_off_at_the_deadline(
    world: World, signing_key: SigningKey
) -> None:
    """A byte a second keeps every per-read timeout happy; the head deadline
    (``AIRGAP_SERVE_HEAD_TIMEOUT``, here 2 s) ends the connection and frees its slot."""
    served = Served(
        world.pinned.bundle, "--key", signing_key.public, env={"AIRGAP_SERVE_HEAD_TIMEOUT": "2"}
    )
    try:
        host, port = served.address.rsplit(":", 1)
        trickler = socket.create_connection((host, int(port)), timeout=10)
        started = time.monotonic()
        cut = False
        for byte in b"GET /v2/ HTTP/1.1\r\nHost: " + b"x" * 20:
            try:
                trickler.sendall(bytes([byte]))
            except OSError:
                cut = True
                break
            readable, _, _ = select.select([trickler], [], [], 0.5)
            if readable and trickler.recv(1) == b"":
                cut = True
                break
        assert cut, "the server kept a connection whose head never finished"
        assert time.monotonic() - started < 8
        trickler.close()
        # a request sent at once is answered as always
        assert httpx.get(f"{served.url}/v2/", timeout=10).status_code == 200
    finally:
        code, stderr = served.stop()
        assert code == 0 and stderr.endswith(STOPPED) and "Traceback" not in stderr, stderr


def _hammer(url: str, answered: threading.Semaphore, done: threading.Event) -> None:
    """New connections, one request each, until ``done``: the server's main thread is
    then mostly accepting and starting threads, where a signal used to land."""
    while not done.is_set():
        try:
            with httpx.Client(timeout=5) as client:
                client.get(f"{url}/v2/")
        except httpx.HTTPError:
            continue  # the server went away mid-request: it is being stopped
        answered.release()


def test_a_server_stopped_while_accepting_connections_exits_0(
    world: World, signing_key: SigningKey
) -> None:
    """SIGTERM lands while connections arrive: every stop is 'stopped serving', exit 0.

    A signal raised as an exception in the main thread could land inside the start of
    a connection's thread, where socketserver passed what it raised to handle_error and
    served on until the interrupt watchdog ended the process with 143 (1 or 2 stops in
    40 did, on a loaded machine)."""
    for _ in range(4):
        served = Served(world.pinned.bundle, "--key", signing_key.public)
        answered, done = threading.Semaphore(0), threading.Event()
        clients = [
            threading.Thread(target=_hammer, args=(served.url, answered, done), daemon=True)
            for _ in range(4)
        ]
        for client in clients:
            client.start()
        try:
            for _ in range(40):  # traffic is flowing before the signal
                assert answered.acquire(timeout=30), "the server stopped answering"
        finally:
            code, stderr = served.stop()
            done.set()
            for client in clients:
                client.join(timeout=30)
        assert code == 0 and stderr.endswith(STOPPED) and "Traceback" not in stderr, stderr
