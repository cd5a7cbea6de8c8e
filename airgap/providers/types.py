"""Cluster API provider types and the names each tool uses for them (pure).

clusterctl, its local-repository layout and the Cluster API operator each spell a
provider type differently (``InfrastructureProvider`` / ``infrastructure-NAME`` /
``infrastructure``). Keeping every spelling on one enum means a bundle written for one
tool can never silently disagree with another about which provider it carries.
"""

from __future__ import annotations

import enum

from airgap.core.errors import InputError
from airgap.core.names import shown

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
        raise InputError(f"unknown provider type {shown(text)}: valid types are {valid}")


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
