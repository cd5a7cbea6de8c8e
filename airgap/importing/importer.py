"""``airgap import``: verify, push into the disconnected registry, write configuration.

The import runs as stages (``importing.stages``), each handing the next a frozen record
of what it did: plan (verify, map, rewrite), push (images and what is attached to
them), publish (charts, manifests images), outputs (the files import writes), closure
(every reference the outputs make, asked of the target) and write.
"""

from __future__ import annotations

import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.core.progress import QUIET, Progress
from airgap.importing import stages
from airgap.importing.model import ImportOptions, ImportResult, verified_mappings


def run_import(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    progress: Progress = QUIET,
) -> ImportResult:
    """Import a bundle into ``options.target``; raises once the outputs and the report
    are written when an image failed (``--keep-going``) or an output dangles."""
    started = time.monotonic()
    reading = stages.read_outputs_ahead(options)
    bundle, mappings = verified_mappings(bundle_path, keys, options, progress)
    if options.dry_run:
        return ImportResult(bundle, mappings, None, time.monotonic() - started)
    planned = stages.plan(bundle_path, bundle, mappings, options, reading)
    with options.pool() as pool:
        registry = pool.registry(options.target.host)
        pushed = stages.push(planned, registry, options, progress)
        publication = stages.publish(planned, pushed, registry, options)
        written = stages.outputs(planned, pushed, publication, options)
        checked = stages.closure(planned, pushed, written, registry, options)
    report = stages.result(planned, pushed, publication, written, checked, options, started)
    if options.output_dir is not None:
        stages.write(planned, publication, written, report, options, options.output_dir)
    stages.raise_failures(report, checked, options)
    return report
