"""``airgap import`` as the tests run it: the arguments for a test registry (its CA, its
user with the password on stdin) and the report an import writes.

The import tests of collected, management and supply-chain bundles share these rather
than each keeping a copy; what differs between them (repository prefix, ``-q``, the
cache directory) is a parameter.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Protocol, cast

from tests.harness.cli import run_airgap
from tests.harness.registry import RegistryServer


class ImportableBundle(Protocol):
    """A bundle that knows the start of its own import command (CollectedBundle,
    ManagementBundle)."""

    def import_args(self, registry: str) -> list[str | Path]: ...


def import_args(
    bundle: ImportableBundle, registry: RegistryServer, prefix: str, out: Path, *extra: str | Path
) -> list[str | Path]:
    """``import BUNDLE --key PUB --registry HOST/PREFIX --output-dir OUT EXTRA...`` plus
    the registry's CA and, when it has a user, ``--username U --password-stdin``."""
    args = [*bundle.import_args(f"{registry.host}/{prefix}"), "--output-dir", out, *extra]
    if registry.ca_file:
        args += ["--ca-file", registry.ca_file]
    if registry.username:
        args += ["--username", registry.username, "--password-stdin"]
    return args


def run_import(
    bundle: ImportableBundle, registry: RegistryServer, prefix: str, out: Path, *extra: str | Path
) -> subprocess.CompletedProcess[str]:
    """Import ``bundle`` into ``registry`` under ``prefix``, the password on stdin."""
    return run_airgap(
        *import_args(bundle, registry, prefix, out, *extra),
        input=f"{registry.password}\n" if registry.username else None,
    )


def quiet_import(
    bundle: Path,
    public_key: Path,
    target: str,
    *extra: str | Path,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``import BUNDLE --key PUB --registry TARGET -q EXTRA...``; the test inspects it."""
    return run_airgap(
        "import", bundle, "--key", public_key, "--registry", target, "-q", *extra, env=env
    )


def import_report(
    bundle: Path, public_key: Path, target: str, out: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """A quiet import of ``bundle`` into ``target`` that must succeed; its
    import-report.json."""
    result = quiet_import(bundle, public_key, target, "--output-dir", out, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return cast(dict[str, Any], json.loads((out / "import-report.json").read_text()))
