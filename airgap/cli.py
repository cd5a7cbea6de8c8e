"""The ``airgap`` command line: a thin edge over the library.

Commands parse flags, call one library function and print its result. Every typed
error becomes one line on stderr and an exit code (0 ok, 1 operation failed, 2 usage or
input error); a traceback is only ever shown for a bug, never for a user error.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict, TypeVar

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap import __version__
from airgap.bundle.reader import read_head
from airgap.core import interrupt
from airgap.core.errors import EXIT_FAILURE, AirgapError, InputError
from airgap.core.failures import ManyFailures
from airgap.core.progress import Progress
from airgap.core.redact import scrub
from airgap.registry.credentials import Credentials

if TYPE_CHECKING:
    from airgap.bundle.diff import BundleDiff
    from airgap.importing.importer import ImportOptions
    from airgap.rewrite.mapping import Target
    from airgap.verify.bundle import VerifiedBundle
    from airgap.verify.report import Report
from airgap.bundle.signing import generate_keypair, load_public_key
from airgap.core.textfmt import human_size, plural, printable

F = TypeVar("F", bound=Callable[..., Any])


MAX_MESSAGE_CHARS = 1000  # of an error line, before "... (N more characters)"
MAX_PASSWORD_CHARS = 64 * 1024  # registry tokens (JWTs) are a few KiB


def _fail(message: str, code: int) -> int:
    # the last guards: a URL's user:password@ never reaches the terminal, whoever built
    # the message (click quotes bad option values back verbatim), and a message quoting
    # outside input (a path, a value, a server's words) stays one readable line that
    # the terminal shows rather than obeys
    click.echo(f"airgap: error: {_bounded(printable(scrub(message)))}", err=True)
    return code


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS} more characters)"


def main() -> None:
    """Console entry point: run the CLI and map every expected failure to one line.

    Ctrl-C and SIGTERM end it within a second or two, temporary files removed
    (``airgap.core.interrupt``)."""
    interrupt.install()
    leave(_run())


def _run() -> int:
    try:
        code = cli.main(prog_name="airgap", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt, interrupt.Interrupted):
        interrupt.finish()
    except click.exceptions.NoArgsIsHelpError as exc:  # plain ``airgap``: the help
        click.echo(exc.ctx.get_help())
        return 0
    except click.ClickException as exc:  # usage errors too: one line, like every error
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see {exc.ctx.command_path} --help)"
        return _fail(f"{exc.format_message().rstrip('.')}{hint}", exc.exit_code)
    except ManyFailures as exc:  # every failure of the run: one line each, then a count
        for line in exc.lines():
            _fail(line, exc.exit_code)
        return exc.exit_code
    except AirgapError as exc:
        return _fail(str(exc), exc.exit_code)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}", EXIT_FAILURE)
    return code if isinstance(code, int) else 0


def leave(code: int) -> NoReturn:
    """End the process with ``code`` without tearing the interpreter down.

    Why: a command's work is done and its files are closed, but a normal exit then frees
    every module and object one by one, ~15-20 ms of a 0.25 s re-import (issue 12) that
    the kernel does at once when the process ends. What an exit must still do is done
    here: the exit handlers run (``airgap.core.phases`` writes its times, logging flushes)
    and stdout and stderr are flushed. While a thread that an exit would wait for is
    still running, or when flushing fails (a closed pipe: Python's own report and exit
    status are kept), it exits the normal way instead."""
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def _stdout_closed() -> bool:
    """Whether standard output is a pipe nobody reads any more (POLLERR on its end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class WrittenPath(click.Path):
    """A path airgap writes: a file or directory, never ``-``.

    Why: by convention ``-`` means standard output, and these outputs cannot be a
    stream: bundles are written in place (in parallel) and renamed, keys come in pairs,
    output trees are directories. Taken literally, ``keygen -`` wrote a private key to
    a file called ``-``; now it is a usage error (``./-`` still names such a file)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value == "-":
            self.fail(
                "'-' (standard output) is not supported here; name a path (./- for one called '-')",
                param,
                ctx,
            )
        return super().convert(value, param, ctx)


authfile_option = click.option(
    "--authfile",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Credentials file (podman/skopeo auth.json or docker config.json) to read "
    "instead of REGISTRY_AUTH_FILE, containers' auth.json and docker's config.",
)
cert_dir_option = click.option(
    "--cert-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Directory of *.crt CAs and a NAME.cert/NAME.key client pair for the registry "
    "(default: /etc/containers/certs.d/HOST:PORT, then /etc/docker/certs.d/HOST:PORT).",
)
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress output.")
registry_option = click.option(
    "--registry",
    "registry",
    required=True,
    help="Target registry and optional prefix: HOST[:PORT][/PREFIX].",
)


def concurrency_option(text: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """``--concurrency 1..64`` (default 8): how many downloads, uploads or checks at once."""
    return click.option(
        "--concurrency",
        default=8,
        show_default=True,
        type=click.IntRange(1, 64),
        help=text,
    )


def format_option(text: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """``--format text|json`` for a command's summary on stdout."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=text,
    )


def _check_namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refused here, not by kubectl on the far side of the gap."""
    from airgap.core.names import namespace_problem

    problem = None if value is None else namespace_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return value


def _enable_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from airgap.net import httplog

        httplog.enable(
            lambda line: click.echo(f"airgap: debug: {printable(scrub(line))}", err=True)
        )


def debug_option(function: F) -> F:
    """``--debug``, on the group and on every command that talks HTTP."""
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_enable_debug,
        help="One line per HTTP request on stderr (method, URL, status, bytes, time); "
        "credentials and tokens are never shown.",
    )(function)


class _Airgap(click.Group):
    """The command group; a reader that stops reading is not a failure."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # caught here: click's own handler would exit 1
            if not _stdout_closed():
                raise AirgapError("broken pipe") from None
            # ``airgap … | head -1``: the reader had enough, which is not a failure
            _silence_stdout()
            return 0


@click.group(
    cls=_Airgap,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: 0 success, 1 operation failed, 2 usage or input error.",
)
@click.version_option(
    __version__, "--version", "-V", prog_name="airgap", message="%(prog)s %(version)s"
)
@debug_option
def cli() -> None:
    """Carry Cluster API providers and their images across an air gap."""


@cli.command(short_help="Print a shell completion script (bash, zsh or fish).")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> int:
    """Print the completion script for SHELL, e.g. in ~/.bashrc:
    eval "$(airgap completion bash)"; zsh: eval "$(airgap completion zsh)"; fish:
    airgap completion fish > ~/.config/fish/completions/airgap.fish."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    if complete is None:  # click dropped a shell: say so instead of a traceback
        raise InputError(f"no completion for {shell}")
    click.echo(complete(cli, {}, "airgap", "_AIRGAP_COMPLETE").source())
    return 0


@cli.command(short_help="Show airgap's version.")
def version() -> int:
    """Print airgap's version (the same as ``airgap --version``) and, when an offline
    installer installed it, which one."""
    from airgap.installer.origin import origin_line

    click.echo(f"airgap {__version__}")
    origin = origin_line()
    if origin is not None:
        click.echo(origin)
    return 0


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


def load_trusted_keys(keys: tuple[Path, ...], no_signature: bool) -> list[Ed25519PublicKey] | None:
    """Trusted keys, or None when the user explicitly opted out of signature checks."""
    if keys and no_signature:
        raise InputError("give either --key or --no-signature, not both")
    if not keys and not no_signature:
        raise InputError(
            "no trusted key: pass --key signing.pub (repeatable), or --no-signature to skip "
            "the authenticity check explicitly"
        )
    if no_signature:
        click.echo(
            "airgap: WARNING: --no-signature: the bundle's authenticity is NOT being checked",
            err=True,
        )
        return None
    return [load_public_key(path) for path in keys]


def key_options(function: Callable[..., int]) -> Callable[..., int]:
    """--key (repeatable) and --no-signature, shared by verify, import and configmaps."""
    function = click.option(
        "--no-signature", is_flag=True, help="Skip the signature check (says so loudly)."
    )(function)
    return click.option(
        "--key",
        "keys",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Trusted Ed25519 public key (repeatable).",
    )(function)


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


def _read_password(username: str | None, password_stdin: bool) -> Credentials | None:
    if password_stdin and not username:
        raise InputError("--password-stdin needs --username")
    if not username:
        return None
    if not password_stdin:
        raise InputError("--username needs --password-stdin (passwords are never taken as flags)")
    if sys.stdin.isatty():  # a person at a terminal: ask, and do not echo what they type
        import getpass

        try:
            password = getpass.getpass(f"Password for {username}: ")
        except EOFError:
            password = ""
    else:
        # never all of an endless pipe
        password = sys.stdin.readline(MAX_PASSWORD_CHARS + 1).rstrip("\r\n")
        if len(password) > MAX_PASSWORD_CHARS:
            raise InputError(f"--password-stdin: longer than {MAX_PASSWORD_CHARS} characters")
    if not password:
        raise InputError("--password-stdin: no password on standard input")
    return Credentials(username, password)


max_path_depth_option = click.option(
    "--max-path-depth",
    type=click.IntRange(1, 64),
    help="At most N path components below the registry host (a registry that refuses "
    "deeper paths): deeper repositories are flattened, their last components joined "
    "by '-' (capi/k8s/controller -> capi/k8s-controller with 2).",
)


def target_options(function: Callable[..., int]) -> Callable[..., int]:
    """--registry and the output options shared by import and configmaps."""
    for decorator in reversed(
        [
            registry_option,
            click.option(
                "--keep-source-registry",
                is_flag=True,
                help="Keep the source registry host as the first path element.",
            ),
            max_path_depth_option,
            click.option(
                "--no-pin", is_flag=True, help="Do not pin rewritten references by digest."
            ),
            click.option(
                "--output-dir",
                type=WrittenPath(file_okay=False, path_type=Path),
                help="Where to write rewritten components and configuration.",
            ),
            click.option(
                "--output-location",
                type=click.Path(file_okay=False, path_type=Path),
                help="Where the output tree will be read from when it is moved after "
                "writing (clusterctl.yaml's file:// URLs point there; default: --output-dir).",
            ),
        ]
    ):
        function = decorator(function)
    return function


def registry_options(function: Callable[..., int]) -> Callable[..., int]:
    """How to reach the target registry and log in: import, configmaps and status."""
    for decorator in reversed(
        [
            click.option(
                "--ca-file",
                type=click.Path(dir_okay=False, exists=True),
                help="CA bundle (PEM) for the registry.",
            ),
            click.option(
                "--insecure-skip-tls-verify", is_flag=True, help="Do not verify TLS certificates."
            ),
            click.option("--plain-http", is_flag=True, help="Speak plain HTTP to the registry."),
            cert_dir_option,
            click.option("--username", help="Registry user (password from --password-stdin)."),
            click.option(
                "--password-stdin",
                is_flag=True,
                help="Read the registry password from stdin (on a terminal: a prompt "
                "that does not echo).",
            ),
            authfile_option,
        ]
    ):
        function = decorator(function)
    return function


def connection_options(function: Callable[..., int]) -> Callable[..., int]:
    """How to reach the target registry, shared by import and configmaps."""
    function = registry_options(function)
    for decorator in reversed(
        [
            click.option(
                "--namespace",
                callback=_check_namespace,
                help="Put every operator object in this namespace.",
            ),
            click.option(
                "--provider-source",
                type=click.Choice(["selector", "oci"]),
                default="selector",
                show_default=True,
                help="How provider CRs fetch manifests: labelled ConfigMaps or OCI.",
            ),
            click.option(
                "--variables",
                "variables_file",
                type=click.Path(dir_okay=False, path_type=Path),
                help="clusterctl-style YAML of NAME: value filling the providers' config "
                "Secrets (environment variables take precedence, as in clusterctl).",
            ),
        ]
    ):
        function = decorator(function)
    return function


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
    from airgap.importing.importer import status_and_have
    from airgap.importing.status import status_text

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


def parse_target(registry: str, max_path_depth: int | None) -> Target:
    """``--registry`` with ``--max-path-depth``, refused when the prefix leaves no room."""
    from airgap.rewrite.mapping import Target

    target = Target.parse(registry)
    target = Target(target.host, target.prefix, max_path_depth)
    target.check_depth()
    return target


def _import_options(
    *,
    registry: str,
    keep_source_registry: bool,
    max_path_depth: int | None,
    no_pin: bool,
    output_dir: Path | None,
    output_location: Path | None,
    namespace: str | None,
    provider_source: str,
    variables_file: Path | None,
    concurrency: int = 8,
    reverify: bool = False,
    dry_run: bool = False,
    keep_going: bool = False,
    **connection: Any,
) -> ImportOptions:
    """ImportOptions from the flags import and configmaps share (click checks names)."""
    from airgap.configmaps.variables import VariableValues, load_variables
    from airgap.core.fsutil import check_output_dir
    from airgap.importing.importer import ImportOptions

    if output_dir is not None:
        check_output_dir(output_dir)  # before anything is pushed
    connection["plain_http"] = _plain_http(registry, connection["plain_http"])
    file_values = load_variables(variables_file) if variables_file else {}
    return ImportOptions(
        target=parse_target(registry, max_path_depth),
        output_dir=output_dir,
        keep_registry=keep_source_registry,
        pin=not no_pin,
        dry_run=dry_run,
        concurrency=concurrency,
        namespace=namespace,
        provider_source=provider_source,
        reverify=reverify,
        keep_going=keep_going,
        variables=VariableValues.from_sources(file_values, os.environ),
        output_location=output_location.absolute() if output_location else None,
        **_connection(**connection),
    )


def _registry_options(
    registry: str,
    max_path_depth: int | None,
    keep_source_registry: bool,
    no_pin: bool,
    provider_source: str,
    concurrency: int,
    connection: dict[str, Any],
) -> ImportOptions:
    """Where and how status and prune reach the target registry: as import does."""
    from airgap.importing.importer import ImportOptions

    connection["plain_http"] = _plain_http(registry, connection["plain_http"])
    return ImportOptions(
        target=parse_target(registry, max_path_depth),
        keep_registry=keep_source_registry,
        pin=not no_pin,
        provider_source=provider_source,
        concurrency=concurrency,
        **_connection(**connection),
    )


def _plain_http(registry: str, plain_http: bool) -> bool:
    """``--registry http://HOST`` asks for plain HTTP, as the URL says (it used to be
    dropped, and TLS tried); ``https://`` beside ``--plain-http`` contradicts itself."""
    from airgap.rewrite.mapping import split_scheme

    scheme, _ = split_scheme(registry)
    if scheme == "https" and plain_http:
        raise click.UsageError("--registry says https:// and --plain-http says plain HTTP")
    return plain_http or scheme == "http"


class _Connection(TypedDict):
    """ImportOptions' fields for reaching and logging in to the target registry."""

    ca_file: str | None
    skip_tls_verify: bool
    plain_http: bool
    credentials: Credentials | None
    authfile: Path | None
    cert_dir: Path | None


def _connection(
    *,
    ca_file: str | None,
    insecure_skip_tls_verify: bool,
    plain_http: bool,
    username: str | None,
    password_stdin: bool,
    authfile: Path | None,
    cert_dir: Path | None,
) -> _Connection:
    """The values of registry_options' flags as ImportOptions' fields, in one place for
    import, configmaps and status (the password is read here, once per command)."""
    return _Connection(
        ca_file=ca_file,
        skip_tls_verify=insecure_skip_tls_verify,
        plain_http=plain_http,
        credentials=_read_password(username, password_stdin),
        authfile=authfile,
        cert_dir=cert_dir,
    )


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
    from airgap.importing.importer import run_configmaps

    if output_dir is None:
        raise InputError("configmaps needs --output-dir")
    options = _import_options(output_dir=output_dir, **target)
    trusted = load_trusted_keys(keys, no_signature)
    outputs = run_configmaps(bundle, trusted, options)
    operator = sum(1 for name in outputs.files if name.startswith("operator/"))
    click.echo(f"wrote {operator} operator files and a clusterctl repository to {output_dir}")
    _warn_missing_variables(outputs.missing, output_dir)
    return 0


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
