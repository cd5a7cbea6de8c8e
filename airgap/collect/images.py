"""Copy images from registries into an OCI image layout, many blobs at once.

Three phases: resolve every image's manifest tree (small documents, in parallel), then
download the union of their blobs once each (largest first, in parallel, hashed while
streaming), then store the manifests' exact bytes and name each image in index.json.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from airgap.errors import AirgapError
from airgap.layout import LayoutWriter
from airgap.oci import Descriptor, Manifest, config_platform, filter_index
from airgap.parallel import run_parallel
from airgap.progress import QUIET, Progress, Task
from airgap.reference import Reference
from airgap.registry.client import Registry
from airgap.registry.pool import RegistryPool

UNKNOWN_PLATFORM = "unknown/unknown"  # buildx attestation manifests
MAX_CONFIG_BYTES = 1 << 20


@dataclass
class ResolvedImage:
    """An image's manifest tree, as it will be stored."""

    reference: Reference
    registry: Registry
    repository: str
    top: Manifest
    manifests: list[Manifest] = field(default_factory=list)  # top and every child
    source_digest: str | None = None

    @property
    def what(self) -> str:
        return f"image {self.reference}"

    def blobs(self) -> list[Descriptor]:
        seen: dict[str, Descriptor] = {}
        for manifest in self.manifests:
            for blob in manifest.blobs():
                seen.setdefault(blob.digest, blob)
        return list(seen.values())


@dataclass(frozen=True)
class CopiedImage:
    reference: str
    manifest: Manifest
    platforms: list[str]
    size: int
    source_digest: str | None


@dataclass(frozen=True)
class _BlobJob:
    descriptor: Descriptor
    image: ResolvedImage


class ImageCopier:
    """Copies images into ``layout``; one instance per collect run."""

    def __init__(
        self,
        pool: RegistryPool,
        layout: LayoutWriter,
        *,
        platforms: tuple[str, ...] | None = None,
        concurrency: int = 8,
        progress: Progress = QUIET,
    ) -> None:
        self._pool = pool
        self._layout = layout
        self._platforms = platforms
        self._concurrency = concurrency
        self._progress = progress

    def copy(self, references: Sequence[Reference]) -> list[CopiedImage]:
        resolved = run_parallel(
            [partial(self._resolve, ref) for ref in references], self._concurrency
        )
        self._download_blobs(resolved)
        copied = []
        for image in resolved:
            for manifest in image.manifests:
                self._layout.write_manifest(manifest)
            self._layout.add_reference(str(image.reference), image.top.descriptor())
            copied.append(self._record(image))
        return copied

    def _resolve(self, reference: Reference) -> ResolvedImage:
        registry, repository = self._pool.pull_location(reference)
        what = f"image {reference}"
        top = registry.get_manifest(repository, reference.identifier, what=what)
        image = ResolvedImage(reference, registry, repository, top)
        if top.is_index and self._platforms:
            filtered = filter_index(top, self._platforms)
            if not filtered.children():
                available = ", ".join(sorted({c.platform or "?" for c in top.children()}))
                raise AirgapError(
                    f"{what}: none of the platforms {', '.join(self._platforms)} "
                    f"(it has {available})"
                )
            image.top, image.source_digest = filtered, top.digest
        self._gather(image, image.top)
        return image

    def _gather(self, image: ResolvedImage, manifest: Manifest) -> None:
        image.manifests.append(manifest)
        for child in manifest.children():
            fetched = image.registry.get_manifest(image.repository, child.digest, what=image.what)
            self._gather(image, fetched)

    def _download_blobs(self, images: list[ResolvedImage]) -> None:
        jobs: dict[str, _BlobJob] = {}
        for image in images:
            for blob in image.blobs():
                if blob.digest not in jobs and not self._layout.has_blob(blob.digest):
                    jobs[blob.digest] = _BlobJob(blob, image)
        ordered = sorted(jobs.values(), key=lambda job: job.descriptor.size, reverse=True)
        task = self._progress.task("images", sum(j.descriptor.size for j in ordered))
        run_parallel([partial(self._download, job, task) for job in ordered], self._concurrency)

    def _download(self, job: _BlobJob, task: Task) -> None:
        blob, image = job.descriptor, job.image
        with self._layout.blob_sink(blob.digest) as sink:
            image.registry.download_blob(
                image.repository,
                blob.digest,
                blob.size,
                sink,
                what=image.what,
                on_bytes=partial(self._progress.advance, task),
            )

    def _record(self, image: ResolvedImage) -> CopiedImage:
        size = sum(m.size for m in image.manifests) + sum(b.size for b in image.blobs())
        return CopiedImage(
            reference=str(image.reference),
            manifest=image.top,
            platforms=self._platforms_of(image),
            size=size,
            source_digest=image.source_digest,
        )

    def _platforms_of(self, image: ResolvedImage) -> list[str]:
        if image.top.is_index:
            found = [c.platform for c in image.top.children() if c.platform]
            return sorted({p for p in found if p != UNKNOWN_PLATFORM})
        config = next(iter(image.top.blobs()), None)
        if config is None or config.size > MAX_CONFIG_BYTES:
            return []
        platform = config_platform(self._layout.blob_path(config.digest).read_bytes())
        return [platform] if platform else []
