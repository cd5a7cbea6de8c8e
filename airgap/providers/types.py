"""Cluster API provider types and the names each tool uses for them (pure).

clusterctl, its local-repository layout and the Cluster API operator each spell a
provider type differently (``InfrastructureProvider`` / ``infrastructure-NAME`` /
``infrastructure``). Keeping every spelling on one enum means a bundle written for one
tool can never silently disagree with another about which provider it carries.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from airgap.errors import InputError

CORE_PROVIDER_NAME = "cluster-api"


class ProviderType(enum.Enum):
    """A clusterctl provider type; the value is the clusterctl/operator kind."""

    CORE = "CoreProvider"
    BOOTSTRAP = "BootstrapProvider"
    CONTROL_PLANE = "ControlPlaneProvider"
    INFRASTRUCTURE = "InfrastructureProvider"
    IPAM = "IPAMProvider"
    RUNTIME_EXTENSION = "RuntimeExtensionProvider"
    ADDON = "AddonProvider"

    @property
    def kind(self) -> str:
        """The clusterctl type / operator kind, e.g. ``InfrastructureProvider``."""
        return self.value

    @property
    def operator_type(self) -> str:
        """The operator's type string (ConfigMap labels and names), e.g. ``control-plane``."""
        return _OPERATOR_TYPES[self]

    @property
    def file_prefix(self) -> str:
        """clusterctl's prefix for components files and local-repository labels."""
        return _FILE_PREFIXES[self]

    @property
    def components_file(self) -> str:
        """The components file name clusterctl expects in a release of this type."""
        return f"{self.file_prefix}-components.yaml"

    def label(self, name: str) -> str:
        """The clusterctl local-repository label: ``cluster-api`` or ``PREFIX-NAME``."""
        if self is ProviderType.CORE:
            return CORE_PROVIDER_NAME
        return f"{self.file_prefix}-{name}"

    @classmethod
    def parse(cls, text: str) -> ProviderType:
        """Accept the kind (any case) or the operator/clusterctl short form.

        Users copy types from clusterctl.yaml (``InfrastructureProvider``) as often as
        from operator labels (``infrastructure``); both mean the same thing.
        """
        wanted = text.strip().lower()
        for member in cls:
            spellings = {member.kind.lower(), member.operator_type, member.file_prefix}
            if wanted in spellings:
                return member
        valid = ", ".join(member.kind for member in cls)
        raise InputError(f"unknown provider type {text!r}: valid types are {valid}")


@dataclass(frozen=True)
class ProviderSpec:
    """One provider to collect, as a spec asks for it; ``url`` None means the built-in
    table must know it. Lives here, below the spec reader, so that fetching a provider
    never depends on how a spec file is read."""

    name: str
    type: ProviderType
    version: str
    url: str | None = None
    components_file: str | None = None


@dataclass(frozen=True)
class ImageProviderSpec:
    """A provider whose manifests ship inside its image (OpenShift's
    ``/capi-operator-manifests/PROFILE/``): the image, the profiles to read (None: all
    of them) and what the spec says about the provider, each None when the image's
    metadata.yaml is to say it. ``line`` names the spec entry in messages."""

    image: str
    profiles: tuple[str, ...] | None = None
    name: str | None = None
    type: ProviderType | None = None
    version: str | None = None
    contract: str | None = None
    where: str = ""


@dataclass(frozen=True)
class ProviderImageInfo:
    """Where an image-based provider's manifests came from, and what its profiles'
    metadata.yaml said (the first selected profile's: ``default`` when read)."""

    reference: str  # the image read, by digest: registry/repository@sha256:...
    profiles: tuple[str, ...]
    name: str  # metadata.yaml name, e.g. cluster-api-provider-aws
    attribute_type: str | None
    attribute_version: str | None
    install_order: int
    ocp_platform: str | None
    self_image_ref: str | None


_OPERATOR_TYPES: dict[ProviderType, str] = {
    ProviderType.CORE: "core",
    ProviderType.BOOTSTRAP: "bootstrap",
    ProviderType.CONTROL_PLANE: "control-plane",
    ProviderType.INFRASTRUCTURE: "infrastructure",
    ProviderType.IPAM: "ipam",
    ProviderType.RUNTIME_EXTENSION: "runtimeextension",
    ProviderType.ADDON: "addon",
}

_FILE_PREFIXES: dict[ProviderType, str] = {
    ProviderType.CORE: "core",
    ProviderType.BOOTSTRAP: "bootstrap",
    ProviderType.CONTROL_PLANE: "control-plane",
    ProviderType.INFRASTRUCTURE: "infrastructure",
    ProviderType.IPAM: "ipam",
    ProviderType.RUNTIME_EXTENSION: "runtime-extension",
    ProviderType.ADDON: "addon",
}
