"""Credentials as podman, skopeo and docker users keep them (issue 14), end to end: a
real ``skopeo login`` into ``$XDG_RUNTIME_DIR/containers/auth.json``, repository-scoped
keys (most specific wins), ``--authfile`` on every command that talks to a registry,
docker's ``identitytoken`` exchanged as an OAuth2 refresh token at a real token server,
and ``--password-stdin`` on a terminal (a pseudo-terminal: a prompt, no echo).

Every registry here is the real distribution binary on loopback.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import AIRGAP, assert_clean_failure, run_airgap
from tests.harness.images import TestImage
from tests.harness.importing import quiet_import
from tests.harness.registry import RegistryFactory, RegistryServer
from tests.harness.registry_fixtures import PASSWORD, USERNAME

pytestmark = pytest.mark.e2e

WRONG = "not-the-password"


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Private, empty credential homes for airgap and skopeo alike."""
    places = {
        "runtime": tmp_path / "run",
        "config": tmp_path / "config",
        "docker": tmp_path / "docker",
    }
    for path in places.values():
        path.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(places["runtime"]))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(places["config"]))
    monkeypatch.setenv("DOCKER_CONFIG", str(places["docker"]))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    return places


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def _auth_json(path: Path, auths: dict[str, dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"auths": auths}))
    return path


@pytest.fixture
def small_bundle(
    tmp_path: Path, source_images: dict[str, TestImage], signing_key: SigningKey
) -> Path:
    spec = write_spec(tmp_path / "spec.yaml", {"images": [source_images["app"].reference]})
    bundle = tmp_path / "small.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", bundle, "-q")
    assert result.returncode == 0, result.stderr
    return bundle


def _import(
    bundle: Path, key: SigningKey, registry: RegistryServer, prefix: str, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    tls = ["--ca-file", str(registry.ca_file)] if registry.ca_file else []
    return quiet_import(bundle, key.public, f"{registry.host}/{prefix}", *tls, *extra)


def test_a_skopeo_login_in_the_runtime_dir_is_used(
    homes: dict[str, Path],
    small_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    registry = registry_factory("basic")
    login = subprocess.run(
        [
            "skopeo",
            "login",
            "--cert-dir",
            str(registry.cert_dir),
            "--username",
            USERNAME,
            "--password-stdin",
            registry.host,
        ],
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # containers/common makes DOCKER_CONFIG (or REGISTRY_AUTH_FILE) the default
        # --authfile; without them skopeo writes where podman does
        env={
            k: v for k, v in os.environ.items() if k not in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG")
        },
    )
    assert login.returncode == 0, login.stderr
    written = homes["runtime"] / "containers" / "auth.json"
    assert registry.host in json.loads(written.read_text())["auths"]  # where podman keeps it
    result = _import(small_bundle, signing_key, registry, "mirror")
    assert result.returncode == 0, result.stderr
    # and ~/.config/containers/auth.json when the runtime directory has nothing
    moved = homes["config"] / "containers" / "auth.json"
    moved.parent.mkdir()
    shutil.move(written, moved)
    assert _import(small_bundle, signing_key, registry, "again").returncode == 0
    moved.unlink()
    refused = _import(small_bundle, signing_key, registry, "third")
    assert_clean_failure(refused, 1, "no credentials were found")


def test_repository_scoped_keys_most_specific_wins(
    homes: dict[str, Path],
    small_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    for mode in ("basic", "token"):
        registry = registry_factory(mode)
        _auth_json(
            homes["runtime"] / "containers" / "auth.json",
            {
                registry.host: {"auth": _auth(USERNAME, WRONG)},
                f"{registry.host}/team": {"auth": _auth(USERNAME, PASSWORD)},
            },
        )
        allowed = _import(small_bundle, signing_key, registry, "team/mirror")
        assert allowed.returncode == 0, (mode, allowed.stderr)
        refused = _import(small_bundle, signing_key, registry, "elsewhere")
        line = assert_clean_failure(refused, 1, "credentials were tried")
        assert WRONG not in line and PASSWORD not in line


def test_authfile_on_collect_import_configmaps_and_status(
    homes: dict[str, Path],
    tmp_path: Path,
    small_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    secure_registry: RegistryServer,
    source_images: dict[str, TestImage],
) -> None:
    registry = registry_factory("basic")
    assert registry.ca_file is not None
    given = _auth_json(
        tmp_path / "given.json",
        {
            registry.host: {"auth": _auth(USERNAME, PASSWORD)},
            secure_registry.host: {"auth": _auth(USERNAME, PASSWORD)},
        },
    )
    # a REGISTRY_AUTH_FILE with wrong passwords is not read when --authfile is given
    wrong = _auth_json(tmp_path / "wrong.json", {registry.host: {"auth": _auth(USERNAME, WRONG)}})
    os.environ["REGISTRY_AUTH_FILE"] = str(wrong)
    try:
        result = _import(small_bundle, signing_key, registry, "m", "--authfile", given)
        assert result.returncode == 0, result.stderr
        without = _import(small_bundle, signing_key, registry, "n")
        assert_clean_failure(without, 1, "credentials were tried")
        status = run_airgap(
            "status",
            small_bundle,
            "--key",
            signing_key.public,
            "--registry",
            f"{registry.host}/m",
            "--ca-file",
            registry.ca_file,
            "--authfile",
            given,
        )
        assert status.returncode == 0, status.stdout + status.stderr
        configmaps = run_airgap(
            "configmaps",
            small_bundle,
            "--key",
            signing_key.public,
            "--registry",
            f"{registry.host}/oci",
            "--ca-file",
            registry.ca_file,
            "--authfile",
            given,
            "--provider-source",
            "oci",
            "--output-dir",
            tmp_path / "cm",
        )
        assert configmaps.returncode == 0, configmaps.stderr
    finally:
        del os.environ["REGISTRY_AUTH_FILE"]
    # collect: a source registry that wants a login
    spec = write_spec(
        tmp_path / "secure.yaml",
        {
            "images": [source_images["secure_app"].reference],
            "registries": {secure_registry.host: {"caFile": str(secure_registry.ca_file)}},
        },
    )
    out = tmp_path / "secure.tar"
    refused = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", out, "-q")
    assert_clean_failure(refused, 1, "no credentials were found")
    collected = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", out, "-q", "--authfile", given
    )
    assert collected.returncode == 0, collected.stderr
    for command in ("collect", "import", "configmaps", "status"):
        assert "--authfile" in run_airgap(command, "--help").stdout, command


def test_an_identity_token_is_a_refresh_token_never_a_password(
    homes: dict[str, Path],
    small_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    registry = registry_factory("token")
    token_server = registry.token_server
    assert token_server is not None
    refresh = "refresh-token-5b0c1e"
    token_server.add_refresh_token(refresh)
    _auth_json(
        homes["docker"] / "config.json",
        {registry.host: {"auth": _auth("<token>", ""), "identitytoken": refresh}},
    )
    result = _import(small_bundle, signing_key, registry, "idt", "--debug")
    assert result.returncode == 0, result.stderr
    assert refresh not in result.stdout + result.stderr
    exchanges = [r for r in token_server.requests if r.grant_type == "refresh_token"]
    assert exchanges and all(r.method == "POST" and r.status == 200 for r in exchanges)
    assert not any(r.basic_auth for r in token_server.requests)  # never as a password
    assert {a for r in exchanges for g in r.granted for a in g["actions"]} >= {"pull", "push"}
    # a revoked token: one line, saying what to do
    token_server.refresh_tokens.clear()
    refused = _import(small_bundle, signing_key, registry, "again")
    assert_clean_failure(refused, 1, "refused the identity token", "log in again")
    assert refresh not in refused.stderr


# -- --password-stdin on a terminal ---------------------------------------------------


def _run_on_a_terminal(args: list[str], answer: str, timeout: float = 120) -> tuple[int, str]:
    """Run airgap with a pseudo-terminal as its stdin, stdout and stderr; type ``answer``
    once it prompts. Returns the exit code and everything the terminal showed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: airgap on the terminal
        os.execv(AIRGAP[0], [*AIRGAP, *args])  # noqa: S606 (our own interpreter, no shell)
    shown = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            if not answered and b"Password for" in shown:
                os.write(fd, answer.encode() + b"\n")
                answered = True
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")


def test_password_stdin_on_a_terminal_prompts_without_echo(
    homes: dict[str, Path],
    small_bundle: Path,
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    registry = registry_factory("basic")
    args = [
        "import",
        str(small_bundle),
        "--key",
        str(signing_key.public),
        "--registry",
        f"{registry.host}/tty",
        "--ca-file",
        str(registry.ca_file),
        "-q",
        "--username",
        USERNAME,
        "--password-stdin",
    ]
    code, shown = _run_on_a_terminal(args, PASSWORD)
    assert code == 0, shown
    assert f"Password for {USERNAME}:" in shown
    assert PASSWORD not in shown  # the terminal never echoed it
    code, shown = _run_on_a_terminal([*args[:5], f"{registry.host}/tty2", *args[6:]], WRONG)
    assert code == 1 and WRONG not in shown and "authentication failed" in shown
