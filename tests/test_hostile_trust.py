"""Hostile inputs against what airgap trusts: the bundle file, names, credentials.

Issue 11, families 1-3: a bundle edited after it was verified (keeping size and times),
forged cache entries, names from registries and bundles that are paths, symlinks in the
output tree, credentials offered to hosts they were not given for. Every case runs the
real CLI (or the real client) against real servers on loopback, and ends the way every
hostile input must: exit 1 or 2, exactly one line on stderr, no traceback, nothing
written outside the output directory, no credential anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from airgap.errors import AirgapError, DigestMismatchError
from airgap.oci import Manifest
from airgap.registry.client import Registry
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.registry import RegistryServer

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
    bundle: Path, key: Path, registry: RegistryServer, *extra: str | Path, env=None
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


def test_components_edited_after_an_import_are_refused_and_forged_caches_change_nothing(
    capi_bundle: CollectedBundle, bundle_copy: Path, registry_factory, tmp_path: Path
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


def test_a_layer_edited_after_an_import_is_never_pushed(
    capi_bundle: CollectedBundle, bundle_copy: Path, registry_factory, tmp_path: Path
) -> None:
    """Blobs are hashed while they stream: a registry that already holds a blob needs no
    byte of it (and holds the signed content), one that lacks it never receives the
    altered bytes whole, and nothing refers to them."""
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


def test_an_image_manifest_edited_after_an_import_is_refused_even_with_all_blobs_there(
    capi_bundle: CollectedBundle, bundle_copy: Path, registry_factory, tmp_path: Path
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


def test_a_chunked_upload_whose_bytes_do_not_hash_to_the_digest_is_never_committed(
    registry_factory, fault_proxy_factory
) -> None:
    """The chunked path cannot hold back a last byte the way a monolithic stream does:
    the client hashes what the registry accepted and cancels instead of committing."""
    server = registry_factory("plain")
    proxy = fault_proxy_factory(server)
    signed = os.urandom(150 * 1024)
    digest = "sha256:" + hashlib.sha256(signed).hexdigest()
    altered = signed[:-1] + bytes([signed[-1] ^ 1])

    def body(offset: int):
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
