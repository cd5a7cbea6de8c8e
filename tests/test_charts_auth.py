"""A classic chart repository behind TLS (a test CA) and HTTP basic auth, on loopback.

The spec gives the credentials in the repository URL (``https://user:pass@host/…``) and
the CA as the entry's ``caFile``, as provider and manifest URLs take theirs. Collect
must send the credentials to that origin only (an ``index.yaml`` whose package URL is
absolute, on a second loopback server, gets none), keep them out of every message and
of the bundle, and fail in one line on a wrong password (HTTP 401) or an untrusted CA.
"""

from __future__ import annotations

import base64
import hashlib
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.harness.bundle_fixtures import SigningKey
from tests.harness.chartrepo import ChartRepository, other_loopback_host, package
from tests.harness.cli import run_airgap
from tests.harness.pki import Pki

pytestmark = pytest.mark.e2e

USER, PASSWORD = "helm", "s3cr3t:pw"  # a ':' in the password, URL-encoded in the spec
SECRETS = (PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())


@dataclass(frozen=True)
class Repositories:
    protected: ChartRepository  # TLS + basic auth: index.yaml and app's package
    other: ChartRepository  # another origin: ext's package (an absolute URL)
    app: bytes
    ext: bytes


def chart(name: str, version: str) -> bytes:
    return package(name, {"Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: {version}\n"})


@pytest.fixture(scope="module")
def repositories(pki: Pki) -> Iterator[Repositories]:
    tls = (pki.server_cert, pki.server_key)
    with (
        ChartRepository(tls=tls, credentials=(USER, PASSWORD)) as protected,
        ChartRepository(host=other_loopback_host()) as other,
    ):
        app, ext = chart("app", "1.0.0"), chart("ext", "1.1.0")
        protected.add("charts/app-1.0.0.tgz", app)
        ext_url = other.add("elsewhere/ext-1.1.0.tgz", ext)
        entries = {
            "app": [{"name": "app", "version": "1.0.0", "urls": ["app-1.0.0.tgz"],
                     "digest": hashlib.sha256(app).hexdigest()}],
            "ext": [{"name": "ext", "version": "1.1.0", "urls": [ext_url],
                     "digest": hashlib.sha256(ext).hexdigest()}],
        }  # fmt: skip
        index = {"apiVersion": "v1", "entries": entries}
        protected.add("charts/index.yaml", yaml.safe_dump(index).encode())
        yield Repositories(protected, other, app, ext)


def write_spec(directory: Path, repo: str, ca_file: Path | None) -> Path:
    extra = {"caFile": str(ca_file)} if ca_file else {}
    entries = [
        {"repo": repo, "name": "app", "version": "1.0.0", **extra},
        {"repo": repo, "name": "ext", "version": "^1.0", **extra},
    ]
    spec = directory / "spec.yaml"
    spec.write_text(yaml.safe_dump({"charts": entries}))
    return spec


def repo_url(repositories: Repositories, password: str) -> str:
    host = repositories.protected.url.removeprefix("https://")
    return f"https://{USER}:{password.replace(':', '%3A')}@{host}charts/"


def test_collect_from_a_repository_behind_tls_and_basic_auth(
    tmp_path: Path, repositories: Repositories, pki: Pki, signing_key: SigningKey
) -> None:
    spec = write_spec(tmp_path, repo_url(repositories, PASSWORD), pki.ca_cert)
    output = tmp_path / "bundle.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", output)
    assert result.returncode == 0, result.stderr
    with tarfile.open(output) as archive:
        for path, expected in (
            ("charts/app/1.0.0/app-1.0.0.tgz", repositories.app),
            ("charts/ext/1.1.0/ext-1.1.0.tgz", repositories.ext),
        ):
            member = archive.extractfile(path)
            assert member is not None and member.read() == expected, path
    # the repository's origin got the credentials on every request, and let them in
    seen = repositories.protected.requests
    assert {r.path for r in seen} >= {"/charts/index.yaml", "/charts/app-1.0.0.tgz"}
    assert all(r.authorization == f"Basic {SECRETS[1]}" and r.status != 401 for r in seen)
    # the package on another origin was fetched without them
    elsewhere = repositories.other.requests
    assert [r.path for r in elsewhere if r.status == 200] == ["/elsewhere/ext-1.1.0.tgz"]
    assert all(r.authorization is None for r in elsewhere)
    # never in the bundle (sources recorded without user info) nor any output
    data = output.read_bytes()
    for secret in SECRETS:
        assert secret.encode() not in data and secret.replace(":", "%3A").encode() not in data
        assert secret not in result.stdout + result.stderr
    assert f"{USER}:".encode() not in data


@pytest.mark.parametrize(
    ("password", "trusted", "needles"),
    [
        ("wr0ngpw", True, ("HTTP 401", "/charts/index.yaml")),
        (PASSWORD, False, ("TLS", "not trusted", "/charts/index.yaml", "caFile")),
    ],
    ids=["wrong-password", "no-ca"],
)
def test_a_refused_repository_fails_in_one_line(
    tmp_path: Path,
    repositories: Repositories,
    pki: Pki,
    signing_key: SigningKey,
    password: str,
    trusted: bool,
    needles: tuple[str, ...],
) -> None:
    spec = write_spec(tmp_path, repo_url(repositories, password), pki.ca_cert if trusted else None)
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", tmp_path / "x")
    # both charts of the refused repository are reported, one line each, then the count
    # (issue 46: every failure of a collect at once)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-1] == "airgap: error: 2 releases failed; nothing written", result.stderr
    assert len(lines) == 3 and all(x.startswith("airgap: error: Helm charts ") for x in lines[:2])
    for needle in (repositories.protected.url, *needles):
        assert all(needle in x for x in lines[:2]), (needle, result.stderr)
    line = result.stderr
    for secret in (password, *SECRETS):
        assert secret not in line and secret.replace(":", "%3A") not in line
    assert f"{USER}:" not in line
    assert not (tmp_path / "x").exists()
