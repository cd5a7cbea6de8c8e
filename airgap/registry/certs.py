"""Per-registry TLS files where containers/image and docker keep them.

podman, skopeo, CRI-O (containers/image ``dockerCertDir``) and docker read a registry's
extra CAs and client certificate from ``/etc/containers/certs.d/HOST[:PORT]/`` (then
``/etc/docker/certs.d/HOST[:PORT]/``; the first directory that exists wins): every
``*.crt`` is a CA to trust besides the system's, and a ``NAME.cert`` with its
``NAME.key`` is a client certificate (``tlsclientconfig.SetupCertificates``). A
``--cert-dir DIR`` holds the same files for the one registry a command talks to and
replaces the lookup. ``AIRGAP_CERTS_D`` (colon-separated) replaces the two system roots,
for relocated roots and tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from airgap.core.errors import InputError

SYSTEM_ROOTS = ("/etc/containers/certs.d", "/etc/docker/certs.d")
ROOTS_ENV = "AIRGAP_CERTS_D"
MAX_CERT_FILES = 64  # a certs.d directory holds a handful of files


@dataclass(frozen=True)
class HostCerts:
    """What one registry's directory holds (nothing when there is none)."""

    directory: Path | None = None
    cas: tuple[Path, ...] = ()
    client: tuple[Path, Path] | None = None  # (certificate, key)


def roots() -> tuple[Path, ...]:
    configured = os.environ.get(ROOTS_ENV)
    names = configured.split(":") if configured is not None else SYSTEM_ROOTS
    return tuple(Path(name) for name in names if name)


def for_host(host: str, *, cert_dir: Path | None = None) -> HostCerts:
    """The TLS files for registry ``host`` (``name[:port]``, as written in references)."""
    if cert_dir is not None:
        if not cert_dir.is_dir():
            raise InputError(f"--cert-dir {cert_dir} is not a directory")
        return read_directory(cert_dir)
    for root in roots():
        directory = root / host
        try:
            if directory.is_dir():
                return read_directory(directory)
        except PermissionError:  # as containers/image: an unreadable one is skipped
            continue
    return HostCerts()


def read_directory(directory: Path) -> HostCerts:
    """``*.crt`` CAs and the ``*.cert``/``*.key`` client pair of one directory; a
    certificate without its key (or the reverse) is an error naming both, as in
    containers/image. With several pairs the first by name is used (a TLS client
    presents one certificate)."""
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError as exc:
        raise InputError(f"cannot read certificate directory {directory}: {exc.strerror}") from None
    if len(names) > MAX_CERT_FILES:
        raise InputError(f"certificate directory {directory} holds over {MAX_CERT_FILES} files")
    cas = tuple(directory / name for name in names if name.endswith(".crt"))
    pairs: list[tuple[Path, Path]] = []
    for name in names:
        if name.endswith(".cert"):
            key = name.removesuffix(".cert") + ".key"
            if key not in names:
                raise InputError(f"{directory / name}: client certificate without its key {key}")
            pairs.append((directory / name, directory / key))
        elif name.endswith(".key") and name.removesuffix(".key") + ".cert" not in names:
            cert = name.removesuffix(".key") + ".cert"
            raise InputError(f"{directory / name}: client key without its certificate {cert}")
    return HostCerts(directory, cas, pairs[0] if pairs else None)
