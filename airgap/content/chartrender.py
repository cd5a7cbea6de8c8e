"""A chart's images: what Helm renders with the user's values, and nothing else.

A ``charts:`` entry says how the chart is installed (``RenderSettings``: its values,
release name, namespace, Kubernetes version and API versions); the chart is rendered
with Helm's own engine (``helmengine``) and its images are every container,
initContainer and ephemeralContainer image of every Pod template in the rendered
manifests: Pods, the workload kinds, CronJobs, the items of a ``List``, hooks included,
``helm test`` hooks excluded (an install never runs them). The settings travel in the
bundle's (signed) content record, so verify and import render the same chart the same
way without the spec.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airgap.core.errors import InputError

# what .Capabilities.KubeVersion renders as when the entry gives none (Helm's own default
# follows the library's build; a fixed one renders the same on every machine)
DEFAULT_KUBE_VERSION = "v1.34.0"
DEFAULT_NAMESPACE = "default"
TEST_HOOKS = frozenset({"test", "test-success", "test-failure"})
HOOK_ANNOTATION = "helm.sh/hook"
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# what a chart may render, all manifests together (a chart unpacks to 100 MiB at most;
# real ones render a few MiB, CRDs included)
MAX_RENDERED_CHARS = 256 << 20


@dataclass(frozen=True)
class RenderSettings:
    """How a chart is installed: what ``helm install -f … --set …`` would be given.
    ``release_name`` None renders as the chart's name."""

    values: dict[str, Any] = field(default_factory=dict)
    release_name: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    kube_version: str = DEFAULT_KUBE_VERSION
    api_versions: tuple[str, ...] = ()

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): what the bundle's content record holds."""
        document: dict[str, Any] = {
            "values": self.values,
            "namespace": self.namespace,
            "kubeVersion": self.kube_version,
        }
        if self.release_name is not None:
            document["releaseName"] = self.release_name
        if self.api_versions:
            document["apiVersions"] = list(self.api_versions)
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None, where: str) -> RenderSettings:
        """The settings a content record holds (None: a bundle made before values
        travelled, rendered with the defaults). InputError when malformed."""
        if text is None:
            return cls()
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            raise InputError(f"{where}: render settings are not JSON") from None
        if not isinstance(document, dict):
            raise InputError(f"{where}: render settings are not an object")
        values = document.get("values", {})
        name = document.get("releaseName")
        namespace = document.get("namespace", DEFAULT_NAMESPACE)
        kube = document.get("kubeVersion", DEFAULT_KUBE_VERSION)
        apis = document.get("apiVersions", [])
        if (
            not isinstance(values, dict)
            or not (name is None or isinstance(name, str))
            or not isinstance(namespace, str)
            or not isinstance(kube, str)
            or not (isinstance(apis, list) and all(isinstance(a, str) for a in apis))
        ):
            raise InputError(f"{where}: render settings of the wrong shape")
        return cls(values, name, namespace, kube, tuple(apis))


def merge_values(layers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Values files merged as ``helm install -f a -f b --set …`` merges them: later
    layers win, maps merge key by key, anything else (lists, null) replaces."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _merge(merged, layer)
    return merged


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def rendered_images(manifests: dict[str, str], source: str, *, strict: bool = True) -> list[str]:
    """Every image the rendered manifests' Pod templates run (not ``helm test`` hooks),
    normalised, in the order Helm's output lists them. InputError for a manifest that
    does not parse or (``strict``) a container image that is not a reference; not
    ``strict``, such an image is listed as written."""
    from airgap.formats.yamlload import iter_documents
    from airgap.oci.reference import parse_reference
    from airgap.providers.components import document_images

    if sum(len(text) for text in manifests.values()) > MAX_RENDERED_CHARS:
        raise InputError(f"{source}: renders more than {MAX_RENDERED_CHARS >> 20} MiB of manifests")
    found: dict[str, None] = {}
    for path in sorted(manifests):
        if not path.endswith(_MANIFEST_SUFFIXES):
            continue  # NOTES.txt
        where = f"{source}: {path}"
        for document in iter_documents(manifests[path], where):
            if not isinstance(document, dict) or _is_test_hook(document):
                continue
            for owner, raw in document_images(document):
                if not isinstance(raw, str) or not raw.strip():
                    raise InputError(f"{where}: {owner} has no image")
                try:
                    found.setdefault(str(parse_reference(raw.strip())))
                except InputError as exc:
                    if strict:
                        raise InputError(f"{where}: {owner}: {exc}") from None
                    found.setdefault(raw.strip()[:200])
    return list(found)


def _is_test_hook(document: dict[Any, Any]) -> bool:
    """A ``helm test`` hook (``helm.sh/hook: test``, also in a list of hooks)."""
    metadata = document.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    hooks = annotations.get(HOOK_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(hooks, str):
        return False
    return any(hook.strip() in TEST_HOOKS for hook in hooks.split(","))


def chart_images(
    packages: Sequence[tuple[bytes, str]],
    settings: RenderSettings,
    chart_name: str,
    *,
    strict: bool = True,
) -> list[str]:
    """The images of the first package rendered as ``settings`` say, its dependencies
    among the others (fetched beside it); ``strict`` as for ``rendered_images``."""
    from airgap.content.helmengine import Capabilities, render_chart

    capabilities = Capabilities(
        settings.release_name or chart_name,
        settings.namespace,
        settings.kube_version,
        settings.api_versions,
    )
    manifests = render_chart(packages, settings.values, capabilities)
    return rendered_images(manifests, packages[0][1], strict=strict)
