"""Variables filled, not only templated: ``--variables FILE`` and the environment.

clusterctl's precedence (environment over the config file, an empty environment
variable counting as set, case-insensitive file keys) is checked on the parser; the
rest goes through the real CLI on a real bundle: values land in the providers' config
Secrets (mode 0600 even under umask 000), the required variables nobody set are named
in one warning line (exit 0), and no value appears in any other file, in stdout or
stderr, or in ``import-report.json``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.configmaps.variables import VariableValues, load_variables, parse_variables
from airgap.core.errors import InputError
from airgap.core.limits import MAX_VARIABLES_BYTES
from airgap.providers.types import ProviderType
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.registry import RegistryFactory
from tests.schemas import validate_kubernetes

TARGET = "registry.local:5000/capi"
SECRET_VALUE = "s3cr3t-Cred: 'x' \"y\" # not a comment"
LOG_VALUE = "5"
# every provider of the capi bundle requires PROVIDER_CREDENTIALS and has these optional
# ones (tests/harness/releases.make_components)
TOUCHED = ("PROVIDER_CREDENTIALS", "LOG_LEVEL", "EXP_MACHINE_POOL", "CLUSTER_TOPOLOGY")


# --- the file and the precedence (pure) --------------------------------------------------


@pytest.mark.unit
def test_file_values_as_clusterctl_reads_them(tmp_path: Path) -> None:
    text = (
        "# a clusterctl.yaml: variables and configuration side by side\n"
        "PROVIDER_CREDENTIALS: plain text\n"
        'QUOTED: "yes"\n'
        "YES_STRING: yes\n"  # YAML 1.2 (viper): a string, not a boolean
        "BOOL: True\n"  # a boolean: viper hands clusterctl "true"
        "NUMBER: 0042\n"  # taken as written
        "EMPTY: ''\n"  # set, to the empty string
        "UNSET:\n"  # null: not set at all
        "MULTI: |\n  line one\n  line two\n"
        "providers:\n  - {name: x, url: 'file:///x', type: InfrastructureProvider}\n"
        "images:\n  all: {repository: r.local}\n"
        "cert-manager: {version: v1.16.1}\n"
    )
    assert parse_variables(text, tmp_path / "v.yaml") == {
        "PROVIDER_CREDENTIALS": "plain text",
        "QUOTED": "yes",
        "YES_STRING": "yes",
        "BOOL": "true",
        "NUMBER": "0042",
        "EMPTY": "",
        "MULTI": "line one\nline two\n",
    }


@pytest.mark.unit
def test_environment_wins_over_the_file_and_the_fallback_comes_last() -> None:
    values = VariableValues.from_sources(
        {"Log_Level": "from-file", "ONLY_FILE": "f", "OCI_USERNAME": "file-user"},
        {"LOG_LEVEL": "from-env", "EMPTY": ""},
    ).with_fallback({"OCI_USERNAME": "import-user", "OCI_PASSWORD": "import-pass"}.get)
    assert values.get("LOG_LEVEL") == "from-env"  # clusterctl: environment first
    assert values.get("log_level") == "from-env"  # viper upper-cases for the environment
    assert values.get("ONLY_FILE") == "f"
    assert values.get("EMPTY") == ""  # AllowEmptyEnv: an empty variable is set
    assert values.get("OCI_USERNAME") == "file-user"  # given variables beat the import's
    assert values.get("OCI_PASSWORD") == "import-pass"
    assert values.get("NOBODY") is None
    assert repr(values) == "VariableValues(<3 from a file, the environment>)"  # no value


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- a\n- b\n", "expected a mapping"),
        ("A: 1\na: 2\n", "v.yaml:2: variable a is given twice"),
        ("? [x]\n: 1\n", "v.yaml:1: every key must be a variable name"),
        ("A: 'unterminated s3cr3t\n", "v.yaml:"),
        ("A: [s3cr3t\n", "not valid YAML"),
        ("A: " + "[" * 100 + "]" * 100 + "\n", "nested deeper"),
        (
            "A: &a [s3cr3t, s3cr3t]\nB: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
            + "".join(
                f"C{i}: &c{i} [{', '.join(['*b' if i == 0 else f'*c{i - 1}'] * 9)}]\n"
                for i in range(6)
            ),
            "nodes",
        ),
    ],
)
def test_bad_files_fail_naming_file_and_line_never_a_value(
    tmp_path: Path, text: str, needle: str
) -> None:
    with pytest.raises(InputError) as info:
        parse_variables(text, tmp_path / "v.yaml")
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert "s3cr3t" not in message


@pytest.mark.unit
def test_the_file_is_bounded_and_must_be_a_regular_utf8_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("A: " + "x" * MAX_VARIABLES_BYTES + "\n")
    with pytest.raises(InputError, match="larger than"):
        load_variables(big)
    with pytest.raises(InputError, match="not a regular file"):
        load_variables(tmp_path)
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes(b"A: caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_variables(binary)
    with pytest.raises(InputError, match="not found"):
        load_variables(tmp_path / "missing.yaml")


# --- through the CLI ----------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables the tests set must not come from the developer's environment."""
    for name in (*TOUCHED, "OCI_USERNAME", "OCI_PASSWORD", "OCI_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def secrets_of(out: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((out / "operator/02-provider-configmaps/secrets").iterdir()):
        secret = yaml.safe_load(path.read_text())
        validate_kubernetes(secret)
        found[path.name] = secret
    return found


def other_files(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.is_file() and p.parent.name != "secrets"]


def configmaps(
    bundle: CollectedBundle, out: Path, *extra: str | Path, env: dict[str, str] | None = None
) -> Any:
    return run_airgap(
        "configmaps",
        bundle.path,
        "--key",
        bundle.key.public,
        "--registry",
        TARGET,
        "--output-dir",
        out,
        *extra,
        env=env,
    )


def under_umask_000(function: Any) -> Any:
    old = os.umask(0)
    try:
        return function()
    finally:
        os.umask(old)


@pytest.mark.e2e
def test_values_from_file_and_environment_fill_the_secrets(
    capi_bundle: CollectedBundle, tmp_path: Path, clean_env: None
) -> None:
    variables = tmp_path / "vars.yaml"
    variables.write_text(
        yaml.safe_dump(
            {"PROVIDER_CREDENTIALS": SECRET_VALUE, "LOG_LEVEL": "3", "UNRELATED": "u-n-r-e-l"}
        )
    )
    out = tmp_path / "out"
    result = under_umask_000(
        lambda: configmaps(capi_bundle, out, "--variables", variables, env={"LOG_LEVEL": LOG_VALUE})
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr  # every required variable has a value
    secrets = secrets_of(out)
    providers = {(r.type, r.name) for r in capi_bundle.manifest.providers}
    assert len(secrets) == len(providers)
    for name, secret in secrets.items():
        data = secret["stringData"]
        assert data["PROVIDER_CREDENTIALS"] == SECRET_VALUE, name
        assert data["LOG_LEVEL"] == LOG_VALUE  # the environment beats the file
        assert data["EXP_MACHINE_POOL"] == "true"  # nobody set it: the default
        assert "UNRELATED" not in data  # only the variables the components use
        path = out / "operator/02-provider-configmaps/secrets" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for path in other_files(out):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
        assert SECRET_VALUE.encode() not in path.read_bytes(), path
        assert b"s3cr3t" not in path.read_bytes(), path
    assert "s3cr3t" not in result.stdout + result.stderr


@pytest.mark.e2e
def test_missing_required_variables_are_named_in_one_warning(
    capi_bundle: CollectedBundle, tmp_path: Path, clean_env: None
) -> None:
    out = tmp_path / "out"
    result = configmaps(capi_bundle, out)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("airgap: warning: required variables not set")
    for record in capi_bundle.manifest.providers:
        kind = ProviderType.parse(record.type).kind
        assert f"{kind} {record.name}: PROVIDER_CREDENTIALS" in line
    assert "--variables" in line
    for secret in secrets_of(out).values():
        assert "PROVIDER_CREDENTIALS" not in secret["stringData"]  # commented out


@pytest.mark.e2e
def test_import_takes_the_same_flag_and_reports_names_only(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    tmp_path: Path,
    clean_env: None,
) -> None:
    registry = registry_factory("plain")
    variables = tmp_path / "vars.yaml"
    variables.write_text(yaml.safe_dump({"LOG_LEVEL": "s3cr3t-log-level"}))
    out = tmp_path / "out"
    result = under_umask_000(
        lambda: run_airgap(
            *capi_bundle.import_args(f"{registry.host}/capi"),
            "--output-dir",
            out,
            "--variables",
            variables,
            "-q",
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("\n") == 1 and "PROVIDER_CREDENTIALS" in result.stderr
    again = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/capi"),
        *("--output-dir", out, "--variables", variables, "-q"),
    )
    assert again.stderr == result.stderr  # the same warning, in the same order, from the record
    for name, secret in secrets_of(out).items():
        assert secret["stringData"]["LOG_LEVEL"] == "s3cr3t-log-level"
        secret_file = out / "operator/02-provider-configmaps/secrets" / name
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    report = json.loads((out / "import-report.json").read_text())
    missing = report["variables_missing"]
    assert missing and all(names == ["PROVIDER_CREDENTIALS"] for names in missing.values())
    for path in other_files(out):
        assert b"s3cr3t" not in path.read_bytes(), path
    assert "s3cr3t" not in result.stdout + result.stderr


@pytest.mark.e2e
def test_a_bad_variables_file_fails_before_anything_is_written(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    variables = tmp_path / "vars.yaml"
    variables.write_text("PROVIDER_CREDENTIALS: s3cr3t\nPROVIDER_CREDENTIALS: s3cr3t-2\n")
    out = tmp_path / "out"
    result = configmaps(capi_bundle, out, "--variables", variables)
    line = assert_clean_failure(result, 2, f"{variables}:2", "given twice")
    assert "s3cr3t" not in line
    assert not out.exists()
    result = configmaps(capi_bundle, out, "--variables", tmp_path / "nope.yaml")
    assert_clean_failure(result, 2, "nope.yaml")
    assert not out.exists()
