"""Commands that make and read bundles: ``installer``, ``keygen``, ``collect``,
``inspect`` and ``diff``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from airgap import __version__
from airgap.bundle.reader import read_head
from airgap.bundle.signing import generate_keypair, load_public_key
from airgap.cli.app import (
    WrittenPath,
    authfile_option,
    cli,
    concurrency_option,
    debug_option,
    format_option,
    quiet_option,
)
from airgap.core.errors import InputError
from airgap.core.progress import Progress
from airgap.core.textfmt import human_size, plural, printable


@cli.command(short_help="Build an offline installer of airgap for a host without an index.")
@click.option(
    "-o",
    "--output",
    type=WrittenPath(dir_okay=False, path_type=Path),
    help="Installer file to write (default: airgap-installer-VERSION.tar).",
)
@click.option(
    "--machine",
    "machines",
    multiple=True,
    help="Machine to carry wheels for: x86_64, aarch64, ppc64le, s390x (repeatable; "
    "default: x86_64 and aarch64).",
)
@click.option(
    "--python",
    "pythons",
    multiple=True,
    help="CPython version to carry wheels for (repeatable; default: 3.11, 3.12 and 3.13).",
)
@click.option(
    "--constraint",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="pip constraints file pinning the dependencies (e.g. airgap's constraints.txt).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing installer file.")
@quiet_option
def installer(
    output: Path | None,
    machines: tuple[str, ...],
    pythons: tuple[str, ...],
    constraint: Path | None,
    force: bool,
    quiet: bool,
) -> int:
    """Write airgap's wheel, every dependency's wheel for each machine and CPython
    version (manylinux, glibc 2.28) and an install.sh needing only python3 and venv
    into one tar, from the package index (see docs/installer.md)."""
    from airgap.installer.build import build_installer, default_output
    from airgap.installer.targets import parse_machines, parse_pythons

    chosen_machines, chosen_pythons = parse_machines(machines), parse_pythons(pythons)
    with Progress.for_terminal(quiet) as progress:
        result = build_installer(
            output or default_output(),
            chosen_machines,
            chosen_pythons,
            constraint=constraint,
            overwrite=force,
            progress=progress,
        )
    for target, requirements in result.missing.items():
        click.echo(
            f"airgap: warning: {target}: no wheel of {', '.join(requirements)} "
            "(install.sh says what is lost there)",
            err=True,
        )
    if not quiet:
        click.echo(
            f"wrote {result.output}: airgap {__version__} and {plural(result.wheels, 'wheel')} "
            f"for linux {', '.join(chosen_machines)}, CPython {', '.join(chosen_pythons)} "
            f"({human_size(result.size)}) in {result.seconds:.1f}s"
        )
    return 0


@cli.command(short_help="Create an Ed25519 signing key pair.")
@click.argument("private_key", type=WrittenPath(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite existing key files.")
def keygen(private_key: Path, force: bool) -> int:
    """Create an Ed25519 signing key (mode 0600) and its public key (.pub)."""
    public, fingerprint = generate_keypair(private_key, overwrite=force)
    click.echo(f"wrote {private_key} (private) and {public} (public), key {fingerprint}")
    return 0


@cli.command(short_help="Collect providers and their images into one signed bundle.")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--sign-key",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Ed25519 private key (from airgap keygen).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=WrittenPath(dir_okay=False, path_type=Path),
    help="Bundle file to write.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing bundle file.")
@click.option(
    "--part-size",
    metavar="SIZE",
    help="Write the bundle as parts NAME.000, NAME.001, ... of at most SIZE (4GiB, 700MiB, "
    "bytes, or fat32, dvd, bd) plus a signed NAME.parts.json; cat joins them.",
)
@click.option(
    "--base",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A bundle (or its airgap-bundle.json) already imported on the far side: write a "
    "delta carrying only the manifests and blobs it does not hold.",
)
@click.option(
    "--base-key",
    "base_keys",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Public key the base must be signed with (repeatable; default: not checked).",
)
@click.option(
    "--have",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A have-list (airgap status --export-have) of what the far side's registry "
    "holds: write a delta carrying only the rest.",
)
@authfile_option
@format_option("The summary on stdout; json: inspect --format json's keys, bundle and duration.")
@debug_option
@concurrency_option("Parallel image downloads.")
@click.option(
    "--no-signatures",
    is_flag=True,
    help="Do not look for (or carry) the images' cosign signatures, attestations and SBOMs.",
)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Policy YAML the bundle must pass before it is signed (as verify --policy; "
    "requireSignatures' Fulcio roots and Rekor keys travel in the bundle).",
)
@click.option(
    "--with-installer",
    "installer",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Carry this offline installer (from airgap installer) in the bundle as "
    "installer/airgap-installer-VERSION.tar, signed like every member.",
)
@quiet_option
def collect(
    spec: Path,
    sign_key: Path,
    output: Path,
    force: bool,
    part_size: str | None,
    base: Path | None,
    base_keys: tuple[Path, ...],
    have: Path | None,
    authfile: Path | None,
    fmt: str,
    concurrency: int,
    quiet: bool,
    no_signatures: bool,
    policy: Path | None,
    installer: Path | None,
) -> int:
    """Collect provider releases and their images into one signed bundle."""
    from airgap.bundle.parts import parse_part_size

    size = parse_part_size(part_size) if part_size is not None else None
    from airgap.collect.base import load_holdings
    from airgap.collect.collector import collect as run_collect
    from airgap.verify.report import (
        INDEX_SIGNATURE_NOTE,
        filtered_signed_indexes,
        inventory_json,
    )

    if base_keys and base is None:
        raise InputError("--base-key needs --base")
    keys = [load_public_key(path) for path in base_keys] if base_keys else None
    holdings = load_holdings(base, keys, have)
    with Progress.for_terminal(quiet) as progress:
        result = run_collect(
            spec,
            output,
            sign_key,
            concurrency=concurrency,
            progress=progress,
            overwrite=force,
            part_size=size,
            holdings=holdings,
            authfile=authfile,
            signatures=not no_signatures,
            policy=policy,
            installer=installer,
        )
    manifest = result.manifest
    for image in filtered_signed_indexes(manifest):
        click.echo(f"airgap: warning: {image.reference}: {INDEX_SIGNATURE_NOTE}", err=True)
    if fmt == "json":
        document = {
            "bundle": str(result.output),
            **inventory_json(manifest),
            "duration_seconds": round(result.seconds, 3),
        }
        if size is not None:
            document["parts"] = _parts_json(result.output)
        click.echo(json.dumps(document, indent=2))
    elif not quiet:
        delta = ""
        if manifest.delta is not None:
            delta = (
                f" (a delta: relies on {len(manifest.needs)} manifests and blobs, "
                f"{human_size(result.skipped_bytes)}, the far side holds)"
            )
        providers = plural(len(manifest.providers), "provider")
        click.echo(
            f"wrote {_written(result.output, size)}: {providers}, "
            f"{plural(len(manifest.images), 'image')}, {human_size(manifest.total_size)}{delta} "
            f"in {result.seconds:.1f}s"
        )
    return 0


def _parts_json(output: Path) -> list[dict[str, object]]:
    """The parts of a split bundle just written: path and size of each."""
    from airgap.bundle.source import open_source

    with open_source(output) as source:
        return [{"path": str(part.path), "size": part.size} for part in source.parts]


def _written(output: Path, part_size: int | None) -> str:
    """``NAME.tar``, or ``NAME.tar.000 … NAME.tar.006 (7 parts) and NAME.tar.parts.json``."""
    if part_size is None:
        return str(output)
    from airgap.bundle.parts import parts_list_path

    parts = _parts_json(output)
    last = Path(str(parts[-1]["path"])).name
    return (
        f"{parts[0]['path']} … {last} ({len(parts)} parts of at most {human_size(part_size)}) "
        f"and {parts_list_path(output).name}"
    )


@cli.command(short_help="Show what a bundle holds, without verifying it.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option("--wide", is_flag=True, help="Full digests and references in tables.")
def inspect(bundle: Path, fmt: str, wide: bool) -> int:
    """Show what a bundle holds (read from its manifest; run verify to check it)."""
    from airgap.bundle.source import open_source
    from airgap.verify.report import inventory_json, inventory_tables

    with open_source(bundle) as source:  # the file, or its parts NAME.000, NAME.001, ...
        manifest = read_head(source).manifest
        parts = f" ({len(source.parts)} parts)" if source.split else ""
    if fmt == "json":
        click.echo(json.dumps(inventory_json(manifest), indent=2))
        return 0
    click.echo(
        f"{bundle}{parts}: created {printable(manifest.created)} by airgap "
        f"{printable(manifest.tool_version)}, "
        f"{plural(len(manifest.providers), 'provider')}, {plural(len(manifest.images), 'image')}, "
        f"{human_size(manifest.total_size)} (not verified: run airgap verify)"
    )
    from airgap.installer.member import installer_records

    for record in installer_records(manifest):
        click.echo(
            f"offline installer: {printable(record.path)} ({human_size(record.size)}; "
            "see the README's 'Installing airgap on the disconnected side')"
        )
    click.echo()
    click.echo(inventory_tables(manifest, wide=wide))
    return 0


@cli.command("diff", short_help="Show what changed between two bundles.")
@click.argument("old", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("new", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Trusted Ed25519 public key: both signatures must verify (repeatable; "
    "default: not checked).",
)
@format_option("The differences as tables or as JSON.")
@click.option("--wide", is_flag=True, help="Full digests and references in tables.")
def diff_(old: Path, new: Path, keys: tuple[Path, ...], fmt: str, wide: bool) -> int:
    """Providers added, removed or upgraded (with contract changes), images added,
    removed or at another digest, and the blobs and bytes NEW has that OLD lacks. Reads
    only the signed manifests (bundles, split parts, delta bundles, or an extracted
    airgap-bundle.json); exit 0 whatever differs."""
    from airgap.bundle.diff import Side, diff, diff_text
    from airgap.bundle.manifestfile import load_manifest

    trusted = [load_public_key(path) for path in keys] if keys else None
    sides = []
    for label, path in (("old", old), ("new", new)):
        signed = load_manifest(path, trusted, what=f"{label} bundle")
        sides.append(Side(str(path), signed.digest, signed.manifest, signed.signer))
    result = diff(*sides)
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        click.echo(diff_text(result, wide=wide))
    return 0
