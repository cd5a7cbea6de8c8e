"""What a provider's components YAML needs: its container images and its variables (pure).

clusterctl only looks at Deployment and DaemonSet containers, but real components also
run images from StatefulSets, Jobs, CronJobs, bare Pods, init and ephemeral containers;
every one of them has to be carried across the air gap or the install stalls on the far
side with ImagePullBackOff. Images are read from the parsed YAML (so comments and
strings elsewhere never count as images) and resolved through clusterctl variable
defaults, because an image such as ``${IMG:=registry.k8s.io/capi:v1.9.4}`` is what the
cluster will pull when nobody sets IMG.

A components file is parsed once per command (``parse_components``), with libyaml and
bounded (``airgap.formats.yamlload``), one document at a time; what the outputs need from the
documents (images, containers, Deployments, the Namespace) is taken in that one pass and
the documents are dropped, so a 1.2 MB core-components never sits in memory as objects.
Documents of other kinds (CRDs are most of the bytes) are parsed and bounded but never
built into objects, which is most of what parsing them would otherwise cost.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from airgap.core.errors import InputError
from airgap.core.limits import MAX_COMPONENTS_BYTES, describe_size
from airgap.core.names import shown
from airgap.formats.yamlload import iter_documents
from airgap.formats.yamlsafe import utf8_length
from airgap.oci.reference import parse_reference

# ``${NAME}``, ``${NAME:=default}``, ``${NAME=default}``, ``${NAME:-default}`` (and the
# envsubst sibling ``${NAME-default}``), as clusterctl's envsubst understands them. A
# default may hold whole ``${INNER}`` references but never an unclosed ``${``: every
# attempt then stops at the second ``${`` it meets, which keeps scans linear (an
# unclosed ``${A:=`` repeated through a long line would otherwise rescan the rest of
# the line from each occurrence: quadratic).
_DEFAULT = r"(?:[^}$]++|\$(?!\{)|\$\{[^{}$]*+\})*+"  # possessive: never backtracks
VARIABLE_RE = re.compile(rf"\$\{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:(:=|:-|=|-)({_DEFAULT}))?\}}")

_TEMPLATE_KINDS = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"}
)
_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")
# the documents parse_components reads; CRDs, RBAC, webhooks... are parsed, not built
_KINDS = _TEMPLATE_KINDS | {"Pod", "CronJob", "List", "Namespace"}


@dataclass(frozen=True)
class ContainerImage:
    """One container of a workload document and the image it runs."""

    kind: str  # of the workload: Deployment, DaemonSet, Job, ...
    name: str | None  # the workload's metadata.name
    key: str  # containers, initContainers or ephemeralContainers
    container: str  # the container's name, or "containers[0]" without one
    raw: str  # as written, variables included
    image: str  # normalised, variable defaults applied

    @property
    def where(self) -> str:
        return f"{_owner(self.kind, self.name)} container {self.container}"


@dataclass(frozen=True)
class Components:
    """A components file, parsed once: its text and what the outputs need of it."""

    source: str  # file or URL, for messages
    text: str
    containers: tuple[ContainerImage, ...]
    namespaces: tuple[object, ...]  # metadata.name of every Namespace document
    # (name, spec.template.spec.containers) of every Deployment document, as parsed:
    # what the operator's image overrides apply to
    deployments: tuple[tuple[str, list[Any]], ...] = ()

    @property
    def images(self) -> list[str]:
        """Every image the containers run, normalised, in order of first appearance."""
        return list(dict.fromkeys(container.image for container in self.containers))

    @property
    def namespace(self) -> str | None:
        """The name of the one Namespace the components create, if exactly one."""
        names = self.namespaces
        return names[0] if len(names) == 1 and isinstance(names[0], str) and names[0] else None

    @cached_property
    def variables(self) -> list[Variable]:
        return find_variables(self.text)


def parse_components(text: str, source: str, *, unique: bool = False) -> Components:
    """Parse a components file once. ``source`` (a file or URL) only serves messages.

    Raises InputError (one line naming ``source``) for a file above
    MAX_COMPONENTS_BYTES, malformed or unbounded YAML (with line and column), an image
    that needs a variable without a default (naming document and variable) and an
    invalid image reference; with ``unique`` (collect), for an object defined twice
    (``ObjectIndex``).
    """
    if utf8_length(text, MAX_COMPONENTS_BYTES) > MAX_COMPONENTS_BYTES:
        raise InputError(
            f"{source}: components larger than the {describe_size(MAX_COMPONENTS_BYTES)} limit"
        )
    containers: list[ContainerImage] = []
    namespaces: list[object] = []
    deployments: list[tuple[str, list[Any]]] = []
    seen = ObjectIndex(source).add if unique else None
    for document in iter_documents(text, source, kinds=_KINDS, on_document=seen):
        if not isinstance(document, dict):
            continue
        if document.get("kind") == "Namespace":
            metadata = document.get("metadata")
            namespaces.append(metadata.get("name") if isinstance(metadata, dict) else None)
        deployment = deployment_containers(document)
        if deployment is not None:
            deployments.append(deployment)
        for kind, name, key, label, raw in _document_images(document):
            where = f"{_owner(kind, name)} container {label}"
            image = _resolve_image(raw, source, where)
            containers.append(ContainerImage(kind, name, key, label, str(raw), image))
    return Components(source, text, tuple(containers), tuple(namespaces), tuple(deployments))


class ObjectIndex:
    """Which object each document of a components file defines, by line: the same
    (API group, kind, namespace, name) twice is refused naming both lines. clusterctl
    and the operator apply the documents in order, so the last one would silently win
    (two profiles of an image concatenated: a cluster that asked for nothing got the
    tech-preview Deployment)."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._lines: dict[tuple[str, str, str, str], int] = {}

    def add(self, line: int, document: Any) -> None:
        key = object_key(document)
        if key is None:
            return
        first = self._lines.setdefault(key, line)
        if first != line:
            group, kind, namespace, name = key
            what = f"{kind} {namespace + '/' if namespace else ''}{name}"
            raise InputError(
                f"{self._source}:{line}: {shown(what)} ({group or 'core'} API group) is "
                f"defined twice, at lines {first} and {line}: it would be applied twice, "
                "the last one winning"
            )


def object_key(document: Any) -> tuple[str, str, str, str] | None:
    """(API group, kind, namespace, name) of a document defining a named object."""
    if not isinstance(document, dict):
        return None
    kind, api = document.get("kind"), document.get("apiVersion")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not (isinstance(kind, str) and kind and isinstance(name, str) and name):
        return None
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    group = api.rpartition("/")[0] if isinstance(api, str) else ""
    return group, kind, namespace if isinstance(namespace, str) else "", name


def deployment_containers(document: Any) -> tuple[str, list[Any]] | None:
    """``(metadata.name, spec.template.spec.containers)`` of a Deployment document."""
    if not isinstance(document, dict) or document.get("kind") != "Deployment":
        return None
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    spec = document.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if isinstance(name, str) and isinstance(containers, list):
        return name, containers
    return None


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
    """Every container image the components run, normalised, in order of first appearance
    (``parse_components(text, source).images``; the same errors)."""
    return parse_components(text, source).images


def document_images(document: Any) -> Iterator[tuple[str, Any]]:
    """``(WORKLOAD container NAME, image as written)`` for every container,
    initContainer and ephemeralContainer of a document's Pod templates (a ``List``'s
    items too): what a rendered chart runs."""
    for kind, name, _key, label, raw in _document_images(document):
        yield f"{_owner(kind, name)} container {label}", raw


def _owner(kind: str, name: str | None) -> str:
    return f"{kind} {name or '<unnamed>'}"


def _document_images(document: Any) -> Iterator[tuple[str, str | None, str, str, Any]]:
    """``(kind, name, key, container label, raw image)`` for every container of a workload
    document; a List's items are workloads too (a List is not nested in a List by any
    real tool, and the parser's depth bound keeps it finite)."""
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
    name = str(name) if name is not None else None
    # dicts keep YAML key order, so this follows the text: "first appearance".
    for key, containers in pod_spec.items():
        if key not in _CONTAINER_KEYS or not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, dict):
                continue
            label = container.get("name")
            if not isinstance(label, str) or not label:
                label = f"{key}[{index}]"
            yield str(kind), name, key, label, container.get("image")


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
                f"{source}: {where}: image {shown(raw)} needs variable {name}, which has no default"
            )
        return default

    resolved = VARIABLE_RE.sub(substitute, raw)
    try:
        return str(parse_reference(resolved))
    except InputError as exc:
        raise InputError(f"{source}: {where}: {exc}") from None


def resolve_image(raw: Any, source: str, where: str) -> str:
    """An image as written, variable defaults applied and normalised; InputError naming
    the variable without a default (what whoever generates the cluster must set)."""
    return _resolve_image(raw, source, where)


def lenient_images(text: str, source: str) -> tuple[list[str], list[str]]:
    """Every image a manifest's workloads run that resolves on its own, normalised, in
    order of first appearance; and why each of the others does not.

    Cluster templates leave images to variables nobody defaults (``${KIND_IMAGE}``),
    which only whoever generates the cluster can name: those are reported, not errors.
    Malformed YAML and a file over the size limit are still InputErrors."""
    scan = lenient_scan(text, source)
    return scan.images, scan.unresolved


class LenientScan(NamedTuple):
    images: list[str]
    unresolved: list[str]
    documents: list[Any]  # the documents of the other kinds asked for (and kindless ones)


def lenient_scan(text: str, source: str, others: frozenset[str] = frozenset()) -> LenientScan:
    """``lenient_images``, and the documents of the kinds ``others`` names, from one
    parse: a reader that wants a file's images and some other objects of it (import's
    closure check: ConfigMaps that embed components) would otherwise parse it twice."""
    if utf8_length(text, MAX_COMPONENTS_BYTES) > MAX_COMPONENTS_BYTES:
        raise InputError(f"{source}: larger than the {describe_size(MAX_COMPONENTS_BYTES)} limit")
    images: dict[str, None] = {}
    unresolved: list[str] = []
    documents: list[Any] = []
    # only workloads name images (_document_images): CRDs and the rest are parsed whole
    # but never built into objects, as in parse_components
    for document in iter_documents(text, source, kinds=_KINDS | others):
        for kind, name, _key, label, raw in _document_images(document):
            try:
                where = f"{_owner(kind, name)} container {label}"
                images.setdefault(_resolve_image(raw, source, where))
            except InputError as exc:
                unresolved.append(str(exc))
        if others and not (isinstance(document, dict) and document.get("kind") in _KINDS):
            documents.append(document)
    return LenientScan(list(images), unresolved, documents)
