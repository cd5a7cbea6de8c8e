"""The scale run (``run.py --scale``): 2,000 images and a bundle of >= 20 GiB.

What it asks: does peak RSS stay within 10% of the 40-image run, and does time grow
linearly with bytes? Content does not matter to a copier, so the workload is cheap to
make and to keep: every layer is a sparse file, a unique 4 KiB head followed by a hole
(zeros to whoever reads it, no disk blocks, no generation time beyond one sha256 pass).
The blobs are written straight into the source registry's filesystem storage
(distribution's layout: ``blobs/sha256/XX/HEX/data`` plus each repository's layer,
manifest revision and tag links), so nothing is pushed either. Only what airgap writes
takes real disk: the bundle (~20 GiB) and the target registry's copy (~20 GiB).

Each image: a config, a layer shared by its group of 50 images (a base) and a unique
application layer sized so that the distinct bytes reach the target.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from benchmarks.workload import GIB, KIB, MIB

GENERATOR = 1  # bump when the generated content changes: the cached workload is remade
SCALE_IMAGES = 2000
SCALE_BYTES = 20 * GIB
SHAPE_IMAGES = 40  # the same shape at the main run's image count: time per byte's baseline
SHAPE_REPEATS = 3
GROUP = 50  # images sharing one base layer
BASE_SIZE = 24 * MIB
HEAD = 4 * KIB
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
_ZEROS = bytes(MIB)


@dataclass(frozen=True)
class ScaleSet:
    """The generated scale workload: repositories (``bench-scale/sNNNN:v1``) and bytes."""

    references: list[str]  # repository:tag, without the registry host
    bytes: int  # distinct blobs, manifests included
    blobs: int


def plan_sizes(images: int, total: int) -> tuple[int, int]:
    """(base layer size, application layer size) so ``images`` images hold ``total``."""
    bases = -(-images // GROUP)
    app = max(HEAD, (total - bases * BASE_SIZE) // images)
    return BASE_SIZE, app


def required_disk(total: int) -> int:
    """Free bytes the run needs: the bundle and the target registry's copy, plus 10%."""
    return int(total * 2.2)


class _Storage:
    """Writes blobs and links in distribution's filesystem layout."""

    def __init__(self, root: Path) -> None:
        self.root = root / "docker" / "registry" / "v2"

    def blob_path(self, digest: str) -> Path:
        hex_ = digest.removeprefix("sha256:")
        return self.root / "blobs" / "sha256" / hex_[:2] / hex_ / "data"

    def put_bytes(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return digest

    def put_sparse(self, seed: str, size: int) -> str:
        """A layer of ``size`` bytes: a unique head, then a hole (sparse, no blocks)."""
        head = hashlib.shake_256(seed.encode()).digest(min(HEAD, size))
        hasher = hashlib.sha256(head)
        remaining = size - len(head)
        while remaining:
            step = min(len(_ZEROS), remaining)
            hasher.update(memoryview(_ZEROS)[:step])
            remaining -= step
        digest = "sha256:" + hasher.hexdigest()
        path = self.blob_path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            handle.write(head)
            handle.truncate(size)
        return digest

    def link(self, repository: str, kind: str, digest: str) -> None:
        hex_ = digest.removeprefix("sha256:")
        path = self.root / "repositories" / repository / kind / "sha256" / hex_ / "link"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(digest)

    def put_image(
        self, repository: str, labels: dict[str, str], layers: list[tuple[str, int]]
    ) -> int:
        """A single-platform image of ``layers`` (digest, size), stored already, under
        ``repository:v1``: its config (with ``labels``) and manifest written and every
        link made. The bytes of config and manifest."""
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": [d for d, _ in layers]},
            }
        ).encode()
        config_digest = self.put_bytes(config)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": [{"mediaType": OCI_LAYER, "digest": d, "size": s} for d, s in layers],
            }
        ).encode()
        manifest_digest = self.put_bytes(manifest)
        for digest, _ in [*layers, (config_digest, 0)]:
            self.link(repository, "_layers", digest)
        self.link(repository, "_manifests/revisions", manifest_digest)
        self.tag(repository, "v1", manifest_digest)
        return len(config) + len(manifest)

    def tag(self, repository: str, tag: str, digest: str) -> None:
        tags = self.root / "repositories" / repository / "_manifests" / "tags" / tag
        (tags / "current").mkdir(parents=True, exist_ok=True)
        (tags / "current" / "link").write_text(digest)
        index = tags / "index" / "sha256" / digest.removeprefix("sha256:")
        index.mkdir(parents=True, exist_ok=True)
        (index / "link").write_text(digest)


def generate(storage_root: Path, images: int = SCALE_IMAGES, total: int = SCALE_BYTES) -> ScaleSet:
    """Write the scale workload into a registry storage root (cached by the caller)."""
    shutil.rmtree(storage_root, ignore_errors=True)
    storage = _Storage(storage_root)
    base_size, app_size = plan_sizes(images, total)
    bases: dict[int, tuple[str, int]] = {}
    references = []
    distinct = 0
    blobs = 0
    for i in range(images):
        group = i // GROUP
        if group not in bases:
            bases[group] = (storage.put_sparse(f"scale-base-{group}", base_size), base_size)
            distinct += base_size
            blobs += 1
        app = (storage.put_sparse(f"scale-app-{i}", app_size), app_size)
        repository = f"bench-scale/s{i:04d}"
        written = storage.put_image(repository, {"scale": str(i)}, [bases[group], app])
        references.append(f"{repository}:v1")
        distinct += app_size + written
        blobs += 3
    return ScaleSet(references, distinct, blobs)


def layer_sources(storage_root: Path) -> tuple[dict[str, str], dict[str, int]]:
    """Every config and layer of a generated set, as the raw download GETs them: (digest
    -> the first repository that links it, digest -> size), read back from the storage."""
    storage = _Storage(storage_root)
    repositories_root = storage.root / "repositories"
    repositories: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for link in sorted(repositories_root.glob("*/*/_layers/sha256/*/link")):
        digest = link.read_text()
        if digest not in repositories:
            repositories[digest] = "/".join(link.relative_to(repositories_root).parts[:2])
            sizes[digest] = storage.blob_path(digest).stat().st_size
    return repositories, sizes


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize
