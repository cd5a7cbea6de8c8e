"""Copy images from registries into the bundle being written, many blobs at once.

Two phases. ``resolve`` fetches every image's manifest tree and, for single-platform
images, the small config that names the platform: all small documents, kept in memory
as exact bytes. After that every digest and size is known, so collect can plan the whole
bundle; ``download`` then streams the union of the remaining blobs, once each, largest
first and in parallel, hashed as they arrive, straight into their places in the bundle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from airgap.bundle.format import ArtifactRecord
from airgap.bundle.writer import Region, RegionWriter, Sink
from airgap.core.errors import AirgapError, InputError
from airgap.core.failures import Failure
from airgap.core.limits import MAX_CONFIG_BYTES
from airgap.core.parallel import run_parallel
from airgap.core.progress import QUIET, Progress, Task
from airgap.oci.manifest import Descriptor, Manifest, config_platform, filter_index
from airgap.oci.reference import Reference
from airgap.registry.client import Registry
from airgap.registry.pool import RegistryPool
from airgap.supplychain.discover import Attached, Subject, discover, index_attestations

UNKNOWN_PLATFORM = "unknown/unknown"  # buildx attestation manifests
PINNED = "pinned by digest"  # why an index was kept whole despite ``platforms:``


@dataclass(slots=True)
class ResolvedImage:
    """An image's manifest tree as it will be stored, and where to pull its blobs."""

    reference: Reference
    registry: Registry
    repository: str
    top: Manifest
    manifests: list[Manifest] = field(default_factory=list)  # top and every child
    source_digest: str | None = None
    kept_whole: str | None = None  # why a platform filter left this index whole
    config: bytes | None = None  # single-platform images: their config, for the platform
    source: Manifest | None = None  # the index a platform filter rewrote
    attached: list[Attached] = field(default_factory=list)  # signatures, attestations, SBOMs

    @property
    def what(self) -> str:
        return f"image {self.reference}"

    def blobs(self) -> list[Descriptor]:
        """Configs and layers of the image and of everything attached to it."""
        seen: dict[str, Descriptor] = {}
        for manifest in self.manifests:
            for blob in manifest.blobs():
                seen.setdefault(blob.digest, blob)
        for attached in self.attached:
            for blob in attached.blobs():
                seen.setdefault(blob.digest, blob)
        return list(seen.values())

    def subjects(self) -> list[str]:
        """Digests to look for attachments of: the stored top, every child but buildx
        attestation manifests, and the source index a filter rewrote (what upstream
        signed)."""
        linked = {a.top.digest for a in index_attestations(self.manifests)}
        found = [m.digest for m in self.manifests if m.digest not in linked]
        if self.source is not None:
            found.append(self.source.digest)
        return found

    def carried_manifests(self) -> list[Manifest]:
        """Every manifest stored as a blob: the image's, its attachments', and the
        source index when something upstream attached to it (its signature is only
        checkable against the index it signed)."""
        found = list(self.manifests)
        for attached in self.attached:
            found.extend(attached.manifests)
        if self.source is not None and any(a.subject == self.source.digest for a in self.attached):
            found.append(self.source)
        return found

    @property
    def size(self) -> int:
        """Manifests plus unique blobs: what this image weighs in the bundle."""
        unique = {m.digest: m.size for m in self.carried_manifests()}
        return sum(unique.values()) + sum(b.size for b in self.blobs())

    @property
    def platforms(self) -> list[str]:
        if self.top.is_index:
            found = {c.platform for c in self.top.children() if c.platform}
            return sorted(found - {UNKNOWN_PLATFORM})
        platform = config_platform(self.config) if self.config else None
        return [platform] if platform else []

    def artifact_records(self) -> list[ArtifactRecord]:
        """What is attached to this image, as the bundle manifest links it."""
        return [
            ArtifactRecord(
                image=str(self.reference),
                subject=attached.subject,
                kind=attached.kind.value,
                via=attached.via.value,
                digest=attached.top.digest,
                media_type=attached.top.media_type,
                size=attached.top.size,
                tag=attached.tag,
                artifact_type=attached.artifact_type,
            )
            for attached in self.attached
        ]

    def inline_blobs(self) -> dict[str, bytes]:
        """Blob bytes already in memory: manifests, and the config if fetched."""
        found = {m.digest: m.data for m in self.carried_manifests()}
        for attached in self.attached:
            found.update(attached.payloads)
        config = self._config_descriptor()
        if self.config is not None and config is not None:
            found[config.digest] = self.config
        return found

    def _config_descriptor(self) -> Descriptor | None:
        return None if self.top.is_index else next(iter(self.top.blobs()), None)


@dataclass(frozen=True, slots=True)
class BlobJob:
    """One blob to download and where from: all ``download`` needs of an image, so the
    images (their manifests' and configs' bytes, written into the bundle by then) need
    not be held while the blobs move."""

    digest: str
    size: int
    registry: Registry
    repository: str
    reference: Reference  # the image's, for messages (``what``): no string kept per job

    @property
    def what(self) -> str:
        return f"image {self.reference}"


def _caught(job: Callable[[], ResolvedImage]) -> ResolvedImage | AirgapError:
    """The job's image, or the error that says why there is none."""
    try:
        return job()
    except InputError:
        raise  # the user's own input (an authfile, a CA file): once, not per image
    except AirgapError as exc:
        return exc


class ImageCopier:
    """Resolves images, then fills their blobs into planned regions of one file."""

    def __init__(
        self,
        pool: RegistryPool,
        *,
        platforms: tuple[str, ...] | None = None,
        concurrency: int = 8,
        progress: Progress = QUIET,
        signatures: bool = True,
    ) -> None:
        self._pool = pool
        self._platforms = platforms
        self._signatures = signatures
        self._concurrency = concurrency
        self._progress = progress

    def resolve(
        self, references: Sequence[Reference], failures: list[Failure] | None = None
    ) -> list[ResolvedImage]:
        """Every image's manifest tree, and (unless ``signatures`` is off) what upstream
        attached to each of its manifests. With ``failures``, an image that cannot be
        resolved is added there and the others are still resolved; without,
        the first failure is raised."""
        jobs = [partial(self._resolve, ref) for ref in references]
        if failures is None:
            images = run_parallel(jobs, self._concurrency)
        else:
            found = run_parallel([partial(_caught, job) for job in jobs], self._concurrency)
            for reference, result in zip(references, found, strict=True):
                if isinstance(result, AirgapError):
                    failures.append(Failure.of(str(reference), reference.registry, result))
            images = [result for result in found if isinstance(result, ResolvedImage)]
        if self._signatures:
            self._attach(images)
        return images

    def _attach(self, images: list[ResolvedImage]) -> None:
        subjects: list[tuple[ResolvedImage, Subject]] = [
            (image, Subject(digest, image.registry, image.repository, image.what))
            for image in images
            for digest in image.subjects()
        ]
        found = discover([subject for _, subject in subjects], self._concurrency)
        for image in images:
            image.attached = list(index_attestations(image.manifests))
        for (image, _), attached in zip(subjects, found, strict=True):
            image.attached.extend(attached)

    def _resolve(self, reference: Reference) -> ResolvedImage:
        registry, repository = self._pool.pull_location(reference)
        what = f"image {reference}"
        top = registry.get_manifest(repository, reference.identifier, what=what)
        image = ResolvedImage(reference, registry, repository, top)
        if top.is_index and self._platforms and reference.digest:
            # a digest is a promise: filtering would change it, and every reference
            # written on the far side (components, mapping, node digest mirrors) names it
            image.kept_whole = PINNED
        elif top.is_index and self._platforms:
            filtered = filter_index(top, self._platforms, attestations=self._signatures)
            if not filtered.children():
                available = ", ".join(sorted({c.platform or "?" for c in top.children()}))
                raise AirgapError(
                    f"{what}: none of the platforms {', '.join(self._platforms)} "
                    f"(it has {available})"
                )
            image.top, image.source_digest, image.source = filtered, top.digest, top
        self._gather(image, image.top)
        return image

    def read_configs(self, images: list[ResolvedImage]) -> None:
        """Each single-platform image's config (small), which names its platform: read
        after ``resolve``, once the bundle's size is known and its space checked, so
        that nothing of a blob is asked for before."""
        run_parallel([partial(self._read_config, image) for image in images], self._concurrency)

    @staticmethod
    def _read_config(image: ResolvedImage) -> None:
        config = image._config_descriptor()
        if config is not None and config.size <= MAX_CONFIG_BYTES:
            image.config = image.registry.fetch_small_blob(
                image.repository, config.digest, config.size, what=image.what
            )

    def _gather(self, image: ResolvedImage, manifest: Manifest) -> None:
        image.manifests.append(manifest)
        for child in manifest.children():
            fetched = image.registry.get_manifest(image.repository, child.digest, what=image.what)
            self._gather(image, fetched)

    @staticmethod
    def blob_jobs(images: list[ResolvedImage], wanted: set[str]) -> list[BlobJob]:
        """The blobs of ``images`` whose digests are ``wanted`` (each once, from the
        first image that has it), largest first: what ``download`` fetches."""
        jobs: dict[str, BlobJob] = {}
        for image in images:
            for blob in image.blobs():
                if blob.digest in wanted and blob.digest not in jobs:
                    job = BlobJob(
                        blob.digest, blob.size, image.registry, image.repository, image.reference
                    )
                    jobs[blob.digest] = job
        return sorted(jobs.values(), key=lambda job: job.size, reverse=True)

    def download(self, ordered: list[BlobJob], regions: dict[str, Region], fd: int | Sink) -> None:
        """Stream each job's blob into its region, largest first."""
        task = self._progress.task("images", sum(j.size for j in ordered))
        run_parallel(
            [partial(self._download, job, fd, regions[job.digest], task) for job in ordered],
            self._concurrency,
        )

    def _download(self, job: BlobJob, fd: int | Sink, region: Region, task: Task) -> None:
        job.registry.download_blob(
            job.repository,
            job.digest,
            job.size,
            RegionWriter(fd, region),  # made when its turn comes, not one per blob up front
            what=job.what,
            on_bytes=partial(self._progress.advance, task),
        )
