"""Names that come from outside and become paths, URLs and object names (pure).

A digest served by a registry becomes a bundle member (``images/blobs/sha256/HEX``) and
a URL path; a provider's name, label, version and file names in a bundle manifest
become directories and files under ``--output-dir`` and Kubernetes object names. Each
is checked here, against one strict form, before it is used as any of those: collect
refuses what it would otherwise sign, verify refuses what a forged manifest claims.
Every check returns why a name is refused (or None), for the caller to say where.
"""

from __future__ import annotations

import re
import reprlib

from airgap.core.redact import scrub

# A provider name is a Kubernetes label value (provider.cluster.x-k8s.io/name) and part
# of object and directory names: a DNS label, as clusterctl's own names are.
MAX_PROVIDER_NAME = 63
# A version is a directory name, a URL segment and part of object names.
MAX_VERSION = 128
# A release file name (metadata.yaml, infrastructure-components.yaml): one segment.
MAX_FILE_NAME = 255
# A contract (v1beta1): printed and compared, never a path; bounded all the same.
MAX_CONTRACT = 32

_DIGESTS = {"sha256": 64, "sha512": 128}
_HEX_RE = re.compile(r"[0-9a-f]+")
_PROVIDER_NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CONTRACT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")


def shown(value: object, limit: int = 80) -> str:
    """``value`` quoted for a one-line message, shortened if long (it may be hostile): a
    string as its repr, cut at ``limit`` characters; any other parsed value (a number,
    list or mapping from YAML or JSON) as its repr abridged the same way."""
    if isinstance(value, str):
        value = scrub(value)  # before the cut, which could leave half a user:pass@
        quoted = repr(value[:limit])
        return quoted + ("..." if len(value) > limit else "")
    text = reprlib.repr(value)  # lists, mappings and long numbers abridged as it builds
    return text if len(text) <= limit else text[:limit] + "..."


def digest_problem(digest: str) -> str | None:
    """Why ``digest`` is not ``sha256:<64 hex>`` or ``sha512:<128 hex>`` (lower case)."""
    algorithm, colon, hexpart = digest.partition(":")
    length = _DIGESTS.get(algorithm)
    if not colon or length is None:
        return f"digest {shown(digest)} is not sha256:<64 hex digits> or sha512:<128 hex digits>"
    if len(hexpart) != length or not _HEX_RE.fullmatch(hexpart):
        return f"digest {shown(digest)} is not {algorithm}: and {length} lower-case hex digits"
    return None


def is_digest(digest: str) -> bool:
    return digest_problem(digest) is None


def provider_name_problem(name: str) -> str | None:
    return _dns_label_problem(name, "provider name")


def namespace_problem(namespace: str) -> str | None:
    """A Kubernetes namespace is a DNS label (RFC 1123), as a provider name is."""
    return _dns_label_problem(namespace, "namespace")


def _dns_label_problem(value: str, what: str) -> str | None:
    if len(value) > MAX_PROVIDER_NAME or not _PROVIDER_NAME_RE.fullmatch(value):
        return (
            f"invalid {what} {shown(value)} (a DNS label: lower-case letters, digits and "
            f"'-', starting and ending with a letter or digit, at most {MAX_PROVIDER_NAME})"
        )
    return None


def version_problem(version: str) -> str | None:
    if len(version) > MAX_VERSION or not _VERSION_RE.fullmatch(version):
        return (
            f"invalid version {shown(version)} (letters, digits, '.', '_', '+', '-', "
            f"at most {MAX_VERSION})"
        )
    return None


def file_name_problem(name: str) -> str | None:
    if len(name) > MAX_FILE_NAME or not _FILE_NAME_RE.fullmatch(name):
        return f"invalid file name {shown(name)} (one path segment: letters, digits, '.', '_', '-')"
    return None


def contract_problem(contract: str) -> str | None:
    if len(contract) > MAX_CONTRACT or not _CONTRACT_RE.fullmatch(contract):
        return f"invalid contract {shown(contract)}"
    return None
