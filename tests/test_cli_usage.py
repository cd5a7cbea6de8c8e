"""Errors that help (issue 14): one-line usage errors, help that fits, output paths that
are refused instead of created, FILE:LINE policy errors, version suggestions, no retries
for what cannot get better, a closed pipe, tables that fit, and a warning-free build.

Everything runs through the real entry point in a subprocess (or the real HTTP stack
against real loopback servers); nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import httpx
import pytest

from airgap.cli import cli
from airgap.cli.options import _plain_http as plain_http_for
from airgap.core.errors import NetworkError, SpecError
from airgap.net import httpclient as airgap_http
from airgap.providers.types import ProviderType
from airgap.verify.policy import load_policy
from airgap.verify.report import inventory_tables
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import AIRGAP, assert_clean_failure, collect_args, run_airgap
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory
from tests.harness.releases import ReleaseServer, make_components, make_metadata

REPO = Path(__file__).resolve().parent.parent


# -- usage errors ---------------------------------------------------------------------

_NO_AUTHFILE = "Invalid value for '--authfile': File 'nosuch.json' does not exist"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["collect"], "Missing argument 'SPEC' (see airgap collect --help)"),
        (["collect", "s.yaml", "--bogus"], "No such option '--bogus'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["inspect", "b.tar", "--format", "xml"], "Invalid value for '--format'"),
        (["import", "b.tar", "--registry", "r", "--concurrency", "0"], "--concurrency"),
        (["configmaps", "b.tar", "--registry", "r", "--concurrency", "4"], "--concurrency"),
        (["verify"], "Missing argument 'BUNDLE'"),
        (
            [
                "import",
                "b.tar",
                "--no-signature",
                "--registry",
                "https://r.example/x",
                "--plain-http",
            ],
            "--registry says https:// and --plain-http says plain HTTP",
        ),
        (
            ["import", "b.tar", "--no-signature", "--registry", "r.example:99999/x"],
            "port must be 1 to 65535",
        ),
        (
            ["status", "b.tar", "--no-signature", "--registry", "[::1]:0/x"],
            "port must be 1 to 65535",
        ),
        (["verify", "b.tar", "--sbom", "spdx", "--format", "json"], "--sbom prints the SBOM"),
        # a file to write in a directory that is not there (an unmounted disk?)
        (["keygen", "nodir/k.key"], "directory nodir does not exist (is the disk mounted?"),
        (
            ["status", "b.tar", "--no-signature", "--registry", "r/x", "--export-have", "no/h"],
            "directory no does not exist",
        ),
        # a namespace kubectl would refuse on the far side is refused here
        (["import", "b.tar", "--registry", "r/x", "--namespace", "Bad_NS"], "invalid namespace"),
        (["configmaps", "b.tar", "--registry", "r/x", "--namespace", ""], "invalid namespace"),
        (["configmaps", "b.tar", "--registry", "r/x", "--namespace", "a" * 64], "at most 63"),
        # a typo in --authfile's path is not "no credentials" (podman refuses it too)
        (["collect", "s.yaml", "--authfile", "nosuch.json"], _NO_AUTHFILE),
        (["import", "b.tar", "--registry", "r/x", "--authfile", "nosuch.json"], _NO_AUTHFILE),
        (["status", "b.tar", "--registry", "r/x", "--authfile", "nosuch.json"], _NO_AUTHFILE),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args: list[str], needle: str) -> None:
    result = run_airgap(*args)
    line = assert_clean_failure(result, 2, needle)
    assert line.startswith("airgap: error: ")
    assert "Usage:" not in result.stderr and "Error:" not in result.stderr
    assert result.stdout == ""


@pytest.mark.e2e
def test_bare_airgap_prints_the_help_and_succeeds() -> None:
    result = run_airgap()
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: airgap") and "Commands:" in result.stdout
    assert result.stderr == ""


@pytest.mark.e2e
def test_help_shows_every_command_summary_whole_within_80_columns() -> None:
    result = run_airgap("--help", env={"COLUMNS": "80"})
    assert result.returncode == 0
    commands = result.stdout.split("Commands:", 1)[1]
    assert "..." not in commands
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    commands = result.stdout.split("Commands:", 1)[1]
    for name, command in cli.commands.items():
        assert name in commands
        assert command.short_help, f"{name} has no short help"
        # the summary may wrap, but every word of it is there
        flowing = " ".join(commands.split())
        assert " ".join(command.short_help.split()) in flowing, name


@pytest.mark.unit
def test_every_option_of_every_command_has_help_text() -> None:
    for name, command in cli.commands.items():
        for parameter in command.params:
            if isinstance(parameter, click.Option):
                assert parameter.help, f"airgap {name} {parameter.opts[0]} has no help text"


@pytest.mark.e2e
def test_configmaps_lists_only_the_flags_it_uses() -> None:
    result = run_airgap("configmaps", "--help")
    assert result.returncode == 0
    for unused in ("--concurrency", "--reverify", "--dry-run", "--quiet"):
        assert unused not in result.stdout, unused
    for used in ("--registry", "--output-dir", "--key", "--provider-source", "--variables"):
        assert used in result.stdout, used
    imported = run_airgap("import", "--help").stdout
    assert "--concurrency" in imported and "--reverify" in imported


# -- collect -o ---------------------------------------------------------------------


@pytest.fixture
def small_spec(tmp_path: Path, source_images: dict[str, TestImage]) -> Path:
    return write_spec(tmp_path / "spec.yaml", {"images": [source_images["app"].reference]})


@pytest.mark.e2e
def test_collect_refuses_a_missing_output_directory(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey
) -> None:
    output = tmp_path / "unmounted" / "usb" / "x.tar"
    result = run_airgap("collect", small_spec, "--sign-key", signing_key.private, "-o", output)
    assert_clean_failure(result, 2, str(output.parent), "does not exist")
    assert not (tmp_path / "unmounted").exists()


@pytest.mark.e2e
def test_collect_refuses_to_overwrite_a_bundle_without_force(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey
) -> None:
    output = tmp_path / "bundle.tar"
    output.write_bytes(b"an earlier bundle")
    result = run_airgap("collect", small_spec, "--sign-key", signing_key.private, "-o", output)
    assert_clean_failure(result, 2, str(output), "already exists", "--force")
    assert output.read_bytes() == b"an earlier bundle"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tar", "spec.yaml"]
    forced = run_airgap(
        "collect", small_spec, "--sign-key", signing_key.private, "-o", output, "--force", "-q"
    )
    assert forced.returncode == 0, forced.stderr
    assert run_airgap("verify", output, "--key", signing_key.public).returncode == 0


@pytest.mark.e2e
@pytest.mark.parametrize(
    "value", ["abc", "-5", "1.5", "99999999999999", "9" * 5000, "\u0661\u0662"]
)
def test_collect_refuses_a_malformed_source_date_epoch_before_any_work(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey, value: str
) -> None:
    """reproducible-builds.org: a malformed ``SOURCE_DATE_EPOCH`` fails the build, rather
    than stamping "now" on a bundle meant to be reproducible. A year past 9999 once ended
    a whole collect in a traceback after every download."""
    output = tmp_path / "bundle.tar"
    result = run_airgap(
        *collect_args(small_spec, signing_key.private, output),
        env={"SOURCE_DATE_EPOCH": value},
    )
    assert_clean_failure(result, 2, "SOURCE_DATE_EPOCH=", "0 to 253402300799")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no staging left


@pytest.mark.e2e
def test_collect_stamps_source_date_epoch_up_to_the_last_second_of_9999(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey
) -> None:
    output = tmp_path / "bundle.tar"
    result = run_airgap(
        *collect_args(small_spec, signing_key.private, output),
        "-q",
        env={"SOURCE_DATE_EPOCH": "253402300799"},
    )
    assert result.returncode == 0, result.stderr
    shown = run_airgap("inspect", output, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert '"created": "9999-12-31T23:59:59Z"' in shown.stdout
    verified = run_airgap("verify", output, "--key", signing_key.public)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.e2e
def test_force_never_replaces_a_device_fifo_or_socket(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey
) -> None:
    """``keygen /dev/null --force`` renamed a key file over /dev/null (as root: a broken
    machine). ``--force`` replaces files and links, nothing else, for keys and bundles."""
    fifo = tmp_path / "pipe"
    part = tmp_path / "split.tar.000"  # the first part of a bundle written in parts
    for special in (fifo, part):
        os.mkfifo(special)
    collect = ("collect", small_spec, "--sign-key", signing_key.private, "--force", "-o")
    for args, special in (
        (("keygen", fifo, "--force"), fifo),
        ((*collect, fifo), fifo),
        ((*collect, tmp_path / "split.tar", "--part-size", "700MiB"), part),
    ):
        result = run_airgap(*args)
        assert_clean_failure(result, 2, str(special), "not a regular file")
        assert special.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "spec.yaml", "split.tar.000"]


@pytest.mark.e2e
def test_a_dash_is_not_taken_as_a_file_to_write(
    tmp_path: Path, small_spec: Path, signing_key: SigningKey
) -> None:
    """``keygen -`` wrote a private key to a file called ``-`` in the working
    directory: outputs that cannot be standard output refuse ``-`` before any work."""
    work = tmp_path / "work"
    work.mkdir()
    for args, option in (
        (("keygen", "-"), "PRIVATE_KEY"),
        (("collect", small_spec, "--sign-key", signing_key.private, "-o", "-"), "--output"),
        (("import", "b.tar", "--registry", "r.example", "--output-dir", "-"), "--output-dir"),
        (("configmaps", "b.tar", "--registry", "r.example", "--output-dir", "-"), "--output-dir"),
        (("status", "b.tar", "--registry", "r.example", "--export-have", "-"), "--export-have"),
    ):
        result = run_airgap(*args, cwd=work)
        assert_clean_failure(result, 2, option, "'-' (standard output) is not supported")
    assert list(work.iterdir()) == []
    named = run_airgap("keygen", "./-", cwd=work)  # a file called '-' is still possible
    assert named.returncode == 0, named.stderr
    assert sorted(p.name for p in work.iterdir()) == ["-", "-.pub"]


@pytest.mark.e2e
def test_a_registry_given_as_an_http_url_is_reached_over_plain_http(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """``--registry http://HOST/x`` was stripped of its scheme and tried over TLS: on
    loopback a probe then fell back to HTTP, anywhere else the import failed. The URL's
    scheme is now what it says (the decision below; the import shows it end to end)."""
    assert plain_http_for("http://r.example/x", False)
    assert not plain_http_for("r.example/x", False) and plain_http_for("r.example/x", True)
    assert not plain_http_for("HTTPS://r.example/x", False)
    registry = registry_factory("plain")
    args = capi_bundle.import_args(f"http://{registry.host}/capi")
    result = run_airgap("--debug", *args, "-q")
    assert result.returncode == 0, result.stderr
    assert f"http://{registry.host}/v2/" in result.stderr
    assert "https://" not in result.stderr


@pytest.mark.e2e
def test_a_password_on_stdin_is_read_to_a_bound(tmp_path: Path, signing_key: SigningKey) -> None:
    """``--password-stdin`` read a whole line, so an endless pipe without a newline was
    read into memory; a password over 64 KiB is refused before anything else is done."""
    bundle = tmp_path / "absent.tar"
    args = ("import", bundle, "--key", signing_key.public, "--registry", "127.0.0.1:1/x")
    result = run_airgap(
        *args, "--username", "u", "--password-stdin", input="p" * (1 << 20), timeout=60
    )
    assert_clean_failure(result, 2, "--password-stdin", "longer than 65536 characters")
    # a password of the longest size passes on to the next check (the missing bundle)
    result = run_airgap(*args, "--username", "u", "--password-stdin", input="p" * 65536 + "\n")
    assert_clean_failure(result, 2, str(bundle))


# -- policy files: FILE:LINE ----------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "forbiddenTags: [latest]\nallowedRegistry: [registry.k8s.io]\n",
            ":2: unknown key 'allowedRegistry' (did you mean allowedRegistries?",
        ),
        ("requireDigests: true\nmaxAge: 30 days\n", ":2: maxAge: must look like 30d"),
        # a string of 5,000 digits (not a YAML number, whose length is bounded) was a
        # traceback from int(); 12 digits of weeks are past timedelta's range
        (f"requireDigests: true\nmaxAge: {'9' * 5000}d\n", ":2: maxAge: must look like 30d"),
        (
            "requireDigests: true\nmaxAge: 999999999999w\n",
            ":2: maxAge: '999999999999w' is too large",
        ),
        (
            "requiredPlatforms:\n  - linux/amd64\n  - amd64\n",
            ":3: requiredPlatforms[1]: 'amd64' is not os/arch",
        ),
        ("\n\nforbiddenTags: latest\n", ":3: forbiddenTags: must be a list of strings"),
        ("requiredProviderTypes: [CoreProvider,\n  Nope]\n", ":2: requiredProviderTypes[1]:"),
        ("- a\n- b\n", ":1: a policy is a mapping of rules"),
    ],
)
def test_policy_errors_name_file_and_line(tmp_path: Path, content: str, expected: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_policy(policy)
    assert str(caught.value).startswith(f"{policy}{expected}"), str(caught.value)


@pytest.mark.e2e
def test_policy_error_through_the_cli(tmp_path: Path, signing_key: SigningKey) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("requireDigests: true\nforbiddenTags: [latest]\nmaxAge: soon\n")
    result = run_airgap(
        "verify", tmp_path / "any.tar", "--key", signing_key.public, "--policy", policy
    )
    assert_clean_failure(result, 2, f"{policy}:3: maxAge:")


# -- version suggestions --------------------------------------------------------------


@pytest.mark.e2e
def test_a_version_without_its_v_gets_a_suggestion(
    tmp_path: Path, release_server: ReleaseServer, signing_key: SigningKey
) -> None:
    owner, repo = release_server.new_repo("cluster-api-provider-typo")
    files = {
        "metadata.yaml": make_metadata([(1, 9, "v1beta1")]).encode(),
        "infrastructure-components.yaml": make_components(
            ProviderType.INFRASTRUCTURE, "typo-system", ["registry.invalid/typo:v1"]
        ).encode(),
    }
    for tag in ("v1.9.3", "v1.9.4"):
        release_server.add_release(owner, repo, tag, files)
    url = release_server.repo_url(owner, repo)
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "providers": [
                {"name": "typo", "type": "InfrastructureProvider", "version": "1.9.4", "url": url}
            ]
        },
    )
    result = run_airgap(
        *collect_args(spec, signing_key.private, tmp_path / "o.tar"),
        env={"GITHUB_API_URL": release_server.api_url},
    )
    line = assert_clean_failure(result, 1, "release 1.9.4 not found")
    assert line.endswith("did you mean v1.9.4?"), line


# -- retries ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecordingPolicy(airgap_http.RetryPolicy):
    delays: list[float] = dataclasses.field(default_factory=list, compare=False, hash=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        chosen = super().delay(attempt, retry_after)
        self.delays.append(chosen)
        return chosen


@pytest.mark.unit
def test_a_name_that_does_not_resolve_is_not_retried() -> None:
    policy = RecordingPolicy(attempts=5, base_delay=0.01)
    with httpx.Client() as client, pytest.raises(NetworkError) as caught:
        airgap_http.send(
            client,
            lambda: client.build_request("GET", "https://registry.invalid/v2/"),
            policy=policy,
        )
    assert policy.delays == []  # no wait chosen: no second attempt
    assert "registry.invalid" in str(caught.value)
    assert "cannot resolve the host name" in str(caught.value)


@pytest.mark.integration
def test_a_certificate_or_protocol_mismatch_is_not_retried(
    plain_registry: object,
) -> None:
    host = plain_registry.host  # type: ignore[attr-defined]
    policy = RecordingPolicy(attempts=5, base_delay=0.01)
    with httpx.Client() as client, pytest.raises(NetworkError):
        airgap_http.send(  # TLS spoken to a plain-HTTP registry: the handshake fails
            client, lambda: client.build_request("GET", f"https://{host}/v2/"), policy=policy
        )
    assert policy.delays == []


@pytest.mark.integration
def test_a_dropped_connection_is_still_retried() -> None:
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def drop() -> None:  # accept and close at once, every time
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=drop, daemon=True).start()
    policy = RecordingPolicy(attempts=3, base_delay=0.01)
    try:
        with httpx.Client() as client, pytest.raises(NetworkError):
            airgap_http.send(
                client,
                lambda: client.build_request("GET", f"http://127.0.0.1:{port}/"),
                policy=policy,
            )
    finally:
        server.close()
    assert len(policy.delays) == 2


@pytest.mark.unit
def test_backoff_is_jittered_so_workers_do_not_retry_in_lockstep() -> None:
    policy = airgap_http.RetryPolicy(base_delay=1.0, max_delay=100.0)
    for attempt in range(4):
        waits = {policy.delay(attempt) for _ in range(50)}
        full = 2.0**attempt
        assert all(full * (1 - policy.jitter) <= w <= full for w in waits)
        assert len(waits) > 40  # spread, not one value
    after = {policy.delay(0, retry_after=3.0) for _ in range(50)}
    assert all(3.0 <= w <= 3.0 * (1 + policy.jitter) for w in after)  # never sooner
    assert len(after) > 40
    capped = airgap_http.RetryPolicy(max_delay=2.0)
    assert {capped.delay(0, retry_after=3600.0) for _ in range(10)} == {2.0}


# -- closed pipes ---------------------------------------------------------------------


def _run_into_closed_pipe(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run airgap with stdout a pipe whose reader is already gone (``| head -0``)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            [*AIRGAP, *map(str, args)],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(writer)


@pytest.mark.e2e
def test_output_into_a_closed_pipe_exits_0_quietly(capi_bundle: CollectedBundle) -> None:
    key = capi_bundle.key.public
    for args in (
        ("import", capi_bundle.path, "--key", key, "--registry", "r.local/x", "--dry-run"),
        ("inspect", capi_bundle.path),
        ("verify", capi_bundle.path, "--key", key, "--format", "json"),
    ):
        result = _run_into_closed_pipe(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stderr == "", args
    shell = subprocess.run(
        [
            "bash",
            "-c",
            'set -o pipefail; "$@" | head -1 >/dev/null',
            "sh",
            *AIRGAP,
            "import",
            str(capi_bundle.path),
            "--key",
            str(key),
            "--registry",
            "r.local/x",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shell.returncode == 0 and shell.stderr == "", shell.stderr


# -- tables -----------------------------------------------------------------------------


@pytest.mark.e2e
def test_tables_fit_100_columns_and_wide_shows_everything(capi_bundle: CollectedBundle) -> None:
    manifest = capi_bundle.manifest
    long_host = "registry.example.corporation.internal:5000/platform/mirrors/k8s"
    images = [
        dataclasses.replace(
            image,
            reference=f"{long_host}/{image.reference.split('/', 1)[1].split('@')[0]}@{image.digest}",
        )
        for image in manifest.images
    ]
    wide_manifest = dataclasses.replace(manifest, images=images)
    narrow = inventory_tables(wide_manifest)
    assert max(len(line) for line in narrow.splitlines()) <= 100, narrow
    for image in images:
        assert image.digest not in narrow
        assert image.digest[:19] in narrow  # sha256: and 12 hex digits
    full = inventory_tables(wide_manifest, wide=True)
    for image in images:
        assert image.reference in full and image.digest in full
    result = run_airgap("inspect", capi_bundle.path)
    tables = result.stdout.splitlines()[1:]  # below the line naming the bundle's path
    assert tables and max(len(line) for line in tables) <= 100
    assert capi_bundle.manifest.images[0].digest not in result.stdout
    wide = run_airgap("inspect", capi_bundle.path, "--wide").stdout
    assert all(image.digest in wide for image in capi_bundle.manifest.images)
    verified = run_airgap("verify", capi_bundle.path, "--key", capi_bundle.key.public, "--wide")
    assert all(image.digest in verified.stdout for image in capi_bundle.manifest.images)


# -- packaging --------------------------------------------------------------------------


@pytest.mark.integration
def test_the_build_emits_no_setuptools_warnings(tmp_path: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"  # an SPDX expression, not a table
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "*.egg-info", "build", "__pycache__", "demo-out", "tests"
        ),
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-v",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    output = result.stdout + result.stderr
    for warning in ("SetuptoolsDeprecationWarning", "BuildBackendWarning", "SetuptoolsWarning"):
        assert warning not in output, output[-3000:]
    assert list((tmp_path / "dist").glob("airgap-*.whl"))
