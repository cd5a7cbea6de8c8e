"""Manifests images for OpenShift's image-based installer, and the list it consumes.

OpenShift's Cluster API installer reads each component from an image holding
``/capi-operator-manifests/PROFILE/manifests.yaml`` and ``metadata.yaml``
(cluster-capi-operator, ``pkg/providerimages``), listed in a ``ClusterAPI`` revision's
``components``: ``{type: Image, image: {ref: HOST/NAME@sha256:..., profile}}``, installed
in list order (``operator.openshift.io/v1alpha1``). On import airgap builds one such
image for every provider of the bundle, whatever its source: the default profile holds
the rewritten, digest-pinned components (so no ``selfImageRef`` is needed) and a
metadata.yaml with the provider's name, type, version and install order. The image is
reproducible: same components, same digest (sorted entries, fixed mtimes, uid/gid 0,
gzip with mtime 0 and no name), so importing twice pushes nothing new.

Building is pure (``build_image``, ``component_list``); pushing goes through a registry
client in two steps: ``stage`` puts the blobs, ``name_image`` the manifest under
``TARGET/capi-manifests/LABEL:VERSION`` (LABEL: the clusterctl label,
``infrastructure-aws``: names alone collide across types). An import stages while the
images' tags are written and names once they are: a manifests image names images by
digest, and no tag of one goes before every image it names is whole.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from airgap.bundle.format import ProviderRecord
from airgap.core.errors import AirgapError
from airgap.core.parallel import Ahead, ByteBudget, run_parallel
from airgap.oci.manifest import OCI_MANIFEST, Manifest, sha256_digest
from airgap.registry.client import Registry, bytes_body
from airgap.rewrite.mapping import Target
from airgap.rewrite.providers import RewrittenProvider

if TYPE_CHECKING:
    from airgap.providers.imagesource import ProfileMetadata

MANIFESTS_ROOT = "capi-operator-manifests"
PROFILE = "default"
REPOSITORY = "capi-manifests"
COMPONENTS_FILE = "openshift/capi-components.yaml"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MAX_COMPONENTS = 32  # a ClusterAPI revision's components (MaxItems)
# providers built and pushed at once: each push is ~9 requests, one after the other,
# that wait on the registry; as many as there are providers, up to 8, with at most
# PUBLISH_BYTES of components (the image's tar and layer built from them) in memory
PUBLISH_CONCURRENCY = 8
PUBLISH_BYTES = 32 * 1024 * 1024
# ImageDigestFormat's two CEL rules, as one expression, and its host part alone
_HOST_PATTERN = r"(?:[a-zA-Z0-9-]+\.)+[a-zA-Z0-9-]+(?::[0-9]{2,5})?"
_REF_RE = re.compile(
    _HOST_PATTERN + r"/(?:[a-zA-Z0-9-_]{0,61}/)?[a-zA-Z0-9-_.]*?@sha256:[a-f0-9]{64}"
)
_HOST_RE = re.compile(_HOST_PATTERN)
# what each manifests image's version tag names in the target: (repository, tag) -> digest
TagAnswers = dict[tuple[str, str], str | None]
MTIME = 0  # every entry's time: the same components give the same bytes, any day
# The installer installs in ascending installOrder; a provider read from an image keeps
# its own, the others are ordered as clusterctl installs them (core first).
_ORDER = {
    "CoreProvider": 10,
    "BootstrapProvider": 20,
    "ControlPlaneProvider": 20,
    "InfrastructureProvider": 30,
    "IPAMProvider": 40,
    "RuntimeExtensionProvider": 40,
    "AddonProvider": 50,
}
_TYPES = {
    "CoreProvider": "core",
    "BootstrapProvider": "bootstrap",
    "ControlPlaneProvider": "control-plane",
    "InfrastructureProvider": "infrastructure",
    "IPAMProvider": "ipam",
    "RuntimeExtensionProvider": "runtimeextension",
    "AddonProvider": "addon",
}


@dataclass(frozen=True)
class BuiltImage:
    """One manifests image: its blobs (layer, config) and manifest, as exact bytes."""

    layer: bytes
    config: bytes
    manifest: Manifest
    files: dict[str, bytes]  # path in the image -> bytes


@dataclass(frozen=True)
class ImageProfile:
    """One profile of a manifests image: ``/capi-operator-manifests/NAME/``."""

    name: str
    manifests: str
    metadata: bytes
    install_order: int


@dataclass(frozen=True)
class Published:
    """A manifests image in the target: where, by digest, and in which order; each of
    its profiles is a component of its own (none listed: ``default`` alone)."""

    provider: ProviderRecord
    repository: str  # e.g. PREFIX/capi-manifests/aws
    tag: str
    reference: str  # HOST/REPOSITORY@sha256:...
    install_order: int
    profiles: tuple[tuple[str, int], ...] = ()  # (profile, its install order)

    def components(self) -> list[tuple[int, str]]:
        """(install order, profile) of each component this image is."""
        if not self.profiles:
            return [(self.install_order, PROFILE)]
        return [(order, name) for name, order in self.profiles]


def install_order(record: ProviderRecord) -> int:
    if record.image is not None:
        return record.image.install_order
    return _ORDER.get(record.type, 50)


def metadata_yaml(record: ProviderRecord) -> bytes:
    """The profile's metadata.yaml (``providermetadata.ProviderMetadata``): the name the
    image format uses (``cluster-api-provider-NAME``, or the one the source image had),
    its type and version as attributes, its install order and OpenShift platform."""
    image = record.image
    if image is not None:
        name = image.name
    elif record.type == "CoreProvider":
        name = record.name
    else:
        name = f"cluster-api-provider-{record.name}"
    lines = [
        f"name: {_scalar(name)}",
        "attributes:",
        f"  type: {_scalar(_TYPES.get(record.type, record.type))}",
        f"  version: {_scalar(record.version)}",
        f"  contract: {_scalar(record.contract)}",
        f"installOrder: {install_order(record)}",
    ]
    if image is not None and image.ocp_platform:
        lines.append(f"ocpPlatform: {_scalar(image.ocp_platform)}")
    return ("\n".join(lines) + "\n").encode()


def profile_metadata_yaml(record: ProviderRecord, metadata: ProfileMetadata) -> bytes:
    """A carried profile's metadata.yaml as its image said it (name, every attribute,
    install order, OpenShift platform), with the type, version and contract the bundle
    records where it said none; no ``selfImageRef``: the manifests are pinned."""
    attributes = dict(metadata.attributes)
    attributes.setdefault("type", _TYPES.get(record.type, record.type))
    attributes.setdefault("version", record.version)
    attributes.setdefault("contract", record.contract)
    lines = [f"name: {_scalar(metadata.name)}", "attributes:"]
    lines += [f"  {_scalar(key)}: {_scalar(value)}" for key, value in attributes.items()]
    lines.append(f"installOrder: {metadata.install_order}")
    if metadata.ocp_platform:
        lines.append(f"ocpPlatform: {_scalar(metadata.ocp_platform)}")
    return ("\n".join(lines) + "\n").encode()


def image_profiles(provider: RewrittenProvider) -> list[ImageProfile]:
    """The profiles of a provider's manifests image: each one an image-based provider
    carries apart, as its image had them; else ``default``, the rewritten components."""
    record = provider.record
    if not provider.profiles:
        order = install_order(record)
        return [ImageProfile(PROFILE, provider.components, metadata_yaml(record), order)]
    return [
        ImageProfile(
            profile.name,
            profile.manifests,
            profile_metadata_yaml(record, profile.metadata),
            profile.metadata.install_order,
        )
        for profile in provider.profiles
    ]


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as the same string (JSON is YAML)."""
    return json.dumps(text)


def build_image(profiles: Sequence[ImageProfile]) -> BuiltImage:
    """The image: one gzip layer with each profile's two files, an OCI config naming
    its diff ID, an OCI manifest; every byte determined by the inputs."""
    files: dict[str, bytes] = {}
    directories = [MANIFESTS_ROOT]
    for profile in profiles:
        base = f"{MANIFESTS_ROOT}/{profile.name}"
        directories.append(base)
        files[f"{base}/manifests.yaml"] = profile.manifests.encode()
        files[f"{base}/metadata.yaml"] = profile.metadata
    tar = _tar(directories, files)
    layer = _gzip(tar)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": {"io.openshift.capi.manifests": "true"}},
            "rootfs": {"type": "layers", "diff_ids": [sha256_digest(tar)]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": sha256_digest(config),
                "size": len(config),
            },
            "layers": [
                {"mediaType": OCI_LAYER_GZIP, "digest": sha256_digest(layer), "size": len(layer)}
            ],
        }
    )
    return BuiltImage(layer, config, Manifest.from_bytes(manifest, OCI_MANIFEST), files)


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _tar(directories: Sequence[str], files: dict[str, bytes]) -> bytes:
    """A ustar archive, entries sorted, owned by 0:0, fixed times and modes."""
    buffer = io.BytesIO()
    entries = sorted([(d, None) for d in directories] + list(files.items()))
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name + "/" if data is None else name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _gzip(data: bytes) -> bytes:
    """Level 1, go-containerregistry's default for the layers it compresses
    (``gzip.BestSpeed``): every import builds one layer per provider, for a registry
    next to it, and level 6 takes several times as long for layers only a quarter
    smaller."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=1) as gz:
        gz.write(data)
    return buffer.getvalue()


def repository_for(target: Target, record: ProviderRecord) -> str:
    """``[PREFIX/]capi-manifests/LABEL``: the provider's clusterctl label
    (``cluster-api``, ``bootstrap-kubeadm``, ``control-plane-kubeadm``), since a name
    alone is shared by providers of different types (kubeadm's bootstrap and control
    plane) that must never share a repository and tag."""
    return target.repository(REPOSITORY, record.label)


@dataclass(frozen=True)
class Staged:
    """A manifests image whose blobs are in its repository: ``name_image`` PUTs its manifest
    under the version tag (``manifest`` None: the tag names these bytes already)."""

    published: Published
    manifest: Manifest | None


def stage(
    registry: Registry,
    target: Target,
    provider: ProviderRecord,
    image: BuiltImage,
    tags: TagAnswers,
    profiles: Sequence[ImageProfile] = (),
) -> Staged:
    """The blobs of ``image`` its repository lacks, each asked for and its session
    opened in one request (``find_or_start``), as the images' are; the manifest is left
    to ``name_image``. A tag that already names these bytes (a re-import) costs its one
    HEAD (``tags``, from ``tags_now``) and nothing else: no write is sent to a registry
    that holds it all. The layer and the config go side by side: an import stages while
    the registry writes the images' tags, when every request waits on it, and one after
    the other they were five waits per provider."""
    repository = repository_for(target, provider)
    what = _what(provider)
    digest = image.manifest.digest
    published = Published(
        provider,
        repository,
        provider.version,
        f"{target.host}/{repository}@{digest}",
        install_order(provider),
        tuple(
            (p.name, p.install_order) for p in profiles if p.name != PROFILE or len(profiles) > 1
        ),
    )
    if tags.get((repository, provider.version)) == digest:
        return Staged(published, None)
    config = Ahead("manifests-config", partial(_put_blob, registry, repository, image.config, what))
    _put_blob(registry, repository, image.layer, what)
    config.result()
    return Staged(published, image.manifest)


def tags_now(
    registry: Registry, target: Target, providers: Sequence[RewrittenProvider]
) -> TagAnswers:
    """What each provider's version tag names in the target, by (repository, tag): one
    HEAD each, side by side. An import asks before it pushes anything, while the
    registry is idle, so that ``stage`` starts with the answers."""
    asked = [(repository_for(target, p.record), p.record) for p in providers]
    answers = run_parallel(
        [
            partial(registry.manifest_digest, repository, record.version, what=_what(record))
            for repository, record in asked
        ],
        PUBLISH_CONCURRENCY,
    )
    return {
        (repository, record.version): answer
        for (repository, record), answer in zip(asked, answers, strict=True)
    }


def _put_blob(registry: Registry, repository: str, blob: bytes, what: str) -> None:
    """``blob`` into ``repository`` unless it is there."""
    blob_digest = sha256_digest(blob)
    session = registry.find_or_start(repository, blob_digest, what=what)
    if session is not None:
        registry.upload_blob(
            repository, blob_digest, len(blob), bytes_body(blob), what=what, session=session
        )


def name_image(registry: Registry, staged: Staged) -> Published:
    """The staged image's manifest under its tag, read back after: what the component
    list names must be what is there."""
    published, manifest = staged.published, staged.manifest
    if manifest is not None:
        what = _what(published.provider)
        repository, tag = published.repository, published.tag
        registry.put_manifest(repository, tag, manifest, what=what)
        served = registry.manifest_digest(repository, tag, what=what)
        if served != manifest.digest:
            raise_mismatch(what, repository, tag, served, manifest.digest)
    return published


def _what(provider: ProviderRecord) -> str:
    return f"manifests image of {provider.type}/{provider.name} {provider.version}"


def raise_mismatch(what: str, repository: str, tag: str, served: str | None, want: str) -> None:
    raise AirgapError(
        f"{what}: {repository}:{tag} resolves to {served or 'nothing'} after the push, not {want}"
    )


def stage_all(
    registry: Registry,
    target: Target,
    providers: Sequence[RewrittenProvider],
    tags: TagAnswers | None = None,
) -> list[Staged]:
    """Every provider's manifests image, from the components import rewrote, built and
    its blobs pushed side by side (zlib and sha256 let go of the GIL, and each push
    waits on the registry), in provider order. Nothing names them yet (``name_all``).
    ``tags``: ``tags_now``'s answers, if the caller asked them earlier; else asked here."""
    if tags is None:
        tags = tags_now(registry, target, providers)
    budget = ByteBudget(PUBLISH_BYTES)

    def one(provider: RewrittenProvider) -> Staged:
        profiles = image_profiles(provider)
        release = budget.hold(sum(len(p.manifests) for p in profiles))
        try:
            image = build_image(profiles)
            return stage(registry, target, provider.record, image, tags, profiles)
        finally:
            release()

    return run_parallel([partial(one, p) for p in providers], PUBLISH_CONCURRENCY)


def name_all(registry: Registry, staged: Sequence[Staged]) -> list[Published]:
    """``name_image`` for each staged image, side by side, in their order."""
    return run_parallel([partial(name_image, registry, s) for s in staged], PUBLISH_CONCURRENCY)


def ref_accepted(reference: str) -> bool:
    """Whether the ClusterAPI resource's validation (``ImageDigestFormat``) accepts it."""
    return len(reference) <= 447 and bool(_REF_RE.fullmatch(reference))


def component_list(published: Sequence[Published]) -> bytes:
    """The ``components`` of a ClusterAPI revision: each image by digest with each of
    its profiles, one component each, in install order (then type, name and profile,
    so the order is stable)."""
    ordered = [(order, item, profile) for item in published for order, profile in item.components()]
    ordered.sort(key=lambda c: (c[0], c[1].provider.type, c[1].provider.name, c[2]))
    lines = [
        "# The components of an OpenShift ClusterAPI revision (operator.openshift.io/v1alpha1,",
        "# status.revisions[].components), installed in this order. Written by airgap import.",
    ]
    refused = [item.reference for _, item, _ in ordered if not ref_accepted(item.reference)]
    if refused:
        host = refused[0].split("/", 1)[0]
        why = (
            "import without a --registry prefix"
            if _HOST_RE.fullmatch(host)
            else "its host must be a DNS name with a dot, or an IPv4 address"
        )
        lines += [
            "# NOTE: the ClusterAPI API accepts host[:port]/[namespace/]name@sha256:... only:",
            f"# it would refuse {refused[0]} ({why}).",
        ]
    if len(ordered) > MAX_COMPONENTS:
        lines.append(f"# NOTE: a revision holds at most {MAX_COMPONENTS} components.")
    lines.append("components:")
    for _, item, profile in ordered:
        lines += [
            "- type: Image",
            "  image:",
            f"    ref: {_scalar(item.reference)}",
            f"    profile: {_scalar(profile)}",
        ]
    return ("\n".join(lines) + "\n").encode()
