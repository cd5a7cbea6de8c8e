"""``airgap verify``: the signature, digests, safety, policy, SBOM and review page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap import __version__
from airgap.cli.app import cli, quiet_option
from airgap.cli.options import key_options, load_trusted_keys
from airgap.core.errors import EXIT_FAILURE
from airgap.core.progress import Progress

if TYPE_CHECKING:
    from airgap.bundle.diff import BundleDiff
    from airgap.verify.bundle import VerifiedBundle
    from airgap.verify.report import Report


@cli.command(short_help="Check a bundle's signature, digests, safety and policy.")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@key_options
@click.option("--policy", type=click.Path(dir_okay=False, path_type=Path), help="Policy YAML.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option(
    "--sbom",
    type=click.Choice(["spdx", "cyclonedx"]),
    help="Print an inventory document instead of the report.",
)
@click.option("--wide", is_flag=True, help="Full digests and references in tables.")
@click.option(
    "--base",
    type=click.Path(dir_okay=False, path_type=Path),
    help="An earlier bundle (or its airgap-bundle.json): the report says what changed.",
)
@click.option(
    "--report",
    "review",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the review report: one self-contained HTML page (written when the "
    "bundle fails verification too, saying so).",
)
@quiet_option
def verify(
    bundle: Path,
    keys: tuple[Path, ...],
    no_signature: bool,
    policy: Path | None,
    fmt: str,
    sbom: str | None,
    wide: bool,
    base: Path | None,
    review: Path | None,
    quiet: bool,
) -> int:
    """Verify a bundle: signature, every digest, tar safety, providers and policy."""
    from airgap.verify.bundle import verify_bundle
    from airgap.verify.report import Report

    given = click.get_current_context().get_parameter_source("fmt")
    if sbom and given is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--sbom prints the SBOM instead of the report: drop --format")
    if sbom and (base or review):
        raise click.UsageError("--sbom prints the SBOM instead of the report: drop --base/--report")
    trusted = load_trusted_keys(keys, no_signature)
    if review is not None:
        from airgap.core.fsutil import require_directory_of

        require_directory_of(review)  # before hashing gigabytes: the page has a place
    rules = None
    if policy:
        # start-up: policy loads cosign, x509 and yaml; sbom too, only when asked for
        from airgap.verify import policy as policy_rules

        rules = policy_rules.load_policy(policy)
    with Progress.for_terminal(quiet) as progress:
        verified = verify_bundle(bundle, trusted, progress=progress)
    results = (
        policy_rules.evaluate(rules, verified.manifest, read=verified.read)
        if rules and verified.manifest
        else []
    )
    change = _change_against(base, verified, trusted) if base is not None else None
    report = Report(
        verified,
        results,
        signature_checked=trusted is not None,
        policy_given=policy is not None,
        change=change,
    )
    if review is not None:
        _write_review(review, report, quiet)
    if sbom:
        # stdout is the SBOM file the user redirects to: on failure it stays empty
        if not report.ok or verified.manifest is None:
            click.echo(f"airgap: error: {_not_verified(report)}; no SBOM written", err=True)
            return EXIT_FAILURE
        from airgap.verify import sbom as sbom_docs

        if sbom == "spdx":
            document = sbom_docs.spdx(
                verified.manifest, verified.manifest_bytes, bundle.name, read=verified.read
            )
        else:
            document = sbom_docs.cyclonedx(verified.manifest, verified.manifest_bytes, bundle.name)
        click.echo(json.dumps(document, indent=2))
        return 0
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(report.text(wide=wide))
        if change is not None:
            from airgap.bundle.diff import diff_text

            click.echo(f"\nChange against the base bundle:\n{diff_text(change, wide=wide)}")
    if not report.ok:  # the report is on stdout; scripts and logs get the verdict too
        click.echo(f"airgap: error: {_not_verified(report)}", err=True)
        return EXIT_FAILURE
    return 0


def _change_against(
    base: Path, verified: VerifiedBundle, trusted: list[Ed25519PublicKey] | None
) -> BundleDiff | None:
    """What changed since ``base`` (its signature checked with the same keys); None when
    the bundle's own manifest could not be read."""
    from airgap.bundle.diff import Side, diff
    from airgap.bundle.manifestfile import load_manifest

    old = load_manifest(base, trusted, what="base bundle")
    if verified.manifest is None:
        return None
    digest = f"sha256:{verified.manifest_sha256}"
    new = Side(str(verified.path), digest, verified.manifest, verified.signer)
    return diff(Side(str(base), old.digest, old.manifest, old.signer), new)


def _write_review(path: Path, report: Report, quiet: bool) -> None:
    """The review page, from the document ``--format json`` prints."""
    from datetime import UTC, datetime

    from airgap.core.fsutil import write_atomic
    from airgap.verify.review import render

    generated = datetime.now(tz=UTC).isoformat(timespec="seconds")
    page = render(report.to_json(), generated=generated, tool=__version__)
    # a lone surrogate from a bundle's JSON cannot be UTF-8: shown as U+FFFD, not a traceback
    write_atomic(path, page.encode("utf-8", errors="replace"))
    if not quiet:
        verdict = "verified" if report.ok else "NOT verified"
        click.echo(f"airgap: review report ({verdict}) written to {path}", err=True)


def _not_verified(report: Report) -> str:
    """``bundle NOT verified: FIRST FAILURE (and N more)``, for one line on stderr."""
    failures = report.failures
    first = f": {failures[0]}" if failures else ""
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    return f"bundle NOT verified{first}{more}"
