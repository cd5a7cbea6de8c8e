"""What a provider's components YAML needs: its container images and its variables (pure).

clusterctl only looks at Deployment and DaemonSet containers, but real components also
run images from StatefulSets, Jobs, CronJobs, bare Pods, init and ephemeral containers;
every one of them has to be carried across the air gap or the install stalls on the far
side with ImagePullBackOff. Images are read from the parsed YAML (so comments and
strings elsewhere never count as images) and resolved through clusterctl variable
defaults, because an image such as ``${IMG:=registry.k8s.io/capi:v1.9.4}`` is what the
cluster will pull when nobody sets IMG.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from airgap.errors import InputError
from airgap.reference import parse_reference

# ``${NAME}``, ``${NAME:=default}``, ``${NAME=default}``, ``${NAME:-default}`` (and the
# envsubst sibling ``${NAME-default}``), as clusterctl's envsubst understands them.
VARIABLE_RE = re.compile(r"\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:(:=|:-|=|-)([^}]*))?\}")

_TEMPLATE_KINDS = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"}
)
_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class Variable:
    """A clusterctl variable; ``required`` when no occurrence gives a default."""

    name: str
    default: str | None
    required: bool


def find_variables(text: str) -> list[Variable]:
    """Every ``${VAR}`` in ``text``, in order of first appearance, de-duplicated.

    The whole text is scanned, comments included, because that is what clusterctl and
    the operator do before parsing: a variable they cannot substitute fails the install
    wherever it appears. A variable that has a default anywhere is optional.
    """
    order: list[str] = []
    defaults: dict[str, str | None] = {}
    for match in VARIABLE_RE.finditer(text):
        name, operator, default = match.group(1), match.group(2), match.group(3)
        if name not in defaults:
            order.append(name)
            defaults[name] = None
        if operator is not None and defaults[name] is None:
            defaults[name] = default
    return [
        Variable(name=name, default=defaults[name], required=defaults[name] is None)
        for name in order
    ]


def find_images(text: str, source: str) -> list[str]:
    """Every container image the components run, normalised, in order of first appearance.

    ``source`` (a file or URL) only serves error messages. Raises InputError for
    malformed YAML (with the line), for an image that needs a variable without a
    default (naming document and variable) and for an invalid image reference.
    """
    images: list[str] = []
    seen: set[str] = set()
    for document in _load_documents(text, source):
        for where, raw in _document_images(document):
            image = _resolve_image(raw, source, where)
            if image not in seen:
                seen.add(image)
                images.append(image)
    return images


def _load_documents(text: str, source: str) -> list[Any]:
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        if mark is None:
            raise InputError(f"{source}: malformed YAML: {problem}") from None
        raise InputError(
            f"{source}:{mark.line + 1}:{mark.column + 1}: malformed YAML: {problem}"
        ) from None


def _document_images(document: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(description, raw image)`` for every container of a workload document."""
    if not isinstance(document, dict):
        return
    kind = document.get("kind")
    if kind == "List" and isinstance(document.get("items"), list):
        for item in document["items"]:
            yield from _document_images(item)
        return
    pod_spec = _pod_spec(document)
    if pod_spec is None:
        return
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    owner = f"{kind} {name or '<unnamed>'}"
    # dicts keep YAML key order, so this follows the text: "first appearance".
    for key, containers in pod_spec.items():
        if key not in _CONTAINER_KEYS or not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, dict):
                continue
            label = container.get("name") or f"{key}[{index}]"
            yield f"{owner} container {label}", container.get("image")


def _pod_spec(document: dict[Any, Any]) -> dict[Any, Any] | None:
    kind = document.get("kind")
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return None
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        job_template = spec.get("jobTemplate")
        spec = job_template.get("spec") if isinstance(job_template, dict) else None
        if not isinstance(spec, dict):
            return None
    elif kind not in _TEMPLATE_KINDS:
        return None
    template = spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    return pod_spec if isinstance(pod_spec, dict) else None


def _resolve_image(raw: Any, source: str, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise InputError(f"{source}: {where}: has no image")

    def substitute(match: re.Match[str]) -> str:
        name, operator, default = match.group(1), match.group(2), match.group(3)
        if operator is None:
            raise InputError(
                f"{source}: {where}: image {raw!r} needs variable {name}, which has no default"
            )
        return default

    resolved = VARIABLE_RE.sub(substitute, raw)
    try:
        return str(parse_reference(resolved))
    except InputError as exc:
        raise InputError(f"{source}: {where}: {exc}") from None
