"""``airgap prune``: plan, then apply, removing what no kept bundle needs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.cli.app import WrittenPath, cli, concurrency_option, registry_option
from airgap.cli.options import (
    _registry_options,
    key_options,
    load_trusted_keys,
    max_path_depth_option,
    registry_options,
)
from airgap.core.errors import InputError
from airgap.core.textfmt import human_size, plural

if TYPE_CHECKING:
    from airgap.importing.model import ImportOptions


@cli.command(short_help="Plan, then apply, removing what no kept bundle needs.")
@registry_option
@click.option(
    "--keep",
    "keep_bundles",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A bundle whose images stay (repeatable; its signature must verify with --key).",
)
@click.option(
    "--keep-have",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A have-list (status --export-have) whose digests stay too (repeatable).",
)
@key_options
@click.option(
    "-o",
    "--output",
    type=WrittenPath(dir_okay=False, path_type=Path),
    help="Where to write the plan (plan mode: required).",
)
@click.option(
    "--apply",
    "plan_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Delete what PLAN.json lists, re-checking each manifest first.",
)
@click.option(
    "--keep-source-registry",
    is_flag=True,
    help="The imports kept the source registry host as the first path element.",
)
@max_path_depth_option
@click.option("--no-pin", is_flag=True, help="The imports ran with --no-pin.")
@click.option(
    "--provider-source",
    type=click.Choice(["selector", "oci"]),
    default="selector",
    show_default=True,
    help="oci: the imports published the providers as OCI artifacts.",
)
@registry_options
@concurrency_option("Parallel registry requests.")
def prune(
    registry: str,
    keep_bundles: tuple[Path, ...],
    keep_have: tuple[Path, ...],
    keys: tuple[Path, ...],
    no_signature: bool,
    output: Path | None,
    plan_file: Path | None,
    keep_source_registry: bool,
    max_path_depth: int | None,
    no_pin: bool,
    provider_source: str,
    concurrency: int,
    **connection: Any,
) -> int:
    """Remove from REGISTRY/PREFIX the tags and manifests no kept bundle needs, in two
    stages: without --apply, list them with the bytes they hold and write a plan
    (nothing changes); with --apply PLAN.json, delete exactly those, re-checking each.
    Blobs are never deleted: run the registry's garbage collection afterwards."""
    options = _registry_options(
        registry,
        max_path_depth,
        keep_source_registry,
        no_pin,
        provider_source,
        concurrency,
        connection,
    )
    if plan_file is not None:
        if keep_bundles or keep_have or output:
            raise InputError("--apply takes the plan alone: no --keep, --keep-have or -o")
        return _prune_apply(plan_file, options)
    if not keep_bundles:
        raise InputError("prune needs --keep BUNDLE (the bundles whose images stay)")
    if output is None:
        raise InputError("prune needs -o PLAN.json (where to write the plan)")
    if no_signature:
        raise InputError("prune keeps only bundles whose signatures verify: pass --key")
    return _prune_plan(keep_bundles, keep_have, load_trusted_keys(keys, False), output, options)


def _prune_plan(
    bundles: tuple[Path, ...],
    haves: tuple[Path, ...],
    keys: list[Ed25519PublicKey] | None,
    output: Path,
    options: ImportOptions,
) -> int:
    from airgap.core.fsutil import require_directory_of, write_atomic
    from airgap.prune.planner import check_prefix, kept_by, make_plan

    check_prefix(options)
    require_directory_of(output)
    assert keys is not None
    kept = kept_by(list(bundles), list(haves), keys, options)
    with options.pool() as pool:
        plan = make_plan(pool.registry(options.target.host), options, kept)
    write_atomic(output, plan.to_bytes())
    rows = [(f"{d.repository}:{','.join(d.tags)}", d.digest[:19], d.size) for d in plan.drops]
    width = max([len(r[0]) for r in rows] + [len("REPOSITORY:TAG")])
    click.echo(f"{'REPOSITORY:TAG':<{width}}  {'DIGEST':<19}  SIZE")
    for name, digest, size in rows:
        click.echo(f"{name:<{width}}  {digest:<19}  {human_size(size)}")
    manifests = sum(len(d.manifests) for d in plan.drops)
    if plan.unread:
        click.echo(
            f"airgap: warning: {len(plan.unread)} repositories outside the prefix "
            f"could not be read ({', '.join(plan.unread[:5])}); what they share with these "
            "is counted as freed",
            err=True,
        )
    click.echo(
        f"total: {plural(len(plan.drops), 'tagged manifest')} ({manifests} manifests) "
        f"under {options.target}, {human_size(plan.total)} ({plan.total} bytes) that garbage "
        f"collection can free; wrote {output}"
    )
    return 0


def _prune_apply(plan_file: Path, options: ImportOptions) -> int:
    from airgap.core.inputfile import read_small
    from airgap.prune.applier import apply_plan
    from airgap.prune.planfile import MAX_PLAN_BYTES, PrunePlan
    from airgap.prune.planner import check_prefix

    check_prefix(options)
    plan = PrunePlan.from_bytes(read_small(plan_file, MAX_PLAN_BYTES, "--apply"), str(plan_file))
    if plan.registry != str(options.target):
        raise InputError(
            f"{plan_file} is a plan for {plan.registry}, not for --registry {options.target}"
        )
    with options.pool() as pool:
        applied = apply_plan(pool.registry(options.target.host), plan)
    for line in applied.skipped:
        click.echo(f"airgap: warning: {line}", err=True)
    click.echo(
        f"deleted {plural(len(applied.deleted), 'manifest')} and "
        f"{plural(len(applied.tags_deleted), 'tag')} under {options.target} "
        f"({len(applied.gone)} already gone, {len(applied.skipped)} skipped); "
        f"{human_size(applied.freed)} for the registry's garbage collection to free"
    )
    return 0
