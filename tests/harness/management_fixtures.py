"""Session fixtures for a complete management-cluster bundle: providers with cluster
templates, cert-manager and the Cluster API operator (with its chart), collected once
through the real CLI from the fake GitHub and the plain source registry.

cert-manager and the operator are published where their default URLs point
(``cert-manager/cert-manager``, ``kubernetes-sigs/cluster-api-operator``, reached
through ``GITHUB_API_URL``), so the spec names only their versions, as a user's would.
The providers live in a repository of their own (``url:``), so their templates never
reach the shared CAPI bundle other tests use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.providers.types import ProviderType
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.cli import run_airgap
from tests.harness.images import CorpusEntry, OciLayout, TestImage, push_corpus
from tests.harness.management import (
    CERT_MANAGER_VERSION,
    OPERATOR_VERSION,
    CertManagerImages,
    cluster_templates,
    publish_cert_manager,
    publish_operator,
)
from tests.harness.registry import RegistryServer
from tests.harness.releases import ReleaseServer, make_components, make_metadata

CAPI_VERSION = "v1.9.4"


@dataclass(frozen=True)
class ManagementImages:
    cert_manager: CertManagerImages
    operator: str
    images: dict[str, TestImage]  # reference -> image, every image a bundle must hold


@dataclass(frozen=True)
class ManagementBundle:
    path: Path
    key: SigningKey
    manifest: BundleManifest
    spec: dict[str, object]
    env: dict[str, str]
    release_url: str  # the providers' repository
    images: ManagementImages

    def import_args(self, registry: str) -> list[str | Path]:
        """``import BUNDLE --key PUB --registry REGISTRY``: the start of every import of
        this bundle, as ``CollectedBundle.import_args``."""
        return ["import", self.path, "--key", self.key.public, "--registry", registry]


@pytest.fixture(scope="session")
def management_images(
    corpus_layout: OciLayout,
    plain_registry: RegistryServer,
    source_images: dict[str, TestImage],
) -> ManagementImages:
    """cert-manager's three images and the operator's in the plain source registry
    (made from the corpus: shared layers, a multi-arch index, a Docker schema 2)."""
    pushed = push_corpus(
        corpus_layout,
        plain_registry,
        {
            "controller": CorpusEntry("app", "jetstack/cert-manager-controller", "v1.16.1"),
            "cainjector": CorpusEntry("sidecar", "jetstack/cert-manager-cainjector", "v1.16.1"),
            "webhook": CorpusEntry("multiarch", "jetstack/cert-manager-webhook", "v1.16.1"),
            "operator": CorpusEntry(
                "dockerv2", "capi-operator/cluster-api-operator", OPERATOR_VERSION, "v2s2"
            ),
        },
    )
    host = plain_registry.host
    cert_manager = CertManagerImages(
        controller=pushed["controller"].reference,
        cainjector=pushed["cainjector"].reference,
        webhook=pushed["webhook"].reference,
        acmesolver=f"{host}/jetstack/cert-manager-acmesolver:v1.16.1",  # never pushed
    )
    images = {image.reference: image for image in pushed.values()}
    return ManagementImages(cert_manager, pushed["operator"].reference, images)


def publish_management(
    server: ReleaseServer,
    management: ManagementImages,
    source_images: dict[str, TestImage],
) -> tuple[str, dict[str, TestImage]]:
    """Providers (core, kubeadm, docker) with templates in a repository of their own,
    plus cert-manager and the operator at their default places. Returns the providers'
    URL and every provider image."""
    app, sidecar = source_images["app"], source_images["sidecar"]
    dockerv2, dlist = source_images["dockerv2"], source_images["dockerlist"]
    files = {
        "metadata.yaml": make_metadata([(1, 9, "v1beta1")]).encode(),
        "core-components.yaml": make_components(
            ProviderType.CORE, "capi-system", [app.reference]
        ).encode(),
        "bootstrap-components.yaml": make_components(
            ProviderType.BOOTSTRAP, "capi-kubeadm-bootstrap-system", [sidecar.reference]
        ).encode(),
        "control-plane-components.yaml": make_components(
            ProviderType.CONTROL_PLANE, "capi-kubeadm-control-plane-system", [dockerv2.reference]
        ).encode(),
        "infrastructure-components-development.yaml": make_components(
            ProviderType.INFRASTRUCTURE, "capd-system", [app.reference]
        ).encode(),
        # the addon's DaemonSet (inside a ConfigMap) runs the core image; the Job's
        # default is the Docker manifest list, which only the templates use
        **cluster_templates(app.reference, dlist.reference),
    }
    owner, repo = server.new_repo("cluster-api")
    server.add_release(owner, repo, CAPI_VERSION, files)
    publish_cert_manager(server, management.cert_manager)
    publish_operator(server, management.operator)
    used = {i.reference: i for i in (app, sidecar, dockerv2, dlist)}
    return server.repo_url(owner, repo), used


def management_spec(release_url: str, *, templates: bool = True) -> dict[str, object]:
    def provider(name: str, kind: str) -> dict[str, str]:
        return {"name": name, "type": kind, "version": CAPI_VERSION, "url": release_url}

    spec: dict[str, object] = {
        "providers": [
            provider("cluster-api", "CoreProvider"),
            provider("kubeadm", "BootstrapProvider"),
            provider("kubeadm", "ControlPlaneProvider"),
            {
                **provider("docker", "InfrastructureProvider"),
                "componentsFile": "infrastructure-components-development.yaml",
            },
        ],
        "certManager": {"version": CERT_MANAGER_VERSION},
        "operator": {"version": OPERATOR_VERSION},
    }
    if not templates:
        spec["templates"] = False
    return spec


_published: dict[int, tuple[str, dict[str, TestImage]]] = {}


@pytest.fixture(scope="session")
def management_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    management_images: ManagementImages,
    signing_key: SigningKey,
) -> Iterator[ManagementBundle]:
    directory = tmp_path_factory.mktemp("management-bundle")
    if id(release_server) not in _published:
        _published[id(release_server)] = publish_management(
            release_server, management_images, source_images
        )
    release_url, provider_images = _published[id(release_server)]
    spec = management_spec(release_url)
    spec_path = directory / "management.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {"GITHUB_API_URL": release_server.api_url}
    output = directory / "management.tar"
    result = run_airgap(
        "collect", spec_path, "--sign-key", signing_key.private, "-o", output, env=env
    )
    assert result.returncode == 0, result.stderr
    images = ManagementImages(
        management_images.cert_manager,
        management_images.operator,
        {**provider_images, **management_images.images},
    )
    yield ManagementBundle(
        output, signing_key, read_head(output).manifest, spec, env, release_url, images
    )
