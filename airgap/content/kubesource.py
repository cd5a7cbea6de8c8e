"""Where a Kubernetes version's kubeadm constants are read on the connected side.

The default is GitHub's raw file server (``https://raw.githubusercontent.com/kubernetes/
kubernetes/TAG/cmd/kubeadm/app/constants/constants.go``); ``kubernetes.url`` in the spec
names any server laid out the same way (an internal mirror of the repository). The file
travels through the one download path of release files: the same HTTP client (its
proxies), retries, size bound and atomic write. ``offline: true`` reads nothing and
takes ``content.kubeadm.BUILTIN``.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from airgap.content.kinds import ContentKind
from airgap.content.kubeadm import (
    BUILTIN_SOURCE,
    CONSTANTS_FILE,
    CONSTANTS_PATH,
    IMAGES_FILE,
    MAX_CONSTANTS_BYTES,
    builtin_constants,
    images_file,
    kubeadm_images,
    parse_constants,
)
from airgap.core.errors import InputError, utf8_text
from airgap.core.redact import redact_url
from airgap.sources.releases import (
    SingleFileSource,
    check_version,
    download,
    write_atomically,
)


class KubeadmSource(SingleFileSource):
    """A raw source tree of Kubernetes, by tag; or the built-in table (``offline``)."""

    def __init__(self, url: str, client: httpx.Client, *, offline: bool = False) -> None:
        self._base = url.strip().rstrip("/")
        self._client = client
        self.offline = offline
        if not offline and httpx.URL(self._base).scheme not in ("http", "https"):
            raise InputError(f"kubernetes.url {redact_url(self._base)!r}: use https:// or http://")

    @property
    def url(self) -> str:
        return BUILTIN_SOURCE if self.offline else redact_url(self._base)

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        """Download kubeadm's ``constants.go`` at tag ``version`` to ``dest``."""
        check_version(version, self.url)
        download(
            self._client,
            f"{self._base}/{version}/{CONSTANTS_PATH}",
            dest,
            what=f"read kubeadm's constants of Kubernetes {version} from {self.url}",
        )


def fetch_kubeadm_images(
    source: KubeadmSource, version: str, dest_root: Path
) -> tuple[list[Path], list[str], str]:
    """``(files, images, source)`` of one version: ``kubeadm-images.txt`` and the
    ``constants.go`` it follows from, under ``content/kubernetes/VERSION``."""
    directory = (dest_root / ContentKind.KUBERNETES.directory("kubernetes", version)).absolute()
    files: list[Path] = []
    if source.offline:
        constants = builtin_constants(version)
    else:
        path = directory / CONSTANTS_FILE
        source.fetch(version, CONSTANTS_FILE, path)
        origin = f"{CONSTANTS_PATH} of Kubernetes {version} from {source.url}"
        with path.open("rb") as handle:
            data = handle.read(MAX_CONSTANTS_BYTES + 1)
        constants = parse_constants(utf8_text(data, origin), origin)
        files.append(path)
    images = kubeadm_images(version, constants)
    listing = directory / IMAGES_FILE
    write_atomically(listing, [images_file(images)])
    return [listing, *files], images, source.url
