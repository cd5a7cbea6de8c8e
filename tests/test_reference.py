"""Image reference normalisation: the canonical names every other module compares."""

from __future__ import annotations

import pytest

from airgap.core.errors import InputError
from airgap.oci.reference import Reference, api_host, is_loopback_host, parse_reference

pytestmark = pytest.mark.unit

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.27", "docker.io/library/nginx:1.27"),
        ("library/nginx", "docker.io/library/nginx:latest"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
        ("docker.io/nginx", "docker.io/library/nginx:latest"),
        ("index.docker.io/library/nginx:1", "docker.io/library/nginx:1"),
        ("registry-1.docker.io/foo/bar:v1", "docker.io/foo/bar:v1"),
        (
            "registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4",
            "registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4",
        ),
        (
            "quay.io/jetstack/cert-manager-controller:v1.16.1",
            "quay.io/jetstack/cert-manager-controller:v1.16.1",
        ),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/app:v1", "localhost:5000/app:v1"),
        ("127.0.0.1:5000/a/b/c:v1", "127.0.0.1:5000/a/b/c:v1"),
        ("[::1]:5000/app:v1", "[::1]:5000/app:v1"),
        ("mirror.corp:5000/k8s/pause:3.10", "mirror.corp:5000/k8s/pause:3.10"),
        (f"nginx@{DIGEST}", f"docker.io/library/nginx@{DIGEST}"),
        (f"ghcr.io/o/app:v1@{DIGEST}", f"ghcr.io/o/app:v1@{DIGEST}"),
        ("  quay.io/a/b:v1  ", "quay.io/a/b:v1"),
        ("gcr.io/a__b/c.d-e:1.0_rc", "gcr.io/a__b/c.d-e:1.0_rc"),
    ],
)
def test_normalisation(text: str, expected: str) -> None:
    assert str(parse_reference(text)) == expected


def test_fields_of_a_pinned_reference() -> None:
    ref = parse_reference(f"host:5000/team/app:v2@{DIGEST}")
    assert ref == Reference("host:5000", "team/app", "v2", DIGEST)
    assert ref.name == "host:5000/team/app"
    assert ref.identifier == DIGEST
    assert parse_reference("host:5000/team/app").identifier == "latest"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty image reference"),
        ("   ", "empty image reference"),
        ("Nginx", "invalid repository name"),
        ("quay.io/UPPER/case", "invalid repository name"),
        ("nginx:", "invalid tag"),
        ("nginx:bad tag", "invalid tag"),
        ("nginx@sha256:abc", "invalid digest"),
        ("nginx@md5:" + "a" * 32, "invalid digest"),
        ("bad_host.io:99999x/app", "invalid registry host"),
        ("quay.io/a//b", "invalid repository name"),
        ("${IMAGE}", "invalid"),
    ],
)
def test_invalid_references_name_the_input(text: str, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_reference(text)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message
    if text.strip():
        assert repr(text) in message


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("localhost:5000", True),
        ("127.0.0.1:5000", True),
        ("127.3.2.1", True),
        ("[::1]:5000", True),
        ("registry.k8s.io", False),
        ("10.0.0.1:5000", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_docker_hub_api_host() -> None:
    assert api_host("docker.io") == "registry-1.docker.io"
    assert api_host("quay.io") == "quay.io"
