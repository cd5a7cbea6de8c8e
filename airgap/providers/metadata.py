"""clusterctl ``metadata.yaml``: which API contract each release series implements (pure).

clusterctl refuses to install providers whose contracts disagree with the core
provider's, and the operator rejects unknown contracts; so a bundle must know each
provider's contract before it crosses the air gap, not discover it on the far side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from airgap.core.errors import InputError
from airgap.core.limits import MAX_METADATA_BYTES
from airgap.core.names import shown
from airgap.formats import yamlsafe
from airgap.sources.semver import parse_version

METADATA_API_VERSION = "clusterctl.cluster.x-k8s.io/v1alpha3"
METADATA_KIND = "Metadata"
METADATA_FILE = "metadata.yaml"


@dataclass(frozen=True)
class ReleaseSeries:
    """One ``releaseSeries`` entry: versions ``major.minor.*`` implement ``contract``."""

    major: int
    minor: int
    contract: str


@dataclass(frozen=True)
class Metadata:
    """A parsed metadata.yaml; ``source`` is the file or URL it came from (for messages)."""

    source: str
    release_series: tuple[ReleaseSeries, ...]

    def contract_for(self, version: str) -> str | None:
        """The contract of the release series ``version`` belongs to, or None."""
        parsed = parse_version(version)
        for entry in self.release_series:
            if (entry.major, entry.minor) == parsed.series:
                return entry.contract
        return None

    def describe_series(self) -> str:
        """``1.8 (v1beta1), 1.9 (v1beta1)`` for error messages."""
        return ", ".join(
            f"{entry.major}.{entry.minor} ({entry.contract})" for entry in self.release_series
        )


def parse_metadata(text: str, source: str) -> Metadata:
    """Parse and validate metadata.yaml text; errors are one line naming ``source``."""
    try:
        document = yamlsafe.safe_load(text, source, max_bytes=MAX_METADATA_BYTES)
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: malformed YAML{_mark(exc)}") from None
    if not isinstance(document, dict):
        raise InputError(f"{source}: not a clusterctl Metadata document")
    api_version = document.get("apiVersion")
    kind = document.get("kind")
    if api_version != METADATA_API_VERSION or kind != METADATA_KIND:
        raise InputError(
            f"{source}: expected apiVersion {METADATA_API_VERSION} kind {METADATA_KIND}, "
            f"got apiVersion {shown(api_version)} kind {shown(kind)}"
        )
    raw_series = document.get("releaseSeries")
    if not isinstance(raw_series, list) or not raw_series:
        raise InputError(f"{source}: releaseSeries must be a non-empty list")
    series = tuple(_series_entry(entry, index, source) for index, entry in enumerate(raw_series))
    return Metadata(source=source, release_series=series)


def _series_entry(entry: Any, index: int, source: str) -> ReleaseSeries:
    where = f"{source}: releaseSeries[{index}]"
    if not isinstance(entry, dict):
        raise InputError(f"{where}: must be a mapping with major, minor, contract")
    values: list[int] = []
    for key in ("major", "minor"):
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InputError(f"{where}.{key}: must be a non-negative integer, got {shown(value)}")
        values.append(value)
    contract = entry.get("contract")
    if not isinstance(contract, str) or not contract.strip():
        raise InputError(f"{where}.contract: must be a non-empty string, got {shown(contract)}")
    return ReleaseSeries(major=values[0], minor=values[1], contract=contract.strip())


def _mark(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "invalid YAML"
    if mark is None:
        return f": {problem}"
    return f" at line {mark.line + 1} column {mark.column + 1}: {problem}"
