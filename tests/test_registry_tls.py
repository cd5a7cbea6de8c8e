"""Per-registry TLS as containers/image and docker do it (issue 14): CAs and client
certificates from ``certs.d/HOST:PORT/`` (``*.crt``, ``NAME.cert`` + ``NAME.key``),
``--cert-dir`` for the one registry a command talks to, and mutual TLS against the real
distribution registry configured with ``http.tls.clientcas``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import skopeo
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.images import CorpusEntry, OciLayout, TestImage, push_corpus
from tests.harness.importing import quiet_import
from tests.harness.pki import Pki, create_ca, issue_client_cert
from tests.harness.registry import RegistryFactory, RegistryServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def mtls_registry(tmp_path: Path, pki: Pki) -> Iterator[tuple[RegistryServer, Path]]:
    """A TLS registry that requires a client certificate from its own client CA; also a
    directory holding what a client needs (``ca.crt``, ``client.cert``, ``client.key``)."""
    client_ca = create_ca(tmp_path, "client-ca")
    files = tmp_path / "client-files"
    files.mkdir()
    cert, key = issue_client_cert(client_ca, files)
    shutil.copyfile(pki.ca_cert, files / "ca.crt")
    registry = RegistryServer(
        tmp_path / "mtls",
        "tls",
        pki=pki,
        extra_config={"http": {"tls": {"clientcas": [str(client_ca.cert_path)]}}},
        client_cert=(cert, key),
    )
    # skopeo (the independent client) reads the same layout as its --cert-dir
    assert registry.cert_dir is not None
    shutil.copyfile(cert, registry.cert_dir / "client.cert")
    shutil.copyfile(key, registry.cert_dir / "client.key")
    yield registry, files
    registry.stop()


@pytest.fixture
def small_bundle(
    tmp_path: Path, source_images: dict[str, TestImage], signing_key: SigningKey
) -> tuple[Path, TestImage]:
    image = source_images["app"]
    spec = write_spec(tmp_path / "spec.yaml", {"images": [image.reference]})
    bundle = tmp_path / "small.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert result.returncode == 0, result.stderr
    return bundle, image


def test_mutual_tls_with_cert_dir_and_certs_d(
    tmp_path: Path,
    mtls_registry: tuple[RegistryServer, Path],
    small_bundle: tuple[Path, TestImage],
    signing_key: SigningKey,
    pki: Pki,
) -> None:
    registry, files = mtls_registry
    bundle, image = small_bundle
    empty_roots = {"AIRGAP_CERTS_D": str(tmp_path / "no-certs.d")}
    # without a client certificate: one line saying what the registry wants
    refused = quiet_import(
        bundle, signing_key.public, f"{registry.host}/x", "--ca-file", pki.ca_cert, env=empty_roots
    )
    assert_clean_failure(refused, 1, registry.host, "wants a client certificate", "--cert-dir")
    # --cert-dir: the CA and the client pair for this registry
    given = quiet_import(
        bundle, signing_key.public, f"{registry.host}/given", "--cert-dir", files, env=empty_roots
    )
    assert given.returncode == 0, given.stderr
    repository = image.repository
    pushed = skopeo.raw_manifest(f"given/{repository}:{image.tag}", registry=registry)
    assert skopeo.digest_of(pushed) == image.digest
    # certs.d/HOST:PORT, found on its own: no --ca-file, no --cert-dir
    root = tmp_path / "certs.d"
    shutil.copytree(files, root / registry.host)
    found = quiet_import(
        bundle,
        signing_key.public,
        f"{registry.host}/found",
        env={"AIRGAP_CERTS_D": f"{tmp_path / 'absent'}:{root}"},
    )
    assert found.returncode == 0, found.stderr
    pushed = skopeo.raw_manifest(f"found/{repository}:{image.tag}", registry=registry)
    assert skopeo.digest_of(pushed) == image.digest
    # --cert-dir replaces certs.d: a directory without the client pair is refused again
    ca_only = tmp_path / "ca-only"
    ca_only.mkdir()
    shutil.copyfile(pki.ca_cert, ca_only / "ca.crt")
    replaced = quiet_import(
        bundle,
        signing_key.public,
        f"{registry.host}/y",
        "--cert-dir",
        ca_only,
        env={"AIRGAP_CERTS_D": str(root)},
    )
    assert_clean_failure(replaced, 1, "wants a client certificate")


def test_collect_reads_a_source_registrys_certs_d(
    tmp_path: Path,
    mtls_registry: tuple[RegistryServer, Path],
    corpus_layout: OciLayout,
    signing_key: SigningKey,
) -> None:
    registry, files = mtls_registry
    images = push_corpus(corpus_layout, registry, {"app": CorpusEntry("app", "src/app", "v1")})
    spec = write_spec(tmp_path / "spec.yaml", {"images": [images["app"].reference]})
    root = tmp_path / "certs.d"
    shutil.copytree(files, root / registry.host)
    out = tmp_path / "o.tar"
    result = run_airgap(
        *collect_args(spec, signing_key.private, out),
        "-q",
        env={"AIRGAP_CERTS_D": str(root)},
    )
    assert result.returncode == 0, result.stderr
    assert run_airgap("verify", out, "--key", signing_key.public).returncode == 0


def test_a_client_certificate_without_its_key_is_a_usage_error(
    tmp_path: Path,
    mtls_registry: tuple[RegistryServer, Path],
    small_bundle: tuple[Path, TestImage],
    signing_key: SigningKey,
) -> None:
    registry, files = mtls_registry
    broken = tmp_path / "broken"
    shutil.copytree(files, broken)
    (broken / "client.key").unlink()
    result = quiet_import(
        small_bundle[0], signing_key.public, f"{registry.host}/z", "--cert-dir", broken
    )
    assert_clean_failure(result, 2, str(broken / "client.cert"), "without its key client.key")


def test_tls_files_that_are_fifos_devices_or_huge_fail_at_once(
    tmp_path: Path,
    mtls_registry: tuple[RegistryServer, Path],
    small_bundle: tuple[Path, TestImage],
    signing_key: SigningKey,
) -> None:
    """OpenSSL opens a CA bundle, certificate or key by its path: a FIFO there blocked
    import (and status, and collect) for ever, and /dev/zero would be read without end.
    Each is refused in one line, at once."""
    registry, files = mtls_registry
    fifo = tmp_path / "pipe.crt"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.crt"
    with huge.open("wb") as handle:
        handle.truncate(5 << 20)  # sparse: 5 MiB of nothing
    fifo_key = tmp_path / "fifo-key"  # a --cert-dir whose client key is a FIFO
    shutil.copytree(files, fifo_key)
    (fifo_key / "client.key").unlink()
    os.mkfifo(fifo_key / "client.key")
    no_env: dict[str, str] = {}
    cases: list[tuple[tuple[str | Path, ...], dict[str, str], tuple[str, ...]]] = [
        (("--ca-file", fifo), no_env, (str(fifo), "is a FIFO, not a regular file")),
        (("--ca-file", "/dev/zero"), no_env, ("/dev/zero", "is a device, not a regular file")),
        (("--ca-file", huge), no_env, (str(huge), "is larger than the 4 MiB limit")),
        (("--cert-dir", fifo_key), no_env, (str(fifo_key / "client.key"), "is a FIFO")),
        # the trust store OpenSSL opens by itself for a default context: the same
        ((), {"SSL_CERT_FILE": str(fifo)}, ("SSL_CERT_FILE", str(fifo), "is a FIFO")),
        ((), {"SSL_CERT_FILE": str(huge)}, ("SSL_CERT_FILE", str(huge), "is larger than")),
        ((), {"SSL_CERT_DIR": f"/nonexistent:{fifo}"}, ("SSL_CERT_DIR", "not a directory")),
    ]
    for extra, env, needles in cases:
        result = quiet_import(
            small_bundle[0], signing_key.public, f"{registry.host}/refused", *extra, env=env
        )
        assert_clean_failure(result, 2, *needles)


@pytest.mark.skipif(os.geteuid() != 0, reason="writes below /etc (root only)")
def test_the_system_directories_containers_first_then_docker(
    small_bundle: tuple[Path, TestImage],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    pki: Pki,
) -> None:
    """The real /etc/containers/certs.d and /etc/docker/certs.d, for a port nobody else
    uses (removed afterwards): the first existing directory wins, as in containers/image."""
    registry = registry_factory("tls")
    containers = Path("/etc/containers/certs.d") / registry.host
    docker = Path("/etc/docker/certs.d") / registry.host
    assert "AIRGAP_CERTS_D" not in os.environ
    try:
        docker.mkdir(parents=True)
        shutil.copyfile(pki.ca_cert, docker / "ca.crt")
        result = quiet_import(small_bundle[0], signing_key.public, f"{registry.host}/docker")
        assert result.returncode == 0, result.stderr
        containers.mkdir(parents=True)
        shutil.copyfile(pki.other_ca_cert, containers / "ca.crt")  # wins, and is wrong
        result = quiet_import(small_bundle[0], signing_key.public, f"{registry.host}/containers")
        assert_clean_failure(result, 1, "TLS certificate not trusted")
    finally:
        shutil.rmtree(containers, ignore_errors=True)
        shutil.rmtree(docker, ignore_errors=True)
