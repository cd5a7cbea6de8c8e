"""The disconnected side's commands over a registry: ``import``, ``status`` and
``configmaps``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from airgap.cli.app import (
    WrittenPath,
    cli,
    concurrency_option,
    debug_option,
    format_option,
    quiet_option,
    registry_option,
)
from airgap.cli.options import (
    _import_options,
    _registry_options,
    connection_options,
    key_options,
    load_trusted_keys,
    max_path_depth_option,
    registry_options,
    target_options,
)
from airgap.core.errors import EXIT_FAILURE, InputError
from airgap.core.progress import Progress


@cli.command("import", short_help="Verify a bundle, push it into a registry, write configs.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@key_options
@target_options
@connection_options
@concurrency_option("Parallel blob uploads.")
@click.option(
    "--reverify",
    is_flag=True,
    help="Hash every blob before pushing anything, as verify does (default: "
    "each blob as it is pushed; blobs the registry holds are not read).",
)
@click.option("--dry-run", is_flag=True, help="Print the source -> target mapping only.")
@click.option(
    "--keep-going",
    is_flag=True,
    help="Push every image that can be pushed, then report all that failed (exit 1); "
    "default: stop at the first.",
)
@format_option("The summary on stdout; json: import-report.json's keys (--dry-run: mappings).")
@debug_option
@quiet_option
def import_(
    bundle: Path,
    keys: tuple[Path, ...],
    no_signature: bool,
    output_dir: Path | None,
    dry_run: bool,
    keep_going: bool,
    fmt: str,
    quiet: bool,
    **target: Any,
) -> int:
    """Verify a bundle, push it into a registry and write rewritten manifests and configs."""
    from airgap.importing.importer import run_import

    options = _import_options(
        output_dir=output_dir, dry_run=dry_run, keep_going=keep_going, **target
    )
    trusted = load_trusted_keys(keys, no_signature)
    with Progress.for_terminal(quiet or dry_run) as progress:
        result = run_import(bundle, trusted, options, progress)
    if dry_run:
        if fmt == "json":
            pairs = [{"source": str(m.source), "target": str(m.target)} for m in result.mappings]
            click.echo(json.dumps({"mappings": pairs}, indent=2))
            return 0
        for mapping in result.mappings:
            click.echo(f"{mapping.source} -> {mapping.target}")
        return 0
    if fmt == "json":
        click.echo(json.dumps(result.report(), indent=2))
    elif not quiet:
        click.echo(result.summary())
        if output_dir:
            click.echo(f"wrote {output_dir}")
    if output_dir:
        _warn_missing_variables(result.missing_variables, output_dir)
    return 0


@cli.command(short_help="Report a registry's state against a bundle (conditions).")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@key_options
@registry_option
@click.option(
    "--keep-source-registry",
    is_flag=True,
    help="The import kept the source registry host as the first path element.",
)
@max_path_depth_option
@click.option(
    "--no-pin",
    is_flag=True,
    help="The import ran with --no-pin (the manifests images and OCI provider "
    "artifacts it built hold unpinned references).",
)
@click.option(
    "--provider-source",
    type=click.Choice(["selector", "oci"]),
    default="selector",
    show_default=True,
    help="oci: the import published the providers as OCI artifacts "
    "(--provider-source oci): check those too.",
)
@registry_options
@concurrency_option("Parallel checks.")
@format_option("Conditions as a table or as JSON.")
@click.option(
    "--export-have",
    type=WrittenPath(dir_okay=False, path_type=Path),
    help="Also write a have-list of the digests the registry holds of the bundle's "
    "images, for collect --have on the connected side (small, unsigned).",
)
@click.option(
    "--previous",
    type=click.Path(dir_okay=False, path_type=Path),
    help="An earlier report (import-report.json, or status --format json output): a "
    "condition whose status did not change keeps its lastTransitionTime.",
)
def status(
    bundle: Path,
    keys: tuple[Path, ...],
    no_signature: bool,
    registry: str,
    keep_source_registry: bool,
    max_path_depth: int | None,
    no_pin: bool,
    provider_source: str,
    concurrency: int,
    fmt: str,
    export_have: Path | None,
    previous: Path | None,
    **connection: Any,
) -> int:
    """Available, Progressing and Degraded: whether REGISTRY holds every image and
    artifact (signatures, charts, manifests images, OCI provider artifacts) of BUNDLE
    by digest, an import to resume, or damage (a missing blob, a moved tag). Exit 0
    when Available and not Degraded, 1 otherwise."""
    from airgap.importing.status import status_text
    from airgap.importing.statuscommand import status_and_have

    options = _registry_options(
        registry,
        max_path_depth,
        keep_source_registry,
        no_pin,
        provider_source,
        concurrency,
        connection,
    )
    if export_have is not None:
        from airgap.core.fsutil import require_directory_of

        require_directory_of(export_have)  # before anything is read or asked
    trusted = load_trusted_keys(keys, no_signature)
    result, listed = status_and_have(bundle, trusted, options, export_have, previous)
    if export_have is not None and listed is not None:
        click.echo(
            f"airgap: wrote {export_have}: {listed.digests} digests of "
            f"{len(listed.repositories)} repositories",
            err=True,
        )
    if fmt == "json":
        document = {"bundle": str(bundle), "registry": str(options.target), **result.to_json()}
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(status_text(result, str(bundle), str(options.target)))
    return 0 if result.healthy else EXIT_FAILURE


def _warn_missing_variables(missing: dict[str, list[str]], output_dir: Path) -> None:
    """One line on stderr naming (never showing values of) the required variables that
    no file or environment variable gave; the Secrets keep them commented out. Sorted
    by provider: a re-import reads them from its record, and says it alike."""
    if not missing:
        return
    names = "; ".join(
        f"{provider}: {', '.join(found)}" for provider, found in sorted(missing.items())
    )
    click.echo(
        f"airgap: warning: required variables not set ({names}); the operator will not "
        f"install these providers until they are: pass --variables FILE or set them in the "
        f"environment, or edit {output_dir / 'operator/02-provider-configmaps/secrets'} before "
        "applying",
        err=True,
    )


@cli.command(short_help="Write operator objects and a clusterctl repo; push no image.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@key_options
@target_options
@connection_options
@debug_option
def configmaps(
    bundle: Path,
    keys: tuple[Path, ...],
    no_signature: bool,
    output_dir: Path | None,
    **target: Any,
) -> int:
    """Write operator ConfigMaps, provider CRs and a clusterctl repository, pushing no image."""
    from airgap.importing.configmapscommand import run_configmaps

    if output_dir is None:
        raise InputError("configmaps needs --output-dir")
    options = _import_options(output_dir=output_dir, **target)
    trusted = load_trusted_keys(keys, no_signature)
    outputs = run_configmaps(bundle, trusted, options)
    operator = sum(1 for name in outputs.files if name.startswith("operator/"))
    click.echo(f"wrote {operator} operator files and a clusterctl repository to {output_dir}")
    _warn_missing_variables(outputs.missing, output_dir)
    return 0
