"""The images a Kubernetes version's kubeadm pulls, read from that release's own source.

Every node Cluster API creates runs kubeadm, which pulls the control-plane images of the
cluster's version (``kubeadm config images list --kubernetes-version vX.Y.Z``):
``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` and ``kube-proxy``
tagged with the version, ``coredns/coredns``, ``pause`` and ``etcd``. The last three
versions are constants of that release's kubeadm (``cmd/kubeadm/app/constants/
constants.go`` at the tag): ``CoreDNSVersion``, ``PauseVersion``, and the etcd version
``SupportedEtcdVersion`` maps the control plane's minor to, ``DefaultEtcdVersion`` when
the map gives none. This module reads those constants (pure, bounded) and lists the
images in kubeadm's order (``cmd/kubeadm/app/images/images.go``:
``GetControlPlaneImages``), so the list follows the release and never a table that
goes stale.

``BUILTIN`` is the documented fallback for an offline collect (``offline: true`` in the
spec): the constants of the last patch release airgap knows per minor. A bundle records
which of the two a list came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airgap.core.errors import InputError
from airgap.core.names import shown

DEFAULT_IMAGE_REPOSITORY = "registry.k8s.io"  # kubeadm's DefaultImageRepository
CONSTANTS_PATH = "cmd/kubeadm/app/constants/constants.go"
CONSTANTS_FILE = "constants.go"
IMAGES_FILE = "kubeadm-images.txt"  # what `kubeadm config images list` prints
MAX_CONSTANTS_BYTES = 1 << 20  # the real file is ~35 KB
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")

_VERSION_RE = re.compile(r"^v(?P<major>\d{1,3})\.(?P<minor>\d{1,3})\.(?P<patch>\d{1,4})$")
_CONST_RE = r"^\s*(?:(?:var|const)\s+)?{name}\s*(?:string\s*)?=\s*\"(?P<value>[^\"\n]{{1,64}})\""
_MAP_RE = re.compile(
    r"^\s*(?:var\s+)?SupportedEtcdVersion\s*=\s*map\[uint8\]string\s*\{(?P<body>[^}]{0,4096})\}",
    re.M,
)
_ENTRY_RE = re.compile(
    r"^\s*(?P<minor>\d{1,3})\s*:\s*\"(?P<value>[^\"\n]{1,64})\",?\s*(?://[^\n]*)?$"
)
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class KubeadmConstants:
    """The constants of one kubeadm release that decide its image list."""

    default_etcd: str
    coredns: str
    pause: str
    supported_etcd: tuple[tuple[int, str], ...]  # (minor, etcd version), as in the map


def kubernetes_version_problem(version: str) -> str | None:
    """Why ``version`` is not a Kubernetes release tag airgap carries (``vX.Y.Z``)."""
    if not _VERSION_RE.match(version):
        return f"{shown(version)} is not a Kubernetes release version like v1.33.4"
    return None


def minor_of(version: str) -> int:
    match = _VERSION_RE.match(version)
    if match is None:
        raise InputError(kubernetes_version_problem(version) or version)
    return int(match["minor"])


def parse_constants(text: str, origin: str) -> KubeadmConstants:
    """The image constants of a ``constants.go``; InputError naming ``origin`` when one
    is missing or malformed (a file that is not kubeadm's, or a layout it no longer has)."""
    if len(text) > MAX_CONSTANTS_BYTES:
        raise InputError(f"{origin}: larger than {MAX_CONSTANTS_BYTES} bytes")

    def constant(name: str) -> str:
        match = re.search(_CONST_RE.format(name=name), text, re.M)
        if match is None:
            raise InputError(f"{origin}: kubeadm constant {name} not found")
        value = match["value"]
        if not _TAG_RE.match(value):
            raise InputError(f"{origin}: {name} {shown(value)} is not an image tag")
        return value

    found = _MAP_RE.search(text)
    if found is None:
        raise InputError(f"{origin}: kubeadm's SupportedEtcdVersion map not found")
    entries: list[tuple[int, str]] = []
    for line in found["body"].splitlines():
        if not line.strip() or line.strip().startswith("//"):
            continue
        entry = _ENTRY_RE.match(line)
        if entry is None or not _TAG_RE.match(entry["value"]) or int(entry["minor"]) > 255:
            raise InputError(f"{origin}: SupportedEtcdVersion: cannot read {shown(line.strip())}")
        entries.append((int(entry["minor"]), entry["value"]))
    if not entries:
        raise InputError(f"{origin}: SupportedEtcdVersion is empty")
    return KubeadmConstants(
        default_etcd=constant("DefaultEtcdVersion"),
        coredns=constant("CoreDNSVersion"),
        pause=constant("PauseVersion"),
        supported_etcd=tuple(entries),
    )


def etcd_version(constants: KubeadmConstants, version: str) -> str:
    """kubeadm's ``EtcdSupportedVersion``: the map's entry for the minor, else the
    nearest end of the map (below its lowest, above its highest), else (a gap inside
    the map) ``DefaultEtcdVersion``, as ``GetEtcdImage`` falls back."""
    minor = minor_of(version)
    table = dict(constants.supported_etcd)
    if minor in table:
        return table[minor]
    if minor < min(table):
        return table[min(table)]
    if minor > max(table):
        return table[max(table)]
    return constants.default_etcd


def kubeadm_images(
    version: str, constants: KubeadmConstants, repository: str = DEFAULT_IMAGE_REPOSITORY
) -> list[str]:
    """What ``kubeadm config images list --kubernetes-version VERSION`` prints, in its
    order; CoreDNS under ``REPO/coredns`` for the default repository only (kubeadm's
    ``GetDNSImage``: a custom ``imageRepository`` holds ``REPO/coredns:TAG``)."""
    if kubernetes_version_problem(version):
        raise InputError(kubernetes_version_problem(version) or version)
    dns = f"{repository}/coredns" if repository == DEFAULT_IMAGE_REPOSITORY else repository
    images = [f"{repository}/{name}:{version}" for name in CONTROL_PLANE]
    images.append(f"{dns}/coredns:{constants.coredns}")
    images.append(f"{repository}/pause:{constants.pause}")
    images.append(f"{repository}/etcd:{etcd_version(constants, version)}")
    return images


def images_file(images: list[str]) -> bytes:
    """The list as ``kubeadm config images list`` prints it: one reference a line."""
    return "".join(f"{image}\n" for image in images).encode()


def read_images_file(data: bytes, origin: str) -> list[str]:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InputError(f"{origin}: not an ASCII list of images") from None
    return [line for line in text.splitlines() if line]


# The offline fallback, per minor: the constants of cmd/kubeadm/app/constants/constants.go
# as read at v1.31.0, the release-1.32 branch (commit 00886ac0), v1.33.0 and v1.34.0.
# Used only with ``offline: true``; a bundle says so in its record's source, and a patch
# release that moved etcd since (1.34's later patches run 3.6.5-0) is listed as that
# row says, which is why an online collect reads the tag instead.
def _same(minors: range, etcd: str) -> tuple[tuple[int, str], ...]:
    return tuple((minor, etcd) for minor in minors)


BUILTIN: dict[int, KubeadmConstants] = {
    31: KubeadmConstants("3.5.15-0", "v1.11.3", "3.10", _same(range(29, 32), "3.5.15-0")),
    32: KubeadmConstants("3.5.16-0", "v1.11.3", "3.10", _same(range(29, 33), "3.5.24-0")),
    33: KubeadmConstants("3.5.21-0", "v1.12.0", "3.10", _same(range(31, 34), "3.5.21-0")),
    34: KubeadmConstants(
        "3.6.4-0", "v1.12.1", "3.10.1", (*_same(range(31, 34), "3.5.21-0"), (34, "3.6.4-0"))
    ),
}
BUILTIN_SOURCE = "airgap built-in table (offline collect)"


def builtin_constants(version: str) -> KubeadmConstants:
    """The fallback table's constants for ``version``'s minor; InputError when the
    table does not know it (then only an online collect can carry it)."""
    minor = minor_of(version)
    if minor not in BUILTIN:
        known = ", ".join(f"v1.{m}" for m in sorted(BUILTIN))
        raise InputError(
            f"Kubernetes {version}: the built-in table of an offline collect knows {known}; "
            "collect it online (without offline: true)"
        )
    return BUILTIN[minor]
