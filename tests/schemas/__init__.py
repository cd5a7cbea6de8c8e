"""Schema checks for emitted Kubernetes and Cluster API operator objects.

Core objects (Namespace, ConfigMap, Secret) are checked against the Kubernetes JSON
schemas bundled with ``kubernetes-validate`` (strict: unknown fields fail), plus the
API server's own rules those schemas leave out (object names, label syntax, base64 in
``binaryData``, the 1 MiB ConfigMap limit). Provider CRs are checked twice: against
``operator-v1alpha2-provider.json``, written from the operator's API description, and
against ``operator-v1alpha2-crd.json``, the openAPIV3Schema of the operator's own CRDs
(``extract_crd.py`` says how it was made), with unknown fields refused as the API
server's strict field validation does and the CRDs' CEL rules applied.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

SCHEMA_DIR = Path(__file__).parent
PROVIDER_SCHEMA = SCHEMA_DIR / "operator-v1alpha2-provider.json"
CRD_SCHEMA = SCHEMA_DIR / "operator-v1alpha2-crd.json"
PROVIDER_KINDS = (
    "CoreProvider",
    "BootstrapProvider",
    "ControlPlaneProvider",
    "InfrastructureProvider",
    "AddonProvider",
    "IPAMProvider",
    "RuntimeExtensionProvider",
)
CONFIGMAP_LIMIT = 1024 * 1024

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
DATA_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


@cache
def kubernetes_version() -> str:
    """The newest Kubernetes version whose schemas kubernetes-validate bundles."""
    return str(kubernetes_validate.latest_version())


@cache
def provider_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(PROVIDER_SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_provider(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless ``obj`` is a valid v1alpha2 provider CR."""
    provider_validator().validate(obj)


def provider_errors(obj: dict[str, Any]) -> list[str]:
    return [error.message for error in provider_validator().iter_errors(obj)]


@cache
def crd_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(CRD_SCHEMA.read_text())
    return schema


@cache
def crd_validator() -> jsonschema.protocols.Validator:
    jsonschema.Draft7Validator.check_schema(crd_schema())
    return jsonschema.Draft7Validator(crd_schema())


def _has(obj: dict[str, Any], field: str) -> bool:
    return field in obj


# The CRDs' x-kubernetes-validations, by rule text: a rule not listed here (a newer CRD)
# fails the check instead of passing unevaluated.
CEL_RULES = {
    "!(has(self.manifestPatches) && has(self.patches))": lambda o: (
        not (_has(o, "manifestPatches") and _has(o, "patches"))
    ),
    "[has(self.oci), has(self.url), has(self.selector)].exists_one(x,x)": lambda o: (
        [_has(o, "oci"), _has(o, "url"), _has(o, "selector")].count(True) == 1
    ),
}


def _cel_errors(schema: dict[str, Any], value: Any, where: str) -> list[str]:
    errors = []
    for rule in schema.get("x-kubernetes-validations") or []:
        check = CEL_RULES.get(rule["rule"])
        if check is None:
            errors.append(f"{where}: CEL rule not emulated: {rule['rule']}")
        elif not check(value):
            errors.append(f"{where}: {rule['message']}")
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                errors += _cel_errors(sub, item, f"{where}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += _cel_errors(schema["items"], item, f"{where}[{index}]")
    return errors


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """What the API server would refuse in ``obj`` under the operator's own CRD schema."""
    errors = [
        f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in crd_validator().iter_errors(obj)
    ]
    return errors + _cel_errors(crd_schema(), obj, "")


def validate_provider_crd(obj: dict[str, Any]) -> None:
    errors = crd_errors(obj)
    assert not errors, errors


def _check_name(name: object, *, label: bool, what: str) -> None:
    assert isinstance(name, str), what
    if label:
        assert len(name) <= 63 and DNS_LABEL_RE.match(name), f"{what}: {name!r}"
    else:
        assert len(name) <= 253 and DNS_SUBDOMAIN_RE.match(name), f"{what}: {name!r}"


def _check_labels(labels: dict[str, str], what: str) -> None:
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if prefix:
            _check_name(prefix, label=False, what=f"{what} label prefix")
        assert len(name) <= 63 and LABEL_NAME_RE.match(name), f"{what} label {key!r}"
        assert len(value) <= 63 and LABEL_VALUE_RE.match(value), f"{what} {key}={value!r}"


def configmap_size(obj: dict[str, Any]) -> int:
    """What the API server counts against 1 MiB: data values (UTF-8) + raw binaryData."""
    data = obj.get("data") or {}
    binary = obj.get("binaryData") or {}
    return sum(len(v.encode()) for v in data.values()) + sum(
        len(base64.b64decode(v, validate=True)) for v in binary.values()
    )


def validate_kubernetes(obj: dict[str, Any]) -> None:
    """Strict schema validation plus the API server rules the schemas do not carry."""
    kubernetes_validate.validate(obj, kubernetes_version(), strict=True)
    kind = obj["kind"]
    metadata = obj["metadata"]
    if kind == "Namespace":
        _check_name(metadata["name"], label=True, what="Namespace name")
        assert "namespace" not in metadata
    else:
        _check_name(metadata["name"], label=False, what=f"{kind} name")
        _check_name(metadata.get("namespace"), label=True, what=f"{kind} namespace")
    _check_labels(metadata.get("labels") or {}, f"{kind} {metadata['name']}")
    if kind in ("ConfigMap", "Secret"):
        keys: list[str] = []
        for field in ("data", "binaryData", "stringData"):
            keys += list((obj.get(field) or {}).keys())
        for key in keys:
            assert DATA_KEY_RE.match(key), f"{kind} key {key!r}"
        if kind == "ConfigMap":
            assert len(keys) == len(set(keys)), "data and binaryData keys overlap"
            for value in (obj.get("binaryData") or {}).values():
                try:
                    base64.b64decode(value, validate=True)
                except binascii.Error as exc:  # pragma: no cover - failure path
                    raise AssertionError(f"binaryData is not base64: {exc}") from exc
            assert configmap_size(obj) <= CONFIGMAP_LIMIT


def validate_object(obj: dict[str, Any]) -> None:
    """Any emitted object: operator CRs by our schema, the rest by Kubernetes'."""
    if obj.get("apiVersion", "").startswith("operator.cluster.x-k8s.io/"):
        validate_provider(obj)
        validate_provider_crd(obj)
    else:
        validate_kubernetes(obj)


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics: every matchLabels pair and every expression."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
