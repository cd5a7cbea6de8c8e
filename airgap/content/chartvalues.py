"""A values file pointing a chart's images at the mirror (pure).

Helm renders a chart's images (``chartrender``); pointing them elsewhere is done the way
a user does it, with values. Most charts name an image as a mapping under a key that
says ``image`` (the Cluster API operator's chart does):

    image:
      manager:
        registry: ""           # optional
        repository: registry.k8s.io/capi-operator/cluster-api-operator
        tag: v0.24.0           # default: the chart's appVersion
        digest: ""             # optional; set to the mirror's digest

others as an ``image: REPOSITORY:TAG`` string, an ``image:`` string beside its
``tag`` (Calico's, ingress-nginx's), or a ``name`` completed by the chart's
``imageRegistry`` and ``imageNamespace`` (cert-manager's). These are read in the values
Helm computes for the install (defaults, subcharts' and the user's, coalesced); import
then renders the chart with the values written here and refuses any image the result
still runs from elsewhere, so a shape not read here is named, never silently missed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airgap.core.errors import InputError
from airgap.oci.reference import Reference, parse_reference


@dataclass(frozen=True)
class ChartImage:
    """One image a chart's values name, and where."""

    path: tuple[str, ...]  # keys from the top of values.yaml to the image's mapping/value
    reference: str  # normalised
    # "mapping" (repository/tag/...), "string" (image: repo:tag), or "sibling" (image:
    # repo next to tag: or version:, as Calico's tigera-operator and ingress-nginx's
    # charts write it, with registry: and digest: too)
    style: str
    has_registry: bool = False  # the mapping splits registry from repository
    tag_key: str = "tag"  # a sibling image's tag key: tag or version


def chart_global_registry(values: Any) -> str | None:
    """``global.imageRegistry``, which charts built on Bitnami's common library put in
    front of every image (and prefer to each image's own ``registry``)."""
    if isinstance(values, dict) and isinstance(values.get("global"), dict):
        registry = values["global"].get("imageRegistry")
        if isinstance(registry, str) and registry.strip():
            return registry.strip().rstrip("/")
    return None


def lookup(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(values, dict):
            return None
        values = values.get(key)
    return values


def images_in_values(
    values: Any,
    app_version: str | None,
    warnings: list[str],
    global_registry: str | None = None,
) -> Iterator[ChartImage]:
    """The images ``values`` names (a mapping's tag defaulting to ``app_version``)."""
    read: set[tuple[str, ...]] = set()  # an image: string read with its siblings
    naming = _chart_naming(values)
    for path, node in _walk(values, ()):
        imagey = any("image" in key.lower() for key in path)
        sibling = _sibling_image(node, global_registry) if isinstance(node, dict) else None
        if isinstance(node, dict) and imagey and isinstance(node.get("repository"), str):
            tag = app_version or ""
            mapping = _mapping_at(path, node, tag, global_registry, naming)
            if isinstance(mapping, str):
                warnings.append(mapping)
            elif mapping is not None:
                yield mapping
        elif sibling is not None:
            found, tag_key = sibling
            read.add((*path, "image"))
            yield ChartImage(path, found, "sibling", isinstance(node.get("registry"), str), tag_key)
        elif path in read:
            continue
        elif isinstance(node, str) and path and path[-1].lower().endswith("image") and node.strip():
            try:
                yield ChartImage(path, str(parse_reference(node.strip())), "string")
            except InputError:
                warnings.append(f"values {'.'.join(path)}: {node[:80]!r} is not an image")


def _mapping_at(
    path: tuple[str, ...],
    node: dict[str, Any],
    default_tag: str,
    global_registry: str | None,
    naming: tuple[str, ...] | None,
) -> ChartImage | str | None:
    """The image an ``image`` mapping names, a warning saying why it names none that
    can be carried, or None for an empty ``repository`` (a placeholder the templates
    fill, as Argo CD's components leave theirs for ``global.image``)."""
    placeholder = not (str(node["repository"]).strip() or node.get("name"))
    where = f"values {'.'.join(path)}"
    if not (_tag_of(node) or default_tag or _digest_of(node)):
        # no tag to name: the template gives one (a Kubernetes version, another chart's
        # default) or renders none; a guess (latest) could name nothing
        if placeholder:
            return None
        return f"{where}: no tag, and no appVersion to default to"
    found = _mapping_image(node, default_tag, global_registry, naming)
    if found is None:
        return None if placeholder else f"{where}: not a resolvable image"
    return ChartImage(path, found, "mapping", has_registry=isinstance(node.get("registry"), str))


def values_images(values: Any) -> list[str]:
    """The images a values document names (a chart's values.yaml, or a values file
    airgap wrote), read the way chart discovery reads them; a mapping without a tag
    and no appVersion to default to names no image."""
    return list(dict.fromkeys(image.reference for image in images_in_values(values, None, [])))


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every mapping and scalar below ``node`` with its key path; the YAML loader's
    depth bound keeps this finite. Lists are not looked into: image values in lists
    have no common shape."""
    yield path, node
    if isinstance(node, dict):
        for key, child in node.items():
            if isinstance(key, str):
                yield from _walk(child, (*path, key))


def _sibling_image(node: dict[str, Any], global_registry: str | None) -> tuple[str, str] | None:
    """``{image: REPO, tag: T}`` or ``{image: REPO, version: T, registry: R}`` (Calico's
    tigera-operator chart has both): the image and the key its tag is under, or None.

    Read as a plain string, ``image: tigera/operator`` named docker.io/tigera/
    operator:latest, which the chart never renders (it renders quay.io/tigera/
    operator:v1.38.6); an image string with its own tag or digest is read as it is."""
    image = node.get("image")
    if not isinstance(image, str) or not image.strip():
        return None
    text = image.strip()
    if "@" in text or ":" in text.rsplit("/", 1)[-1]:
        return None
    for tag_key in ("tag", "version"):
        tag = node.get(tag_key)
        if isinstance(tag, (str, int, float)) and not isinstance(tag, bool) and str(tag).strip():
            break
    else:
        return None
    registry = global_registry or node.get("registry")
    if isinstance(registry, str) and registry.strip():
        text = f"{registry.strip().rstrip('/')}/{text}"
    text += f":{str(tag).strip()}"
    digest = _digest_of(node)
    if digest:  # ingress-nginx renders tag@digest
        text += f"@{digest}"
    try:
        return str(parse_reference(text)), tag_key
    except InputError:
        return None


def _chart_naming(values: Any) -> tuple[str, ...] | None:
    """The top-level ``imageRegistry`` and ``imageNamespace`` (those set, in that order)
    that a chart composes an image's repository from when the image gives only its
    ``name``, as cert-manager's chart does from v1.20; None when it sets neither."""
    if not isinstance(values, dict) or not ({"imageRegistry", "imageNamespace"} & values.keys()):
        return None
    parts = (values.get("imageRegistry"), values.get("imageNamespace"))
    return tuple(p.strip(" /") for p in parts if isinstance(p, str) and p.strip(" /"))


def _digest_of(node: dict[str, Any]) -> str:
    digest = node.get("digest")
    return digest.strip() if isinstance(digest, str) else ""


def _tag_of(node: dict[str, Any]) -> str:
    tag = node.get("tag")
    return str(tag).strip() if tag is not None and not isinstance(tag, bool) else ""


def _mapping_image(
    node: dict[str, Any],
    default_tag: str,
    global_registry: str | None = None,
    naming: tuple[str, ...] | None = None,
) -> str | None:
    """``repository`` (and ``registry``, ``tag``, ``digest``) of an image mapping as a
    reference. An empty ``repository`` beside a ``name``, in a chart that sets
    ``imageRegistry`` or ``imageNamespace``, is ``REGISTRY/NAMESPACE/NAME`` (cert-manager's
    ``cert-manager.image``: a repository, when given, wins)."""
    repository = str(node["repository"]).strip()
    name = node.get("name")
    if not repository and naming is not None and isinstance(name, str) and name.strip():
        repository = "/".join((*naming, name.strip()))
    registry = global_registry or node.get("registry")
    if isinstance(registry, str) and registry.strip():
        repository = f"{registry.strip().rstrip('/')}/{repository}"
    tag_text = _tag_of(node) or default_tag
    digest = _digest_of(node)
    text = repository
    if tag_text:
        text += f":{tag_text}"
    if digest:
        text += f"@{digest}"
    if not repository:
        return None
    try:
        return str(parse_reference(text))
    except InputError:
        return None


def values_overrides(
    values: Any,
    app_version: str | None,
    rendered: list[str],
    target: Callable[[str], tuple[Reference, str | None] | None],
    split: frozenset[tuple[str, ...]] = frozenset(),
) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """A values file that points every image ``values`` names, and Helm ``rendered``,
    at the mirror; and for each value path set, the reference it should now render.

    ``target(reference)`` gives the target reference of a bundle image and the digest
    to pin it by (None: not in the bundle). A value names a rendered image when the two
    are equal, or, for a value without a registry (the chart adds one: a global
    registry, a ``merge`` with global values), when repository path and tag match. A
    mapping gets ``repository`` and ``tag``, a sibling image ``image`` and its tag key
    (both split into ``registry`` and a repository when the values split them, the
    chart sets ``global.imageRegistry`` or adds a registry, or ``split`` holds the
    path: the caller found the whole name did not render), and ``digest`` (the charts
    that read one pin by it, the others keep the tag); a string value gets the whole
    pinned reference."""
    global_registry = chart_global_registry(values)
    overrides: dict[str, Any] = {}
    expected: dict[tuple[str, ...], str] = {}
    for image in images_in_values(values, app_version, [], global_registry):
        source = _rendered_as(image, rendered)
        found = target(source) if source is not None else None
        if found is None:
            continue
        reference, digest = found
        pinned = reference.with_digest(digest) if digest else reference
        expected[image.path] = str(pinned)
        if image.style == "string":
            _set(overrides, image.path, str(pinned))
            continue
        if global_registry:  # it wins over each image's registry: the mirror's
            overrides.setdefault("global", {})["imageRegistry"] = reference.registry
        added = source != image.reference  # the chart puts a registry in front
        whole = not (image.has_registry or global_registry or added or image.path in split)
        key = "image" if image.style == "sibling" else "repository"
        value: dict[str, Any] = {key: reference.name if whole else reference.repository}
        if not whole:
            value["registry"] = reference.registry
        if reference.tag:
            value[image.tag_key] = reference.tag
        if digest:
            value["digest"] = digest
        _set(overrides, image.path, value)
    return overrides, expected


def _rendered_as(image: ChartImage, rendered: list[str]) -> str | None:
    """The rendered image a values image is, if any (see ``values_overrides``)."""
    if image.reference in rendered:
        return image.reference
    if image.has_registry:
        return None
    wanted = parse_reference(image.reference)
    path = wanted.repository.removeprefix("library/")
    for candidate in rendered:
        found = parse_reference(candidate)
        if found.tag == wanted.tag and (
            found.repository == path or found.repository.endswith(f"/{path}")
        ):
            return candidate
    return None


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Merge ``value`` in at ``path``; the empty path is the top of the values (a chart
    whose values.yaml is ``image: REPO`` beside ``tag: T``)."""
    if not path:
        tree.update(value)
        return
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise InputError(f"values {'.'.join(path)}: inside another image's value")
    if isinstance(value, dict):
        into = node.setdefault(path[-1], {})
        if not isinstance(into, dict):
            raise InputError(f"values {'.'.join(path)}: inside another image's value")
        into.update(value)
    else:
        node[path[-1]] = value
