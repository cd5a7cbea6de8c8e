"""Wheels for an offline installer, through pip (the running interpreter's): airgap's
own, built from its source, and every runtime dependency's for each target.

pip is the resolver of the field and the tool that installs them on the far side, so
the two sides agree on what a target needs. Every call is bounded: pip's own connect
and read timeout and retries, and a deadline for the whole call, so an unreachable
index is one clear error, never a hang.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from airgap import __version__
from airgap.core.errors import AirgapError, NetworkError
from airgap.installer import targets
from airgap.installer.targets import OptionalDependency, Target, required_dependencies

PIP_TIMEOUT = "20"  # seconds per connection attempt and read (pip --timeout)
PIP_RETRIES = "2"
CALL_DEADLINE = 900.0  # seconds for one pip call: a slow mirror, not a hung one
MAX_REASON_CHARS = 300
_NO_WHEEL = ("No matching distribution found", "Could not find a version that satisfies")


@dataclass
class Wheelhouse:
    """The wheels gathered in ``directory`` and which of them each target installs."""

    directory: Path
    by_target: dict[Target, list[str]] = field(default_factory=dict)
    missing: dict[Target, list[OptionalDependency]] = field(default_factory=dict)

    def add(self, target: Target, downloaded: Path) -> list[str]:
        """Move a target's downloads in (a wheel already there is the same file:
        wheel names are unique on an index) and note their names."""
        names = sorted(path.name for path in downloaded.glob("*.whl"))
        for name in names:
            destination = self.directory / name
            if not destination.exists():
                shutil.move(downloaded / name, destination)
        self.by_target.setdefault(target, []).extend(
            n for n in names if n not in self.by_target.get(target, [])
        )
        return names


def own_wheel(directory: Path) -> Path:
    """airgap's wheel, built with ``pip wheel --no-deps`` from the source it was
    installed from (``pip install DIR`` or ``-e DIR``), at the running version."""
    source = _source_directory()
    if source is None:
        raise AirgapError(
            "airgap installer builds airgap's own wheel from its source, and this "
            "installation does not record one: install airgap from a source directory "
            "(pip install DIR, or pip install -e DIR) and run it again"
        )
    options = ["wheel", "--no-deps", "-w", str(directory)]
    if importlib.util.find_spec("setuptools") is not None:  # else pip fetches it
        options.append("--no-build-isolation")
    run_pip([*options, str(source)], f"build airgap's wheel from {source}")
    wheel = directory / f"airgap-{__version__}-py3-none-any.whl"
    if not wheel.is_file():
        found = ", ".join(sorted(p.name for p in directory.glob("*.whl"))) or "nothing"
        raise AirgapError(
            f"{source} built {found}, not airgap {__version__} (the running version): "
            "reinstall airgap from that source"
        )
    return wheel


def _source_directory() -> Path | None:
    """The source tree of the running airgap: the directory above the package when it
    holds airgap's pyproject.toml (an editable install, a checkout), else the local
    directory it was installed from (PEP 610 ``direct_url.json``)."""
    import airgap

    checkout = Path(airgap.__file__).resolve().parent.parent
    if _is_airgap_source(checkout):
        return checkout
    try:
        text = importlib.metadata.distribution("airgap").read_text("direct_url.json")
        url = json.loads(text or "null")["url"]
    except (importlib.metadata.PackageNotFoundError, ValueError, TypeError, KeyError):
        return None
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme != "file":
        return None
    path = Path(unquote(parsed.path))
    return path if _is_airgap_source(path) else None


def _is_airgap_source(directory: Path) -> bool:
    try:
        text = (directory / "pyproject.toml").read_text(errors="replace")
    except OSError:
        return False
    return re.search(r'^name\s*=\s*"airgap"\s*$', text, re.M) is not None


def runtime_requirements() -> list[str]:
    """airgap's runtime dependencies as its metadata declares them, less the optional."""
    return required_dependencies(importlib.metadata.requires("airgap") or [])


def download(house: Wheelhouse, target: Target, scratch: Path, constraint: Path | None) -> None:
    """The required dependencies' wheels for ``target``, then each optional one's
    where it has them (else noted as missing, with what that loses)."""
    constraints = ["-c", str(constraint)] if constraint is not None else []
    needed = scratch / f"{target.machine}-{target.python}"
    needed.mkdir(parents=True)
    run_pip(
        [
            "download",
            *target.pip_options(),
            *constraints,
            "-d",
            str(needed),
            *runtime_requirements(),
        ],
        f"download the wheels for {target}",
    )
    house.add(target, needed)
    for number, dependency in enumerate(targets.OPTIONAL_DEPENDENCIES):
        optional = scratch / f"{target.machine}-{target.python}-optional-{number}"
        optional.mkdir()
        options = [*target.pip_options(), *constraints, "-d", str(optional)]
        try:
            run_pip(
                ["download", *options, dependency.requirement],
                f"download {dependency.requirement} for {target}",
                missing_ok=True,
            )
        except _NoWheel:
            house.missing.setdefault(target, []).append(dependency)
            continue
        house.add(target, optional)


class _NoWheel(AirgapError):
    """pip found no wheel of a requirement for the target."""


def run_pip(arguments: list[str], what: str, *, missing_ok: bool = False) -> None:
    """``python -m pip ARGUMENTS`` of the running interpreter, bounded in time; its
    failure is one line naming ``what`` and pip's own reason."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    command += ["--timeout", PIP_TIMEOUT, "--retries", PIP_RETRIES, "-q", *arguments]
    environment = {**os.environ, "PIP_PROGRESS_BAR": "off"}
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CALL_DEADLINE,
            env=environment,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NetworkError(f"pip could not {what}: no result in {CALL_DEADLINE:.0f}s") from None
    if done.returncode == 0:
        return
    unreachable = _unreachable(done.stderr)
    if unreachable is not None:
        raise NetworkError(
            f"pip could not {what}: the package index is unreachable ({unreachable})"
        )
    reason = _reason(done.stderr or done.stdout)
    if missing_ok and any(marker in done.stderr for marker in _NO_WHEEL):
        raise _NoWheel(reason)
    raise AirgapError(f"pip could not {what}: {reason}")


def _unreachable(output: str) -> str | None:
    """Why pip's connections failed, when they did (pip then ends with a misleading
    "no matching distribution"): its last "Retrying ... after connection broken by"."""
    retries = [line for line in output.splitlines() if "after connection broken by" in line]
    if not retries:
        return None
    cause = retries[-1].split("after connection broken by", 1)[1].strip()
    return cause[:MAX_REASON_CHARS]


def _reason(output: str) -> str:
    """pip's own words: its last ``ERROR:`` line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    chosen = (errors or lines or ["no output"])[-1]
    return chosen.removeprefix("ERROR: ")[:MAX_REASON_CHARS]
