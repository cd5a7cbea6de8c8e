"""Typed errors shared by every part of airgap.

The CLI is the only place that turns these into exit codes and one-line messages, so
every message must already say *what* went wrong and *where* (file, image, URL, HTTP
status) and must never contain a credential.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class AirgapError(Exception):
    """An operation failed for a reason the user can act on (exit code 1)."""

    exit_code = EXIT_FAILURE


class InputError(AirgapError):
    """The user's input (spec file, flags, key file, policy) is wrong (exit code 2)."""

    exit_code = EXIT_USAGE


class SpecError(InputError):
    """A YAML input file is malformed or has a wrong key; the message names file and key."""


class NetworkError(AirgapError):
    """A host could not be reached or the connection broke after all retries."""


class HTTPStatusError(AirgapError):
    """A server answered with an unexpected HTTP status; the message names URL and status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class NotFoundError(HTTPStatusError):
    """A release file, image tag, manifest or blob does not exist (HTTP 404)."""


class AuthError(HTTPStatusError):
    """A registry or release server refused our credentials (HTTP 401/403)."""


class DigestMismatchError(AirgapError):
    """Bytes received or read do not hash to the digest they were asked for."""


class TLSError(NetworkError):
    """The server's certificate is not trusted; the message suggests --ca-file."""


class BundleError(AirgapError):
    """A bundle is malformed, tampered with, or fails verification."""


class SignatureError(BundleError):
    """A bundle's signature does not verify against any trusted key."""


def utf8_text(data: bytes, where: str, error: type[AirgapError] = AirgapError) -> str:
    """``data`` as text, or ``error`` saying ``WHERE: not UTF-8 text``: every file read
    from a bundle, a release or an image is text only if it decodes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{where}: not UTF-8 text") from None
