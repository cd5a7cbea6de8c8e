"""The offline installer (issue 44): built from PyPI once per session, carried in a
bundle, checked with openssl and sha256sum as the README says, installed with the
system Python in a network namespace with loopback only, and used there to verify and
import into a registry started in that namespace."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from airgap import __version__
from airgap.bundle.format import FileRecord
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.reader import read_head
from airgap.installer import targets
from airgap.installer.build import _install_script
from airgap.installer.origin import ORIGIN_FILE, origin_line
from airgap.installer.targets import DEFAULT_MACHINES, DEFAULT_PYTHONS, OptionalDependency, Target
from airgap.installer.wheels import Wheelhouse, download
from airgap.verify.installer import check_installer
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import publish_capi, write_spec
from tests.harness.cli import assert_clean_failure, collect_args, run_airgap
from tests.harness.images import TestImage
from tests.harness.releases import ReleaseServer

ROOT = Path(__file__).resolve().parents[1]
TOP = f"airgap-installer-{__version__}"
NAME = f"{TOP}.tar"
MEMBER = f"installer/{NAME}"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's 3.11, with python3-venv
BUILD_TIMEOUT = 1200  # seconds: pip's own timeouts end an unreachable index well before
PREFIX = ".local/share/airgap"  # install.sh's default, under HOME


@pytest.fixture(scope="session")
def offline_installer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One installer for the whole session, from PyPI at constraints.txt's versions."""
    output = tmp_path_factory.mktemp("installer") / NAME
    try:
        result = run_airgap(
            "installer",
            "-o",
            output,
            "--constraint",
            ROOT / "constraints.txt",
            "-q",
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"airgap installer did not finish in {BUILD_TIMEOUT}s", pytrace=False)
    if result.returncode != 0:
        pytest.fail(
            "building the offline installer needs the package index (PyPI): "
            + result.stderr.strip(),
            pytrace=False,
        )
    return output


@pytest.fixture(scope="session")
def installer_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
    offline_installer: Path,
) -> CollectedBundle:
    directory = tmp_path_factory.mktemp("installer-bundle")
    providers = publish_capi(release_server, source_images)
    spec = write_spec(directory / "capi.yaml", providers.spec)
    output = directory / "capi.tar"
    result = run_airgap(
        *collect_args(spec, signing_key.private, output),
        "--with-installer",
        offline_installer,
        env=providers.env,
    )
    assert result.returncode == 0, result.stderr
    return CollectedBundle(output, signing_key, providers, read_head(output).manifest)


def readme_commands() -> str:
    """The README's far-side commands, verbatim."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Installing airgap on the disconnected side\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", section, re.S)
    return next(block for block in blocks if "openssl pkeyutl" in block)


def readme_checks() -> str:
    """The README's commands up to the sha256sum check: nothing of airgap runs."""
    lines = readme_commands().splitlines()
    last = next(n for n, line in enumerate(lines) if "sha256sum -c" in line)
    return "\n".join(lines[: last + 1]) + "\n"


def extract(archive: Path, directory: Path) -> None:
    """``tar -xf``, as the user does."""
    subprocess.run(["tar", "-xf", str(archive)], cwd=directory, check=True, timeout=120)


def host_env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_offline(plan: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Run the plan's steps in a new network namespace (loopback only)."""
    plan_path = tmp_path / "plan.json"
    plan["result"] = str(tmp_path / "result.json")
    plan_path.write_text(json.dumps(plan))
    inside = 'ip link set lo up && exec "$0" -m tests.harness.offline_host "$1"'
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", inside, sys.executable, str(plan_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(Path(plan["result"]).read_text()))


def state_script() -> str:
    """What an installation is: its packages, its installer record, its commands."""
    return (
        f'p="$HOME/{PREFIX}"; "$p/bin/python" -m pip freeze --all; '
        f'sha256sum "$p/{ORIGIN_FILE}"; ls "$p/bin"'
    )


@pytest.mark.e2e
def test_disconnected_host_checks_installs_verifies_and_imports(
    installer_bundle: CollectedBundle, tmp_path: Path
) -> None:
    work, home = tmp_path / "host", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    shutil.copy(installer_bundle.path, work / "capi.tar")
    shutil.copy(installer_bundle.key.public, work / "signing.pub")
    env = host_env(home)
    # every way out a tool might take leads to a loopback listener that counts callers
    trapped = {**env, "PIP_INDEX_URL": "http://@TRIPWIRE@/simple/"}
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        trapped[name] = "http://@TRIPWIRE@"
    airgap = f'"$HOME/{PREFIX}/bin/airgap"'
    steps = [
        ("readme", readme_commands(), trapped),
        ("state", state_script(), env),
        ("install again", f"{TOP}/install.sh", trapped),
        ("state again", state_script(), env),
        ("verify", f"{airgap} verify capi.tar --key signing.pub", env),
        (
            "import",
            f"{airgap} import capi.tar --key signing.pub --registry @REGISTRY@/capi "
            "--output-dir out",
            env,
        ),
    ]
    plan = {
        "work": str(work),
        "registry_dir": str(tmp_path / "registry"),
        "steps": [{"name": n, "script": s, "env": e} for n, s, e in steps],
    }
    outcome = run_offline(plan, tmp_path)
    results = {step["name"]: step for step in outcome["steps"]}
    for name, step in results.items():
        assert step["returncode"] == 0, (name, step["stdout"], step["stderr"])
    readme = results["readme"]["stdout"]
    assert "Signature Verified Successfully" in readme
    assert f"{MEMBER}: OK" in readme
    assert f"airgap {__version__}\ninstalled from {NAME} (airgap {__version__}, built " in readme
    assert "creating the virtualenv" in results["readme"]["stderr"]
    # the second run changes nothing and makes nothing anew
    assert "creating the virtualenv" not in results["install again"]["stderr"]
    assert results["state"]["stdout"] == results["state again"]["stdout"]
    assert "airgap==" in results["state"]["stdout"]
    assert results["verify"]["stdout"].startswith("Bundle verified: signed by ")
    assert (work / "out" / "import-report.json").is_file()
    assert outcome["tripwire"] == 0, "something tried the network"


@pytest.mark.e2e
def test_collect_carries_the_installer_as_a_signed_member(
    installer_bundle: CollectedBundle, offline_installer: Path
) -> None:
    records = {f.path: f for f in installer_bundle.manifest.files}
    record = records[MEMBER]
    assert record.size == offline_installer.stat().st_size
    with tarfile.open(installer_bundle.path) as tar:
        names = tar.getnames()
        assert names[:3] == ["airgap-bundle.json", "airgap-bundle.json.sig", MEMBER]
    result = run_airgap("verify", installer_bundle.path, "--key", installer_bundle.key.public)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = run_airgap("inspect", installer_bundle.path)
    assert f"\noffline installer: {MEMBER} (" in shown.stdout, shown.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("damage", ["installer", "manifest", "resigned"])
def test_a_tampered_installer_fails_the_readme_checks(
    installer_bundle: CollectedBundle, offline_installer: Path, tmp_path: Path, damage: str
) -> None:
    work = tmp_path / "host"
    work.mkdir()
    shutil.copy(installer_bundle.key.public, work / "signing.pub")
    bundle = work / "capi.tar"
    if damage == "installer":  # one bit of one wheel: the signed sha256 no longer matches
        tamper.flip_byte(installer_bundle.path, bundle, MEMBER)
        expected = f"{MEMBER}: FAILED"
    elif damage == "manifest":  # the manifest's bytes no longer match the signature
        tamper.flip_byte(installer_bundle.path, bundle, "airgap-bundle.json", offset=40)
        expected = "Signature Verification Failure"
    else:  # altered and re-signed consistently, by a key the user does not trust
        untrusted, _ = tamper.new_key(tmp_path)
        data = bytearray(offline_installer.read_bytes())
        data[len(data) // 2] ^= 1
        tamper.resign(installer_bundle.path, bundle, untrusted, replace={MEMBER: bytes(data)})
        expected = "Signature Verification Failure"
    result = subprocess.run(
        ["/bin/sh", "-ec", readme_checks()],
        cwd=work,
        env=host_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0, result.stdout
    assert expected in result.stdout + result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("machine", DEFAULT_MACHINES)
@pytest.mark.parametrize("python", DEFAULT_PYTHONS)
def test_each_targets_wheels_install_without_an_index(
    offline_installer: Path, tmp_path: Path, machine: str, python: str
) -> None:
    extract(offline_installer, tmp_path)
    target = Target(machine, python)
    options = target.pip_options()
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--no-index",
        "--disable-pip-version-check",
        "--find-links",
        str(tmp_path / TOP / "wheels"),
        "--target",
        str(tmp_path / "target"),
        "--report",
        str(tmp_path / "report.json"),
        *options,
        f"airgap=={__version__}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    names = {item["metadata"]["name"].lower() for item in report["install"]}
    assert {"airgap", "click", "httpx", "pyyaml", "cryptography", "rich"} <= names
    record = json.loads((tmp_path / TOP / "installer.json").read_text())
    wheels = {Path(item["download_info"]["url"]).name for item in report["install"]}
    assert wheels <= set(record["targets"][f"{machine}/{python}"])


@pytest.mark.e2e
def test_install_refuses_a_missing_or_unsupported_python_in_one_line(
    offline_installer: Path, tmp_path: Path
) -> None:
    extract(offline_installer, tmp_path)
    script = str(tmp_path / TOP / "install.sh")
    fakes = {}  # interpreters that answer install.sh's question as these would
    for name, answer in [
        ("python3.10", "cpython 3.10 x86_64 glibc 2.36"),
        ("centos7-python3", "cpython 3.11 x86_64 glibc 2.17"),
        ("alpine-python3", "cpython 3.11 x86_64 none 0"),
    ]:
        fakes[name] = tmp_path / name
        fakes[name].write_text(
            f'#!/bin/sh\ncase "$*" in *implementation*) echo "{answer}" ;; esac\n'
        )
        fakes[name].chmod(0o755)
    blocker = tmp_path / "blocker"
    (blocker / "ensurepip").mkdir(parents=True)
    (blocker / "ensurepip" / "__init__.py").write_text("raise ImportError('not packaged')\n")
    bare = tmp_path / "bare-python3"
    bare.write_text(f'#!/bin/sh\nPYTHONPATH={blocker} exec {SYSTEM_PYTHON} "$@"\n')
    bare.chmod(0o755)
    cases = [
        (str(tmp_path / "nowhere" / "python3"), "install.sh: error: no ", "found"),
        (
            str(fakes["python3.10"]),
            "is Python 3.10; this installer holds wheels for CPython 3.11 3.12 3.13",
            "",
        ),
        (str(fakes["centos7-python3"]), "runs on glibc 2.17; the wheels here need glibc 2.28", ""),
        (str(fakes["alpine-python3"]), "runs on a C library other than glibc", ""),
        (str(bare), "has no venv module with ensurepip", "python3-venv"),
    ]
    for python, *needles in cases:
        env = {**host_env(tmp_path), "PYTHON": python}
        result = subprocess.run(
            [script, str(tmp_path / "prefix")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        line = assert_clean_failure(result, 1, *[n for n in needles if n])
        assert line.startswith("install.sh: error: ")
        assert not (tmp_path / "prefix").exists()


@pytest.mark.e2e
def test_verify_refuses_an_installer_member_named_otherwise(
    installer_bundle: CollectedBundle, tmp_path: Path
) -> None:
    bundle = tamper.resign(
        installer_bundle.path,
        tmp_path / "renamed.tar",
        installer_bundle.key.private,
        rename={MEMBER: "installer/evil.sh"},
    )
    result = run_airgap("verify", bundle, "--key", installer_bundle.key.public)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "installer: installer/evil.sh: 'evil.sh' is not named airgap-installer-VERSION.tar" in (
        result.stdout + result.stderr
    )


@pytest.mark.e2e
def test_check_installer_allows_one_installer_only(installer_bundle: CollectedBundle) -> None:
    manifest: BundleManifest = installer_bundle.manifest
    assert check_installer(manifest) == []
    record = next(f for f in manifest.files if f.path == MEMBER)
    twice = FileRecord("installer/airgap-installer-0.0.9.tar", record.sha256, record.size)
    failures = check_installer(dataclasses.replace(manifest, files=[*manifest.files, twice]))
    assert [str(f) for f in failures] == ["installer: installer: holds 2 installers, not one"]


@pytest.mark.e2e
def test_collect_refuses_a_file_that_is_not_an_installer(
    signing_key: SigningKey, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("images:\n  - registry.k8s.io/pause:3.9\n")  # never fetched
    wrong_name = tmp_path / "tools.tar"
    wrong_name.write_bytes(b"")
    result = run_airgap(
        *collect_args(spec, signing_key.private, tmp_path / "b.tar"),
        "--with-installer",
        wrong_name,
    )
    assert_clean_failure(result, 2, "is not named airgap-installer-VERSION.tar")
    not_tar = tmp_path / NAME
    not_tar.write_bytes(b"not a tar\n" * 100)
    result = run_airgap(
        *collect_args(spec, signing_key.private, tmp_path / "b.tar"),
        "--with-installer",
        not_tar,
    )
    assert_clean_failure(result, 2, "not a readable tar")
    assert not (tmp_path / "b.tar").exists()


@pytest.mark.unit
def test_version_names_the_installer_it_came_from(tmp_path: Path) -> None:
    assert origin_line(tmp_path) is None
    record = {
        "installer": NAME,
        "airgapVersion": __version__,
        "created": "2026-11-28T16:31:12Z",
        "wheelsSha256": "729212dadb6a" + "0" * 52,
    }
    (tmp_path / ORIGIN_FILE).write_text(json.dumps(record))
    assert origin_line(tmp_path) == (
        f"installed from {NAME} (airgap {__version__}, built 2026-11-28T16:31:12Z, "
        "wheels sha256:729212dadb6a)"
    )
    (tmp_path / ORIGIN_FILE).write_text('["\\u001b[31m"]')
    line = origin_line(tmp_path)
    assert line is not None and "unreadable" in line


@pytest.mark.e2e
def test_an_optional_dependency_is_carried_where_it_has_wheels_and_named_where_not(
    offline_installer: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """install.sh as build renders it for a platform-limited dependency: installed
    where the target carries it, a note of what is lost where it does not."""
    carried = OptionalDependency("rich", "airgap's coloured tables")  # in the wheels
    lacking = OptionalDependency("helm-python-sdk", "airgap collect cannot render charts")
    monkeypatch.setattr(targets, "OPTIONAL_DEPENDENCIES", (carried, lacking))
    extract(offline_installer, tmp_path)
    top = tmp_path / TOP
    house = Wheelhouse(top / "wheels")
    host = Target("x86_64", "3.11")  # /usr/bin/python3 on this machine
    house.by_target = {host: [], Target("aarch64", "3.11"): []}
    house.missing = {host: [lacking]}
    script = top / "install.sh"
    script.write_bytes(_install_script(("x86_64", "aarch64"), ("3.11",), house))
    env = {**host_env(tmp_path), "PYTHON": SYSTEM_PYTHON}
    result = subprocess.run(
        [str(script), str(tmp_path / "prefix")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "install.sh: note: on x86_64 helm-python-sdk has no wheel: "
        "airgap collect cannot render charts\n"
    ) in result.stderr
    text = script.read_text()
    assert "  x86_64/3.11) optional=rich; notes='helm-python-sdk has no wheel: " in text
    assert "  aarch64/3.11) optional='rich helm-python-sdk'; notes='' ;;" in text


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("option", "needle"),
    [("--machine=sparc", "--machine 'sparc': expected one of"), ("--python=3.9", "3.11 or newer")],
)
def test_installer_refuses_an_unknown_target_in_one_line(
    tmp_path: Path, option: str, needle: str
) -> None:
    result = run_airgap("installer", "-o", tmp_path / NAME, option)
    assert_clean_failure(result, 2, needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_a_target_without_an_optional_dependencys_wheel_is_noted_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's "no matching distribution" for an optional dependency (from PyPI) is a
    note on that target, while its required wheels are still carried."""
    absent = OptionalDependency("six==0.0.0.1", "nothing: no such release exists")
    monkeypatch.setattr(targets, "OPTIONAL_DEPENDENCIES", (absent,))
    house = Wheelhouse(tmp_path / "wheels")
    house.directory.mkdir()
    target = Target("aarch64", "3.12")
    download(house, target, tmp_path / "scratch", ROOT / "constraints.txt")
    assert house.missing == {target: [absent]}
    assert any(name.startswith("pyyaml-") and "aarch64" in name for name in house.by_target[target])


@pytest.mark.e2e
def test_installer_without_the_index_fails_in_one_line(tmp_path: Path) -> None:
    """No network at all (a fresh namespace, not even loopback up), no pip cache: one
    line naming the target and pip's reason, in bounded time, nothing written."""
    command = [
        "unshare",
        "-n",
        sys.executable,
        "-c",
        "from airgap.cli import main; main()",
        "installer",
        "-o",
        str(tmp_path / NAME),
        "--machine",
        "x86_64",
        "--python",
        "3.12",
    ]
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1"}
    result = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert_clean_failure(
        result,
        1,
        "pip could not download the wheels for linux/x86_64 CPython 3.12: "
        "the package index is unreachable (",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_verify_and_import_start_without_the_installers_tar_reader() -> None:
    """The installer member check costs verify and import no start-up: tarfile (and
    its imports) load for collect --with-installer alone."""
    probe = (
        "import sys, airgap.cli, airgap.verify.bundle, airgap.importing.importer; "
        "print('tarfile' in sys.modules, 'airgap.installer.member' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True"]
