import base64
import json
import os
from pathlib import Path

import pytest

from airgap.registry import credentials
from airgap.registry.auth import parse_challenge


def test_parse_bearer_challenge() -> None:
    challenge = parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",'
        'scope="repository:a/b:pull,push"'
    )
    assert challenge.scheme == "bearer"
    assert challenge.params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:a/b:pull,push",
    }
    assert parse_challenge('Basic realm="Registry Realm"').scheme == "basic"


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    (tmp_path / "docker").mkdir()
    return tmp_path


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_docker_config_auths(isolated: Path) -> None:
    (isolated / "docker" / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://reg.example:5000": {"auth": _auth("u", "p:w")},
                    "https://index.docker.io/v1/": {"auth": _auth("hub", "x")},
                }
            }
        )
    )
    assert credentials.lookup("reg.example:5000") == credentials.Credentials("u", "p:w")
    assert credentials.lookup("docker.io") == credentials.Credentials("hub", "x")
    assert credentials.lookup("other.example") is None
    assert "p:w" not in repr(credentials.lookup("reg.example:5000"))


def test_registry_auth_file_wins(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / "docker" / "config.json").write_text(
        json.dumps({"auths": {"reg.example": {"auth": _auth("docker", "1")}}})
    )
    auth_file = isolated / "auth.json"
    auth_file.write_text(json.dumps({"auths": {"reg.example": {"auth": _auth("podman", "2")}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth_file))
    assert credentials.lookup("reg.example") == credentials.Credentials("podman", "2")


def test_credential_helper_is_executed(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = isolated / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-fake"
    helper.write_text(
        '#!/bin/sh\nread host\n[ "$host" = "reg.example" ] || exit 1\n'
        'echo \'{"ServerURL":"reg.example","Username":"helper","Secret":"tok"}\'\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (isolated / "docker" / "config.json").write_text(
        json.dumps({"credHelpers": {"reg.example": "fake"}})
    )
    assert credentials.lookup("reg.example") == credentials.Credentials("helper", "tok")


def test_missing_helper_is_a_clear_error(isolated: Path) -> None:
    (isolated / "docker" / "config.json").write_text(json.dumps({"credsStore": "nonexistent"}))
    with pytest.raises(Exception, match="docker-credential-nonexistent"):
        credentials.lookup("reg.example")
