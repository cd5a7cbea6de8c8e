"""The images a cluster template's nodes run, for each Kubernetes version carried (pure).

``clusterctl generate cluster --kubernetes-version vX.Y.Z`` substitutes
``${KUBERNETES_VERSION}`` and every variable's default before anything runs, and a
ClusterClass computes node images from the topology's version
(``{{ .builtin.controlPlane.version | replace "+" "_" }}``). So CAPD's
``kindest/node:${KUBERNETES_VERSION}`` is one image per carried version, not an
unresolvable name. Besides workload containers (``components.lenient_scan``), this
module reads what only nodes run: an infrastructure machine template's image
(``DockerMachineTemplate.spec.template.spec.customImage``, also when a ClusterClass
patch sets it) and static Pods written through the bootstrap's ``files[].content``
(vSphere's kube-vip manifest), including files a ClusterClass patch adds. An image left
to a variable nobody defaults is reported, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from airgap.core.errors import InputError
from airgap.formats.yamlload import iter_documents
from airgap.providers.components import VARIABLE_RE, lenient_scan, resolve_image

KUBERNETES_VERSION = "KUBERNETES_VERSION"
NODE_KINDS = frozenset(
    {
        "DockerMachineTemplate",
        "KubeadmControlPlane",
        "KubeadmControlPlaneTemplate",
        "KubeadmConfigTemplate",
        "ClusterClass",
    }
)
# what a ClusterClass patch computes from its own variables: only the cluster decides it,
# so an image using one is reported as needing this variable
TEMPLATE_MARK = "${CLUSTERCLASS_PATCH_VARIABLE}"
_TEMPLATE_RE = re.compile(r"\{\{[^{}]{0,1000}\}\}")
IMAGE_FIELDS = ("customImage",)  # machine-template fields that name the node's image
_BUILTIN_VERSION_RE = re.compile(
    r"\{\{-?\s*\.builtin\.(?:controlPlane|machineDeployment|machinePool|cluster\.topology)"
    r"\.version\s*(?:\|\s*replace\s+\"\+\"\s+\"_\"\s*)?-?\}\}"
)


def for_version(text: str, version: str) -> str:
    """``text`` as clusterctl renders it for ``version`` (only the version: other
    variables keep their defaults for the scan), ClusterClass builtins included."""

    def substitute(match: re.Match[str]) -> str:
        return version if match.group(1) == KUBERNETES_VERSION else match.group(0)

    text = VARIABLE_RE.sub(substitute, text)
    return _BUILTIN_VERSION_RE.sub(version.replace("+", "_"), text)


def template_images(
    text: str, source: str, versions: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Every image ``text``'s clusters run, for each of ``versions`` (the text as
    written when there are none), in order of first appearance; and why each image
    that does not resolve does not (one line each, de-duplicated)."""
    images: dict[str, None] = {}
    unresolved: dict[str, None] = {}
    for rendered in [for_version(text, v) for v in versions] or [text]:
        scan = lenient_scan(rendered, source, others=NODE_KINDS)
        images.update(dict.fromkeys(scan.images))
        unresolved.update(dict.fromkeys(scan.unresolved))
        for document in scan.documents:
            for where, raw in node_images(document):
                try:
                    images.setdefault(resolve_image(raw, source, where))
                except InputError as exc:
                    unresolved.setdefault(str(exc))
            for where, content in embedded_files(document):
                found, problems = _file_images(content, f"{source}: {where}")
                images.update(dict.fromkeys(found))
                unresolved.update(dict.fromkeys(problems))
    return list(images), list(unresolved)


def _file_images(content: str, origin: str) -> tuple[list[str], list[str]]:
    """The images a file written onto a node runs when it is a Pod manifest (a static
    Pod); any other file (TOML, shell, a kubeconfig) names none."""
    content = _TEMPLATE_RE.sub(TEMPLATE_MARK, content)  # a patch template's own logic
    try:
        scan = lenient_scan(content, origin)
    except InputError:
        return [], []
    return scan.images, scan.unresolved


def _name(document: dict[Any, Any]) -> str:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{document.get('kind')} {name or '<unnamed>'}"


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def node_images(document: Any) -> Iterator[tuple[str, Any]]:
    """``(where, raw image)`` of a machine template's node image, and of each image a
    ClusterClass patch writes into one."""
    if not isinstance(document, dict):
        return
    kind = document.get("kind")
    if kind == "DockerMachineTemplate":
        for field in IMAGE_FIELDS:
            raw = _get(document, "spec", "template", "spec", field)
            if raw is not None:
                yield f"{_name(document)} {field}", raw
    if kind == "ClusterClass":
        for name, path, value in _class_patches(document):
            if path.rsplit("/", 1)[-1] in IMAGE_FIELDS and isinstance(value, str):
                yield f"{_name(document)} patch {name} {path}", value.strip()


def embedded_files(document: Any) -> Iterator[tuple[str, str]]:
    """``(where, content)`` of every file a bootstrap config writes onto its nodes."""
    if not isinstance(document, dict):
        return
    kind = document.get("kind")
    paths = {
        "KubeadmControlPlane": ("spec", "kubeadmConfigSpec", "files"),
        "KubeadmControlPlaneTemplate": ("spec", "template", "spec", "kubeadmConfigSpec", "files"),
        "KubeadmConfigTemplate": ("spec", "template", "spec", "files"),
    }
    if kind in paths:
        yield from _file_contents(_get(document, *paths[str(kind)]), _name(document))
    if kind == "ClusterClass":
        for name, path, value in _class_patches(document):
            where = f"{_name(document)} patch {name} {path}"
            if isinstance(value, str) and path.endswith(("/files", "/files/-")):
                value = _template_value(value, where)  # a valueFrom template, as text
            if path.endswith("/files"):
                yield from _file_contents(value, where)
            elif path.endswith("/files/-"):
                yield from _file_contents([value], where)


def _template_value(text: str, where: str) -> Any:
    """A patch's ``valueFrom.template`` read as the YAML it renders to, each of its own
    ``{{ ... }}`` a variable nobody defaults (None when it is not YAML then)."""
    text = _TEMPLATE_RE.sub(TEMPLATE_MARK, text)
    try:
        documents = list(iter_documents(text, where))
    except InputError:
        return None
    return documents[0] if len(documents) == 1 else None


def _file_contents(files: Any, where: str) -> Iterator[tuple[str, str]]:
    if not isinstance(files, list):
        return
    for index, entry in enumerate(files):
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, str):
            path = entry.get("path")
            yield f"{where} files[{index}] {path if isinstance(path, str) else ''}", content


def _class_patches(document: dict[Any, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(patch name, JSON patch path, value or valueFrom template)`` of a ClusterClass."""
    patches = _get(document, "spec", "patches")
    for patch in patches if isinstance(patches, list) else []:
        definitions = _get(patch, "definitions")
        for definition in definitions if isinstance(definitions, list) else []:
            operations = _get(definition, "jsonPatches")
            for operation in operations if isinstance(operations, list) else []:
                path = _get(operation, "path")
                if not isinstance(path, str):
                    continue
                value = _get(operation, "value")
                if value is None:
                    value = _get(operation, "valueFrom", "template")
                yield str(_get(patch, "name")), path, value
