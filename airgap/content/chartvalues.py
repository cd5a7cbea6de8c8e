"""The images a chart's ``values.yaml`` names, and a values file pointing them at the
mirror (pure).

Most charts name an image as a mapping under a key that says ``image`` (the Cluster
API operator's chart does):

    image:
      manager:
        registry: ""           # optional
        repository: registry.k8s.io/capi-operator/cluster-api-operator
        tag: v0.24.0           # default: the chart's appVersion
        digest: ""             # optional; some templates honour it

others as an ``image: REPOSITORY:TAG`` string, an ``image:`` string beside its
``tag`` (Calico's, ingress-nginx's), or a ``name`` completed by the chart's
``imageRegistry`` and ``imageNamespace`` (cert-manager's). What the templates add to
that reading (merged defaults, tag formats) comes from ``charttemplates``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airgap.errors import InputError
from airgap.reference import Reference, parse_reference

if TYPE_CHECKING:
    from airgap.content.chart import Chart
    from airgap.content.charttemplates import ValuesHints


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


VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")


def values_path(dotted: str) -> tuple[str, ...]:
    """``.image.manager`` (what follows ``.Values``) as keys: ``("image", "manager")``."""
    return tuple(dotted[1:].split("."))


def values_paths(text: str) -> list[tuple[str, ...]]:
    """Every ``.Values.…`` path ``text`` reads, as keys."""
    return [values_path(m.group(1)) for m in VALUES_PATH.finditer(text)]


def lookup(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(values, dict):
            return None
        values = values.get(key)
    return values


def coalesced(defaults: Any, given: Any) -> Any:
    """``given`` over ``defaults``, as Helm coalesces a subchart's values: mappings
    merge key by key, anything else given wins, and a null given removes the key."""
    if not isinstance(given, dict) or not given:
        return defaults
    if not isinstance(defaults, dict):
        return {key: value for key, value in given.items() if value is not None}
    merged = dict(defaults)
    for key, value in given.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesced(merged[key], value)
        else:
            merged[key] = value
    return merged


def images_in_values(
    values: Any,
    app_version: str | None,
    warnings: list[str],
    global_registry: str | None = None,
    hints: ValuesHints | None = None,
    dependencies: dict[str, bool] | None = None,
) -> Iterator[ChartImage]:
    """The images ``values`` names. Under a dependency's key, nothing when the dependency
    is off, and no tag defaulted from this chart's appVersion when it is on: there the
    dependency's own defaults apply, which are not in these values."""
    read: set[tuple[str, ...]] = set()  # an image: string read with its siblings
    naming = _chart_naming(values)
    dependencies = dependencies or {}
    for path, node in _walk(values, ()):
        owner = dependencies.get(path[0]) if path else None
        if owner is False:
            continue
        if hints and path in hints.merged and isinstance(node, dict):
            node = _filled(node, [lookup(values, default) for default in hints.merged[path]])
        imagey = any("image" in key.lower() for key in path)
        sibling = _sibling_image(node, global_registry) if isinstance(node, dict) else None
        if isinstance(node, dict) and imagey and isinstance(node.get("repository"), str):
            if owner:  # an enabled dependency's key: its tag defaults to that chart's
                tag = ""
            elif hints:
                tag = hints.default_tag(path, app_version)
            else:
                tag = app_version or ""
            mapping = _mapping_at(path, node, tag, owner is not None, global_registry, naming)
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
    in_dependency: bool,
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
        if in_dependency:
            why = f"its tag is the {path[0]} chart's default, not in these values"
        else:
            why = "no tag, and no appVersion to default to"
        return f"{where}: {why}: list the image in the entry's images"
    found = _mapping_image(node, default_tag, global_registry, naming)
    if found is None:
        return None if placeholder else f"{where}: not a resolvable image"
    return ChartImage(path, found, "mapping", has_registry=isinstance(node.get("registry"), str))


def values_images(values: Any) -> list[str]:
    """The images a values document names (a chart's values.yaml, or a values file
    airgap wrote), read the way chart discovery reads them; a mapping without a tag
    and no appVersion to default to names no image."""
    return list(dict.fromkeys(image.reference for image in images_in_values(values, None, [])))


def _filled(node: dict[str, Any], defaults: list[Any]) -> dict[str, Any]:
    """``node`` with the keys it leaves unset (absent or null) taken from ``defaults``,
    the first that sets each: Sprig's ``merge``, one level deep (image keys)."""
    filled = dict(node)
    for default in defaults:
        if isinstance(default, dict):
            for key, value in default.items():
                if filled.get(key) is None:
                    filled[key] = value
    return filled


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
    chart: Chart, target: Callable[[str], tuple[Reference, str | None] | None]
) -> dict[str, Any]:
    """A values file that points every image of ``chart`` at the mirror.

    ``target(reference)`` gives the target reference of a bundle image and the digest
    to pin it by (None: do not pin). A mapping gets ``repository`` and ``tag``, a
    sibling image ``image`` and its tag key (both with ``registry`` when the chart
    splits it out, also through a ``merge`` with global values, and ``digest`` when a
    template honours one); a string value gets the whole reference."""
    overrides: dict[str, Any] = {}
    for image in chart.images:
        found = target(image.reference)
        if found is None:
            continue
        reference, digest = found
        if chart.global_registry:  # it wins over each image's registry: the mirror's
            overrides.setdefault("global", {})["imageRegistry"] = reference.registry
        if image.style == "string":
            pinned = reference.with_digest(digest) if digest else reference
            _set(overrides, image.path, str(pinned))
            continue
        if image.style == "sibling":
            split = image.has_registry or chart.global_registry
            sibling = {"image": reference.repository if split else reference.name}
            if split:
                sibling["registry"] = reference.registry
            if reference.tag:
                sibling[image.tag_key] = reference.tag
            if digest and chart.honours_digest:
                sibling["digest"] = digest
            _set(overrides, image.path, sibling)
            continue
        value: dict[str, Any] = {}
        if image.has_registry or chart.global_registry:
            value["registry"] = reference.registry
            value["repository"] = reference.repository
        else:
            value["repository"] = reference.name
        if reference.tag:
            value["tag"] = reference.tag
        if digest and chart.honours_digest:
            value["digest"] = digest
        _set(overrides, image.path, value)
    return overrides


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
