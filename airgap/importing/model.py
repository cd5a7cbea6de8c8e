"""What an import takes (``ImportOptions``) and gives (``ImportResult``), and the first
step import, status, configmaps and prune share: verify, then map every image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.configmaps.variables import VariableValues
from airgap.core.failures import Failure
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_TLS_FILE_BYTES
from airgap.core.progress import QUIET, Progress
from airgap.core.textfmt import human_size, plural
from airgap.importing.status import (
    Condition,
)
from airgap.mirror.attached import AttachedPlan
from airgap.mirror.push import PushStats
from airgap.registry.credentials import Credentials
from airgap.registry.pool import EndpointOptions, RegistryPool
from airgap.rewrite.mapping import Mapping, Target, map_images
from airgap.verify.bundle import VerifiedBundle, verify_bundle

if TYPE_CHECKING:
    from airgap.configmaps.generate import ProviderOutputOptions


@dataclass(frozen=True)
class ImportOptions:
    """Everything an import depends on besides the bundle; the outputs' record keys on
    it (``outputs_key``)."""

    target: Target
    output_dir: Path | None = None
    keep_registry: bool = False
    pin: bool = True
    dry_run: bool = False
    concurrency: int = 8
    ca_file: str | None = None
    skip_tls_verify: bool = False
    plain_http: bool = False
    credentials: Credentials | None = None
    namespace: str | None = None
    provider_source: str = "selector"
    # values for the components' variables: environment over --variables FILE
    variables: VariableValues = field(default_factory=VariableValues)
    reverify: bool = False  # hash every blob up front, as verify does, not only those pushed
    # where the output tree will be read from, if not output_dir (--output-location)
    output_location: Path | None = None
    authfile: Path | None = None  # the only credentials file to read (--authfile)
    cert_dir: Path | None = None  # the target's CAs and client pair (--cert-dir)
    keep_going: bool = False  # push every image it can, then report all that failed

    def pool(self) -> RegistryPool:
        """A registry pool configured for the target registry."""
        settings = {
            self.target.host: EndpointOptions(
                ca_file=self.ca_file,
                plain_http=self.plain_http,
                skip_tls_verify=self.skip_tls_verify,
                cert_dir=self.cert_dir,
            )
        }
        credentials = {self.target.host: self.credentials} if self.credentials else {}
        return RegistryPool(
            settings,
            credentials=credentials,
            max_connections=max(4, self.concurrency),
            authfile=self.authfile,
        )

    def provider_output_options(self) -> ProviderOutputOptions:
        # the output builders are imported when outputs are built: a re-import whose
        # outputs are there whole never loads them (importing.outputcache)
        from airgap.configmaps.generate import ProviderOutputOptions

        assert self.output_dir is not None
        return ProviderOutputOptions(
            self.output_dir,
            self.namespace,
            self.provider_source,
            self.variables,
            location=self.output_location,
        )


@dataclass(frozen=True)
class ImportResult:
    """What an import did: the summary, ``import-report.json`` and ``--format json`` are
    made from it."""

    bundle: VerifiedBundle
    mappings: list[Mapping]
    stats: PushStats | None
    seconds: float
    # "<Kind> <name>" -> required variables nobody gave a value for (names, never values)
    missing_variables: dict[str, list[str]] = field(default_factory=dict)
    # ClusterOperator-style conditions (as ``airgap status`` reports them) and versions
    conditions: list[Condition] = field(default_factory=list)
    versions: list[dict[str, str]] = field(default_factory=list)
    attached: AttachedPlan | None = None  # what upstream attached, pushed next to subjects
    failed: list[Failure] = field(default_factory=list)  # --keep-going: images not pushed

    def summary(self) -> str:
        """One line for the terminal."""
        stats = self.stats or PushStats()
        images, target = (
            len(self.mappings),
            self.mappings[0].target.registry if self.mappings else "",
        )
        if not stats.changed:
            return f"nothing changed: all {plural(images, 'image')} already in {target}"
        return (
            f"imported {plural(images, 'image')} into {target}: "
            f"{plural(stats.blobs_uploaded, 'blob')} uploaded "
            f"({human_size(stats.bytes_uploaded)}), {stats.blobs_mounted} mounted, "
            f"{stats.blobs_skipped} already there, {plural(stats.manifests_pushed, 'manifest')} "
            f"pushed in {self.seconds:.1f}s"
        )

    def report(self) -> dict[str, object]:
        stats = self.stats or PushStats()
        return {
            "images": len(self.mappings),
            "blobs_uploaded": stats.blobs_uploaded,
            "blobs_skipped": stats.blobs_skipped,
            "blobs_mounted": stats.blobs_mounted,
            "manifests_pushed": stats.manifests_pushed,
            "manifests_skipped": stats.manifests_skipped,
            "bytes_uploaded": stats.bytes_uploaded,
            "duration_seconds": round(self.seconds, 3),
            "changed": stats.changed,
            # "full": every member hashed before pushing (--reverify); "on-use": every
            # member but the blobs up front, each blob by the registry's digest check
            "verification": "full" if self.bundle.all_hashed else "on-use",
            "variables_missing": self.missing_variables,
            "conditions": [condition.to_json() for condition in self.conditions],
            "versions": self.versions,
            "attached": (self.attached or AttachedPlan()).report(),
            # --keep-going: the images pushed and, one each, those that failed
            "images_pushed": len(self.mappings) - len(self.failed),
            "failed": [failure.to_json() for failure in self.failed],
        }


def verified_mappings(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    progress: Progress = QUIET,
) -> tuple[VerifiedBundle, list[Mapping]]:
    """Verify first (the same code path as ``airgap verify``), then map every image.

    Blobs are hashed as they are pushed, not here (unless ``reverify``): the blobs the
    target already holds are never read, which keeps a re-import fast without trusting
    anything but hashes."""
    bundle = verify_bundle(bundle_path, keys, hash_blobs=options.reverify, progress=progress)
    manifest = bundle.require_verified()
    references = [image.reference for image in manifest.images]
    return bundle, map_images(references, options.target, keep_registry=options.keep_registry)


def read_ca(ca_file: str | None) -> bytes | None:
    """The ``--ca-file`` bytes, copied next to the node configs that need them."""
    return None if ca_file is None else read_small(Path(ca_file), MAX_TLS_FILE_BYTES, "--ca-file")
