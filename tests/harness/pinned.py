"""A small world where images are referenced by tag AND by digest, with ``platforms:`` set.

Its own source registry (so a test may stop it), a provider on the fake GitHub whose
components name one multi-arch image three ways (``repo@digest``, ``repo:tag@digest``,
``repo:tag``) and a spec that adds a Docker manifest list by tag and by digest. Collected
with ``platforms: [linux/arm64]``: tag references get a filtered index, digest references
keep the whole one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.providers.types import ProviderType
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import run_airgap
from tests.harness.images import CORPUS, OciLayout, TestImage, push_corpus
from tests.harness.pki import Pki
from tests.harness.registry import RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

PLATFORM = "linux/arm64"
LABEL = "infrastructure-pinned"


@dataclass(frozen=True)
class PinnedWorld:
    source: RegistryServer  # the caller stops it
    images: dict[str, TestImage]  # app, multiarch, dockerlist as the source serves them
    bundle: Path
    manifest: BundleManifest
    key: SigningKey

    @property
    def references(self) -> list[str]:
        """Every image reference the bundle holds, as written on the connected side."""
        return [image.reference for image in self.manifest.images]


def build_pinned_world(
    directory: Path,
    corpus_layout: OciLayout,
    release_server: ReleaseServer,
    signing_key: SigningKey,
    pki: Pki,
) -> PinnedWorld:
    """Start a source registry, publish the provider, collect the bundle."""
    source = RegistryServer(directory / "source", "plain", pki=pki)
    try:
        wanted = {name: CORPUS[name] for name in ("app", "multiarch", "dockerlist")}
        images = push_corpus(corpus_layout, source, wanted)
        app, multi, dlist = images["app"], images["multiarch"], images["dockerlist"]
        owner, repo = release_server.new_repo("cluster-api-provider-pinned")
        components = make_components(
            ProviderType.INFRASTRUCTURE,
            "pinned-system",
            [multi.digest_reference, f"{multi.reference}@{multi.digest}", multi.reference],
        )
        release_server.add_release(
            owner,
            repo,
            "v0.1.0",
            {
                "metadata.yaml": make_metadata([(0, 1, "v1beta1")]).encode(),
                "infrastructure-components.yaml": components.encode(),
            },
        )
        spec = write_spec(
            directory / "spec.yaml",
            {
                "providers": [
                    {
                        "name": "pinned",
                        "type": "InfrastructureProvider",
                        "version": "v0.1.0",
                        "url": release_server.repo_url(owner, repo),
                    }
                ],
                "images": [app.reference, dlist.reference, dlist.digest_reference],
                "platforms": [PLATFORM],
            },
        )
        bundle = directory / "pinned.tar"
        result = run_airgap(
            "collect",
            spec,
            "--sign-key",
            signing_key.private,
            "-o",
            bundle,
            "-q",
            env={"GITHUB_API_URL": release_server.api_url},
        )
        assert result.returncode == 0, result.stderr
        return PinnedWorld(source, images, bundle, read_head(bundle).manifest, signing_key)
    except BaseException:
        source.stop()
        raise


def import_pinned(
    world: PinnedWorld, target: RegistryServer, out: Path, prefix: str, *extra: str
) -> Path:
    """``airgap import`` into ``target`` (TLS + htpasswd) with ``--ca-file``; returns ``out``."""
    result = run_airgap(
        "import",
        world.bundle,
        "--key",
        world.key.public,
        "--registry",
        f"{target.host}/{prefix}",
        "--ca-file",
        str(target.ca_file),
        "--username",
        str(target.username),
        "--password-stdin",
        "--output-dir",
        out,
        "-q",
        *extra,
        input=f"{target.password}\n",
    )
    assert result.returncode == 0, result.stderr
    return out
