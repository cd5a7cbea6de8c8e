"""Verify's check of the offline installer member (airgap.installer.member names it)."""

from __future__ import annotations

from airgap.bundle.format import INSTALLER_DIR
from airgap.bundle.manifest import BundleManifest
from airgap.installer.member import installer_name_problem, installer_records
from airgap.verify.findings import Failure


def check_installer(manifest: BundleManifest) -> list[Failure]:
    """At most one installer, named as collect names it."""
    failures: list[Failure] = []
    listed = [record.path for record in installer_records(manifest)]
    for path in listed:
        name = path.removeprefix(f"{INSTALLER_DIR}/")
        problem = installer_name_problem(name)
        if problem:
            failures.append(Failure("installer", path, problem))
    if len(listed) > 1:
        failures.append(
            Failure("installer", INSTALLER_DIR, f"holds {len(listed)} installers, not one")
        )
    return failures
