"""Options and their parsing shared by several commands: keys, targets, registries,
connections (TLS, plain HTTP, credentials).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.signing import load_public_key
from airgap.cli.app import (
    MAX_PASSWORD_CHARS,
    WrittenPath,
    _check_namespace,
    authfile_option,
    cert_dir_option,
    registry_option,
)
from airgap.core.errors import InputError
from airgap.registry.credentials import Credentials

if TYPE_CHECKING:
    from airgap.importing.model import ImportOptions
    from airgap.rewrite.mapping import Target


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
    from airgap.importing.model import ImportOptions

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
    from airgap.importing.model import ImportOptions

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
