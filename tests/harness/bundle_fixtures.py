"""Session fixtures for a signing key and the collected CAPI test bundle.

Built once through the real CLI; verify and import tests copy or read it, never modify
it in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from tests.harness.capi import ProviderSet, publish_capi, write_spec
from tests.harness.cli import run_airgap
from tests.harness.images import TestImage
from tests.harness.releases import ReleaseServer


@dataclass(frozen=True)
class SigningKey:
    private: Path
    public: Path


@dataclass(frozen=True)
class CollectedBundle:
    path: Path
    key: SigningKey
    providers: ProviderSet
    manifest: BundleManifest

    def import_args(self, registry: str, command: str = "import") -> list[str | Path]:
        """``import BUNDLE --key PUB --registry REGISTRY``, for run_airgap: the start of
        every import of this bundle (the rest is what the test varies); ``configmaps``
        takes the same start."""
        return [command, self.path, "--key", self.key.public, "--registry", registry]


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    directory = tmp_path_factory.mktemp("keys")
    result = run_airgap("keygen", directory / "signing.key")
    assert result.returncode == 0, result.stderr
    return SigningKey(directory / "signing.key", directory / "signing.pub")


@pytest.fixture(scope="session")
def capi_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> Iterator[CollectedBundle]:
    directory = tmp_path_factory.mktemp("capi-bundle")
    providers = publish_capi(release_server, source_images)
    spec = write_spec(directory / "capi.yaml", providers.spec)
    output = directory / "capi.tar"
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", output, env=providers.env
    )
    assert result.returncode == 0, result.stderr
    yield CollectedBundle(output, signing_key, providers, read_head(output).manifest)
