"""``airgap collect``: provider releases and their images into one signed bundle.

Everything is staged in a temporary directory beside the output (same filesystem, so
the final tar can be written with in-kernel copies) and removed afterwards; the bundle
itself appears at its path only when it is complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from airgap import __version__, http
from airgap.bundle.format import (
    IMAGES_DIR,
    BundleManifest,
    FileRecord,
    ImageRecord,
    ProviderRecord,
    blob_member,
)
from airgap.bundle.writer import write_bundle
from airgap.collect.images import CopiedImage, ImageCopier
from airgap.collect.spec import BundleSpec, load_spec
from airgap.layout import INDEX_FILE, OCI_LAYOUT_FILE, LayoutWriter
from airgap.progress import QUIET, Progress
from airgap.providers.fetch import FetchedProvider, fetch_provider
from airgap.reference import Reference, parse_reference
from airgap.registry.pool import RegistryPool
from airgap.signing import load_private_key, sign


@dataclass(frozen=True)
class CollectResult:
    output: Path
    manifest: BundleManifest
    seconds: float


def created_timestamp() -> datetime:
    """Now, or ``SOURCE_DATE_EPOCH`` for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=UTC)
    return datetime.now(tz=UTC).replace(microsecond=0)


def collect(
    spec_path: Path,
    output: Path,
    sign_key: Path,
    *,
    concurrency: int = 8,
    progress: Progress = QUIET,
) -> CollectResult:
    started = time.monotonic()
    spec = load_spec(spec_path)
    key = load_private_key(sign_key)  # fail before any download if the key is unusable
    output = output.absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".airgap-collect-", dir=output.parent))
    try:
        providers = _fetch_providers(spec, staging, progress)
        images = _copy_images(spec, providers, staging, concurrency, progress)
        created = created_timestamp()
        manifest = BundleManifest(
            created=created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            tool_version=__version__,
            providers=[_provider_record(p, staging) for p in providers],
            images=[_image_record(i) for i in images],
            files=_file_records(staging, images),
        )
        data = manifest.to_bytes()
        members = [(f.path, staging / f.path, f.size) for f in manifest.files]
        write_bundle(output, data, sign(key, data), members, mtime=int(created.timestamp()))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CollectResult(output, manifest, time.monotonic() - started)


def _fetch_providers(spec: BundleSpec, staging: Path, progress: Progress) -> list[FetchedProvider]:
    fetched: dict[tuple[str, str, str], FetchedProvider] = {}
    with http.build_client() as client:
        for provider in spec.providers:
            progress.note(f"fetching {provider.type.kind} {provider.name} {provider.version}")
            result = fetch_provider(provider, staging, client)
            # `latest` may resolve to a version that is also listed explicitly
            fetched.setdefault((result.type.kind, result.name, result.version), result)
    return list(fetched.values())


def _image_references(spec: BundleSpec, providers: list[FetchedProvider]) -> list[Reference]:
    """Provider images then extra images, each once, in first-seen order."""
    seen: dict[str, Reference] = {}
    for text in [image for p in providers for image in p.images] + list(spec.images):
        ref = parse_reference(text)
        seen.setdefault(str(ref), ref)
    return list(seen.values())


def _copy_images(
    spec: BundleSpec,
    providers: list[FetchedProvider],
    staging: Path,
    concurrency: int,
    progress: Progress,
) -> list[CopiedImage]:
    layout = LayoutWriter(staging / IMAGES_DIR)
    with RegistryPool(spec.registries, max_connections=max(concurrency, 4)) as pool:
        copier = ImageCopier(
            pool, layout, platforms=spec.platforms, concurrency=concurrency, progress=progress
        )
        images = copier.copy(_image_references(spec, providers))
    layout.write_index()
    return images


def _relative(path: Path, staging: Path) -> str:
    return path.relative_to(staging).as_posix()


def _provider_record(provider: FetchedProvider, staging: Path) -> ProviderRecord:
    return ProviderRecord(
        name=provider.name,
        type=provider.type.kind,
        version=provider.version,
        contract=provider.contract,
        label=provider.label,
        source=provider.source,
        metadata=_relative(provider.metadata_path, staging),
        components=_relative(provider.components_path, staging),
        images=[str(parse_reference(image)) for image in provider.images],
    )


def _image_record(image: CopiedImage) -> ImageRecord:
    return ImageRecord(
        reference=image.reference,
        digest=image.manifest.digest,
        media_type=image.manifest.media_type,
        platforms=image.platforms,
        size=image.size,
        source_digest=image.source_digest,
    )


def _hashed(path: Path, name: str) -> FileRecord:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return FileRecord(path=name, sha256=hasher.hexdigest(), size=path.stat().st_size)


def _file_records(staging: Path, images: list[CopiedImage]) -> list[FileRecord]:
    """Every member but the manifest and signature: provider files, the layout's
    metadata files, then blobs. Blob names are their digests, verified on download,
    so they need no second hashing pass."""
    records: list[FileRecord] = []
    for path in sorted((staging / "providers").rglob("*")):
        if path.is_file():
            records.append(_hashed(path, _relative(path, staging)))
    for name in (OCI_LAYOUT_FILE, INDEX_FILE):
        records.append(_hashed(staging / IMAGES_DIR / name, f"{IMAGES_DIR}/{name}"))
    blobs_dir = staging / IMAGES_DIR / "blobs" / "sha256"
    for path in sorted(blobs_dir.iterdir()):
        digest = f"sha256:{path.name}"
        records.append(FileRecord(blob_member(digest), path.name, path.stat().st_size))
    return records
