"""Verification findings: what failed, about what, in one line each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Failure:
    kind: str  # signature, tar, member, layout, image, provider, policy
    subject: str  # the member, image, provider or rule concerned
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "subject": self.subject, "message": self.message}
