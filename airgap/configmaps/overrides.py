"""Image overrides for provider CRs: ``spec.deployment.containers[].imageUrl`` (pure).

The operator's proposal asks for "image overrides for each provider in order to pull the
images from an accessible image repository". With them in the CR, the provider's
Deployment pulls from the mirror even when the operator gets the components unmodified
(``fetchConfig.url``, a ConfigMap someone replaced), not only from airgap's rewritten
copy. How the operator applies them (internal/controller/component_customizer.go):

- ``spec.deployment`` customises the provider's Deployment; when the components hold
  several Deployments, only those named ``ca*-controller-manager`` get it, and any other
  gets ``spec.additionalDeployments[<name>].deployment``, or nothing;
- ``containers[]`` entries match the Deployment's ``containers`` by name (never its
  initContainers, which the operator cannot override: the rewritten components carry
  those) and ``imageUrl`` replaces the image.

``spec.manager`` is left alone. The image written is the one the rewritten components
run (the mirror, pinned by digest unless ``--no-pin``). An image given as a variable
with a default (``${CAPA_IMAGE:=…}``) gets the default as override unless the variable
has a value: the user's value then rules, and a value never goes into a CR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from airgap.providers.components import VARIABLE_RE, deployment_containers

Containers = list[dict[str, str]]


@dataclass(frozen=True)
class ImageOverrides:
    """What goes into a provider CR's spec."""

    deployment: Containers = field(default_factory=list)  # spec.deployment.containers
    additional: dict[str, Containers] = field(default_factory=dict)  # by Deployment name

    def spec(self) -> dict[str, Any]:
        """The ``deployment`` and ``additionalDeployments`` fields, those not empty."""
        result: dict[str, Any] = {}
        if self.deployment:
            result["deployment"] = {"containers": self.deployment}
        if self.additional:
            result["additionalDeployments"] = {
                name: {"deployment": {"containers": containers}}
                for name, containers in self.additional.items()
            }
        return result


def is_manager_deployment(name: str) -> bool:
    """The operator's ``isProviderManagerDeploymentName``: ``ca*-controller-manager``."""
    return name.startswith("ca") and name.endswith("-controller-manager")


def _deployments(documents: list[Any]) -> Iterator[tuple[str, list[Any]]]:
    for document in documents:
        deployment = deployment_containers(document)
        if deployment is not None:
            yield deployment


def image_url(image: object, has_value: Callable[[str], bool]) -> str | None:
    """The override for a container's ``image``, or None to leave it to the components."""
    if not isinstance(image, str) or not image.strip():
        return None
    match = VARIABLE_RE.fullmatch(image.strip())
    if match:  # ${VAR:=image}: the default, unless the user gave VAR a value
        name, operator, default = match.groups()
        if operator is None or has_value(name) or not default:
            return None
        return default
    return None if VARIABLE_RE.search(image) else image.strip()


def _containers(containers: list[Any], has_value: Callable[[str], bool]) -> Containers:
    result: Containers = []
    for container in containers:
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            continue
        url = image_url(container.get("image"), has_value)
        if url is not None:
            result.append({"name": container["name"], "imageUrl": url})
    return result


def image_overrides(documents: list[Any], has_value: Callable[[str], bool]) -> ImageOverrides:
    """The overrides for every container of every Deployment in ``documents`` that the
    operator lets a CR override, routed as the operator routes them."""
    return deployment_overrides(list(_deployments(documents)), has_value)


def deployment_overrides(
    deployments: Sequence[tuple[str, list[Any]]], has_value: Callable[[str], bool]
) -> ImageOverrides:
    """The overrides for ``(name, containers)`` of each Deployment (as
    ``Components.deployments`` holds them from the one parse of the components).

    One ``spec.deployment`` serves every manager Deployment: a container name two of
    them run with different images cannot be overridden for both, so it is left out."""
    manager: dict[str, set[str]] = {}  # container name -> images, in order of appearance
    additional: dict[str, Containers] = {}
    for name, containers in deployments:
        wanted = _containers(containers, has_value)
        if len(deployments) == 1 or is_manager_deployment(name):
            for container in wanted:
                manager.setdefault(container["name"], set()).add(container["imageUrl"])
        elif wanted:
            additional[name] = wanted
    deployment = [
        {"name": name, "imageUrl": next(iter(images))}
        for name, images in manager.items()
        if len(images) == 1
    ]
    return ImageOverrides(deployment, additional)
