"""The bundle spec: valid specs load into typed values, every mistake is one clear line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from airgap.collect.spec import BundleSpec, RegistrySettings, load_spec
from airgap.core.errors import InputError, SpecError
from airgap.providers.specs import ProviderSpec
from airgap.providers.types import ProviderType

pytestmark = pytest.mark.unit

FULL = """\
# what to carry across
providers:
  - {name: cluster-api, type: CoreProvider, version: latest}
  - {name: kubeadm, type: BootstrapProvider, version: v1.9.4}
  - name: odd
    type: InfrastructureProvider
    version: v0.3.1
    url: https://github.example.com/acme/cluster-api-provider-odd/releases
    componentsFile: infrastructure-components-development.yaml
images: [quay.io/jetstack/cert-manager-controller:v1.16.1, nginx]
platforms: [linux/amd64, linux/arm64, linux/arm/v7]
registries:
  registry.k8s.io: {mirror: mirror.corp:5000/k8s}
  quay.io: {caFile: certs/corp.pem}
  myreg.local: {plainHTTP: true, skipTLSVerify: false}
  index.docker.io: {skipTLSVerify: true}
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_full_spec(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "corp.pem").write_text("pem")
    spec = load_spec(write(tmp_path, FULL))
    assert spec == BundleSpec(
        providers=(
            ProviderSpec("cluster-api", ProviderType.CORE, "latest"),
            ProviderSpec("kubeadm", ProviderType.BOOTSTRAP, "v1.9.4"),
            ProviderSpec(
                "odd",
                ProviderType.INFRASTRUCTURE,
                "v0.3.1",
                url="https://github.example.com/acme/cluster-api-provider-odd/releases",
                components_file="infrastructure-components-development.yaml",
            ),
        ),
        images=(
            "quay.io/jetstack/cert-manager-controller:v1.16.1",
            "docker.io/library/nginx:latest",
        ),
        platforms=("linux/amd64", "linux/arm64", "linux/arm/v7"),
        registries={
            "registry.k8s.io": RegistrySettings(mirror="mirror.corp:5000/k8s"),
            "quay.io": RegistrySettings(ca_file=str((tmp_path / "certs" / "corp.pem").resolve())),
            "myreg.local": RegistrySettings(plain_http=True),
            "docker.io": RegistrySettings(skip_tls_verify=True),
        },
    )


def test_minimal_specs(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "images: [nginx, nginx:latest]\n"))
    assert spec.providers == ()
    assert spec.images == ("docker.io/library/nginx:latest",)
    assert spec.platforms is None
    assert spec.registries == {}
    spec = load_spec(
        write(tmp_path, "providers:\n- {name: aws, type: infrastructure, version: v2.7.1}\n")
    )
    assert spec.providers == (ProviderSpec("aws", ProviderType.INFRASTRUCTURE, "v2.7.1"),)


def test_versions_stay_strings(tmp_path: Path) -> None:
    # YAML would read 1.10 as the float 1.1; the text as written must survive.
    spec = load_spec(
        write(tmp_path, "providers:\n- {name: aws, type: InfrastructureProvider, version: 1.10}\n")
    )
    assert spec.providers[0].version == "1.10"


def test_absolute_ca_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    spec = load_spec(
        write(tmp_path, f"images: [nginx]\nregistries:\n  quay.io: {{caFile: {ca}}}\n")
    )
    assert spec.registries["quay.io"].ca_file == str(ca)


def test_a_ca_file_must_be_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    for ca, problem in ((fifo, "is a FIFO, not a regular file"), (tmp_path / "x.pem", "not found")):
        path = write(tmp_path, f"images: [nginx]\nregistries:\n  quay.io: {{caFile: {ca}}}\n")
        expected = f"spec.yaml:3: registries.quay.io.caFile: CA file {ca} {problem}"
        with pytest.raises(SpecError, match=re.escape(expected)):
            load_spec(path)


PROVIDER = "providers:\n  - {name: aws, type: InfrastructureProvider, version: v2.7.1}\n"


@pytest.mark.parametrize(
    ("text", "line", "key", "fragment"),
    [
        ("providers: [\n", 2, None, "malformed YAML"),
        ("providers:\n  - name: a\n   bad: indent\n", 3, None, "malformed YAML"),
        ("", None, None, "spec is empty"),
        ("images: []\n", 1, None, "nothing to collect"),
        ("- nginx\n", 1, None, "must be a mapping"),
        ("image: [nginx]\n", 1, "image", "unknown key 'image'"),
        (PROVIDER + "images: [nginx]\nimages: [busybox]\n", 4, "images", "duplicate key"),
        (
            "providers:\n  - name: aws\n    type: InfrastructureProvider\n    verison: v1\n",
            4,
            "providers[0].verison",
            "unknown key 'verison'",
        ),
        (
            "providers:\n  - name: aws\n    type: InfrastructureProvider\n",
            2,
            "providers[0].version",
            "missing required key",
        ),
        (
            "providers:\n  - {name: aws, type: InfrastructureProvider, version: }\n",
            2,
            "providers[0].version",
            "missing required key",
        ),
        (
            "providers:\n  - {name: aws, type: Infra, version: v1.0.0}\n",
            2,
            "providers[0].type",
            "unknown provider type 'Infra': valid types are CoreProvider, BootstrapProvider",
        ),
        (
            "providers:\n  - name: cluster-api\n    type: CoreProvider\n    version: latest\n"
            "  - type: AddonProvider\n    version: v0.1.0\n    name: fleet\n",
            7,
            "providers[1].name",
            "unknown provider 'fleet' of type AddonProvider: closest built-in names: "
            "rancher-fleet; or give url (e.g. https://github.com/OWNER/REPO/releases)",
        ),
        (
            "providers:\n  - {name: talos, type: InfrastructureProvider, version: v1.0.0}\n",
            2,
            "providers[0].name",
            "'talos' is built in as BootstrapProvider, ControlPlaneProvider only",
        ),
        (
            "providers:\n  - {name: Aws_1, type: InfrastructureProvider, version: v1.0.0}\n",
            2,
            "providers[0].name",
            "invalid provider name",
        ),
        (
            "providers:\n  - {name: aws, type: InfrastructureProvider, version: ../x}\n",
            2,
            "providers[0].version",
            "invalid version",
        ),
        (
            PROVIDER + "  - {name: aws, type: InfrastructureProvider, version: v2.7.1}\n",
            3,
            "providers[1]",
            "duplicate provider aws of type InfrastructureProvider v2.7.1 (already at providers[0])",
        ),
        (
            "providers:\n  - {name: x, type: AddonProvider, version: v1.0.0, url: ftp://h/x}\n",
            2,
            "providers[0].url",
            "unsupported URL",
        ),
        (
            "providers:\n  - {name: x, type: AddonProvider, version: v1.0.0,\n"
            "     componentsFile: ../evil.yaml}\n",
            3,
            "providers[0].componentsFile",
            "invalid file name",
        ),
        ("providers: {name: x}\n", 1, "providers", "must be a list"),
        ("providers:\n  - just-a-name\n", 2, "providers[0]", "must be a mapping"),
        ("images:\n  - nginx\n  - Bad:Ref\n", 3, "images[1]", "invalid repository name"),
        ("images:\n  - [nested]\n", 2, "images[0]", "must be a string"),
        (
            "images: [nginx]\nplatforms: [linux/amd64, linux]\n",
            2,
            "platforms[1]",
            "os/arch[/variant]",
        ),
        ("images: [nginx]\nplatforms: [Linux/AMD64]\n", 2, "platforms[0]", "invalid platform"),
        ("images: [nginx]\nplatforms: []\n", 2, "platforms", "empty list"),
        (
            "images: [nginx]\nregistries:\n  quay.io: {plainHttp: true}\n",
            3,
            "registries.quay.io.plainHttp",
            "unknown key 'plainHttp'",
        ),
        (
            "images: [nginx]\nregistries:\n  quay.io: {plainHTTP: maybe}\n",
            3,
            "registries.quay.io.plainHTTP",
            "must be true or false",
        ),
        (
            "images: [nginx]\nregistries:\n  quay.io: {caFile: nope.pem}\n",
            3,
            "registries.quay.io.caFile",
            "not found",
        ),
        (
            "images: [nginx]\nregistries:\n  quay.io: {mirror: 'not a mirror'}\n",
            3,
            "registries.quay.io.mirror",
            "invalid mirror",
        ),
        (
            "images: [nginx]\nregistries:\n  quay.io: {mirror: justaname}\n",
            3,
            "registries.quay.io.mirror",
            "invalid mirror",
        ),
        (
            "images: [nginx]\nregistries:\n  'bad host': {}\n",
            3,
            "registries.bad host",
            "invalid registry host",
        ),
        (
            "images: [nginx]\nregistries:\n  docker.io: {}\n  index.docker.io: {}\n",
            4,
            "registries.index.docker.io",
            "listed twice",
        ),
        ("images: [nginx]\nregistries: [quay.io]\n", 2, "registries", "must be a mapping"),
    ],
)
def test_errors_are_one_line_naming_file_line_and_key(
    tmp_path: Path, text: str, line: int | None, key: str | None, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message
    assert isinstance(caught.value, InputError)  # exit code 2
    prefix = f"{path}:{line}:" if line is not None else f"{path}:"
    assert message.startswith(prefix), message
    if key is not None:
        assert f" {key}: " in message, message
    assert fragment in message, message


def test_malformed_yaml_gives_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "providers:\n  - {name: a, type: b\n")
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert re.match(rf"^{re.escape(str(path))}:\d+:\d+: malformed YAML: ", str(caught.value))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "absent.yaml")


def test_several_versions_of_one_provider_are_allowed(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(PROVIDER + "  - {name: aws, type: InfrastructureProvider, version: v2.6.0}\n")
    versions = [p.version for p in load_spec(spec).providers]
    assert versions == ["v2.7.1", "v2.6.0"]
