import base64
import json
import os
from pathlib import Path

import pytest

from airgap.core.errors import InputError
from airgap.registry import credentials
from airgap.registry.auth import parse_challenge


@pytest.mark.unit
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


@pytest.mark.unit
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


@pytest.mark.unit
def test_registry_auth_file_wins(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (isolated / "docker" / "config.json").write_text(
        json.dumps({"auths": {"reg.example": {"auth": _auth("docker", "1")}}})
    )
    auth_file = isolated / "auth.json"
    auth_file.write_text(json.dumps({"auths": {"reg.example": {"auth": _auth("podman", "2")}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth_file))
    assert credentials.lookup("reg.example") == credentials.Credentials("podman", "2")


@pytest.mark.integration
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


@pytest.mark.integration
def test_missing_helper_is_a_clear_error(isolated: Path) -> None:
    (isolated / "docker" / "config.json").write_text(json.dumps({"credsStore": "nonexistent"}))
    with pytest.raises(Exception, match="docker-credential-nonexistent"):
        credentials.lookup("reg.example")


# -- podman/skopeo files, repository keys, identity tokens (issue 14) ------------------


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Every place credentials are read from, empty and private to the test."""
    places = {
        "registry_auth_file": tmp_path / "registry-auth-file.json",
        "runtime": tmp_path / "run" / "containers" / "auth.json",
        "config": tmp_path / "config" / "containers" / "auth.json",
        "docker": tmp_path / "docker" / "config.json",
    }
    for path in places.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    return places


def _write_auths(path: Path, auths: dict[str, dict[str, str]]) -> None:
    path.write_text(json.dumps({"auths": auths}))


@pytest.mark.unit
def test_files_are_read_in_podmans_order(
    homes: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, path in homes.items():
        _write_auths(path, {"reg.example": {"auth": _auth(name, "pw")}})
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(homes["registry_auth_file"]))
    order = ["registry_auth_file", "runtime", "config", "docker"]
    for name in order:
        found = credentials.lookup("reg.example")
        assert found is not None and found.username == name
        homes[name].unlink()  # the next one answers once this one is gone
    assert credentials.lookup("reg.example") is None


@pytest.mark.unit
def test_runtime_dir_defaults_to_run_containers_uid(
    homes: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    paths = credentials.auth_file_paths()
    assert paths[0] == Path(f"/run/containers/{os.getuid()}/auth.json")
    assert paths[1:] == [homes["config"], homes["docker"]]


@pytest.mark.unit
def test_an_explicit_authfile_is_the_only_file_read(homes: dict[str, Path], tmp_path: Path) -> None:
    _write_auths(homes["docker"], {"reg.example": {"auth": _auth("docker", "pw")}})
    _write_auths(homes["runtime"], {"other.example": {"auth": _auth("podman", "pw")}})
    authfile = tmp_path / "given.json"
    _write_auths(authfile, {"other.example": {"auth": _auth("given", "pw")}})
    assert credentials.lookup("reg.example", authfile=authfile) is None
    found = credentials.lookup("other.example", authfile=authfile)
    assert found is not None and found.username == "given"


@pytest.mark.unit
def test_the_most_specific_repository_key_wins(homes: dict[str, Path]) -> None:
    _write_auths(
        homes["runtime"],
        {
            "reg.example": {"auth": _auth("host", "1")},
            "reg.example/team": {"auth": _auth("team", "2")},
            "reg.example/team/app": {"auth": _auth("app", "3")},
            "reg.example/other/x": {"auth": _auth("x", "4")},
        },
    )

    def user(repository: str | None) -> str:
        found = credentials.lookup("reg.example", repository)
        assert found is not None
        return found.username

    assert user("team/app") == "app"
    assert user("team/app/sub") == "app"
    assert user("team/tool") == "team"
    assert user("other") == "host"  # "reg.example/other/x" is only for other/x
    assert user("other/x") == "x"
    assert user(None) == "host"
    assert credentials.repository_keys("h:5000", "a/b/c") == [
        "h:5000/a/b/c",
        "h:5000/a/b",
        "h:5000/a",
    ]


@pytest.mark.unit
def test_a_file_that_knows_the_repository_wins_over_a_later_more_specific_one(
    homes: dict[str, Path],
) -> None:
    # containers/image asks each file in turn for the image; the first that answers wins
    _write_auths(homes["runtime"], {"reg.example": {"auth": _auth("runtime-host", "1")}})
    _write_auths(homes["docker"], {"reg.example/team/app": {"auth": _auth("docker-app", "2")}})
    found = credentials.lookup("reg.example", "team/app")
    assert found is not None and found.username == "runtime-host"


@pytest.mark.unit
def test_legacy_url_keys_stand_for_their_host(homes: dict[str, Path]) -> None:
    _write_auths(homes["docker"], {"https://reg.example:5000/v1/": {"auth": _auth("old", "pw")}})
    found = credentials.lookup("reg.example:5000", "team/app")
    assert found is not None and found.username == "old"


@pytest.mark.unit
def test_identity_tokens_are_kept_apart_and_never_shown(homes: dict[str, Path]) -> None:
    _write_auths(
        homes["docker"],
        {
            "a.example": {"auth": _auth("<token>", ""), "identitytoken": "refresh-1"},
            "b.example": {"identitytoken": "refresh-2"},
        },
    )
    a = credentials.lookup("a.example")
    b = credentials.lookup("b.example")
    assert a == credentials.Credentials("<token>", "", "refresh-1")
    assert b == credentials.Credentials("<token>", "", "refresh-2")
    assert "refresh" not in repr(a) and "refresh" not in repr(b)


@pytest.mark.integration
def test_a_helper_answering_token_gives_an_identity_token(
    homes: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-idt"
    helper.write_text('#!/bin/sh\necho \'{"Username":"<token>","Secret":"refresh-3"}\'\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    homes["docker"].write_text(json.dumps({"credHelpers": {"reg.example": "idt"}}))
    assert credentials.lookup("reg.example") == credentials.Credentials("<token>", "", "refresh-3")


@pytest.mark.unit
def test_a_credentials_file_that_is_not_json_is_one_line(homes: dict[str, Path]) -> None:
    homes["runtime"].write_text("{not json")
    with pytest.raises(InputError, match=r"cannot read credentials file .*auth\.json"):
        credentials.lookup("reg.example")
    homes["runtime"].write_text("[" * 100_000)  # no RecursionError: a bounded depth
    with pytest.raises(InputError, match=r"auth\.json: nested deeper than 64 levels"):
        credentials.lookup("reg.example")
    homes["runtime"].unlink()
    homes["runtime"].mkdir()
    with pytest.raises(InputError, match="is a directory"):
        credentials.lookup("reg.example")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "mode", "message"),
    [
        ("#!/bin/sh\nexec sleep 30\n", 0o755, "did not answer within 0.5 s"),
        ("#!/bin/sh\nhead -c 200000 /dev/zero | tr '\\0' x\n", 0o755, "answered more than 64 KiB"),
        ("#!/bin/sh\necho '{}'\n", 0o644, "cannot run: Permission denied"),
    ],
    ids=["hangs", "floods", "not-executable"],
)
def test_a_helper_that_hangs_floods_or_cannot_run_is_one_line(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, script: str, mode: int, message: str
) -> None:
    bin_dir = isolated / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-bad"
    helper.write_text(script)
    helper.chmod(mode)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(credentials, "HELPER_TIMEOUT", 0.5)
    (isolated / "docker" / "config.json").write_text(json.dumps({"credsStore": "bad"}))
    with pytest.raises(InputError) as raised:
        credentials.lookup("reg.example")
    assert str(raised.value) == (
        f"credential helper docker-credential-bad (configured for reg.example) {message}"
    )
