"""The ``airgap`` command line: a thin edge over the library.

Commands parse flags, call one library function and print its result. Every typed
error becomes one line on stderr and an exit code (0 ok, 1 operation failed, 2 usage or
input error); a traceback is only ever shown for a bug, never for a user error.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from airgap import __version__
from airgap.core import interrupt
from airgap.core.errors import EXIT_FAILURE, AirgapError, InputError
from airgap.core.failures import ManyFailures
from airgap.core.redact import scrub
from airgap.core.textfmt import printable

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
    every module and object one by one, a visible part of a no-op re-import, work that
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
