"""What a spec asks to collect of a provider, and what an image-based provider's
manifests said: collect's types, beside ``providers.types`` rather than in it.

Why a module of their own: ``providers.types`` (the enum every tool's spelling hangs
on) is loaded by verify and import, which never build these; each frozen dataclass is
half a millisecond of start-up, and a no-op re-import is mostly start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from airgap.providers.types import ProviderType


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
    ``/capi-operator-manifests/PROFILE/``): the image, the profiles to carry (None: all
    of them), the one profile the operator and clusterctl outputs install (None:
    ``default``, or the only one carried) and what the spec says about the provider,
    each None when the image's metadata.yaml is to say it. ``where`` names the spec
    entry in messages."""

    image: str
    profiles: tuple[str, ...] | None = None
    clusterctl_profile: str | None = None
    name: str | None = None
    type: ProviderType | None = None
    version: str | None = None
    contract: str | None = None
    where: str = ""


@dataclass(frozen=True)
class ProviderImageInfo:
    """Where an image-based provider's manifests came from, and what its profiles'
    metadata.yaml said (the clusterctl profile's: ``default`` when read)."""

    reference: str  # the image read, by digest: registry/repository@sha256:...
    profiles: tuple[str, ...]
    clusterctl_profile: str  # the profile the components file is
    name: str  # metadata.yaml name, e.g. cluster-api-provider-aws
    attribute_type: str | None
    attribute_version: str | None
    install_order: int
    ocp_platform: str | None
    self_image_ref: str | None
