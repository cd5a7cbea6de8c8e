"""Compliance policy over a bundle's contents (YAML, every rule optional).

```yaml
allowedRegistries: [registry.k8s.io, "quay.io/jetstack/*"]  # glob on host or host/path
requireDigests: true            # image references must be pinned by digest
forbiddenTags: [latest]
requiredPlatforms: [linux/amd64, linux/arm64]   # present in every multi-arch image
maxAge: 30d                     # s, m, h, d or w
requiredProviderTypes: [CoreProvider, InfrastructureProvider]
requiredContent: [certManager, operator, templates]   # what a management cluster needs
requireSignatures:              # cosign signatures, checked offline (verify.signatures)
  images: ["registry.k8s.io/*"] # optional globs; default every image
  keys: [cosign.pub]            # PEM public keys, relative to this file
  keyless:                      # and/or Fulcio-certified identities
    - {identity: krel-trust@k8s-releng-prod.iam.gserviceaccount.com,
       issuer: https://accounts.google.com}   # or identityRegexp / issuerRegexp
  fulcioRoots: [fulcio.pem]     # keyless trust material (else the bundle's)
  rekorKeys: [rekor.pub]
```
Each rule yields a pass/fail result naming the offending items.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import ContentKind, parse_kind
from airgap.core.errors import InputError, SpecError
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_POLICY_BYTES, MAX_TRUST_FILE_BYTES
from airgap.core.names import shown
from airgap.formats import yamlsafe
from airgap.formats.located import LocatedDocument, yaml_error
from airgap.oci.manifest import INDEX_TYPES, platform_matches
from airgap.oci.reference import Reference, parse_reference
from airgap.providers.types import ProviderType
from airgap.supplychain.cosign import (
    Identity,
    NamedKey,
    load_certificates,
    load_public_keys,
)
from airgap.verify.signatures import ReadMember, SignaturePolicy, check_signatures

_AGE_RE = re.compile(r"^([0-9]{1,12})\s*([smhdw])$")  # ASCII digits, int()-safe
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
NEAR_MISS_SHARE = 0.25  # maxAge: a quarter of the allowed age or less left is a near-miss


@dataclass(frozen=True)
class RuleResult:
    """The outcome of one policy rule, with what broke it, for the report and ``--format
    json``."""

    rule: str
    passed: bool
    offending: list[str] = field(default_factory=list)
    message: str = ""
    details: list[str] = field(default_factory=list)  # e.g. who signed each image
    near_miss: str = ""  # passed, but close to failing (a bundle about to be too old)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "rule": self.rule,
            "passed": self.passed,
            "offending": self.offending,
            "message": self.message,
        }
        if self.details:
            document["details"] = self.details
        if self.near_miss:
            document["nearMiss"] = self.near_miss
        return document


@dataclass(frozen=True)
class Policy:
    """A compliance team's rules for a bundle (``--policy``); a rule left out is not
    checked."""

    allowed_registries: tuple[str, ...] | None = None
    require_digests: bool = False
    forbidden_tags: tuple[str, ...] = ()
    required_platforms: tuple[str, ...] = ()
    max_age: timedelta | None = None
    required_provider_types: tuple[str, ...] = ()
    required_content: tuple[str, ...] = ()
    require_signatures: SignaturePolicy | None = None


_KEYS = {
    "allowedRegistries",
    "requireDigests",
    "forbiddenTags",
    "requiredPlatforms",
    "maxAge",
    "requiredProviderTypes",
    "requiredContent",
    "requireSignatures",
}
_SIGNATURE_KEYS = ("images", "keys", "keyless", "fulcioRoots", "rekorKeys")
_IDENTITY_KEYS = ("identity", "identityRegexp", "issuer", "issuerRegexp")


def load_policy(path: Path) -> Policy:
    """Parse a policy file; any mistake is a one-line SpecError naming file, line and key
    (``policy.yaml:3: maxAge: ...``), as spec errors do."""
    try:
        text = read_small(path, MAX_POLICY_BYTES, "policy").decode("utf-8")
        root = yamlsafe.compose(text, str(path), max_bytes=MAX_POLICY_BYTES)
        document = yamlsafe.construct(root) if root is not None else None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: a policy is UTF-8 YAML ({exc.reason})") from exc
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from exc
    if document is None:
        document = {}
    lines = LocatedDocument(path, root)
    if not isinstance(document, dict):
        raise lines.error_at("a policy is a mapping of rules")
    unknown = [str(key) for key in document if key not in _KEYS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_KEYS), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise lines.key_error(
            unknown[0],
            f"unknown key {shown(unknown[0])} ({hint}known: {', '.join(sorted(_KEYS))})",
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
        require_signatures=_signatures_of(document, lines),
    )


def _platforms_of(document: dict[str, Any], lines: LocatedDocument) -> tuple[str, ...]:
    platforms = _strings(document, "requiredPlatforms", lines)
    for index, platform in enumerate(platforms):
        parts = platform.split("/")
        if not 2 <= len(parts) <= 3 or not all(parts):
            raise lines.error_at(
                f"{shown(platform)} is not os/arch or os/arch/variant", "requiredPlatforms", index
            )
    return platforms


def _signatures_of(document: dict[str, Any], lines: LocatedDocument) -> SignaturePolicy | None:
    """``requireSignatures``: keys and keyless identities, their files read now (a
    policy that cannot be used fails at its line, before anything is checked)."""
    if "requireSignatures" not in document:
        return None
    rule = document["requireSignatures"]
    top = "requireSignatures"
    if not isinstance(rule, dict):
        raise lines.error_at("must be a mapping (images, keys, keyless, ...)", top)
    for key in rule:
        if key not in _SIGNATURE_KEYS:
            raise lines.error_at(
                f"unknown key {shown(str(key))} (known: {', '.join(_SIGNATURE_KEYS)})",
                top,
                str(key),
            )
    images = _nested_strings(rule, "images", lines)
    keys: list[NamedKey] = []
    for index, name in enumerate(_nested_strings(rule, "keys", lines)):
        data = _trust_file(lines, name, top, "keys", index)
        try:
            keys += [NamedKey(name, key) for key in load_public_keys(data, name)]
        except ValueError as exc:
            raise lines.error_at(str(exc), top, "keys", index) from None
    identities = _identities(rule.get("keyless"), lines)
    if not keys and not identities:
        raise lines.error_at("give keys, keyless identities, or both", top)
    roots = _pem_files(rule, "fulcioRoots", lines, load_certificates)
    rekor = _pem_files(rule, "rekorKeys", lines, load_public_keys)
    return SignaturePolicy(tuple(images), tuple(keys), identities, roots, rekor)


def _nested_strings(rule: dict[str, Any], key: str, lines: LocatedDocument) -> tuple[str, ...]:
    value = rule.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise lines.error_at("must be a list of strings", "requireSignatures", key)
    return tuple(value)


def _trust_file(lines: LocatedDocument, name: str, *steps: str | int) -> bytes:
    """A PEM file the policy names, relative to the policy's directory."""
    path = lines.path.parent / name
    try:
        return read_small(path, MAX_TRUST_FILE_BYTES, "file")
    except InputError as exc:
        raise lines.error_at(str(exc), *steps) from None


def _pem_files(
    rule: dict[str, Any], key: str, lines: LocatedDocument, parse: Callable[[bytes, str], list[Any]]
) -> bytes | None:
    """The PEM files of ``fulcioRoots`` or ``rekorKeys``, checked and concatenated."""
    names = _nested_strings(rule, key, lines)
    if not names:
        return None
    chunks = []
    for index, name in enumerate(names):
        data = _trust_file(lines, name, "requireSignatures", key, index)
        try:
            if not parse(data, name):
                raise ValueError(f"{name}: no certificate in it")
        except ValueError as exc:
            raise lines.error_at(str(exc), "requireSignatures", key, index) from None
        chunks.append(data if data.endswith(b"\n") else data + b"\n")
    return b"".join(chunks)


def _identities(value: Any, lines: LocatedDocument) -> tuple[Identity, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise lines.error_at("must be a list of {identity, issuer}", "requireSignatures", "keyless")
    found = []
    for index, entry in enumerate(value):
        steps: tuple[str | int, ...] = ("requireSignatures", "keyless", index)
        if not isinstance(entry, dict) or not entry:
            raise lines.error_at(
                "must be a mapping of identity/issuer (or their Regexp forms)", *steps
            )
        for key, text in entry.items():
            if key not in _IDENTITY_KEYS:
                raise lines.error_at(
                    f"unknown key {shown(str(key))} (known: {', '.join(_IDENTITY_KEYS)})",
                    *steps,
                    str(key),
                )
            if not isinstance(text, str) or not text:
                raise lines.error_at("must be a non-empty string", *steps, key)
            if key.endswith("Regexp"):
                try:
                    re.compile(text)
                except re.error as exc:
                    raise lines.error_at(f"not a regular expression ({exc})", *steps, key) from None
        keys = set(entry)
        if {"identity", "identityRegexp"} <= keys or {"issuer", "issuerRegexp"} <= keys:
            raise lines.error_at("give a value or its Regexp form, not both", *steps)
        if not keys & {"identity", "identityRegexp"} or not keys & {"issuer", "issuerRegexp"}:
            raise lines.error_at(
                "a keyless identity needs identity (or identityRegexp) and issuer "
                "(or issuerRegexp)",
                *steps,
            )
        found.append(
            Identity(
                entry.get("identity"),
                entry.get("identityRegexp"),
                entry.get("issuer"),
                entry.get("issuerRegexp"),
            )
        )
    return tuple(found)


def _types_of(document: dict[str, Any], lines: LocatedDocument) -> tuple[str, ...]:
    kinds = []
    for index, text in enumerate(_strings(document, "requiredProviderTypes", lines)):
        try:
            kinds.append(ProviderType.parse(text).kind)
        except InputError as exc:
            raise lines.error_at(str(exc), "requiredProviderTypes", index) from exc
    return tuple(kinds)


def _content_of(document: dict[str, Any], lines: LocatedDocument) -> tuple[str, ...]:
    kinds = _strings(document, "requiredContent", lines)
    for index, kind in enumerate(kinds):
        if parse_kind(kind) is None:
            known = ", ".join(k.value for k in ContentKind)
            raise lines.error_at(
                f"unknown kind {shown(kind)} (known: {known})", "requiredContent", index
            )
    return kinds


def _strings(document: dict[str, Any], key: str, lines: LocatedDocument) -> tuple[str, ...]:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise lines.error_at("must be a list of strings", key)
    return tuple(value)


def _bool(document: dict[str, Any], key: str, lines: LocatedDocument) -> bool:
    value = document.get(key, False)
    if not isinstance(value, bool):
        raise lines.error_at("must be true or false", key)
    return value


def _age(value: Any, lines: LocatedDocument) -> timedelta | None:
    if value is None:
        return None
    match = _AGE_RE.match(str(value).strip())
    if not match:
        raise lines.error_at(f"must look like 30d, 12h or 90m, not {shown(value)}", "maxAge")
    try:
        return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError as exc:
        raise lines.error_at(f"{shown(value)} is too large", "maxAge") from exc


def evaluate(
    policy: Policy,
    manifest: BundleManifest,
    now: datetime | None = None,
    read: ReadMember | None = None,
) -> list[RuleResult]:
    """Results for the rules the policy sets, in a stable order. ``requireSignatures``
    reads signature manifests and payloads with ``read`` (the verified members)."""
    rules: list[tuple[bool, Callable[[], RuleResult]]] = [
        (policy.allowed_registries is not None, lambda: _allowed(policy, manifest)),
        (policy.require_digests, lambda: _digests(manifest)),
        (bool(policy.forbidden_tags), lambda: _tags(policy, manifest)),
        (bool(policy.required_platforms), lambda: _platforms(policy, manifest)),
        (policy.max_age is not None, lambda: _age_rule(policy, manifest, now)),
        (bool(policy.required_provider_types), lambda: _types(policy, manifest)),
        (bool(policy.required_content), lambda: _content(policy, manifest)),
        (policy.require_signatures is not None, lambda: _signatures(policy, manifest, read)),
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
            "maxAge",
            [f"created {shown(manifest.created)}"],
            "bundle creation time is not a timestamp",
        )
    age = (now or datetime.now(tz=UTC)) - created
    offending = [f"created {manifest.created}"] if age > policy.max_age else []
    result = _result("maxAge", offending, f"bundle older than {_describe(policy.max_age)}")
    left = policy.max_age - age
    if not offending and left < policy.max_age * NEAR_MISS_SHARE:
        # a bundle that passes today and fails at the site: the reviewer should know
        near = f"created {manifest.created}: within {_describe_left(left)} of maxAge"
        return replace(result, near_miss=f"{near} {_describe(policy.max_age)}")
    return result


def _describe_left(left: timedelta) -> str:
    """Time left, rounded down to a readable unit (``3d``, ``5h``, ``12m``)."""
    seconds = max(int(left.total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


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


def _signatures(policy: Policy, manifest: BundleManifest, read: ReadMember | None) -> RuleResult:
    assert policy.require_signatures is not None
    if read is None:
        raise AssertionError("requireSignatures needs the bundle's members")
    results = check_signatures(policy.require_signatures, manifest, read)
    result = _result("requireSignatures", results.offending, "images without a valid signature")
    return RuleResult(result.rule, result.passed, result.offending, result.message, results.signed)


def _content(policy: Policy, manifest: BundleManifest) -> RuleResult:
    present = {c.kind for c in manifest.contents}
    offending = [kind for kind in policy.required_content if kind not in present]
    return _result("requiredContent", offending, "required content missing")
