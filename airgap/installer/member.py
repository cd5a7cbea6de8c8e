"""The offline installer as a bundle member: ``installer/airgap-installer-VERSION.tar``,
listed in the signed manifest like every other member, so its sha256 is signed and
``tar -xf BUNDLE installer/…`` gets it without airgap (docs/installer.md)."""

from __future__ import annotations

import re
from pathlib import Path

from airgap.bundle.format import INSTALLER_DIR, FileRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import InputError
from airgap.core.names import shown, version_problem

_NAME_RE = re.compile(r"airgap-installer-(.+)\.tar")
MAX_INSTALLER_MEMBERS = 10_000  # an installer holds a few dozen wheels
REQUIRED = ("install.sh", "installer.json")


def installer_name_problem(name: str) -> str | None:
    """Why ``name`` is not ``airgap-installer-VERSION.tar``."""
    found = _NAME_RE.fullmatch(name)
    if found is None:
        return f"{shown(name)} is not named airgap-installer-VERSION.tar"
    return version_problem(found.group(1))


def installer_member(path: Path) -> str:
    """The bundle member name of the installer file at ``path``, once it is checked to
    be one ``airgap installer`` wrote: its name, and a tar holding ``install.sh`` and
    ``installer.json`` in its one top directory."""
    problem = installer_name_problem(path.name)
    if problem:
        raise InputError(f"--with-installer {path}: {problem} (as airgap installer writes it)")
    if not path.is_file():
        raise InputError(f"--with-installer {path}: not a regular file")
    import tarfile  # collect's alone: verify and import start without it

    try:
        with tarfile.open(path, "r:") as tar:
            names = set()
            for number, entry in enumerate(tar):
                if number >= MAX_INSTALLER_MEMBERS:
                    raise InputError(
                        f"--with-installer {path}: more than {MAX_INSTALLER_MEMBERS} members"
                    )
                names.add(entry.name)
    except (tarfile.TarError, OSError) as exc:
        raise InputError(f"--with-installer {path}: not a readable tar ({exc})") from None
    top = path.name.removesuffix(".tar")
    lacking = [name for name in REQUIRED if f"{top}/{name}" not in names]
    if lacking:
        raise InputError(
            f"--with-installer {path}: no {', '.join(f'{top}/{n}' for n in lacking)}: "
            "not an installer airgap installer wrote"
        )
    return f"{INSTALLER_DIR}/{path.name}"


def installer_records(manifest: BundleManifest) -> list[FileRecord]:
    """The manifest's records of members under ``installer/``."""
    return [
        f for f in manifest.files if not f.blob_named and f.path.startswith(f"{INSTALLER_DIR}/")
    ]
