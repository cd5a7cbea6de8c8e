"""``airgap serve``: a bundle as a read-only OCI registry, for pulls."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from airgap.cli.app import cli
from airgap.cli.options import key_options, load_trusted_keys
from airgap.core import interrupt
from airgap.core.errors import InputError
from airgap.core.redact import scrub
from airgap.core.textfmt import printable


@cli.command(short_help="Serve a bundle as a read-only OCI registry, for pulls.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@key_options
@click.option(
    "--listen",
    default="127.0.0.1:5050",
    show_default=True,
    help="Address to listen on: HOST:PORT, [IPv6]:PORT, or :PORT for every interface "
    "(port 0 picks a free one).",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Serve HTTPS with this PEM certificate (chain), with --tls-key.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The PEM private key of --tls-cert.",
)
@click.option("--access-log", is_flag=True, help="One line per request on stderr.")
def serve(
    bundle: Path,
    keys: tuple[Path, ...],
    no_signature: bool,
    listen: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    access_log: bool,
) -> int:
    """Verify BUNDLE (a file, or its parts NAME.000, ...) and serve its images read-only
    over the OCI distribution API until stopped: manifests by tag and digest, blobs with
    Range, tags, catalog. Each image is served as its source path (cluster-api/foo, as
    containerd's hosts.toml mirrors ask) and with its source host first
    (registry.k8s.io/cluster-api/foo)."""
    from airgap.serve.run import parse_listen, tls_context
    from airgap.serve.run import serve as run_serve
    from airgap.verify.bundle import verify_bundle

    address = parse_listen(listen)
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together")
    trusted = load_trusted_keys(keys, no_signature)
    tls = tls_context(tls_cert, tls_key) if tls_cert and tls_key else None
    verified = verify_bundle(bundle, trusted)
    manifest = verified.require_verified()
    signer = f"signed by {verified.signer}" if verified.signer else "NOT signature-checked"

    def ready(server: Any) -> None:
        repositories = len(server.content.catalog.names())
        click.echo(
            f"serving {bundle} ({len(manifest.images)} images, {repositories} repositories, "
            f"verified, {signer}) on {server.url}/ (Ctrl-C stops)"
        )
        sys.stdout.flush()

    def log(line: str) -> None:
        click.echo(f"airgap: serve: {printable(scrub(line))}", err=True)

    run_serve(verified, address, tls=tls, log=log if access_log else None, ready=ready)
    # how a server is stopped: not an error
    click.echo(f"airgap: stopped serving ({interrupt.signal_name()})", err=True)
    return 0
