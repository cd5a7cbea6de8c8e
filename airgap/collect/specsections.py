"""The spec's chart entries and the checks they share with the other sections: chart
locations, values and rendering settings, image lists, files the spec names."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from yaml.nodes import MappingNode, Node

from airgap.content.chartrender import (
    DEFAULT_KUBE_VERSION,
    DEFAULT_NAMESPACE,
    RenderSettings,
    merge_values,
)
from airgap.content.constraints import satisfies
from airgap.content.kinds import ChartLocation, ContentKind, ContentSpec
from airgap.core.errors import AirgapError, InputError, utf8_text
from airgap.core.inputfile import check_regular, read_small
from airgap.core.names import (
    namespace_problem,
    provider_name_problem,
    shown,
)
from airgap.core.redact import has_userinfo, redact_url
from airgap.formats import yamlsafe
from airgap.formats.located import (
    LocatedDocument,
    describe,
    is_null,
)
from airgap.oci.reference import parse_reference

_CHART_KEYS = (
    "repo",
    "oci",
    "name",
    "version",
    "caFile",
    "images",
    "keyring",
    "values",
    "valuesFiles",
    "releaseName",
    "namespace",
    "kubeVersion",
    "apiVersions",
)


MAX_VALUES_FILES = 20  # per chart entry


MAX_VALUES_FILE_BYTES = 1 << 20  # a values file (real ones are a few KiB)


def _check_release_name(text: str) -> str | None:
    """Helm's rule for a release name: a DNS label of at most 53 characters."""
    if len(text) > 53 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text):
        return f"invalid release name {shown(text)} (a DNS label of at most 53 characters)"
    return None


def _check_kube_version(text: str) -> str | None:
    if not re.fullmatch(r"v?\d{1,3}\.\d{1,3}(\.\d{1,4})?", text):
        return f"invalid Kubernetes version {shown(text)} (like v1.31.2)"
    return None


def _v(text: str) -> str:
    """``1.31`` -> ``v1.31.0``: what .Capabilities.KubeVersion.Version renders."""
    parts = text.lstrip("v").split(".")
    return "v" + ".".join(parts + ["0"] * (3 - len(parts)))


def _check_url(text: str) -> str | None:
    redacted = shown(redact_url(text))  # a URL may carry user:password@: never repeat it
    try:
        parts = urlsplit(text)
        hostname = parts.hostname
    except ValueError:
        return f"invalid URL {redacted}"
    if parts.scheme.lower() not in ("http", "https", "file"):
        return f"unsupported URL {redacted} (use https://, http:// or file://)"
    if parts.scheme.lower() != "file" and not hostname:
        return f"URL {redacted} has no host"
    return None


class SpecSections(LocatedDocument):
    """Sections of a spec that more than one part of it uses, and its charts."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.base_dir = path.parent

    def charts(
        self, entry: tuple[Node, Node] | None, kube_default: str = DEFAULT_KUBE_VERSION
    ) -> tuple[ContentSpec, ...]:
        """``charts: [{repo, name, version} | {oci, version}]`` with optional ``caFile``
        and ``images``; a repository entry's version may be a Helm constraint. A chart
        with no ``kubeVersion`` renders for ``kube_default``: the highest carried
        Kubernetes version, the workload clusters it will be installed on."""
        if entry is None or is_null(entry[1]):
            return ()
        result: list[ContentSpec] = []
        first_at: dict[tuple[str, str], int] = {}
        for index, node in enumerate(self.sequence(entry[1], "charts")):
            where = f"charts[{index}]"
            keys = self.mapping(node, where, _CHART_KEYS)
            if ("repo" in keys) == ("oci" in keys):
                raise self.error(node, where, "give either repo (with name) or oci")
            version = self.required_string(node, keys, where, "version")
            if "oci" in keys:
                oci = self.required_string(node, keys, where, "oci")
                name = self.oci_chart_name(keys["oci"][1], f"{where}.oci", oci)
                if "name" in keys:
                    raise self.error(keys["name"][0], f"{where}.name", "an oci entry takes no name")
                if "caFile" in keys:  # a registry's CA is the registry's setting
                    raise self.error(
                        keys["caFile"][0],
                        f"{where}.caFile",
                        "an OCI chart's registry takes its CA from registries: HOST: {caFile}",
                    )
                location = ChartLocation(oci=oci)
            else:
                repo = self.required_string(node, keys, where, "repo")
                problem = _check_url(repo)
                if not problem and urlsplit(repo).scheme.lower() == "file":
                    problem = "a chart repository is https:// or http://"
                if problem:
                    raise self.error(keys["repo"][1], f"{where}.repo", problem)
                name = self.required_string(node, keys, where, "name")
                problem = provider_name_problem(name)
                if problem:
                    raise self.error(keys["name"][1], f"{where}.name", problem)
                location = ChartLocation(repo=repo)
            try:  # an exact version or a Helm constraint (OCI: matched against the tags)
                satisfies("0.0.0", version)
            except InputError as exc:
                raise self.error(keys["version"][1], f"{where}.version", str(exc)) from None
            ca_file = self.ca_file(keys, where)
            images = self.images(keys.get("images"), f"{where}.images")
            identity = (name, version)
            if identity in first_at:
                raise self.error(
                    node,
                    where,
                    f"duplicate chart {name} {version} (already at charts[{first_at[identity]}])",
                )
            first_at[identity] = index
            keyring = self.existing_file(keys, where, "keyring", "keyring")
            render = self.render_settings(keys, where, kube_default)
            location = replace(
                location, ca_file=ca_file, images=images, keyring=keyring, render=render
            )
            result.append(ContentSpec(ContentKind.CHARTS, version, None, name, location))
        return tuple(result)

    def render_settings(
        self, keys: dict[str, tuple[Node, Node]], where: str, kube_default: str
    ) -> RenderSettings:
        """How the chart is rendered: ``valuesFiles`` (relative to the spec's directory)
        then ``values`` merged as ``helm install -f … --set …`` merges them, the release
        name and namespace, ``kubeVersion`` and ``apiVersions`` for ``.Capabilities``."""
        layers = [
            self.values_file(node, f"{where}.valuesFiles[{index}]")
            for index, node in enumerate(self.values_files(keys, where))
        ]
        if "values" in keys and not is_null(keys["values"][1]):
            layers.append(self.values_mapping(keys["values"][1], f"{where}.values"))
        release = self.optional_string(keys, where, "releaseName", _check_release_name)
        namespace = self.optional_string(keys, where, "namespace", namespace_problem)
        kube = self.optional_string(keys, where, "kubeVersion", _check_kube_version)
        apis = [
            self.string(node, f"{where}.apiVersions[{index}]")
            for index, node in enumerate(
                self.sequence(keys["apiVersions"][1], f"{where}.apiVersions")
                if "apiVersions" in keys and not is_null(keys["apiVersions"][1])
                else []
            )
        ]
        values = merge_values(layers)
        try:
            json.dumps(values, allow_nan=False)
        except (TypeError, ValueError):
            raise self.error(
                keys.get("values", keys.get("valuesFiles", (None, None)))[1],
                f"{where}.values",
                "a value is not a string, number, boolean, null, list or mapping (quote it)",
            ) from None
        return RenderSettings(
            values=values,
            release_name=release,
            namespace=namespace or DEFAULT_NAMESPACE,
            kube_version=_v(kube) if kube else kube_default,
            api_versions=tuple(dict.fromkeys(apis)),
        )

    def values_files(self, keys: dict[str, tuple[Node, Node]], where: str) -> list[Node]:
        entry = keys.get("valuesFiles")
        if entry is None or is_null(entry[1]):
            return []
        nodes = self.sequence(entry[1], f"{where}.valuesFiles")
        if len(nodes) > MAX_VALUES_FILES:
            raise self.error(
                entry[1], f"{where}.valuesFiles", f"more than {MAX_VALUES_FILES} files"
            )
        return nodes

    def values_file(self, node: Node, where: str) -> dict[str, Any]:
        """A values file the spec names, read within bounds, parsed as one mapping."""
        from airgap.formats.yamlload import load_single

        path = Path(self.string(node, where)).expanduser()
        if not path.is_absolute():
            path = self.base_dir / path
        try:
            text = utf8_text(read_small(path, MAX_VALUES_FILE_BYTES, "values file"), str(path))
            document = load_single(text, str(path))
        except AirgapError as exc:
            raise self.error(node, where, str(exc)) from None
        if document is None:
            return {}
        if not isinstance(document, dict):
            raise self.error(node, where, f"values file {path} is not a mapping")
        return document

    def values_mapping(self, node: Node, where: str) -> dict[str, Any]:
        if not isinstance(node, MappingNode):
            raise self.error(node, where, f"must be a mapping, not {describe(node)}")
        values = yamlsafe.construct(node)
        if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
            raise self.error(node, where, "keys must be strings")
        return values

    def oci_chart_name(self, node: Node, where: str, text: str) -> str:
        parts = urlsplit(text)
        name = parts.path.rstrip("/").rpartition("/")[2]
        if parts.scheme != "oci" or not parts.netloc or not name or parts.query or parts.fragment:
            raise self.error(
                node, where, f"invalid OCI chart {text[:200]!r} (oci://HOST/PATH/NAME)"
            )
        if has_userinfo(text):
            raise self.error(
                node, where, "an OCI reference carries no credentials: use a credentials file"
            )
        problem = provider_name_problem(name)
        if problem:
            raise self.error(node, where, problem)
        return name

    def images(self, entry: tuple[Node, Node] | None, where: str = "images") -> tuple[str, ...]:
        if entry is None or is_null(entry[1]):
            return ()
        images: dict[str, None] = {}  # in order, each once (a list lookup: quadratic)
        for index, node in enumerate(self.sequence(entry[1], where)):
            key = f"{where}[{index}]"
            text = self.string(node, key)
            try:
                image = str(parse_reference(text))
            except InputError as exc:
                raise self.error(node, key, str(exc)) from None
            images.setdefault(image)
        return tuple(images)

    def ca_file(self, keys: dict[str, tuple[Node, Node]], where: str) -> str | None:
        """``caFile`` (a registry's or a chart repository's)."""
        return self.existing_file(keys, where, "caFile", "CA file")

    def existing_file(
        self, keys: dict[str, tuple[Node, Node]], where: str, key: str, what: str
    ) -> str | None:
        """A file the spec names: ``~`` expanded, relative to the spec's directory, and
        present now rather than when first used (a TLS handshake, a .prov's check)."""
        text = self.optional_string(keys, where, key, None)
        if text is None:
            return None
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.base_dir / path
        try:
            check_regular(path, what)
        except InputError as exc:
            raise self.error(keys[key][1], f"{where}.{key}", str(exc)) from None
        return str(path.resolve())
