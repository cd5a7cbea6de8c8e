"""Bundles of repeated trips: a base, a delta of a one-image change, an upgrade.

Built once per session through the real CLI against the plain source registry and the
fake GitHub:

- ``old``: core ``cluster-api`` v1.9.0 (contract v1beta1), infrastructure ``odd``
  v0.3.0, and the extra image ``delta/gone:v1``;
- then ``delta/app:v1`` is pushed again with a new top layer (the one-image change);
- ``one_delta``: the same spec collected with ``--base old`` (signature checked);
- ``one``: the same spec collected whole;
- ``new``: core v1.11.0 (contract v1beta2), the same ``odd``, ``delta/extra:v1``
  instead of ``delta/gone:v1`` (a provider upgrade with a contract change, an image
  removed, one added, one changed digest).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.providers.types import ProviderType
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import collect_ok
from tests.harness.images import AMD64, ARM64, OciLayout, TestImage, push_image
from tests.harness.registry import RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

REPO = "delta"
SERIES = [(1, 9, "v1beta1"), (1, 11, "v1beta2")]


@dataclass(frozen=True)
class DeltaBundles:
    directory: Path
    key: SigningKey
    env: dict[str, str]
    images: dict[str, TestImage]  # app_v1, app_v2, side, multi, gone, extra
    old: Path
    one_delta: Path
    one: Path
    new: Path
    one_spec: Path

    def manifest(self, path: Path) -> BundleManifest:
        return read_head(path).manifest


def _build_layout(layout: OciLayout) -> None:
    size = 16 * 1024
    layout.tag("app_v1", layout.add_image(["d-base-0", "d-base-1", "d-app-v1"], layer_size=size))
    layout.tag("app_v2", layout.add_image(["d-base-0", "d-base-1", "d-app-v2"], layer_size=size))
    layout.tag("side", layout.add_image(["d-base-0", "d-base-1", "d-side"], layer_size=size))
    amd = layout.add_image(["d-base-0", "d-multi-amd64"], architecture="amd64")
    arm = layout.add_image(["d-base-0", "d-multi-arm64"], architecture="arm64", variant="v8")
    layout.tag("multi", layout.add_index([(amd, AMD64), (arm, ARM64)]))
    layout.tag("gone", layout.add_image(["d-gone"]))
    layout.tag("extra", layout.add_image(["d-base-0", "d-extra"], layer_size=size))


def _publish(server: ReleaseServer, images: dict[str, TestImage]) -> tuple[str, str]:
    """The core provider in two minor versions of different contracts, and ``odd``."""
    owner, repo = server.new_repo("delta-core")
    for tag in ("v1.9.0", "v1.11.0"):
        files = {
            "metadata.yaml": make_metadata(SERIES),
            "core-components.yaml": make_components(
                ProviderType.CORE, "capi-system", [images["app_v1"].reference]
            ),
        }
        server.add_release(owner, repo, tag, {n: t.encode() for n, t in files.items()})
    core_url = server.repo_url(owner, repo)
    owner, repo = server.new_repo("delta-odd")
    server.add_release(
        owner,
        repo,
        "v0.3.0",
        {
            "metadata.yaml": make_metadata([(0, 3, "v1beta1")]).encode(),
            "infrastructure-components.yaml": make_components(
                ProviderType.INFRASTRUCTURE,
                "odd-system",
                [images["side"].reference, images["multi"].reference],
            ).encode(),
        },
    )
    return core_url, server.repo_url(owner, repo)


def _spec(core: str, core_version: str, odd: str, extra: TestImage) -> dict[str, object]:
    return {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": core_version, "url": core},
            {"name": "odd", "type": "InfrastructureProvider", "version": "v0.3.0", "url": odd},
        ],
        "images": [extra.reference],
    }


@pytest.fixture(scope="session")
def delta_bundles(
    tmp_path_factory: pytest.TempPathFactory,
    plain_registry: RegistryServer,
    release_server: ReleaseServer,
    signing_key: SigningKey,
) -> DeltaBundles:
    directory = tmp_path_factory.mktemp("delta-bundles")
    layout = OciLayout(directory / "layout")
    _build_layout(layout)

    def push(name: str, repository: str) -> TestImage:
        return push_image(layout, name, plain_registry, f"{REPO}/{repository}", "v1")

    images = {name: push(name, name) for name in ("side", "multi", "gone", "extra")}
    images["app_v1"] = push("app_v1", "app")
    core, odd = _publish(release_server, images)
    env = {"GITHUB_API_URL": release_server.api_url}
    old_spec = write_spec(directory / "old.yaml", _spec(core, "v1.9.0", odd, images["gone"]))
    new_spec = write_spec(directory / "new.yaml", _spec(core, "v1.11.0", odd, images["extra"]))
    old = collect_ok(old_spec, signing_key.private, directory / "old.tar", env=env)
    images["app_v2"] = push("app_v2", "app")  # the one-image change: same tag, new digest
    one_delta = collect_ok(
        old_spec,
        signing_key.private,
        directory / "one-delta.tar",
        "--base",
        old,
        "--base-key",
        signing_key.public,
        env=env,
    )
    one = collect_ok(old_spec, signing_key.private, directory / "one.tar", env=env)
    new = collect_ok(new_spec, signing_key.private, directory / "new.tar", env=env)
    return DeltaBundles(directory, signing_key, env, images, old, one_delta, one, new, old_spec)
