"""Which proxy a request goes through, so that an error can name it.

httpx honours ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (either
case) as curl does. Loopback registries are never proxied, whatever those say, as Go's
``http.ProxyFromEnvironment`` (docker, podman, skopeo) has it: a proxy cannot reach the
machine's own 127.0.0.1. ``build_client`` mounts ``LOOPBACK`` direct; ``proxy_for``
repeats httpx's choice for a message.
"""

from __future__ import annotations

import ssl

import httpx

from airgap.core.errors import InputError
from airgap.core.redact import redact_url, scrub
from airgap.core.textfmt import printable

# httpx mount patterns sent straight to the network (None: the client's own transport)
LOOPBACK: dict[str, httpx.BaseTransport | None] = {
    "all://localhost": None,
    "all://127.0.0.1": None,
    "all://[::1]": None,
}
_VARIABLES = {"https": "HTTPS_PROXY", "http": "HTTP_PROXY"}


def check_environment() -> None:
    """Fail in one line naming the variable when a proxy variable holds what httpx cannot
    parse (``HTTPS_PROXY=::::``, a host that is no IDNA name, a control character):
    httpx raised ``InvalidURL`` from inside a client's constructor, a traceback."""
    try:
        from httpx._utils import URLPattern, get_environment_proxies
    except ImportError:  # a future httpx moved them: its own error then
        return
    for pattern, url in get_environment_proxies().items():
        variable = "NO_PROXY" if url is None else _VARIABLES.get(pattern[:-3], "ALL_PROXY")
        try:
            URLPattern(pattern)
            if url is not None:
                port = httpx.Proxy(url).url.port
                if port is not None and not 0 < port < 65536:
                    raise ValueError(f"Invalid port: {port} (1 to 65535)")
        except (httpx.InvalidURL, ValueError) as exc:
            problem = printable(scrub(str(exc)))[:200]
            raise InputError(
                f"{variable} (or {variable.lower()}) is not a usable proxy setting: {problem}"
            ) from None


def environment_mounts(
    verify: ssl.SSLContext | bool, limits: httpx.Limits
) -> dict[str, httpx.BaseTransport | None]:
    """The proxy transports httpx builds from the environment for its default transport
    (``NO_PROXY`` hosts map to None: direct), for a client given a transport of its own,
    for which httpx reads no proxy variable."""
    try:
        from httpx._utils import get_environment_proxies
    except ImportError:  # a future httpx moved it: tests/test_cli_conventions.py notices
        return {}
    return {
        pattern: None
        if url is None
        else httpx.HTTPTransport(verify=verify, limits=limits, proxy=httpx.Proxy(url))
        for pattern, url in get_environment_proxies().items()
    }


def proxy_for(url: object) -> str | None:
    """``http://proxy:3128 (HTTPS_PROXY)`` when the environment sends ``url`` through a
    proxy (user info dropped), else None."""
    try:
        from httpx._utils import URLPattern, get_environment_proxies
    except ImportError:  # a future httpx moved them: messages just say less
        return None
    try:
        target = httpx.URL(str(url))
    except httpx.InvalidURL:
        return None
    if any(URLPattern(pattern).matches(target) for pattern in LOOPBACK):
        return None  # the mounts every client has: these hosts are never proxied
    mounts = [(URLPattern(key), value) for key, value in get_environment_proxies().items()]
    for pattern, proxy in sorted(mounts, key=lambda mount: mount[0]):  # as httpx orders them
        if pattern.matches(target):
            if proxy is None:
                return None
            variable = _VARIABLES.get(pattern.scheme, "ALL_PROXY")
            return f"{redact_url(proxy)} ({variable})"
    return None
