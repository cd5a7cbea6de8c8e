"""The bundle spec: which providers, images, platforms and registry settings to collect.

The spec is hand-written YAML, so every mistake is reported as ONE line that names the
file, the key path and the line (``spec.yaml:7: providers[1].version: ...``): a collect
can run for an hour and must not start on a typo. Unknown keys are errors, not
warnings, because a misspelt ``plainHttp`` silently ignored would send traffic over TLS
to a plain-HTTP registry (or the reverse) far from where the typo is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from airgap.collect.specsections import (
    SpecSections,
    _check_url,
)
from airgap.content.chartrender import (
    DEFAULT_KUBE_VERSION,
)
from airgap.content.kinds import ContentKind, ContentSpec
from airgap.content.kubeadm import kubernetes_version_problem
from airgap.core.errors import InputError, SpecError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_SPEC_BYTES
from airgap.core.names import (
    file_name_problem,
    provider_name_problem,
    shown,
    version_problem,
)
from airgap.core.redact import has_userinfo, without_userinfo
from airgap.formats import yamlsafe
from airgap.formats.located import (
    NULL_TAG,
    is_null,
    yaml_error,
)
from airgap.oci.reference import parse_reference
from airgap.providers.specs import ImageProviderSpec, ProviderSpec
from airgap.providers.types import ProviderType
from airgap.providers.wellknown import lookup, unknown_provider_message
from airgap.sources.semver import highest

LATEST = "latest"

_PLATFORM_RE = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?$")
_HOST_RE = re.compile(
    r"^(?:\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*)(?::[0-9]+)?$"
)
_DOCKER_HUB_ALIASES = {"index.docker.io": "docker.io", "registry-1.docker.io": "docker.io"}

_TOP_KEYS = (
    "providers",
    "images",
    "platforms",
    "registries",
    "certManager",
    "operator",
    "templates",
    "manifests",
    "charts",
    "kubernetes",
)
_KUBERNETES_KEYS = ("versions", "url", "offline")
_MANIFEST_KEYS = ("name", "url")
MAX_ADDON_NAME = 57  # the Cluster label airgap.io/addon-NAME: its name part <= 63
_CONTENT_KEYS = ("version", "url")
_PROVIDER_KEYS = ("name", "type", "version", "url", "componentsFile", "image")
# an image-based provider (``image:``): everything but the image may come from its
# /capi-operator-manifests metadata.yaml
_IMAGE_PROVIDER_KEYS = (
    "image",
    "profiles",
    "clusterctlProfile",
    "name",
    "type",
    "version",
    "contract",
)
_PROFILE_RE = re.compile(r"^[a-zA-Z0-9_-]{1,255}$")
DEFAULT_PROFILE = "default"
_CONTRACT_RE = re.compile(r"^v\d+(?:(?:alpha|beta)\d+)?$")
_REGISTRY_KEYS = ("mirror", "caFile", "plainHTTP", "skipTLSVerify")


@dataclass(frozen=True)
class RegistrySettings:
    """How to reach one source registry host (``caFile`` already made absolute)."""

    mirror: str | None = None
    ca_file: str | None = None
    plain_http: bool = False
    skip_tls_verify: bool = False


@dataclass(frozen=True)
class BundleSpec:
    """A validated spec; images are normalised (``nginx`` -> ``docker.io/library/...``)."""

    providers: tuple[ProviderSpec, ...] = ()
    images: tuple[str, ...] = ()
    image_providers: tuple[ImageProviderSpec, ...] = ()  # providers: entries with image:
    platforms: tuple[str, ...] | None = None
    registries: dict[str, RegistrySettings] = field(default_factory=dict)
    cert_manager: ContentSpec | None = None
    operator: ContentSpec | None = None
    templates: bool = True  # each infrastructure provider version's cluster templates
    manifests: tuple[ContentSpec, ...] = ()  # addon manifests for workload clusters
    charts: tuple[ContentSpec, ...] = ()  # Helm charts
    kubernetes: tuple[ContentSpec, ...] = ()  # workload clusters' Kubernetes versions

    @property
    def contents(self) -> tuple[ContentSpec, ...]:
        """The content entries besides providers, in install order."""
        first = tuple(c for c in (self.cert_manager, self.operator) if c is not None)
        return first + self.manifests + self.charts + self.kubernetes


def load_spec(path: Path) -> BundleSpec:
    """Read, parse and validate a spec file; raise SpecError with a one-line message."""
    if not path.exists() and not path.is_symlink():
        raise SpecError(f"{path}: spec file not found")
    try:
        text = read_small(path, MAX_SPEC_BYTES, "spec file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: cannot read spec file ({exc.__class__.__name__})") from None
    return parse_spec(text, path)


def parse_spec(text: str, path: Path) -> BundleSpec:
    """Validate spec ``text``; ``path`` names it in messages and anchors relative caFiles."""
    return _SpecReader(path).read(text)


class _SpecReader(SpecSections):
    """The spec's sections, read into a ``BundleSpec``."""

    def read(self, text: str) -> BundleSpec:
        try:
            root = yamlsafe.compose(text, str(self.path), max_bytes=MAX_SPEC_BYTES)
        except yaml.YAMLError as exc:
            raise yaml_error(self.path, exc, "invalid YAML") from None
        if root is None or (isinstance(root, ScalarNode) and root.tag == NULL_TAG):
            raise SpecError(f"{self.path}: spec is empty: list providers and/or images")
        top = self.mapping(root, "", _TOP_KEYS)
        providers, image_providers = self.providers(top.get("providers"))
        images = self.images(top.get("images"))
        cert_manager = self.content(top.get("certManager"), ContentKind.CERT_MANAGER)
        operator = self.content(top.get("operator"), ContentKind.OPERATOR)
        manifests = self.manifests(top.get("manifests"))
        kubernetes = self.kubernetes(top.get("kubernetes"))
        charts = self.charts(top.get("charts"), _highest_version(kubernetes))
        if not (
            providers
            or image_providers
            or images
            or cert_manager
            or operator
            or manifests
            or charts
            or kubernetes
        ):
            raise self.error(
                root,
                "",
                "nothing to collect: list providers, images, certManager, operator, "
                "manifests, charts or kubernetes",
            )
        templates = top.get("templates")
        return BundleSpec(
            providers=providers,
            images=images,
            image_providers=image_providers,
            platforms=self.platforms(top.get("platforms")),
            registries=self.registries(top.get("registries")),
            cert_manager=cert_manager,
            operator=operator,
            templates=True if templates is None else self.boolean(top, "", "templates"),
            manifests=manifests,
            charts=charts,
            kubernetes=kubernetes,
        )

    # --- sections -------------------------------------------------------------------

    def providers(
        self, entry: tuple[Node, Node] | None
    ) -> tuple[tuple[ProviderSpec, ...], tuple[ImageProviderSpec, ...]]:
        if entry is None or is_null(entry[1]):
            return (), ()
        result: list[ProviderSpec] = []
        from_images: list[ImageProviderSpec] = []
        first_at: dict[tuple[str, ProviderType, str], int] = {}
        for index, node in enumerate(self.sequence(entry[1], "providers")):
            where = f"providers[{index}]"
            if isinstance(node, MappingNode) and any(
                isinstance(k, ScalarNode) and k.value == "image" for k, _ in node.value
            ):
                from_images.append(self.image_provider(node, where))
                continue
            keys = self.mapping(node, where, _PROVIDER_KEYS)
            name = self.required_string(node, keys, where, "name")
            problem = provider_name_problem(name)  # the rule verify applies to bundles
            if problem:
                raise self.error(keys["name"][1], f"{where}.name", problem)
            type_text = self.required_string(node, keys, where, "type")
            try:
                ptype = ProviderType.parse(type_text)
            except InputError as exc:
                raise self.error(keys["type"][1], f"{where}.type", str(exc)) from None
            version = self.required_string(node, keys, where, "version")
            if version_problem(version):
                raise self.error(
                    keys["version"][1],
                    f"{where}.version",
                    f"invalid version {shown(version)} (expected {LATEST!r} or a tag like v1.9.4)",
                )
            url = self.optional_string(keys, where, "url", _check_url)
            components = self.optional_string(keys, where, "componentsFile", _check_filename)
            if url is None and lookup(name, ptype) is None:
                # found here, not after an hour of fetching, and with the line to fix
                raise self.error(
                    keys["name"][1], f"{where}.name", unknown_provider_message(name, ptype)
                )
            # Several versions of one provider may travel together (the operator picks
            # among them by version); the first entry is the one its CR installs.
            identity = (name, ptype, version)
            if identity in first_at:
                raise self.error(
                    node,
                    where,
                    f"duplicate provider {name} of type {ptype.kind} {version} "
                    f"(already at providers[{first_at[identity]}])",
                )
            first_at[identity] = index
            result.append(
                ProviderSpec(
                    name=name, type=ptype, version=version, url=url, components_file=components
                )
            )
        return tuple(result), tuple(from_images)

    def image_provider(self, node: Node, where: str) -> ImageProviderSpec:
        """``{image: REF, profiles: [default], name?, type?, version?, contract?}``: a
        provider read from its image's /capi-operator-manifests (all profiles unless
        listed); name, type, version and contract default to the image's metadata."""
        keys = self.mapping(node, where, _IMAGE_PROVIDER_KEYS)
        image_node = keys["image"][1]
        text = self.string(image_node, f"{where}.image")
        try:
            image = str(parse_reference(text))
        except InputError as exc:
            raise self.error(image_node, f"{where}.image", str(exc)) from None
        name = self.optional_string(keys, where, "name", provider_name_problem)
        type_text = self.optional_string(keys, where, "type", None)
        ptype = None
        if type_text is not None:
            try:
                ptype = ProviderType.parse(type_text)
            except InputError as exc:
                raise self.error(keys["type"][1], f"{where}.type", str(exc)) from None
        version = self.optional_string(keys, where, "version", _check_release_version)
        contract = self.optional_string(keys, where, "contract", _check_contract)
        profiles = self.profiles(keys.get("profiles"), where)
        return ImageProviderSpec(
            image=image,
            profiles=profiles,
            clusterctl_profile=self.clusterctl_profile(keys, profiles, where),
            name=name,
            type=ptype,
            version=version,
            contract=contract,
            where=f"{self.path}:{image_node.start_mark.line + 1}: {where}",
        )

    def profiles(self, entry: tuple[Node, Node] | None, where: str) -> tuple[str, ...] | None:
        if entry is None or is_null(entry[1]):
            return None
        nodes = self.sequence(entry[1], f"{where}.profiles")
        if not nodes:
            raise self.error(entry[1], f"{where}.profiles", "empty list: omit it for all")
        found: list[str] = []
        for index, item in enumerate(nodes):
            key = f"{where}.profiles[{index}]"
            text = self.string(item, key)
            if not _PROFILE_RE.match(text):
                raise self.error(
                    item, key, f"invalid profile {shown(text)} (letters, digits, '-' and '_')"
                )
            if text in found:
                raise self.error(item, key, f"profile {shown(text)} is listed twice")
            found.append(text)
        return tuple(found)

    def clusterctl_profile(
        self, keys: dict[str, tuple[Node, Node]], profiles: tuple[str, ...] | None, where: str
    ) -> str | None:
        """``clusterctlProfile: NAME``: the one profile the operator ConfigMaps and the
        clusterctl repository install (they take one components file: two profiles
        concatenated would define the same objects twice). Without it: ``default``,
        or the only profile listed; several listed without ``default`` need it."""
        entry = keys.get("clusterctlProfile")
        key = f"{where}.clusterctlProfile"
        if entry is None or is_null(entry[1]):
            if profiles and len(profiles) > 1 and DEFAULT_PROFILE not in profiles:
                raise self.error(
                    keys["profiles"][1],
                    f"{where}.profiles",
                    f"{shown(profiles[0])} and {shown(profiles[1])} but no 'default': the "
                    "operator and clusterctl outputs install one profile: set "
                    "clusterctlProfile: to it",
                )
            return None
        node = entry[1]
        if isinstance(node, SequenceNode):
            names = ", ".join(
                shown(item.value) for item in node.value[:4] if isinstance(item, ScalarNode)
            )
            raise self.error(
                node,
                key,
                f"one profile, not a list ({names}): the operator and clusterctl outputs "
                "install exactly one; the OpenShift output lists every profile carried",
            )
        text = self.string(node, key)
        if not _PROFILE_RE.match(text):
            raise self.error(
                node, key, f"invalid profile {shown(text)} (letters, digits, '-' and '_')"
            )
        if profiles is not None and text not in profiles:
            raise self.error(
                node, key, f"profile {shown(text)} is not among profiles ({', '.join(profiles)})"
            )
        return text

    def content(self, entry: tuple[Node, Node] | None, kind: ContentKind) -> ContentSpec | None:
        """``certManager: {version, url?}`` or ``operator: {version, url?}``."""
        if entry is None or is_null(entry[1]):
            return None
        where = kind.value
        keys = self.mapping(entry[1], where, _CONTENT_KEYS)
        version = self.required_string(entry[1], keys, where, "version")
        if version_problem(version):
            raise self.error(
                keys["version"][1],
                f"{where}.version",
                f"invalid version {shown(version)} (expected {LATEST!r} or a tag like v1.16.1)",
            )
        url = self.optional_string(keys, where, "url", _check_url)
        return ContentSpec(kind, version, url)

    def manifests(self, entry: tuple[Node, Node] | None) -> tuple[ContentSpec, ...]:
        """``manifests: [{name, url}]``: addon manifests, one file each, names unique
        (each becomes ``addons/NAME`` and a ClusterResourceSet)."""
        if entry is None or is_null(entry[1]):
            return ()
        result: list[ContentSpec] = []
        first_at: dict[str, int] = {}
        for index, node in enumerate(self.sequence(entry[1], "manifests")):
            where = f"manifests[{index}]"
            keys = self.mapping(node, where, _MANIFEST_KEYS)
            name = self.required_string(node, keys, where, "name")
            problem = provider_name_problem(name)  # the rule verify applies to records
            if not problem and len(name) > MAX_ADDON_NAME:
                problem = f"name {shown(name)} is longer than {MAX_ADDON_NAME} (a label's limit)"
            if problem:
                raise self.error(keys["name"][1], f"{where}.name", problem)
            if name in first_at:
                raise self.error(
                    keys["name"][1],
                    f"{where}.name",
                    f"duplicate manifest name {shown(name)} "
                    f"(already at manifests[{first_at[name]}])",
                )
            first_at[name] = index
            url = self.required_string(node, keys, where, "url")
            url_problem = _check_url(url)
            if url_problem:
                raise self.error(keys["url"][1], f"{where}.url", url_problem)
            result.append(ContentSpec(ContentKind.MANIFESTS, LATEST, url, name))
        return tuple(result)

    def kubernetes(self, entry: tuple[Node, Node] | None) -> tuple[ContentSpec, ...]:
        """``kubernetes: {versions: [vX.Y.Z, ...], url?, offline?}``: the versions
        workload clusters will run; ``url`` is where each tag's kubeadm source is read
        (a raw-file server laid out ``URL/TAG/PATH``), ``offline`` takes the built-in
        table instead (``content.kubeadm``)."""
        if entry is None or is_null(entry[1]):
            return ()
        keys = self.mapping(entry[1], "kubernetes", _KUBERNETES_KEYS)
        if "versions" not in keys:
            raise self.error(entry[1], "kubernetes", "missing required key 'versions'")
        url = self.optional_string(keys, "kubernetes", "url", _check_url)
        offline = "offline" in keys and self.boolean(keys, "kubernetes", "offline")
        if offline and url is not None:
            raise self.error(
                keys["url"][1], "kubernetes.url", "offline: true reads no url; give one of them"
            )
        nodes = self.sequence(keys["versions"][1], "kubernetes.versions")
        if not nodes:
            raise self.error(keys["versions"][1], "kubernetes.versions", "empty list")
        result: list[ContentSpec] = []
        for index, node in enumerate(nodes):
            where = f"kubernetes.versions[{index}]"
            version = self.string(node, where)
            problem = kubernetes_version_problem(version)
            if problem:
                raise self.error(node, where, problem)
            if any(spec.version == version for spec in result):
                raise self.error(node, where, f"version {version} is listed twice")
            result.append(ContentSpec(ContentKind.KUBERNETES, version, url, offline=offline))
        return tuple(result)

    def platforms(self, entry: tuple[Node, Node] | None) -> tuple[str, ...] | None:
        if entry is None or is_null(entry[1]):
            return None
        nodes = self.sequence(entry[1], "platforms")
        if not nodes:
            raise self.error(entry[1], "platforms", "empty list: omit the key for all platforms")
        platforms: list[str] = []
        for index, node in enumerate(nodes):
            key = f"platforms[{index}]"
            text = self.string(node, key)
            if not _PLATFORM_RE.match(text):
                raise self.error(
                    node, key, f"invalid platform {shown(text)} (expected os/arch[/variant])"
                )
            if text not in platforms:
                platforms.append(text)
        return tuple(platforms)

    def registries(self, entry: tuple[Node, Node] | None) -> dict[str, RegistrySettings]:
        if entry is None or is_null(entry[1]):
            return {}
        result: dict[str, RegistrySettings] = {}
        for host_text, (host_node, node) in self.mapping(entry[1], "registries", None).items():
            where = f"registries.{host_text}"
            if not _HOST_RE.match(host_text):
                raise self.error(host_node, where, f"invalid registry host {shown(host_text)}")
            host = _DOCKER_HUB_ALIASES.get(host_text.lower(), host_text.lower())
            if host in result:
                raise self.error(host_node, where, f"registry {host} is listed twice")
            keys = self.mapping(node, where, _REGISTRY_KEYS) if not is_null(node) else {}
            result[host] = RegistrySettings(
                mirror=self.optional_string(keys, where, "mirror", _check_mirror),
                ca_file=self.ca_file(keys, where),
                plain_http=self.boolean(keys, where, "plainHTTP"),
                skip_tls_verify=self.boolean(keys, where, "skipTLSVerify"),
            )
        return result

    # --- node helpers ---------------------------------------------------------------


def _check_release_version(text: str) -> str | None:
    if text == LATEST or version_problem(text):
        return f"invalid version {shown(text)} (a release version like v2.8.1)"
    return None


def _check_contract(text: str) -> str | None:
    if not _CONTRACT_RE.match(text):
        return f"invalid contract {shown(text)} (e.g. v1beta1, v1beta2)"
    return None


def _check_filename(text: str) -> str | None:
    if file_name_problem(text):
        return f"invalid file name {shown(text)} (a release file name, no directories)"
    return None


def _check_mirror(text: str) -> str | None:
    if has_userinfo(text):  # a mirror's credentials live in docker's config.json
        return (
            f"mirror {without_userinfo(text)!r} carries credentials: put them in a "
            "credentials file (docker config.json or REGISTRY_AUTH_FILE) instead"
        )
    host = text.split("/", 1)[0]
    problem = f"invalid mirror {shown(text)} (expected HOST[:PORT][/PATH])"
    if not _HOST_RE.match(host) or ("." not in host and ":" not in host and host != "localhost"):
        return problem
    try:
        ref = parse_reference(f"{text.rstrip('/')}/probe")
    except InputError:
        return problem
    return None if ref.registry == host else problem


def _highest_version(kubernetes: tuple[ContentSpec, ...]) -> str:
    """The highest carried Kubernetes version (``vX.Y.Z``), else Helm's default here."""
    return highest(spec.version for spec in kubernetes) or DEFAULT_KUBE_VERSION
