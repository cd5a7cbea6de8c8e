"""Compliance policy over a bundle's contents (YAML, every rule optional).

```yaml
allowedRegistries: [registry.k8s.io, "quay.io/jetstack/*"]  # glob on host or host/path
requireDigests: true            # image references must be pinned by digest
forbiddenTags: [latest]
requiredPlatforms: [linux/amd64, linux/arm64]   # present in every multi-arch image
maxAge: 30d                     # s, m, h, d or w
requiredProviderTypes: [CoreProvider, InfrastructureProvider]
requiredContent: [certManager, operator, templates]   # what a management cluster needs
```
Each rule yields a pass/fail result naming the offending items.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from airgap import yamlsafe
from airgap.bundle.format import BundleManifest
from airgap.content.kinds import ContentKind, parse_kind
from airgap.errors import InputError, SpecError
from airgap.inputfile import read_small
from airgap.limits import MAX_POLICY_BYTES
from airgap.oci import INDEX_TYPES, platform_matches
from airgap.providers.types import ProviderType
from airgap.reference import Reference, parse_reference

_AGE_RE = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True)
class RuleResult:
    rule: str
    passed: bool
    offending: list[str] = field(default_factory=list)
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "passed": self.passed,
            "offending": self.offending,
            "message": self.message,
        }


@dataclass(frozen=True)
class Policy:
    allowed_registries: tuple[str, ...] | None = None
    require_digests: bool = False
    forbidden_tags: tuple[str, ...] = ()
    required_platforms: tuple[str, ...] = ()
    max_age: timedelta | None = None
    required_provider_types: tuple[str, ...] = ()
    required_content: tuple[str, ...] = ()


_KEYS = {
    "allowedRegistries",
    "requireDigests",
    "forbiddenTags",
    "requiredPlatforms",
    "maxAge",
    "requiredProviderTypes",
    "requiredContent",
}


def load_policy(path: Path) -> Policy:
    """Parse a policy file; any mistake is a one-line SpecError naming file, line and key
    (``policy.yaml:3: maxAge: ...``), as spec errors do."""
    try:
        text = read_small(path, MAX_POLICY_BYTES, "policy").decode("utf-8")
        root = yamlsafe.compose(text, str(path), max_bytes=MAX_POLICY_BYTES)
        document = yaml.SafeLoader("").construct_document(root) if root is not None else None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: a policy is UTF-8 YAML ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise SpecError(f"{path}{where}: malformed YAML") from exc
    if document is None:
        document = {}
    lines = _Lines(path, root)
    if not isinstance(document, dict):
        raise lines.error("", "a policy is a mapping of rules")
    unknown = [str(key) for key in document if key not in _KEYS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_KEYS), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise lines.error(
            "", f"unknown key {unknown[0]!r} ({hint}known: {', '.join(sorted(_KEYS))})", unknown[0]
        )
    return Policy(
        allowed_registries=(
            _strings(document, "allowedRegistries", lines)
            if "allowedRegistries" in document
            else None
        ),
        require_digests=_bool(document, "requireDigests", lines),
        forbidden_tags=_strings(document, "forbiddenTags", lines),
        required_platforms=_platforms_of(document, lines),
        max_age=_age(document.get("maxAge"), lines),
        required_provider_types=_types_of(document, lines),
        required_content=_content_of(document, lines),
    )


class _Lines:
    """Where each rule of a policy file is written: errors name the line to fix."""

    def __init__(self, path: Path, root: Node | None) -> None:
        self.path = path
        self._keys: dict[str, tuple[Node, Node]] = {}
        self._root = root
        if isinstance(root, MappingNode):
            for key, value in root.value:
                if isinstance(key, ScalarNode):
                    self._keys.setdefault(str(key.value), (key, value))

    def error(self, key: str, message: str, at_key: str | None = None) -> SpecError:
        """``FILE:LINE: key: message``; ``at_key`` points at a key itself (an unknown
        one) rather than at its value."""
        node: Node | None = self._root
        if at_key is not None and at_key in self._keys:
            node = self._keys[at_key][0]
        elif key:
            name, _, index = key.partition("[")
            node = self._keys[name][1] if name in self._keys else self._root
            if index and isinstance(node, SequenceNode):
                position = int(index.rstrip("]"))
                if position < len(node.value):
                    node = node.value[position]
        return SpecError(yamlsafe.located(self.path, node, key, message))


def _platforms_of(document: dict[str, Any], lines: _Lines) -> tuple[str, ...]:
    platforms = _strings(document, "requiredPlatforms", lines)
    for index, platform in enumerate(platforms):
        parts = platform.split("/")
        if not 2 <= len(parts) <= 3 or not all(parts):
            raise lines.error(
                f"requiredPlatforms[{index}]", f"{platform!r} is not os/arch or os/arch/variant"
            )
    return platforms


def _types_of(document: dict[str, Any], lines: _Lines) -> tuple[str, ...]:
    kinds = []
    for index, text in enumerate(_strings(document, "requiredProviderTypes", lines)):
        try:
            kinds.append(ProviderType.parse(text).kind)
        except InputError as exc:
            raise lines.error(f"requiredProviderTypes[{index}]", str(exc)) from exc
    return tuple(kinds)


def _content_of(document: dict[str, Any], lines: _Lines) -> tuple[str, ...]:
    kinds = _strings(document, "requiredContent", lines)
    for index, kind in enumerate(kinds):
        if parse_kind(kind) is None:
            known = ", ".join(k.value for k in ContentKind)
            raise lines.error(
                f"requiredContent[{index}]", f"unknown kind {kind!r} (known: {known})"
            )
    return kinds


def _strings(document: dict[str, Any], key: str, lines: _Lines) -> tuple[str, ...]:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise lines.error(key, "must be a list of strings")
    return tuple(value)


def _bool(document: dict[str, Any], key: str, lines: _Lines) -> bool:
    value = document.get(key, False)
    if not isinstance(value, bool):
        raise lines.error(key, "must be true or false")
    return value


def _age(value: Any, lines: _Lines) -> timedelta | None:
    if value is None:
        return None
    match = _AGE_RE.match(str(value).strip())
    if not match:
        raise lines.error("maxAge", f"must look like 30d, 12h or 90m, not {value!r}")
    try:
        return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError as exc:
        raise lines.error("maxAge", f"{value!r} is too large") from exc


def evaluate(
    policy: Policy, manifest: BundleManifest, now: datetime | None = None
) -> list[RuleResult]:
    """Results for the rules the policy sets, in a stable order."""
    rules: list[tuple[bool, Callable[[], RuleResult]]] = [
        (policy.allowed_registries is not None, lambda: _allowed(policy, manifest)),
        (policy.require_digests, lambda: _digests(manifest)),
        (bool(policy.forbidden_tags), lambda: _tags(policy, manifest)),
        (bool(policy.required_platforms), lambda: _platforms(policy, manifest)),
        (policy.max_age is not None, lambda: _age_rule(policy, manifest, now)),
        (bool(policy.required_provider_types), lambda: _types(policy, manifest)),
        (bool(policy.required_content), lambda: _content(policy, manifest)),
    ]
    return [rule() for enabled, rule in rules if enabled]


def _result(rule: str, offending: list[str], message: str) -> RuleResult:
    return RuleResult(rule, not offending, offending, message if offending else "")


def _parse(reference: str) -> Reference | None:
    try:
        return parse_reference(reference)
    except InputError:
        return None


def _allowed(policy: Policy, manifest: BundleManifest) -> RuleResult:
    patterns = policy.allowed_registries or ()
    offending = []
    for image in manifest.images:
        ref = _parse(image.reference)
        if ref is None or not any(
            fnmatch.fnmatchcase(ref.registry, p) or fnmatch.fnmatchcase(ref.name, p)
            for p in patterns
        ):
            offending.append(image.reference)
    allowed = ", ".join(patterns) if patterns else "(none allowed)"
    return _result("allowedRegistries", offending, f"images from registries outside {allowed}")


def _digests(manifest: BundleManifest) -> RuleResult:
    offending = []
    for image in manifest.images:
        ref = _parse(image.reference)
        if ref is None or ref.digest is None:
            offending.append(image.reference)
    return _result("requireDigests", offending, "image references not pinned by digest")


def _tags(policy: Policy, manifest: BundleManifest) -> RuleResult:
    offending = []
    for image in manifest.images:
        ref = _parse(image.reference)
        tag = ref.tag if ref else None
        if tag is not None and any(fnmatch.fnmatchcase(tag, p) for p in policy.forbidden_tags):
            offending.append(image.reference)
    return _result("forbiddenTags", offending, f"images tagged {', '.join(policy.forbidden_tags)}")


def _platforms(policy: Policy, manifest: BundleManifest) -> RuleResult:
    offending = []
    for image in manifest.images:
        if image.media_type not in INDEX_TYPES:
            continue
        missing = [
            p
            for p in policy.required_platforms
            if not any(platform_matches(have, (p,)) for have in image.platforms)
        ]
        if missing:
            offending.append(f"{image.reference} (missing {', '.join(missing)})")
    return _result(
        "requiredPlatforms",
        offending,
        f"multi-arch images lacking {', '.join(policy.required_platforms)}",
    )


def _created(manifest: BundleManifest) -> datetime | None:
    try:
        created = datetime.fromisoformat(manifest.created)
    except ValueError:
        return None
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def _age_rule(policy: Policy, manifest: BundleManifest, now: datetime | None) -> RuleResult:
    assert policy.max_age is not None
    created = _created(manifest)
    if created is None:
        return _result(
            "maxAge", [f"created {manifest.created!r}"], "bundle creation time is not a timestamp"
        )
    age = (now or datetime.now(tz=UTC)) - created
    offending = [f"created {manifest.created}"] if age > policy.max_age else []
    return _result("maxAge", offending, f"bundle older than {_describe(policy.max_age)}")


def _describe(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _types(policy: Policy, manifest: BundleManifest) -> RuleResult:
    present = {p.type for p in manifest.providers}
    offending = [t for t in policy.required_provider_types if t not in present]
    return _result("requiredProviderTypes", offending, "required provider types missing")


def _content(policy: Policy, manifest: BundleManifest) -> RuleResult:
    present = {c.kind for c in manifest.contents}
    offending = [kind for kind in policy.required_content if kind not in present]
    return _result("requiredContent", offending, "required content missing")
