"""What an offline installer is built for: machines, CPython versions, and the one place
that names a dependency whose wheels exist for some machines only.

A target is one (machine, CPython) pair; its wheels are the manylinux ones that run on
glibc 2.28 (RHEL 8 and 9, Ubuntu 20.04 and later, Debian 11 and later) or pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airgap.core.errors import InputError

DEFAULT_MACHINES = ("x86_64", "aarch64")
DEFAULT_PYTHONS = ("3.11", "3.12", "3.13")
KNOWN_MACHINES = ("x86_64", "aarch64", "ppc64le", "s390x")
OLDEST_GLIBC_MINOR, NEWEST_GLIBC_MINOR = 17, 28  # manylinux_2_17 (2014) .. manylinux_2_28
_PYTHON_RE = re.compile(r"3\.(1[1-9])")


@dataclass(frozen=True)
class OptionalDependency:
    """A runtime dependency that may lack wheels on some machines: the installer
    carries it where it can, and says what is lost where it cannot, rather than fail
    the whole install."""

    requirement: str  # as pip takes it, e.g. "helm-python-sdk>=0.1"
    loses: str  # which commands lose what without it, one line


# The one declaration of platform-limited dependencies: the installer resolves the
# required dependencies (airgap's own, less these) for every target, and each of these
# for every target on its own. Helm's engine (airgap.content.helmengine) has x86_64
# wheels only: elsewhere every command runs but those that render a chart.
OPTIONAL_DEPENDENCIES: tuple[OptionalDependency, ...] = (
    OptionalDependency(
        "helm-python-sdk>=0.2.2,<0.3",
        "collect and verify of a bundle with charts, and import's chart closure, "
        "need Helm's engine; every other command works",
    ),
)


@dataclass(frozen=True, order=True)
class Target:
    machine: str  # platform.machine() of the host: x86_64, aarch64
    python: str  # "3.12"

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def __str__(self) -> str:
        return f"linux/{self.machine} CPython {self.python}"

    def pip_options(self) -> list[str]:
        """``pip download`` options that select this target's binary wheels only."""
        platforms = [
            f"manylinux_2_{minor}_{self.machine}"
            for minor in range(NEWEST_GLIBC_MINOR, OLDEST_GLIBC_MINOR - 1, -1)
        ]
        platforms.append(f"manylinux2014_{self.machine}")  # pip adds 2010 and 1 (x86_64)
        options = ["--only-binary=:all:", "--implementation", "cp"]
        options += ["--python-version", self.python]
        for abi in (self.abi, "abi3", "none"):
            options += ["--abi", abi]
        for platform in platforms:
            options += ["--platform", platform]
        return options


def parse_machines(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--machine`` values (x86_64, aarch64, ...; amd64 and arm64 as aliases)."""
    aliases = {"amd64": "x86_64", "arm64": "aarch64"}
    chosen: list[str] = []
    for value in values or DEFAULT_MACHINES:
        machine = aliases.get(value, value)
        if machine not in KNOWN_MACHINES:
            raise InputError(
                f"--machine {value!r}: expected one of {', '.join(KNOWN_MACHINES)} "
                "(or amd64, arm64)"
            )
        if machine not in chosen:
            chosen.append(machine)
    return tuple(chosen)


def parse_pythons(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--python`` values: CPython 3.11 or newer, as MAJOR.MINOR."""
    chosen: list[str] = []
    for value in values or DEFAULT_PYTHONS:
        if not _PYTHON_RE.fullmatch(value):
            raise InputError(
                f"--python {value!r}: expected a CPython version 3.11 or newer, e.g. 3.12"
            )
        if value not in chosen:
            chosen.append(value)
    return tuple(chosen)


def targets(machines: tuple[str, ...], pythons: tuple[str, ...]) -> list[Target]:
    return [Target(machine, python) for machine in machines for python in pythons]


def requirement_name(requirement: str) -> str:
    """The normalised project name a requirement names (PEP 503)."""
    name = re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def required_dependencies(requires: list[str]) -> list[str]:
    """airgap's ``Requires-Dist`` less its extras and the optional dependencies."""
    optional = {requirement_name(d.requirement) for d in OPTIONAL_DEPENDENCIES}
    return [
        requirement
        for requirement in requires
        if "extra" not in requirement.partition(";")[2]
        and requirement_name(requirement) not in optional
    ]
