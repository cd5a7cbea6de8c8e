"""Keeping credentials out of messages: the one place URLs are made safe to show (pure).

Users write credentials into URLs (``https://user:token@mirror/...``, ``--registry
user:pass@host``) and servers put tokens and upload state into query strings. Every
message that shows a URL, a registry or a host the user typed goes through here first,
so no error, log line or bundle record ever repeats a password.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# user info after any "://": anchored on the separator, not on the scheme before it, so
# the scan is linear (a scheme-first pattern let every word boundary of a long
# "a+a+a+..." start a scan to its end, ~30 s for 200 KB); what it removes is a superset
_USERINFO_RE = re.compile(r"://[^\s/?#'\"]*@")


def without_userinfo(text: str) -> str:
    """``text`` (a URL, or ``[user[:pass]@]host[/path]`` as typed on a command line)
    with any user info dropped; everything else is kept as written."""
    scheme, separator, rest = text.partition("://")
    prefix = scheme + separator if separator else ""
    if not separator:
        rest = text
    ends = [index for index in (rest.find(c) for c in "/?#") if index >= 0]
    end = min(ends, default=len(rest))
    authority = rest[:end]
    if "@" not in authority:
        return text
    return prefix + authority.rsplit("@", 1)[1] + rest[end:]


def has_userinfo(text: str) -> bool:
    return without_userinfo(text) != text


def redact_url(url: object) -> str:
    """A URL for a message: no user info and no query string (which may carry tokens or
    upload state)."""
    text = str(url)
    try:
        parts = urlsplit(text)
        netloc = parts.hostname or ""
        if parts.hostname and ":" in parts.hostname:
            netloc = f"[{parts.hostname}]"
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
    except ValueError:  # not even parsable (a bad port, an unclosed [): show it cut down
        return without_userinfo(text).split("?", 1)[0].split("#", 1)[0]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scrub(message: str) -> str:
    """Drop ``scheme://user:pass@`` user info wherever it appears in a message: the last
    guard before anything is printed."""
    return _USERINFO_RE.sub("://", message) if "://" in message else message
