"""Have-lists: what the disconnected registry holds, carried back to collect.

``airgap status BUNDLE --export-have have.json`` asks the target for every manifest and
blob of the bundle's images and lists the digests it holds; ``collect --have`` carries
only the rest. Real registries, skopeo and the real CLI; a registry that lost a blob
gets it carried again, and a hostile have-list is one line.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from airgap.bundle.reader import read_head
from tests.harness import skopeo
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.delta_fixtures import DeltaBundles
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.test_delta import PREFIX, carried_blobs, changed_pieces, import_, target_of

pytestmark = pytest.mark.e2e


def export_have(
    bundle: Path, registry: RegistryServer, key: Path, have: Path
) -> subprocess.CompletedProcess[str]:
    """``status BUNDLE --export-have HAVE`` against the import's target prefix."""
    return run_airgap(
        "status",
        bundle,
        "--key",
        key,
        "--registry",
        f"{registry.host}/{PREFIX}",
        "--export-have",
        have,
    )


def collect_with_have(
    delta_bundles: DeltaBundles, have: Path, output: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The connected side: collect the newer spec into ``output``, carrying only what
    ``have`` does not list."""
    return run_airgap(
        *collect_args(delta_bundles.one_spec, delta_bundles.key.private, output),
        "--have",
        have,
        env=delta_bundles.env,
        timeout=timeout,
    )


def test_have_list_round_trip(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry: RegistryServer = registry_factory("plain")
    key = delta_bundles.key.public
    assert import_(delta_bundles.old, registry, key).returncode == 0
    have = tmp_path / "have.json"
    status = export_have(delta_bundles.old, registry, key, have)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"wrote {have}" in status.stderr
    listed = json.loads(have.read_text())
    assert set(listed) == {"kind", "version", "created", "bundle", "repositories"}
    old = {k: v for k, v in delta_bundles.images.items() if k not in ("app_v2", "extra")}
    assert listed["repositories"] == {
        f"{i.registry_host}/{i.repository}": sorted({i.digest, *i.child_digests, *i.blob_digests})
        for i in old.values()
    }
    assert len(have.read_bytes()) < 4096  # digests only: small
    # the other side: carry only what the registry lacks
    delta = tmp_path / "have-delta.tar"
    collected = collect_with_have(delta_bundles, have, delta)
    assert collected.returncode == 0, collected.stderr
    assert "a delta" in collected.stdout
    assert set(carried_blobs(delta)) == changed_pieces(delta_bundles)
    manifest = read_head(delta).manifest
    assert manifest.delta is not None and manifest.delta.base is None
    assert manifest.delta.have_list == "sha256:" + hashlib.sha256(have.read_bytes()).hexdigest()
    assert import_(delta, registry, key).returncode == 0
    app = delta_bundles.images["app_v2"]
    served = skopeo.raw_manifest(target_of(app, registry), registry=registry)
    assert skopeo.digest_of(served) == app.digest


def test_a_drifted_registry_gets_back_what_it_lost(
    delta_bundles: DeltaBundles, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """A blob the disconnected registry lost is not in its have-list, so the next
    bundle carries it again, and importing that bundle puts it back."""
    registry: RegistryServer = registry_factory("plain")
    key = delta_bundles.key.public
    assert import_(delta_bundles.old, registry, key).returncode == 0
    side, app = delta_bundles.images["side"], delta_bundles.images["app_v1"]
    lost = sorted(side.layer_digests - app.layer_digests)[0]
    hexpart = lost.split(":", 1)[1]
    (
        registry.storage_dir / f"docker/registry/v2/blobs/sha256/{hexpart[:2]}/{hexpart}/data"
    ).unlink()
    have = tmp_path / "have.json"
    status = export_have(delta_bundles.old, registry, key, have)
    assert status.returncode == 1  # Degraded, and the list says what is really there
    held = json.loads(have.read_text())["repositories"]
    assert lost not in held[f"{side.registry_host}/{side.repository}"]
    delta = tmp_path / "drift.tar"
    collected = collect_with_have(delta_bundles, have, delta)
    assert collected.returncode == 0, collected.stderr
    assert set(carried_blobs(delta)) == changed_pieces(delta_bundles) | {lost}
    # importing it repairs the image whose tag said it was complete
    imported = import_(delta, registry, key, "--format", "json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["blobs_uploaded"] == 3  # the lost layer, app's two
    status = run_airgap("status", delta, "--key", key, "--registry", f"{registry.host}/{PREFIX}")
    assert status.returncode == 0, status.stdout


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[]", "expected an object"),
        (
            b'{"kind": "airgap-have-list", "version": 1, "created": "x", "repositories": {"r.io/a": ["sha256:../../x"]}}',
            "repositories.r.io/a[0]",
        ),
        (
            b'{"kind": "airgap-have-list", "version": 1, "created": "x", "repositories": {"a": []}}',
            "not a normalised repository name",
        ),
        (
            b'{"kind": "airgap-have-list", "version": 1, "created": "x", "extra": 1, "repositories": {}}',
            "unknown key 'extra'",
        ),
        (b"[" * 100_000, "nested deeper"),
        (b" " * (17 << 20), "larger than the 16 MiB limit"),
    ],
)
def test_a_hostile_have_list_is_one_line(
    delta_bundles: DeltaBundles, tmp_path: Path, content: bytes, needle: str
) -> None:
    have = tmp_path / "have.json"
    have.write_bytes(content)
    result = collect_with_have(delta_bundles, have, tmp_path / "x.tar", timeout=60)
    assert_clean_failure(result, 2, needle)
    assert not (tmp_path / "x.tar").exists()
