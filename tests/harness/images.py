"""Build small, deterministic test images as an OCI image layout, push them with skopeo.

No docker daemon is needed: layers are tar.gz archives generated from a seed (so a
"shared base layer" is byte-identical wherever it is used and blob de-duplication can be
tested), configs carry correct ``rootfs.diff_ids``, and multi-arch images are real OCI
indexes with ``platform`` descriptors.  After pushing, every digest is read back from the
registry itself (``skopeo inspect --raw``), so :class:`TestImage` describes what the registry
really serves, not what we believe we sent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import skopeo

__all__ = [
    "CORPUS",
    "DOCKER_CONFIG",
    "DOCKER_LAYER",
    "DOCKER_LIST",
    "DOCKER_MANIFEST",
    "OCI_CONFIG",
    "OCI_INDEX",
    "OCI_LAYER_GZIP",
    "OCI_LAYER_TAR",
    "OCI_MANIFEST",
    "CorpusEntry",
    "Descriptor",
    "Layer",
    "OciLayout",
    "TestImage",
    "build_corpus",
    "describe_pushed",
    "make_big_image",
    "push_corpus",
    "push_image",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
REF_NAME = "org.opencontainers.image.ref.name"
_EPOCH = 1_700_000_000  # fixed mtime: identical input -> identical bytes
_CREATED = "2023-11-14T22:13:20Z"


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str
    size: int
    platform: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """Serialise as it appears inside manifests and indexes."""
        out: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class Layer:
    """A layer blob plus the digest of its uncompressed tar (the config's diff_id)."""

    descriptor: Descriptor
    diff_id: str


class OciLayout:
    """A writable OCI image layout directory (``oci-layout``, ``index.json``, ``blobs/``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self.index_file = root / "index.json"
        if not self.index_file.exists():
            self._write_index([])

    # -- blobs ------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        """Path of a blob by ``sha256:`` digest."""
        algorithm, _, hexdigest = digest.partition(":")
        assert algorithm == "sha256", digest
        return self.blobs / hexdigest

    def write_blob(self, data: bytes, media_type: str) -> Descriptor:
        """Store ``data`` content-addressed and describe it."""
        digest = skopeo.digest_of(data)
        path = self.blob_path(digest)
        if not path.exists():
            path.write_bytes(data)
        return Descriptor(media_type, digest, len(data))

    def add_layer(
        self, seed: str, *, size: int = 4096, files: int = 3, media_type: str = OCI_LAYER_GZIP
    ) -> Layer:
        """A deterministic gzip'ed tar layer whose content is derived from ``seed``."""
        tar_bytes = _layer_tar(seed, size=size, files=files)
        diff_id = skopeo.digest_of(tar_bytes)
        buf = io.BytesIO()
        # mtime=0 and no filename keep the gzip header (and so the digest) stable.
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
            gz.write(tar_bytes)
        return Layer(self.write_blob(buf.getvalue(), media_type), diff_id)

    def add_config(
        self,
        layers: Sequence[Layer],
        *,
        architecture: str = "amd64",
        os_name: str = "linux",
        variant: str | None = None,
        label: str = "",
        media_type: str = OCI_CONFIG,
    ) -> Descriptor:
        """An image config with ``rootfs.diff_ids`` matching ``layers``."""
        config: dict[str, Any] = {
            "architecture": architecture,
            "os": os_name,
            "created": _CREATED,
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Cmd": ["/bin/true"],
                "Labels": {"org.airgap.test": label},
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
            "history": [
                {"created": _CREATED, "created_by": f"airgap test layer {i}"}
                for i, _ in enumerate(layers)
            ],
        }
        if variant:
            config["variant"] = variant
        return self.write_blob(_json_bytes(config), media_type)

    def add_manifest(
        self, config: Descriptor, layers: Sequence[Layer], *, docker: bool = False
    ) -> Descriptor:
        """An image manifest (OCI, or Docker schema 2 with ``docker=True``)."""
        media_type = DOCKER_MANIFEST if docker else OCI_MANIFEST
        manifest = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": config.to_json(),
            "layers": [layer.descriptor.to_json() for layer in layers],
        }
        return self.write_blob(_json_bytes(manifest), media_type)

    def add_image(
        self,
        layer_seeds: Sequence[str],
        *,
        architecture: str = "amd64",
        os_name: str = "linux",
        variant: str | None = None,
        layer_size: int = 4096,
        docker: bool = False,
    ) -> Descriptor:
        """Layers + config + manifest in one go; returns the manifest descriptor."""
        layer_type = DOCKER_LAYER if docker else OCI_LAYER_GZIP
        layers = [
            self.add_layer(seed, size=layer_size, media_type=layer_type) for seed in layer_seeds
        ]
        config = self.add_config(
            layers,
            architecture=architecture,
            os_name=os_name,
            variant=variant,
            label="/".join(layer_seeds),
            media_type=DOCKER_CONFIG if docker else OCI_CONFIG,
        )
        return self.add_manifest(config, layers, docker=docker)

    def add_index(
        self, manifests: Iterable[tuple[Descriptor, dict[str, str]]], *, docker: bool = False
    ) -> Descriptor:
        """An OCI index (or Docker manifest list) of ``(manifest, platform)`` pairs."""
        media_type = DOCKER_LIST if docker else OCI_INDEX
        index = {
            "schemaVersion": 2,
            "mediaType": media_type,
            "manifests": [
                Descriptor(d.media_type, d.digest, d.size, platform=p).to_json()
                for d, p in manifests
            ],
        }
        return self.write_blob(_json_bytes(index), media_type)

    # -- index.json -----------------------------------------------------------------------

    def _read_index(self) -> list[dict[str, Any]]:
        manifests: list[dict[str, Any]] = json.loads(self.index_file.read_text())["manifests"]
        return manifests

    def _write_index(self, manifests: list[dict[str, Any]]) -> None:
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
        self.index_file.write_text(json.dumps(index, indent=2))

    def tag(self, name: str, descriptor: Descriptor) -> str:
        """Name ``descriptor`` in ``index.json``; returns the skopeo ref ``oci:ROOT:NAME``."""
        manifests = [
            m for m in self._read_index() if m.get("annotations", {}).get(REF_NAME) != name
        ]
        entry = descriptor.to_json()
        entry.pop("platform", None)
        entry["annotations"] = {REF_NAME: name}
        manifests.append(entry)
        self._write_index(manifests)
        return self.ref(name)

    def ref(self, name: str) -> str:
        """skopeo source reference for a named entry."""
        return f"oci:{self.root}:{name}"


def _layer_tar(seed: str, *, size: int, files: int) -> bytes:
    """Uncompressed tar with a directory and ``files`` files, content seeded by ``seed``."""
    rng = random.Random(f"airgap-layer:{seed}")
    buf = io.BytesIO()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in seed)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        directory = tarfile.TarInfo(f"layers/{safe}")
        directory.type = tarfile.DIRTYPE
        directory.mode = 0o755
        directory.mtime = _EPOCH
        tar.addfile(directory)
        per_file = max(1, size // max(1, files))
        for i in range(files):
            # Random bytes are incompressible, so blob sizes track ``size``.
            data = f"layer {seed}\n".encode() if i == 0 else rng.randbytes(per_file)
            info = tarfile.TarInfo(f"layers/{safe}/file-{i}.bin")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = _EPOCH
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_big_image(
    layout: OciLayout,
    name: str,
    size: int,
    *,
    seed: int = 0,
    chunk_size: int = 1 << 20,
    architecture: str = "amd64",
) -> Descriptor:
    """One image whose single, uncompressed tar layer holds a ``size``-byte random file.

    The blob is written and hashed chunk by chunk, never held in memory, so the harness can
    make images larger than the memory limits the streaming tests enforce on airgap.
    The file is tagged ``name`` in ``layout``; returns the manifest descriptor.
    """
    rng = random.Random(seed)
    tmp = layout.blobs / f".tmp-{name}-{os.getpid()}"
    hasher = hashlib.sha256()
    info = tarfile.TarInfo("big/payload.bin")
    info.size = size
    info.mode = 0o644
    info.mtime = _EPOCH
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    total = 0
    with tmp.open("wb") as out:

        def emit(data: bytes) -> None:
            nonlocal total
            hasher.update(data)
            out.write(data)
            total += len(data)

        emit(header)
        left = size
        while left:
            n = min(left, chunk_size)
            emit(rng.randbytes(n))
            left -= n
        padding = (-size) % tarfile.BLOCKSIZE
        emit(b"\0" * padding + b"\0" * (2 * tarfile.BLOCKSIZE))
        # tarfile pads archives to a RECORDSIZE multiple; mimic it for a conventional tar.
        emit(b"\0" * ((-total) % tarfile.RECORDSIZE))
    digest = "sha256:" + hasher.hexdigest()
    final = layout.blob_path(digest)
    tmp.replace(final)
    # Uncompressed layer: the blob digest *is* the diff_id.
    layer = Layer(Descriptor(OCI_LAYER_TAR, digest, total), digest)
    config = layout.add_config([layer], architecture=architecture, label=f"big:{size}")
    manifest = layout.add_manifest(config, [layer])
    layout.tag(name, manifest)
    return manifest


@dataclass
class TestImage:
    """An image as a registry actually serves it.

    ``digest`` is the sha256 of the exact manifest bytes the registry returns;
    ``blob_digests`` is every config and layer reachable (through an index's children
    too); ``child_digests``/``platforms`` are empty for single-manifest images.
    """

    __test__ = False  # not a pytest test class despite the name

    reference: str  # "127.0.0.1:PORT/repo:tag"
    registry_host: str
    repository: str
    tag: str
    digest: str
    media_type: str
    raw_manifest: bytes
    blob_digests: set[str] = field(default_factory=set)
    layer_digests: set[str] = field(default_factory=set)
    config_digests: set[str] = field(default_factory=set)
    child_digests: list[str] = field(default_factory=list)
    platforms: list[str] = field(default_factory=list)
    layout_ref: str | None = None  # oci:DIR:NAME it was pushed from, if any

    @property
    def digest_reference(self) -> str:
        """``host/repo@sha256:...``."""
        return f"{self.registry_host}/{self.repository}@{self.digest}"

    @property
    def is_index(self) -> bool:
        """True for an OCI index or Docker manifest list."""
        return self.media_type in INDEX_TYPES


def _platform_string(platform: dict[str, Any]) -> str:
    out = f"{platform.get('os', '')}/{platform.get('architecture', '')}"
    if platform.get("variant"):
        out += f"/{platform['variant']}"
    return out


def describe_pushed(
    registry: skopeo.RegistryLike,
    repository: str,
    tag: str,
    *,
    layout_ref: str | None = None,
) -> TestImage:
    """Read an image back from ``registry`` and describe it (digests from the served bytes)."""
    reference = f"{registry.host}/{repository}:{tag}"
    raw = skopeo.raw_manifest(reference, registry=registry)
    manifest = json.loads(raw)
    media_type = manifest.get("mediaType") or (
        OCI_INDEX if "manifests" in manifest else OCI_MANIFEST
    )
    image = TestImage(
        reference=reference,
        registry_host=registry.host,
        repository=repository,
        tag=tag,
        digest=skopeo.digest_of(raw),
        media_type=media_type,
        raw_manifest=raw,
        layout_ref=layout_ref,
    )
    if "manifests" in manifest:
        for child in manifest["manifests"]:
            image.child_digests.append(child["digest"])
            if child.get("platform"):
                image.platforms.append(_platform_string(child["platform"]))
            child_raw = skopeo.raw_manifest(
                f"{registry.host}/{repository}@{child['digest']}", registry=registry
            )
            if skopeo.digest_of(child_raw) != child["digest"]:
                raise AssertionError(f"child {child['digest']} served with other bytes")
            _collect_blobs(image, json.loads(child_raw))
    else:
        _collect_blobs(image, manifest)
    return image


def _collect_blobs(image: TestImage, manifest: dict[str, Any]) -> None:
    config = manifest["config"]["digest"]
    layers = {layer["digest"] for layer in manifest["layers"]}
    image.config_digests.add(config)
    image.layer_digests |= layers
    image.blob_digests |= layers | {config}


def push_image(
    layout: OciLayout,
    name: str,
    registry: skopeo.RegistryLike,
    repository: str,
    tag: str,
    *,
    format: str | None = None,
    preserve_digests: bool | None = None,
) -> TestImage:
    """``skopeo copy --all`` a layout entry to ``registry`` and describe the result.

    Unless converting (``format``), ``--preserve-digests`` is used: without it skopeo
    gzips uncompressed layers on the way to a registry, changing every digest.
    """
    src = layout.ref(name)
    skopeo.copy(
        src,
        skopeo.docker_ref(f"{repository}:{tag}", registry),
        dest_registry=registry,
        format=format,
        preserve_digests=format is None if preserve_digests is None else preserve_digests,
    )
    return describe_pushed(registry, repository, tag, layout_ref=src)


# -- the standard corpus ------------------------------------------------------------------

BASE_LAYERS = ("base-0", "base-1")  # shared, byte-identical across app and sidecar
AMD64 = {"os": "linux", "architecture": "amd64"}
ARM64 = {"os": "linux", "architecture": "arm64", "variant": "v8"}


@dataclass(frozen=True)
class CorpusEntry:
    """Where a corpus image lives in the layout and where it is pushed."""

    layout_name: str
    repository: str
    tag: str
    format: str | None = None  # skopeo --format; "v2s2" converts to Docker schema 2


CORPUS: dict[str, CorpusEntry] = {
    "app": CorpusEntry("app", "test/app", "v1"),
    "sidecar": CorpusEntry("sidecar", "test/sidecar", "v2"),
    "multiarch": CorpusEntry("multiarch", "test/multi", "v1"),
    # skopeo's oci: transport ignores index.json entries with Docker media types, so the
    # Docker variants are OCI in the layout and converted by skopeo --format v2s2 on push
    # (skopeo 1.9 converts an OCI index into a Docker manifest list, children included).
    "dockerv2": CorpusEntry("dockerv2", "test/dockerv2", "v1", "v2s2"),
    "dockerlist": CorpusEntry("dockerlist", "test/dockerlist", "v1", "v2s2"),
}


def build_corpus(layout: OciLayout) -> dict[str, CorpusEntry]:
    """Write the standard images into ``layout``; returns :data:`CORPUS`."""
    layout.tag("app", layout.add_image([*BASE_LAYERS, "app"], layer_size=16 * 1024))
    layout.tag("sidecar", layout.add_image([*BASE_LAYERS, "sidecar"], layer_size=16 * 1024))

    def multi(prefix: str) -> Descriptor:
        amd = layout.add_image(["base-0", f"{prefix}-amd64"], architecture="amd64")
        arm = layout.add_image(["base-0", f"{prefix}-arm64"], architecture="arm64", variant="v8")
        return layout.add_index([(amd, AMD64), (arm, ARM64)])

    layout.tag("multiarch", multi("multi"))
    layout.tag("dockerv2", layout.add_image(["docker-base", "docker-app"]))
    layout.tag("dockerlist", multi("dockerlist"))
    return dict(CORPUS)


def push_corpus(
    layout: OciLayout,
    registry: skopeo.RegistryLike,
    entries: dict[str, CorpusEntry],
) -> dict[str, TestImage]:
    """Push ``entries`` from ``layout`` into ``registry``; returns name -> TestImage."""
    return {
        name: push_image(
            layout, entry.layout_name, registry, entry.repository, entry.tag, format=entry.format
        )
        for name, entry in entries.items()
    }
