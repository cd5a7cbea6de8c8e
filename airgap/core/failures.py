"""Every failure of a run at once, rather than the first.

A spec with five typos should take one round trip, not five: collect resolves every
release and image before it writes anything and reports all that failed, and
``import --keep-going`` pushes what it can before reporting what it could not. Each
failure is one line (what, where, status); the CLI prints them and then a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airgap.core.errors import AirgapError, HTTPStatusError, NetworkError


@dataclass(frozen=True)
class Failure:
    """One thing that failed: ``what`` (an image reference, a provider release), ``where``
    (its registry or release host) and the error that says why."""

    what: str
    where: str
    message: str
    status: str
    error: AirgapError | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, what: str, where: str, error: AirgapError) -> Failure:
        return cls(what, where, str(error), status_of(error), error)

    def line(self) -> str:
        """``WHAT (WHERE): STATUS: MESSAGE``, the message without a repeat of WHAT."""
        message = self.message
        for prefix in (f"{self.what}: ", f"image {self.what}: "):
            message = message.removeprefix(prefix)
        return f"{self.what} ({self.where}): {self.status}: {message}"

    def to_json(self) -> dict[str, str]:
        return {
            "what": self.what,
            "where": self.where,
            "status": self.status,
            "error": self.message,
        }


def status_of(error: AirgapError) -> str:
    """A short status: ``HTTP 404``, ``network`` or ``failed``."""
    if isinstance(error, HTTPStatusError):
        return f"HTTP {error.status}"
    if isinstance(error, NetworkError):
        return "unreachable"
    return "failed"


def raise_failures(failures: list[Failure], summary: str) -> None:
    """Raise what failed, if anything: one failure as its own error (its one line, as
    ever), several as ``ManyFailures``."""
    if len(failures) == 1 and failures[0].error is not None:
        raise failures[0].error
    if failures:
        raise ManyFailures(failures, summary)


class ManyFailures(AirgapError):
    """Several things failed; ``failures`` are reported one line each, then ``summary``."""

    def __init__(self, failures: list[Failure], summary: str) -> None:
        super().__init__(f"{summary}: " + "; ".join(f.line() for f in failures))
        self.failures = failures
        self.summary = summary

    def lines(self) -> list[str]:
        return [failure.line() for failure in self.failures] + [self.summary]
