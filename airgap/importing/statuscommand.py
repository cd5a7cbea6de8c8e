"""``airgap status``: what a target registry holds of a bundle, as conditions, and the
have-list of it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.manifest import BundleManifest
from airgap.core.errors import AirgapError, InputError
from airgap.core.fsutil import write_atomic
from airgap.core.inputfile import read_small
from airgap.importing.status import (
    ABSENT,
    MAX_REPORT_BYTES,
    Expected,
    ImageState,
    Status,
    conditions_from,
    from_tree,
    keep_transitions,
    previous_transitions,
    probe,
    unknown,
    versions,
)
from airgap.importing.status import now as status_now
from airgap.mirror.attached import attached_trees
from airgap.mirror.push import ImageTree
from airgap.registry.client import Registry
from airgap.rewrite.contents import rewrite_contents
from airgap.rewrite.mapping import Mapping
from airgap.rewrite.providers import rewrite_providers
from airgap.verify.bundle import VerifiedBundle

if TYPE_CHECKING:
    from airgap.oci.havelist import HaveList
from airgap.importing.model import ImportOptions, read_ca, verified_mappings
from airgap.importing.targetwork import image_trees


def run_status(
    bundle_path: Path, keys: list[Ed25519PublicKey] | None, options: ImportOptions
) -> Status:
    """``airgap status``: every image of the bundle asked of the target (HEAD only),
    as ClusterOperator-style conditions."""
    return status_and_have(bundle_path, keys, options)[0]


def status_and_have(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    export_have: Path | None = None,
    previous: Path | None = None,
) -> tuple[Status, HaveList | None]:
    """``airgap status``, and with ``export_have`` the have-list of what the target
    holds of the bundle's images, written there (``mirror.have``). Besides the images,
    every artifact import pushes is asked for (``expected_artifacts``). A registry
    that cannot be asked makes the conditions Unknown, and fails an export. With
    ``previous`` (an earlier report), a condition whose status did not change keeps
    its lastTransitionTime."""
    from airgap.mirror.have import have_list  # status only

    earlier: dict[str, tuple[str, str]] = {}
    if previous is not None:
        data = read_small(previous, MAX_REPORT_BYTES, "--previous")
        earlier = previous_transitions(data, f"--previous {previous}")
    read_ca(options.ca_file)  # unusable: the user's to fix, as import says, before any work
    bundle, mappings = verified_mappings(bundle_path, keys, options)
    manifest = bundle.require_verified()
    trees = image_trees(bundle, manifest, mappings) if manifest.delta is None else []
    artifacts = expected_artifacts(bundle, manifest, mappings, options)
    when = status_now()
    lacking: list[ImageState] = []
    try:
        with options.pool() as pool:
            registry = pool.registry(options.target.host)
            if manifest.delta is not None:
                trees, lacking = _delta_status(registry, bundle, manifest, mappings, options)
            items = [from_tree(tree) for tree in trees] + artifacts
            states = probe(registry, items, concurrency=options.concurrency) + lacking
            listed = None
            if export_have is not None:
                listed = have_list(
                    registry,
                    trees,
                    created=when,
                    bundle="sha256:" + hashlib.sha256(bundle.manifest_bytes).hexdigest(),
                    concurrency=options.concurrency,
                )
    except InputError:
        raise  # what the user gave is unusable (a CA file, an authfile): not the registry
    except AirgapError as exc:
        if export_have is not None:
            raise AirgapError(f"cannot export the have-list to {export_have}: {exc}") from None
        return Status(keep_transitions(unknown(exc, when), earlier), versions(manifest)), None
    if export_have is not None and listed is not None:
        write_atomic(export_have, listed.to_bytes())
    conditions = keep_transitions(conditions_from(states, when), earlier)
    return Status(conditions, versions(manifest), states), listed


def expected_artifacts(
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    options: ImportOptions,
) -> list[Expected]:
    """What import pushes besides the images, from the bundle and the options import
    was run with (``--no-pin``, ``--provider-source``): attached artifacts, charts,
    manifests images, provider artifacts (``importing.expected``)."""
    from airgap.importing.expected import attached_artifacts, built_artifacts  # status only

    providers = rewrite_providers(bundle, manifest, mappings, pin=options.pin)
    contents = rewrite_contents(bundle, manifest, mappings, pin=options.pin)
    built = built_artifacts(
        providers,
        contents,
        options.target,
        created=manifest.created,
        provider_source=options.provider_source,
    )
    return attached_artifacts(attached_trees(bundle, manifest, mappings)) + built


def _delta_status(
    registry: Registry,
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    options: ImportOptions,
) -> tuple[list[ImageTree], list[ImageState]]:
    """A delta's images against the target: those whose needs the target holds are
    probed as whole trees; the others are absent (their base is not there)."""
    from airgap.mirror.supply import locate, read_manifests  # deltas only

    supply = locate(registry, manifest, mappings, None, concurrency=options.concurrency)
    supply = read_manifests(registry, manifest, supply, concurrency=options.concurrency)
    targets = {str(m.source): str(m.target) for m in mappings}
    whole = {image.reference for image in manifest.images} - supply.missing.keys()
    trees = image_trees(bundle, manifest, mappings, supply.manifests, only=whole)
    lacking = [
        ImageState(
            reference,
            targets[reference],
            ABSENT,
            f"relies on {len(digests)} manifests and blobs the registry lacks "
            "(a delta: import its base first)",
        )
        for reference, digests in supply.missing.items()
    ]
    return trees, lacking
