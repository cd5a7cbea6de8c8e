"""A CAPI-shaped provider set published on the fake GitHub, and the spec to collect it.

Images are the standard corpus in the plain source registry, spread over providers so
that bundles exercise shared base layers, a multi-arch index, a Docker schema 2 image
and a Docker manifest list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from airgap.providers.types import ProviderType
from tests.harness.images import TestImage
from tests.harness.releases import ReleaseServer, make_components, make_metadata

CAPI_SERIES = [(1, 9, "v1beta1"), (1, 10, "v1beta1")]


@dataclass(frozen=True)
class ProviderSet:
    spec: dict[str, object]
    env: dict[str, str]  # GITHUB_API_URL pointing at the fake GitHub
    images: dict[str, TestImage]  # every image the bundle must hold, by reference
    odd_url: str


_published: dict[int, ProviderSet] = {}


def publish_capi(server: ReleaseServer, images: dict[str, TestImage]) -> ProviderSet:
    """Publish kubernetes-sigs/cluster-api (v1.9.3, v1.9.4, v1.10.0-rc.1) and an
    out-of-tree provider once per server, and return the spec that collects them."""
    if id(server) in _published:
        return _published[id(server)]
    app, sidecar, multi = images["app"], images["sidecar"], images["multiarch"]
    docker, dlist = images["dockerv2"], images["dockerlist"]
    files = {
        "metadata.yaml": make_metadata(CAPI_SERIES),
        "core-components.yaml": make_components(ProviderType.CORE, "capi-system", [app.reference]),
        "bootstrap-components.yaml": make_components(
            ProviderType.BOOTSTRAP, "capi-kubeadm-bootstrap-system", [sidecar.reference]
        ),
        "control-plane-components.yaml": make_components(
            ProviderType.CONTROL_PLANE, "capi-kubeadm-control-plane-system", [docker.reference]
        ),
        "infrastructure-components-development.yaml": make_components(
            ProviderType.INFRASTRUCTURE, "capd-system", [app.reference, multi.reference]
        ),
    }
    encoded = {name: text.encode() for name, text in files.items()}
    for tag, prerelease in (("v1.9.3", False), ("v1.9.4", False), ("v1.10.0-rc.1", True)):
        server.add_release("kubernetes-sigs", "cluster-api", tag, encoded, prerelease=prerelease)
    owner, repo = server.new_repo("cluster-api-provider-odd")
    server.add_release(
        owner,
        repo,
        "v0.3.1",
        {
            "metadata.yaml": make_metadata([(0, 3, "v1beta1")]).encode(),
            "infrastructure-components.yaml": make_components(
                ProviderType.INFRASTRUCTURE, "odd-system", [dlist.reference]
            ).encode(),
        },
    )
    odd_url = server.repo_url(owner, repo)
    spec: dict[str, object] = {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": "latest"},
            {"name": "kubeadm", "type": "BootstrapProvider", "version": "v1.9.4"},
            {"name": "kubeadm", "type": "ControlPlaneProvider", "version": "v1.9.4"},
            {"name": "docker", "type": "InfrastructureProvider", "version": "v1.9.4"},
            {"name": "odd", "type": "InfrastructureProvider", "version": "v0.3.1", "url": odd_url},
        ],
        "images": [multi.reference],
    }
    wanted = {i.reference: i for i in (app, sidecar, multi, docker, dlist)}
    result = ProviderSet(spec, {"GITHUB_API_URL": server.api_url}, wanted, odd_url)
    _published[id(server)] = result
    return result


def write_spec(path: Path, spec: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
