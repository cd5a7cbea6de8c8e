"""``airgap installer``: one tar holding airgap's wheel, every dependency's wheel for
each target, ``install.sh`` and ``installer.json`` (what it was built for, and from).

The tar is ``airgap-installer-VERSION/`` with ``install.sh``, ``installer.json`` and
``wheels/``; its members are sorted and stamped with the creation time, so the same
wheels make the same bytes. It is written to a temporary file and renamed.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from airgap import __version__
from airgap.bundle.created import created_timestamp, source_date_epoch
from airgap.core import interrupt
from airgap.core.fsutil import atomic_writer, check_replaceable, require_directory_of
from airgap.core.progress import QUIET, Progress
from airgap.installer import targets
from airgap.installer.targets import NEWEST_GLIBC_MINOR, Target
from airgap.installer.wheels import Wheelhouse, download, own_wheel

RECORD_NAME = "installer.json"  # in the tar; install.sh copies it into the virtualenv
TOP = f"airgap-installer-{__version__}"


@dataclass(frozen=True)
class InstallerResult:
    output: Path
    wheels: int
    size: int
    seconds: float
    missing: dict[Target, list[str]]  # optional requirements a target goes without


def default_output() -> Path:
    return Path(f"airgap-installer-{__version__}.tar")


def build_installer(
    output: Path,
    machines: tuple[str, ...],
    pythons: tuple[str, ...],
    *,
    constraint: Path | None = None,
    overwrite: bool = False,
    progress: Progress = QUIET,
) -> InstallerResult:
    started = time.monotonic()
    moment = created_timestamp(source_date_epoch())
    created = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    output = output.absolute()
    require_directory_of(output)
    check_replaceable(output, overwrite=overwrite, what="installer")
    scratch = Path(tempfile.mkdtemp(prefix=".airgap-installer-", dir=output.parent))
    interrupt.track(scratch, directory=True)
    try:
        house = Wheelhouse(scratch / "wheels")
        house.directory.mkdir()
        progress.note(f"building airgap {__version__}'s wheel")
        (scratch / "own").mkdir()
        own = own_wheel(scratch / "own")
        shutil.copy2(own, house.directory / own.name)
        for target in targets.targets(machines, pythons):
            progress.note(f"downloading the wheels for {target}")
            download(house, target, scratch / "downloads", constraint)
            house.by_target[target].insert(0, own.name)
        record = _record(output.name, created, machines, pythons, house)
        script = _install_script(machines, pythons, house)
        wheels = sum(1 for _ in house.directory.glob("*.whl"))
        _write_tar(output, house.directory, record, script, int(moment.timestamp()))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        interrupt.untrack(scratch)
    missing = {t: [d.requirement for d in deps] for t, deps in house.missing.items()}
    return InstallerResult(
        output, wheels, output.stat().st_size, time.monotonic() - started, missing
    )


def _record(
    name: str, created: str, machines: tuple[str, ...], pythons: tuple[str, ...], house: Wheelhouse
) -> dict[str, object]:
    """installer.json: what ``airgap version`` on the far side names its origin by."""
    wheels = []
    for path in sorted(house.directory.glob("*.whl")):
        with path.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        wheels.append({"name": path.name, "sha256": digest, "size": path.stat().st_size})
    identity = hashlib.sha256(json.dumps(wheels, sort_keys=True).encode()).hexdigest()
    return {
        "installer": name,
        "airgapVersion": __version__,
        "created": created,
        "wheelsSha256": identity,
        "machines": list(machines),
        "pythons": list(pythons),
        "targets": {f"{t.machine}/{t.python}": names for t, names in house.by_target.items()},
        "missing": {
            f"{t.machine}/{t.python}": [d.requirement for d in deps]
            for t, deps in house.missing.items()
        },
        "wheels": wheels,
    }


def _install_script(
    machines: tuple[str, ...], pythons: tuple[str, ...], house: Wheelhouse
) -> bytes:
    """install.sh with this build's versions, machines and optional dependencies."""
    cases = []
    for target in house.by_target:
        lacking = house.missing.get(target, [])
        carried = [d.requirement for d in targets.OPTIONAL_DEPENDENCIES if d not in lacking]
        notes = "\n".join(f"{d.requirement} has no wheel: {d.loses}" for d in lacking)
        cases.append(
            f"  {target.machine}/{target.python}) optional={shlex.quote(' '.join(carried))}; "
            f"notes={shlex.quote(notes)} ;;"
        )
    template = resources.files("airgap.installer").joinpath("install.sh").read_text()
    return (
        template.replace("@VERSION@", __version__)
        .replace("@PYTHONS@", " ".join(pythons))
        .replace("@MACHINES@", " ".join(machines))
        .replace("@GLIBC_MINOR@", str(NEWEST_GLIBC_MINOR))
        .replace(
            "case $machine in\n@OPTIONAL_CASES@",
            "case $machine/$python_version in\n" + "\n".join(cases),
        )
        .encode()
    )


def _write_tar(
    output: Path, wheels: Path, record: dict[str, object], script: bytes, mtime: int
) -> None:
    record_bytes = json.dumps(record, indent=2).encode() + b"\n"

    def info(
        name: str, size: int = 0, mode: int = 0o644, kind: bytes = tarfile.REGTYPE
    ) -> tarfile.TarInfo:
        entry = tarfile.TarInfo(f"{TOP}/{name}".rstrip("/"))
        entry.size, entry.mode, entry.mtime, entry.type = size, mode, mtime, kind
        entry.uid = entry.gid = 0
        entry.uname = entry.gname = ""
        return entry

    with (
        atomic_writer(output) as out,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(info("", mode=0o755, kind=tarfile.DIRTYPE))
        tar.addfile(info("install.sh", len(script), 0o755), io.BytesIO(script))
        tar.addfile(info(RECORD_NAME, len(record_bytes)), io.BytesIO(record_bytes))
        tar.addfile(info("wheels/", mode=0o755, kind=tarfile.DIRTYPE))
        for path in sorted(wheels.glob("*.whl")):
            with path.open("rb") as handle:
                tar.addfile(info(f"wheels/{path.name}", path.stat().st_size), handle)
