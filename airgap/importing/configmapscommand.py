"""``airgap configmaps``: the operator's objects and a clusterctl repository, without
pushing any image.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.importing.outputfiles import write_outputs
from airgap.importing.outputlisting import OPERATOR
from airgap.rewrite.contents import rewrite_contents
from airgap.rewrite.providers import rewrite_providers

if TYPE_CHECKING:
    from airgap.configmaps.generate import ProviderOutputs
from airgap.importing.model import ImportOptions, verified_mappings


def run_configmaps(
    bundle_path: Path, keys: list[Ed25519PublicKey] | None, options: ImportOptions
) -> ProviderOutputs:
    """Operator objects and the clusterctl repository, without pushing any image.

    The references are the ones an import into the same target produces."""
    bundle, mappings = verified_mappings(bundle_path, keys, options)
    manifest = bundle.require_verified()
    providers = rewrite_providers(bundle, manifest, mappings, pin=options.pin)
    contents = rewrite_contents(bundle, manifest, mappings, pin=options.pin)
    from airgap.configmaps.generate import provider_outputs  # as import's, when building

    output = options.provider_output_options()
    if options.provider_source == "oci":
        with options.pool() as pool:
            files = provider_outputs(
                providers,
                output,
                target=options.target,
                created=manifest.created,
                registry=pool.registry(options.target.host),
                contents=contents,
            )
    else:
        files = provider_outputs(
            providers, output, target=options.target, created=manifest.created, contents=contents
        )
    # the operator's part of the directory: an import's node configs there stay
    write_outputs(output.output_dir, files.files, operator=files.files, replaced=(OPERATOR,))
    return files
