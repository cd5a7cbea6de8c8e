"""Verification findings: what failed, about what, in one line each."""

from __future__ import annotations

from dataclasses import dataclass

from airgap.core.textfmt import printable


@dataclass(frozen=True)
class Failure:
    """One thing verification found wrong; a report lists them all rather than stopping
    at the first."""

    kind: str  # signature, tar, member, layout, image, provider, policy
    subject: str  # the member, image, provider or rule concerned
    message: str

    def __post_init__(self) -> None:
        # Subjects and messages quote member names and manifest fields, which a tampered
        # bundle controls: keep every failure one printable, encodable line.
        object.__setattr__(self, "subject", printable(self.subject))
        object.__setattr__(self, "message", printable(self.message))

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "message": self.message}
