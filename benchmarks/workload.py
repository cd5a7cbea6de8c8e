"""The benchmark workload: plan it, write it streamingly into an OCI layout, push it.

Three image sets, each generated once and cached under ``OUT/workload/<fingerprint>/``:

- ``main``: N images (default 40) built like real ones: four base stacks (static,
  debian, ubuntu, a JRE on debian) shared between images, a few multi-arch indexes
  (amd64 + arm64, the arm64 variants sharing arm64 bases), per-image application layers
  from 1 KiB to 200 MiB, about 2 GiB of unique bytes per 40 images;
- ``big``: one image with a single 1 GiB layer (the memory case);
- ``small``: 400 images of two tiny layers each (the linearity case; the first 40 are the
  small run).

Layers are real gzip'ed tars (stored deflate blocks, so generation runs at disk speed)
whose payload is AES-CTR keystream: incompressible, deterministic from the layer's seed,
never held in memory. Configs carry the right ``diff_ids``. Content realism does not
matter to a copy tool; sizes, counts and sharing do.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import tarfile
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.harness import skopeo
from tests.harness.images import (
    AMD64,
    ARM64,
    OCI_LAYER_GZIP,
    Descriptor,
    Layer,
    OciLayout,
    make_big_image,
)
from tests.harness.realistic import REALISTIC_PROVIDERS, realistic_releases
from tests.harness.registry import RegistryServer
from tests.harness.releases import ReleaseServer

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
MAX_LAYER = 200 * MIB
MAIN_BYTES_PER_40 = 2 * GIB
CHUNK = 1 << 20
WORKLOAD_VERSION = 2  # bump when generation changes: invalidates cached workloads
_EPOCH = 1_700_000_000
_TAR_OVERHEAD = tarfile.BLOCKSIZE * 3  # header + end-of-archive blocks

# Base stacks: (seed, size). "debian" layers are shared by the debian and jre kinds.
_BASES: dict[str, list[tuple[str, int]]] = {
    "static": [("base-static", 2 * MIB), ("ca-certificates", 220 * KIB)],
    "debian": [("base-debian", 29 * MIB), ("tzdata", 1400 * KIB)],
    "ubuntu": [("base-ubuntu", 72 * MIB), ("apt-tools", 18 * MIB)],
    "jre": [("base-debian", 29 * MIB), ("tzdata", 1400 * KIB), ("jre", 110 * MIB)],
}
_KINDS = ("static", "debian", "ubuntu", "jre")


@dataclass(frozen=True)
class LayerSpec:
    seed: str
    size: int


@dataclass(frozen=True)
class ImageSpec:
    """One image: a single manifest, or an index when it has several variants."""

    name: str  # the OCI layout ref name, also the last path element of the repository
    repository: str
    tag: str
    variants: tuple[tuple[str, tuple[LayerSpec, ...]], ...]  # (architecture, layers)

    @property
    def is_index(self) -> bool:
        return len(self.variants) > 1


def plan_main(images: int, scale: float) -> list[ImageSpec]:
    """``images`` images, ~2 GiB x ``scale`` per 40 images of unique layer bytes."""
    rng = random.Random(f"airgap-bench-main:{images}")
    drafts: list[tuple[str, list[tuple[str, list[tuple[str, int, bool]]]]]] = []
    for i in range(images):
        kind = _KINDS[i % len(_KINDS)]
        arches = ["amd64", "arm64"] if i % 10 == 3 else ["amd64"]
        app_sizes = [_log_uniform(rng, 64 * KIB, 64 * MIB) for _ in range(rng.randint(1, 3))]
        tiny = rng.randint(1 * KIB, 8 * KIB)
        variants = []
        for arch in arches:
            suffix = "" if arch == "amd64" else f"-{arch}"
            layers: list[tuple[str, int, bool]] = [  # (seed, size, scaled-to-target)
                (f"{seed}{suffix}", int(size * scale), False) for seed, size in _BASES[kind]
            ]
            layers += [
                (f"img{i:03d}-app{n}{suffix}", size, True) for n, size in enumerate(app_sizes)
            ]
            if i % 20 == 11:  # a couple of images carry a model or data set
                layers.append((f"img{i:03d}-data{suffix}", int(MAX_LAYER * scale), False))
            layers.append((f"img{i:03d}-etc{suffix}", tiny, False))
            variants.append((arch, layers))
        drafts.append((f"img{i:03d}", variants))

    unique: dict[str, tuple[int, bool]] = {}
    for _, variants in drafts:
        for _, layers in variants:
            for seed, size, scaled in layers:
                unique[seed] = (size, scaled)
    fixed = sum(size for size, scaled in unique.values() if not scaled)
    variable = sum(size for size, scaled in unique.values() if scaled) or 1
    target = MAIN_BYTES_PER_40 * scale * images / 40
    factor = max(0.05, (target - fixed) / variable)
    cap = max(KIB, int(MAX_LAYER * scale))

    def final(size: int, scaled: bool) -> int:
        size = int(size * factor) if scaled else size
        return min(cap, max(KIB, size))

    return [
        ImageSpec(
            name=name,
            repository=f"bench/{name}",
            tag="v1",
            variants=tuple(
                (arch, tuple(LayerSpec(seed, final(size, scaled)) for seed, size, scaled in layers))
                for arch, layers in variants
            ),
        )
        for name, variants in drafts
    ]


def plan_small(count: int) -> list[ImageSpec]:
    """``count`` images of two unique layers of a few KiB each."""
    rng = random.Random("airgap-bench-small")
    return [
        ImageSpec(
            name=f"s{i:03d}",
            repository=f"bench-small/s{i:03d}",
            tag="v1",
            variants=(
                (
                    "amd64",
                    (
                        LayerSpec(f"small{i:03d}-a", rng.randint(2 * KIB, 6 * KIB)),
                        LayerSpec(f"small{i:03d}-b", rng.randint(2 * KIB, 6 * KIB)),
                    ),
                ),
            ),
        )
        for i in range(count)
    ]


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(low * (high / low) ** rng.random())


# -- generation ----------------------------------------------------------------------


def _layer_payload(seed: str) -> Any:
    key = hashlib.sha256(f"airgap-bench-layer:{seed}".encode()).digest()
    return Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()


def write_layer(layout: OciLayout, spec: LayerSpec) -> Layer:
    """A gzip'ed (stored blocks) tar of one random file, ~``spec.size`` bytes, streamed."""
    payload = max(64, spec.size - _TAR_OVERHEAD - 32)
    info = tarfile.TarInfo(f"data/{spec.seed}.bin")
    info.size = payload
    info.mode = 0o644
    info.mtime = _EPOCH
    keystream = _layer_payload(spec.seed)
    compressor = zlib.compressobj(0, zlib.DEFLATED, 31)  # gzip wrapper, stored blocks
    tar_hash, blob_hash = hashlib.sha256(), hashlib.sha256()
    tmp = layout.blobs / f".tmp-{spec.seed}"
    size = 0
    zeros = bytes(CHUNK)
    with tmp.open("wb") as out:

        def emit(data: bytes, final: bool = False) -> None:
            nonlocal size
            tar_hash.update(data)
            packed = compressor.compress(data) + (compressor.flush() if final else b"")
            blob_hash.update(packed)
            out.write(packed)
            size += len(packed)

        emit(info.tobuf(format=tarfile.USTAR_FORMAT))
        left = payload
        while left:
            n = min(left, CHUNK)
            emit(keystream.update(zeros[:n]))
            left -= n
        emit(b"\0" * ((-payload) % tarfile.BLOCKSIZE) + b"\0" * (2 * tarfile.BLOCKSIZE), True)
    digest = "sha256:" + blob_hash.hexdigest()
    tmp.replace(layout.blob_path(digest))
    return Layer(Descriptor(OCI_LAYER_GZIP, digest, size), "sha256:" + tar_hash.hexdigest())


def _platform(arch: str) -> dict[str, str]:
    return dict(ARM64 if arch == "arm64" else AMD64)


def generate(layout: OciLayout, images: Iterable[ImageSpec]) -> dict[str, Descriptor]:
    """Write every image (each distinct layer once) and tag it by name; top descriptors."""
    layers: dict[str, Layer] = {}
    tops: dict[str, Descriptor] = {}
    for image in images:
        manifests = []
        for arch, specs in image.variants:
            image_layers = []
            for spec in specs:
                if spec.seed not in layers:
                    layers[spec.seed] = write_layer(layout, spec)
                image_layers.append(layers[spec.seed])
            platform = _platform(arch)
            config = layout.add_config(
                image_layers,
                architecture=platform["architecture"],
                variant=platform.get("variant"),
                label=image.name,
            )
            manifests.append((layout.add_manifest(config, image_layers), platform))
        top = layout.add_index(manifests) if image.is_index else manifests[0][0]
        tops[image.name] = top
    _tag_all(layout, tops)
    return tops


def _tag_all(layout: OciLayout, tops: dict[str, Descriptor]) -> None:
    """Name every image in index.json at once (OciLayout.tag rewrites it per call)."""
    index = json.loads(layout.index_file.read_text())
    kept = [m for m in index["manifests"] if m.get("annotations", {}).get(_REF) not in tops]
    for name, descriptor in tops.items():
        entry = descriptor.to_json()
        entry["annotations"] = {_REF: name}
        kept.append(entry)
    index["manifests"] = kept
    layout.index_file.write_text(json.dumps(index, indent=2))


_REF = "org.opencontainers.image.ref.name"


def content_of(
    layout: OciLayout, descriptors: Iterable[Descriptor]
) -> tuple[dict[str, int], set[str]]:
    """Every distinct blob reachable (digest -> size), and which of them are manifests
    or indexes (the rest are configs and layers)."""
    seen: dict[str, int] = {}
    manifests: set[str] = set()

    def visit(digest: str, size: int, is_manifest: bool) -> None:
        if digest in seen:
            return
        seen[digest] = size
        if not is_manifest:
            return
        manifests.add(digest)
        document = json.loads(layout.blob_path(digest).read_bytes())
        for child in document.get("manifests", []):
            visit(child["digest"], child["size"], True)
        if "config" in document:
            visit(document["config"]["digest"], document["config"]["size"], False)
        for layer in document.get("layers", []):
            visit(layer["digest"], layer["size"], False)

    for descriptor in descriptors:
        visit(descriptor.digest, descriptor.size, True)
    return seen, manifests


# -- providers -----------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedProviders:
    """The realistic providers as published: spec entries and the bytes collect fetches."""

    entries: list[dict[str, str]]
    files: dict[str, int]  # "OWNER/REPO/TAG/FILE" -> bytes

    @property
    def bytes(self) -> int:
        return sum(self.files.values())

    def summary(self) -> dict[str, Any]:
        return {
            "providers": len(self.entries),
            "files": len(self.files),
            "bytes": self.bytes,
            "mib": round(self.bytes / MIB, 2),
            "components": {
                name: size
                for name, size in self.files.items()
                if not name.endswith("/metadata.yaml")
            },
        }


def publish_realistic(server: ReleaseServer, images: list[str]) -> PublishedProviders:
    """Publish the five realistic provider releases (core ~1.2 MB, bootstrap ~0.6 MB,
    control-plane ~0.7 MB, docker ~0.16 MB, openstack ~0.65 MB of components) on the fake
    GitHub, their managers running ``images``; return what a spec needs to collect them.
    Deterministic: the same images give the same bytes."""
    files: dict[str, int] = {}
    for (repository, tag), release in realistic_releases(images).items():
        owner, repo = repository.split("/")
        server.add_release(owner, repo, tag, release)
        files.update({f"{repository}/{tag}/{name}": len(data) for name, data in release.items()})
    return PublishedProviders([p.spec_entry for p in REALISTIC_PROVIDERS], files)


# -- the cached workload -------------------------------------------------------------


@dataclass(frozen=True)
class ImageSet:
    """A generated image set: what to name in a spec and how many bytes it moves."""

    name: str
    images: list[ImageSpec]
    blobs: dict[str, int]  # digest -> size, every distinct blob incl. manifests
    layer_blobs: dict[str, int]  # configs and layers only (what raw uploads send)

    @property
    def bytes(self) -> int:
        return sum(self.blobs.values())

    def subset(self, count: int, layout: OciLayout) -> ImageSet:
        images = self.images[:count]
        return image_set(f"{self.name}{count}", layout, images)

    def summary(self) -> dict[str, Any]:
        layer_sizes = sorted(self.layer_blobs.values())
        return {
            "images": len(self.images),
            "indexes": sum(1 for image in self.images if image.is_index),
            "distinct_blobs": len(self.blobs),
            "bytes": self.bytes,
            "mib": round(self.bytes / MIB, 1),
            "smallest_blob": layer_sizes[0] if layer_sizes else 0,
            "largest_blob": layer_sizes[-1] if layer_sizes else 0,
        }


def image_set(name: str, layout: OciLayout, images: list[ImageSpec]) -> ImageSet:
    tops = _tops(layout, [image.name for image in images])
    blobs, manifests = content_of(layout, tops.values())
    return ImageSet(name, images, blobs, {d: s for d, s in blobs.items() if d not in manifests})


def blob_repositories(layout: OciLayout, image_set: ImageSet) -> dict[str, str]:
    """Each config and layer of ``image_set`` -> the repository of the first image that
    holds it: where a registry serves it (``GET /v2/REPO/blobs/DIGEST``)."""
    found: dict[str, str] = {}
    tops = _tops(layout, [image.name for image in image_set.images])
    for image in image_set.images:
        blobs, _ = content_of(layout, [tops[image.name]])
        for digest in blobs:
            if digest in image_set.layer_blobs:
                found.setdefault(digest, image.repository)
    return found


def _tops(layout: OciLayout, names: list[str]) -> dict[str, Descriptor]:
    index = json.loads(layout.index_file.read_text())
    by_name = {
        m["annotations"][_REF]: Descriptor(m["mediaType"], m["digest"], m["size"])
        for m in index["manifests"]
        if m.get("annotations", {}).get(_REF)
    }
    return {name: by_name[name] for name in names}


class Workload:
    """The generated layout and the source registry holding it, cached across runs."""

    def __init__(
        self,
        out: Path,
        *,
        images: int,
        scale: float,
        small_count: int,
        big_size: int,
        log: Any = print,
    ) -> None:
        self.main_plan = plan_main(images, scale)
        self.small_plan = plan_small(small_count)
        self.big_size = big_size
        self.log = log
        fingerprint = hashlib.sha256(
            json.dumps(
                {
                    "version": WORKLOAD_VERSION,
                    "main": [asdict(image) for image in self.main_plan],
                    "small": [asdict(image) for image in self.small_plan],
                    "big": big_size,
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()[:12]
        parent = out / "workload"
        self.root = parent / fingerprint
        if parent.is_dir():  # keep the disk sane: one cached workload per out dir
            for stale in parent.iterdir():
                if stale.name != fingerprint:
                    shutil.rmtree(stale, ignore_errors=True)
        self.layout = OciLayout(self.root / "layout")
        self.registry: RegistryServer | None = None

    # -- generation --------------------------------------------------------------

    def prepare(self) -> None:
        marker = self.root / "generated.json"
        if not marker.is_file():
            self.log(f"generating workload into {self.layout.root} (once, cached)")
            generate(self.layout, self.main_plan)
            generate(self.layout, self.small_plan)
            make_big_image(self.layout, "big", self.big_size, seed=7)
            marker.write_text(json.dumps({"generated": True}))
        self.main = image_set("main", self.layout, self.main_plan)
        self.small = image_set("small", self.layout, self.small_plan)
        self.big = image_set("big", self.layout, [ImageSpec("big", "bench-big/big", "v1", ())])

    # -- the source registry -----------------------------------------------------

    def start_source(self) -> RegistryServer:
        """Start the source registry on its cached storage; push what it lacks."""
        self.registry = RegistryServer(self.root / "source-registry", "plain")
        marker = self.root / "pushed.json"
        pushed: set[str] = set(json.loads(marker.read_text())) if marker.is_file() else set()
        todo = [
            image
            for image in [*self.main.images, *self.small.images, *self.big.images]
            if image.name not in pushed
        ]
        if todo:
            self.log(f"pushing {len(todo)} images to the source registry with skopeo (once)")
            registry = self.registry

            def push(image: ImageSpec) -> str:
                skopeo.copy(
                    self.layout.ref(image.name),
                    skopeo.docker_ref(f"{image.repository}:{image.tag}", registry),
                    dest_registry=registry,
                    preserve_digests=True,
                )
                return image.name

            # Biggest images alone first would not help: 4 pushes at once keep both
            # cores busy without starving the registry.
            with ThreadPoolExecutor(4) as pool:
                for name in pool.map(push, todo):
                    pushed.add(name)
            marker.write_text(json.dumps(sorted(pushed)))
        return self.registry

    def references(self, image_set: ImageSet) -> list[str]:
        assert self.registry is not None
        return [f"{self.registry.host}/{i.repository}:{i.tag}" for i in image_set.images]

    def stop(self) -> None:
        if self.registry is not None:
            self.registry.stop()
            self.registry = None
