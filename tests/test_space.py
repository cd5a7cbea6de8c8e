"""Free space checked first (issue 46): a collect that cannot fit is refused in one line,
naming what it needs and what is free, before a single blob is asked of the registry.

The filesystems are real size-limited tmpfs mounts (``tests.harness.tmpfs``); the
registry is the real one behind the counting proxy, whose log shows every request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.faultproxy import FaultProxy, FaultProxyFactory
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.tmpfs import tmpfs

pytestmark = pytest.mark.e2e

NAMES = ("app", "sidecar", "multiarch", "dockerv2", "dockerlist")


def _spec_through(proxy: FaultProxy, images: dict[str, TestImage], path: Path) -> Path:
    """A spec of the corpus images, pulled through ``proxy``."""
    references = [
        images[name].reference.replace(images[name].reference.split("/", 1)[0], proxy.host, 1)
        for name in NAMES
    ]
    return write_spec(path, {"images": references})


def _blob_requests(proxy: FaultProxy) -> list[str]:
    return [f"{r.method} {r.path}" for r in proxy.requests if "/blobs/" in r.path]


def test_a_collect_onto_a_disk_too_small_is_refused_before_any_blob(
    tmp_path: Path,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
    fault_proxy_factory: FaultProxyFactory,
    signing_key: SigningKey,
) -> None:
    proxy = fault_proxy_factory(plain_registry)
    spec = _spec_through(proxy, source_images, tmp_path / "spec.yaml")
    whole = tmp_path / "whole.tar"
    result = run_airgap(*collect_args(spec, signing_key.private, whole), "-q")
    assert result.returncode == 0, result.stderr
    size = whole.stat().st_size
    assert _blob_requests(proxy)  # the proxy sees blobs when they are asked for
    proxy.requests.clear()
    half = size // 2 // 4096 * 4096  # tmpfs sizes are whole pages
    with tmpfs(tmp_path / "usb", half) as usb:
        output = usb / "capi.tar"
        result = run_airgap(*collect_args(spec, signing_key.private, output), "-q")
        line = assert_clean_failure(result, 1, "not enough space", str(usb), "free", "bundle")
        assert sorted(p.name for p in usb.iterdir()) == []  # nothing written, staging gone
    assert any("/manifests/" in r.path for r in proxy.requests)  # it did resolve
    assert _blob_requests(proxy) == []  # and asked for no blob, not even a config
    found = re.search(r"needs ([\d.]+ \w+) .*, ([\d.]+ \w+) free", line)
    assert found is not None, line
    needed, free = found.groups()
    assert needed.endswith("KiB") and free.endswith("KiB")
    assert float(needed.split()[0]) * 1024 >= size  # the bound covers the real bundle
    assert float(free.split()[0]) * 1024 <= half


def test_a_bundle_that_fits_is_written(
    tmp_path: Path,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
    fault_proxy_factory: FaultProxyFactory,
    signing_key: SigningKey,
) -> None:
    """The check is a bound, not a refusal of what fits: a disk with room for the
    bundle and a little more takes it."""
    proxy = fault_proxy_factory(plain_registry)
    spec = _spec_through(proxy, source_images, tmp_path / "spec.yaml")
    whole = tmp_path / "whole.tar"
    assert run_airgap(*collect_args(spec, signing_key.private, whole), "-q").returncode == 0
    size = whole.stat().st_size
    with tmpfs(tmp_path / "usb", size + (64 << 10)) as usb:
        result = run_airgap(*collect_args(spec, signing_key.private, usb / "capi.tar"), "-q")
        assert result.returncode == 0, result.stderr
        assert (usb / "capi.tar").stat().st_size == size


def test_the_staging_directory_in_tmpdir_is_checked_too(
    tmp_path: Path,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
    fault_proxy_factory: FaultProxyFactory,
    signing_key: SigningKey,
) -> None:
    """Collect stages its small blobs under ``$TMPDIR`` when it is set: a full /tmp is
    refused as a full output disk is, naming that directory."""
    proxy = fault_proxy_factory(plain_registry)
    spec = _spec_through(proxy, source_images, tmp_path / "spec.yaml")
    output = tmp_path / "out.tar"
    with tmpfs(tmp_path / "tmp", 4096) as small:
        result = run_airgap(
            *collect_args(spec, signing_key.private, output),
            "-q",
            env={"TMPDIR": str(small)},
        )
        assert_clean_failure(result, 1, "not enough space", str(small), "staged manifests")
        assert list(small.iterdir()) == []
    assert not output.exists()
    assert _blob_requests(proxy) == []


def test_import_refuses_outputs_its_disk_cannot_hold(
    tmp_path: Path, capi_bundle: CollectedBundle, registry_factory: RegistryFactory
) -> None:
    """Import's one staging is its output tree, written beside the old one and renamed:
    refused whole, in one line, when the disk cannot hold it (not half-written)."""
    registry = registry_factory("plain")
    with tmpfs(tmp_path / "small", 8192) as small:
        result = run_airgap(
            *capi_bundle.import_args(f"{registry.host}/capi"), "--output-dir", small / "out"
        )
        assert_clean_failure(result, 1, "not enough space", str(small), "the outputs")
        assert list(small.iterdir()) == []
