"""The ``airgap`` command line: a thin edge over the library.

Commands parse flags, call one library function and print its result. Every typed
error becomes one line on stderr and an exit code (0 ok, 1 operation failed, 2 usage or
input error); a traceback is only ever shown for a bug, never for a user error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from airgap import __version__
from airgap.bundle.format import BundleManifest
from airgap.bundle.reader import read_head
from airgap.errors import EXIT_FAILURE, EXIT_USAGE, AirgapError
from airgap.progress import Progress
from airgap.signing import generate_keypair
from airgap.textfmt import human_size, table


def _fail(message: str, code: int) -> None:
    click.echo(f"airgap: error: {message}", err=True)
    sys.exit(code)


def main() -> None:
    """Console entry point: run the CLI and map every expected failure to one line."""
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except AirgapError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        _fail(f"{exc.strerror or exc}{where}", EXIT_FAILURE)
    sys.exit(code if isinstance(code, int) else 0)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="airgap")
def cli() -> None:
    """Carry Cluster API providers and their images across an air gap."""


@cli.command()
@click.argument("private_key", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite existing key files.")
def keygen(private_key: Path, force: bool) -> int:
    """Create an Ed25519 signing key (mode 0600) and its public key (.pub)."""
    public, fingerprint = generate_keypair(private_key, overwrite=force)
    click.echo(f"wrote {private_key} (private) and {public} (public), key {fingerprint}")
    return 0


@cli.command()
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
    type=click.Path(dir_okay=False, path_type=Path),
    help="Bundle file to write.",
)
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def collect(spec: Path, sign_key: Path, output: Path, concurrency: int, quiet: bool) -> int:
    """Collect provider releases and their images into one signed bundle."""
    from airgap.collect.collector import collect as run_collect

    with Progress.for_terminal(quiet) as progress:
        result = run_collect(spec, output, sign_key, concurrency=concurrency, progress=progress)
    manifest = result.manifest
    if not quiet:
        click.echo(
            f"wrote {result.output}: {len(manifest.providers)} providers, "
            f"{len(manifest.images)} images, {human_size(manifest.total_size)} "
            f"in {result.seconds:.1f}s"
        )
    return 0


def manifest_summary(manifest: BundleManifest) -> dict[str, object]:
    """The JSON shape ``inspect`` prints (and verify reuses for its inventory)."""
    return {
        "formatVersion": manifest.format_version,
        "created": manifest.created,
        "toolVersion": manifest.tool_version,
        "size": manifest.total_size,
        "providers": [
            {
                "name": p.name,
                "type": p.type,
                "version": p.version,
                "contract": p.contract,
                "source": p.source,
                "images": p.images,
            }
            for p in manifest.providers
        ],
        "images": [
            {
                "reference": i.reference,
                "digest": i.digest,
                "mediaType": i.media_type,
                "platforms": i.platforms,
                "size": i.size,
            }
            for i in manifest.images
        ],
    }


def manifest_tables(manifest: BundleManifest) -> str:
    providers = table(
        ["PROVIDER", "TYPE", "VERSION", "CONTRACT"],
        [[p.name, p.type, p.version, p.contract] for p in manifest.providers],
    )
    images = table(
        ["IMAGE", "DIGEST", "PLATFORMS", "SIZE"],
        [
            [i.reference, i.digest, ",".join(i.platforms) or "-", human_size(i.size)]
            for i in manifest.images
        ],
    )
    return f"{providers}\n\n{images}"


@cli.command()
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def inspect(bundle: Path, fmt: str) -> int:
    """Show what a bundle holds (read from its manifest; run verify to check it)."""
    manifest = read_head(bundle).manifest
    if fmt == "json":
        click.echo(json.dumps(manifest_summary(manifest), indent=2))
        return 0
    click.echo(
        f"{bundle}: created {manifest.created} by airgap {manifest.tool_version}, "
        f"{len(manifest.providers)} providers, {len(manifest.images)} images, "
        f"{human_size(manifest.total_size)} (not verified: run airgap verify)"
    )
    click.echo()
    click.echo(manifest_tables(manifest))
    return 0


__all__ = ["EXIT_USAGE", "cli", "main"]
