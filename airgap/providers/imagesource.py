"""Providers whose manifests ship inside their image (OpenShift's image-based format).

OpenShift's Cluster API installer reads ``/capi-operator-manifests/PROFILE/manifests.yaml``
and ``metadata.yaml`` from each provider image (cluster-capi-operator,
``pkg/providerimages``) and substitutes the metadata's ``selfImageRef`` in the manifests
with the image it read them from. Collect does the same without a runtime: it reads
the two files of each selected profile from the image's layers (``imagefs``), writes
the provider as a clusterctl release would look (``metadata.yaml`` and the components
file under ``providers/LABEL/VERSION/``), so verify, import, the operator ConfigMaps and
the clusterctl repository treat it like any other provider, and carries the image.

A profile is an alternative set of manifests (its metadata.yaml says when it is
installed), never a part of one whole: the components file is exactly one profile (the
spec's ``clusterctlProfile``, else ``default``), and every selected profile is also
written apart (``profiles/NAME/metadata.yaml`` and ``manifests.yaml`` beside it) for the
OpenShift output, which lists each as its own component.

The image format's metadata.yaml has no ``releaseSeries``, so the contract is, in order:
the spec entry's ``contract``, the metadata's ``attributes.contract``, or the newest
Cluster API contract label (``cluster.x-k8s.io/v1beta2: ...``) on the manifests' CRDs
(the labels Cluster API itself uses to map a provider's CRDs to a contract). None of
them: the provider is refused, naming the spec entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from airgap.core import phases
from airgap.core.errors import AirgapError, InputError, utf8_text
from airgap.core.limits import MAX_COMPONENTS_BYTES, MAX_METADATA_BYTES, MAX_PROVIDER_IMAGE_LAYERS
from airgap.core.names import provider_name_problem, shown, version_problem
from airgap.formats import yamlsafe
from airgap.oci.manifest import Manifest, platform_matches
from airgap.oci.reference import Reference, parse_reference
from airgap.providers.components import parse_components
from airgap.providers.fetch import PROVIDERS_DIR, FetchedProvider
from airgap.providers.imagefs import ImageFiles
from airgap.providers.metadata import METADATA_API_VERSION, METADATA_FILE, METADATA_KIND
from airgap.providers.specs import ImageProviderSpec, ProviderImageInfo
from airgap.providers.types import CORE_PROVIDER_NAME, ProviderType
from airgap.registry.client import Registry
from airgap.sources.semver import try_parse

MANIFESTS_DIR = "capi-operator-manifests"
MANIFESTS_FILE = "manifests.yaml"
DEFAULT_PROFILE = "default"
PROFILES_DIR = "profiles"  # providers/LABEL/VERSION/profiles/NAME/{metadata,manifests}.yaml
DEFAULT_PLATFORMS = ("linux/amd64",)
PROVIDER_NAME_PREFIX = "cluster-api-provider-"
# the ClusterAPI resource's rule for a profile name (operator.openshift.io/v1alpha1)
_PROFILE_RE = re.compile(r"^[a-zA-Z0-9_-]{1,255}$")
_CONTRACT_LABEL_RE = re.compile(
    r"^\s+['\"]?cluster\.x-k8s\.io/(v\d+(?:(?:alpha|beta)\d+)?)['\"]?\s*:", re.MULTILINE
)
_CONTRACT_RE = re.compile(r"^v([0-9]{1,9})(?:(alpha|beta)([0-9]{1,9}))?$")  # int()-safe


class RegistryPoolLike(Protocol):
    """What reading an image needs of ``RegistryPool``."""

    def pull_location(self, reference: Reference) -> tuple[Registry, str]: ...


@dataclass(frozen=True)
class ProfileMetadata:
    """One profile's metadata.yaml (``providermetadata.ProviderMetadata``)."""

    name: str
    attributes: Mapping[str, str]
    install_order: int
    ocp_platform: str | None
    self_image_ref: str | None


@dataclass(frozen=True)
class Profile:
    """One profile directory of a provider image's ``/capi-operator-manifests``: its
    metadata (parsed, and its text as read) and its manifests' text."""

    name: str
    metadata: ProfileMetadata
    manifests: str
    metadata_text: str = ""


def parse_profile_metadata(text: str, source: str) -> ProfileMetadata:
    """Parse a profile's metadata.yaml; errors are one line naming ``source``."""
    try:
        document = yamlsafe.safe_load(text, source, max_bytes=MAX_METADATA_BYTES)
    except yaml.YAMLError:
        raise InputError(f"{source}: malformed YAML") from None
    if not isinstance(document, dict):
        raise InputError(f"{source}: not a provider metadata document (a mapping)")
    unknown = sorted(str(k) for k in document if k not in _METADATA_KEYS)
    if unknown:
        raise InputError(f"{source}: unknown key {unknown[0][:60]!r}")
    name = document.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{source}: name: missing or not a string")
    attributes = document.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise InputError(f"{source}: attributes: must map strings to strings")
    order = document.get("installOrder", 0)
    if not isinstance(order, int) or isinstance(order, bool) or order < 0:
        raise InputError(f"{source}: installOrder: must be a non-negative integer")
    return ProfileMetadata(
        name=name.strip(),
        attributes=dict(attributes),
        install_order=order,
        ocp_platform=_optional_text(document, "ocpPlatform", source),
        self_image_ref=_optional_text(document, "selfImageRef", source),
    )


_METADATA_KEYS = ("name", "attributes", "installOrder", "ocpPlatform", "selfImageRef")


def _optional_text(document: dict[str, Any], key: str, source: str) -> str | None:
    value = document.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InputError(f"{source}: {key}: must be a string")
    return value


def wanted(path: str) -> int | None:
    """The cap for a profile file of the image (``capi-operator-manifests/P/F``), else
    None: everything else in the layers is passed over."""
    parts = path.split("/")
    if len(parts) != 3 or parts[0] != MANIFESTS_DIR or not _PROFILE_RE.match(parts[1]):
        return None
    return {METADATA_FILE: MAX_METADATA_BYTES, MANIFESTS_FILE: MAX_COMPONENTS_BYTES}.get(parts[2])


def select_profiles(
    image: ImageFiles, requested: tuple[str, ...] | None, what: str
) -> list[Profile]:
    """The profiles to carry, ``default`` first then by name: each with both files, as
    the installer requires (one without the other is an error, as there)."""
    found: dict[str, set[str]] = {}
    for path in image.files:
        _, profile, filename = path.split("/")
        found.setdefault(profile, set()).add(filename)
    if not found:
        raise AirgapError(f"{what}: no /{MANIFESTS_DIR}/PROFILE/ files in the image")
    names = sorted(found, key=lambda p: (p != DEFAULT_PROFILE, p))
    if requested is not None:
        missing = [p for p in requested if p not in found]
        if missing:
            raise AirgapError(
                f"{what}: no profile {shown(missing[0])} in /{MANIFESTS_DIR}/ "
                f"(it has {', '.join(names)})"
            )
        names = [p for p in names if p in requested]
    profiles: list[Profile] = []
    for name in names:
        files = image.files
        base = f"{MANIFESTS_DIR}/{name}"
        for filename in (METADATA_FILE, MANIFESTS_FILE):
            if f"{base}/{filename}" not in files:
                kind = image.kind_of(f"{base}/{filename}")
                why = f"is a {kind}, not a file" if kind else "is missing"
                raise AirgapError(f"{what}: /{base}/{filename} {why}")
        metadata_text = utf8_text(
            files[f"{base}/{METADATA_FILE}"], f"{what}: /{base}/{METADATA_FILE}"
        )
        metadata = parse_profile_metadata(metadata_text, f"{what}: /{base}/{METADATA_FILE}")
        manifests = utf8_text(
            files[f"{base}/{MANIFESTS_FILE}"], f"{what}: /{base}/{MANIFESTS_FILE}"
        )
        profiles.append(Profile(name, metadata, manifests, metadata_text))
    return profiles


def clusterctl_profile(profiles: list[Profile], asked: str | None, what: str) -> Profile:
    """The one profile the operator and clusterctl outputs install: the one the spec
    asks for, else ``default``, else the only one carried. A profile is an alternative
    set of manifests (its metadata.yaml says when it is installed), never a part of
    one whole: two concatenated would define the same objects twice."""
    by_name = {profile.name: profile for profile in profiles}
    if asked is not None:
        if asked not in by_name:
            raise InputError(
                f"{what}: clusterctlProfile {shown(asked)} is not among the profiles "
                f"carried ({', '.join(by_name)})"
            )
        return by_name[asked]
    if DEFAULT_PROFILE in by_name:
        return by_name[DEFAULT_PROFILE]
    if len(profiles) == 1:
        return profiles[0]
    raise InputError(
        f"{what}: profiles {shown(profiles[0].name)} and {shown(profiles[1].name)} but no "
        "'default': the operator and clusterctl outputs install one profile: set "
        "clusterctlProfile: in the spec entry"
    )


def contract_from_manifests(text: str) -> str | None:
    """The newest contract a CRD of ``text`` is labelled for (``cluster.x-k8s.io/v1beta2``
    as a label key), or None."""
    found = {m.group(1) for m in _CONTRACT_LABEL_RE.finditer(text)}
    ranked = [(_contract_rank(c), c) for c in found if _contract_rank(c) is not None]
    return max(ranked)[1] if ranked else None


def _contract_rank(contract: str) -> tuple[int, int, int] | None:
    match = _CONTRACT_RE.match(contract)
    if not match:
        return None
    major, stage, number = match.groups()
    level = {"alpha": 0, "beta": 1, None: 2}[stage]
    return int(major), level, int(number or 0)


def substitute_self(manifests: str, self_image_ref: str | None, image: str) -> str:
    """What the installer installs: every ``selfImageRef`` replaced by the image read
    (a plain substitution, as ``strings.NewReplacer`` there)."""
    return manifests.replace(self_image_ref, image) if self_image_ref else manifests


def release_metadata(version: str, contract: str) -> str:
    """A clusterctl metadata.yaml declaring ``contract`` for ``version``'s series: what a
    release of this provider would carry, so everything downstream reads it as one."""
    parsed = try_parse(version)
    assert parsed is not None
    major, minor = parsed.series
    return (
        "# written by airgap from the provider image's /capi-operator-manifests\n"
        f"apiVersion: {METADATA_API_VERSION}\n"
        f"kind: {METADATA_KIND}\n"
        "releaseSeries:\n"
        f"- major: {major}\n"
        f"  minor: {minor}\n"
        f"  contract: {contract}\n"
    )


def provider_name(metadata_name: str) -> str:
    """``cluster-api-provider-aws`` -> ``aws`` (clusterctl's name); ``cluster-api`` stays."""
    if metadata_name.startswith(PROVIDER_NAME_PREFIX):
        return metadata_name[len(PROVIDER_NAME_PREFIX) :]
    return metadata_name


def read_image(
    pool: RegistryPoolLike, reference: Reference, platforms: tuple[str, ...] | None, what: str
) -> tuple[str, ImageFiles]:
    """The image's profile files, its layers applied in order for the platform chosen
    (the spec's first platform the image has, else linux/amd64), and the digest
    reference of what was read (the index when there is one)."""
    registry, repository = pool.pull_location(reference)
    top = registry.get_manifest(repository, reference.identifier, what=what)
    manifest = top
    if top.is_index:
        wanted_platforms = platforms or DEFAULT_PLATFORMS
        child = next(
            (c for c in top.children() if platform_matches(c.platform, wanted_platforms)), None
        )
        if child is None:
            have = ", ".join(sorted({c.platform or "?" for c in top.children()}))
            raise AirgapError(
                f"{what}: no manifest for {', '.join(wanted_platforms)} (it has {have})"
            )
        manifest = registry.get_manifest(repository, child.digest, what=what)
    if manifest.is_index:
        raise AirgapError(f"{what}: an index inside an index")
    files = ImageFiles(wanted, what)
    layers = _layers(manifest)
    if len(layers) > MAX_PROVIDER_IMAGE_LAYERS:
        raise AirgapError(f"{what}: more than {MAX_PROVIDER_IMAGE_LAYERS} layers")
    for media_type, digest, size in layers:
        sink = files.layer(media_type, digest)
        registry.download_blob(repository, digest, size, sink, what=what)
        sink.finish()
    return f"{reference.name}@{top.digest}", files


def _layers(manifest: Manifest) -> list[tuple[str, str, int]]:
    has_config = isinstance(manifest.json.get("config"), dict)
    blobs = manifest.blobs()[1:] if has_config else manifest.blobs()
    return [(b.media_type, b.digest, b.size) for b in blobs]


def fetch_image_provider(
    spec: ImageProviderSpec,
    dest_root: Path,
    pool: RegistryPoolLike,
    platforms: tuple[str, ...] | None,
) -> FetchedProvider:
    """Read ``spec``'s image and lay the provider out as a release
    (``dest_root/providers/LABEL/VERSION/``)."""
    reference = parse_reference(spec.image)
    what = f"{spec.where}: provider image {reference}" if spec.where else f"image {reference}"
    with phases.timed("providers/image"):
        pinned, files = read_image(pool, reference, platforms, what)
    profiles = select_profiles(files, spec.profiles, what)
    chosen = clusterctl_profile(profiles, spec.clusterctl_profile, what)
    first = chosen.metadata
    name = spec.name or provider_name(first.name)
    problem = provider_name_problem(name)
    if problem:
        raise InputError(f"{what}: {problem} (set name: in the spec entry)")
    ptype = _provider_type(spec, first, what)
    version = _agreeing(spec.version, first.attributes.get("version"), "version", what)
    if version_problem(version) or try_parse(version) is None:
        raise InputError(f"{what}: version {shown(version)} is not a release version like v2.8.1")
    texts = {
        p.name: substitute_self(p.manifests, p.metadata.self_image_ref, pinned) for p in profiles
    }
    components = texts[chosen.name]
    contract = (
        spec.contract or first.attributes.get("contract") or contract_from_manifests(components)
    )
    if not contract:
        raise InputError(
            f"{what}: cannot tell its Cluster API contract (no attributes.contract in "
            "metadata.yaml, no cluster.x-k8s.io/<contract> label on its CRDs): set "
            "contract: in the spec entry"
        )
    label = ptype.label(name)
    directory = (dest_root / PROVIDERS_DIR / label / version).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    metadata_path = directory / METADATA_FILE
    components_path = directory / ptype.components_file
    metadata_path.write_text(release_metadata(version, contract), encoding="utf-8")
    components_path.write_text(components, encoding="utf-8")
    images = [pinned]
    profile_files: list[Path] = []
    for profile in profiles:
        source = f"/{MANIFESTS_DIR}/{profile.name}/{MANIFESTS_FILE} of {what}"
        images += parse_components(texts[profile.name], source, unique=True).images
        profile_files += _write_profile(directory, profile, texts[profile.name])
    return FetchedProvider(
        name=name,
        type=ptype,
        version=version,
        contract=contract,
        label=label,
        source=f"image://{pinned}",
        metadata_path=metadata_path,
        components_path=components_path,
        images=list(dict.fromkeys(images)),
        image_source=ProviderImageInfo(
            reference=pinned,
            profiles=tuple(p.name for p in profiles),
            clusterctl_profile=chosen.name,
            name=first.name,
            attribute_type=first.attributes.get("type"),
            attribute_version=first.attributes.get("version"),
            install_order=first.install_order,
            ocp_platform=first.ocp_platform,
            self_image_ref=first.self_image_ref,
        ),
        profile_files=tuple(profile_files),
    )


def _write_profile(directory: Path, profile: Profile, manifests: str) -> list[Path]:
    """``profiles/NAME/metadata.yaml`` (as the image holds it) and ``manifests.yaml``
    (``selfImageRef`` substituted) beside the components: each profile carried apart,
    as the OpenShift installer reads it. NAME is a checked profile name, one path part."""
    base = directory / PROFILES_DIR / profile.name
    base.mkdir(parents=True, exist_ok=True)
    (base / METADATA_FILE).write_text(profile.metadata_text, encoding="utf-8")
    (base / MANIFESTS_FILE).write_text(manifests, encoding="utf-8")
    return [base / METADATA_FILE, base / MANIFESTS_FILE]


def _provider_type(spec: ImageProviderSpec, metadata: ProfileMetadata, what: str) -> ProviderType:
    declared = metadata.attributes.get("type")
    if declared is None and metadata.name == CORE_PROVIDER_NAME:
        declared = "core"
    parsed: ProviderType | None = None
    if declared is not None:
        try:
            parsed = ProviderType.parse(declared)
        except InputError as exc:
            raise InputError(f"{what}: metadata.yaml attributes.type: {exc}") from None
    if spec.type is not None and parsed is not None and spec.type is not parsed:
        raise InputError(
            f"{what}: the spec says type {spec.type.kind}, the image's metadata.yaml "
            f"says {parsed.kind}"
        )
    result = spec.type or parsed
    if result is None:
        raise InputError(f"{what}: metadata.yaml has no attributes.type: set type: in the spec")
    return result


def _agreeing(spec_value: str | None, image_value: str | None, key: str, what: str) -> str:
    if spec_value and image_value and spec_value != image_value:
        raise InputError(
            f"{what}: the spec says {key} {spec_value}, the image's metadata.yaml says "
            f"{image_value}"
        )
    value = spec_value or image_value
    if not value:
        raise InputError(f"{what}: metadata.yaml has no attributes.{key}: set {key}: in the spec")
    return value
