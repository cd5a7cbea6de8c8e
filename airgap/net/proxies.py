"""Which proxy a request goes through, so that an error can name it.

``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` (either case) are read
with the standard library's ``urllib.request.getproxies`` and given to httpx as mounts,
as httpx itself would read them. Loopback registries are never proxied, whatever those say, as Go's
``http.ProxyFromEnvironment`` (docker, podman, skopeo) has it: a proxy cannot reach the
machine's own 127.0.0.1. ``build_client`` mounts ``LOOPBACK`` direct; ``proxy_for``
repeats httpx's choice for a message.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Callable

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


def environment_proxies() -> dict[str, str | None]:
    """httpx mount patterns for the proxy variables, read with the standard library's
    ``urllib.request.getproxies`` as httpx reads them: ``SCHEME://`` (and ``all://``) to
    the proxy's URL, each ``NO_PROXY`` host to None (direct); ``NO_PROXY=*``: no proxy."""
    found = urllib.request.getproxies()
    mounts: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        url = found.get(scheme)
        if url:
            mounts[f"{scheme}://"] = url if "://" in url else f"http://{url}"
    for host in (entry.strip() for entry in found.get("no", "").split(",")):
        if host == "*":
            return {}
        if host:
            mounts[_bypass_pattern(host)] = None
    return mounts


def _bypass_pattern(host: str) -> str:
    """The mount pattern of one ``NO_PROXY`` entry: a URL as it is, an IP address or
    ``localhost`` exactly, any other name with its subdomains."""
    if "://" in host:
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"all://{host}" if host.lower() == "localhost" else f"all://*{host}"
    return f"all://[{host}]" if address.version == 6 else f"all://{host}"


def check_environment() -> None:
    """Fail in one line naming the variable when a proxy variable holds what httpx cannot
    parse (``HTTPS_PROXY=::::``, a host that is no IDNA name, a control character):
    httpx would raise ``InvalidURL`` from inside a client's constructor, a traceback."""
    for pattern, url in environment_proxies().items():
        variable = "NO_PROXY" if url is None else _VARIABLES.get(pattern[:-3], "ALL_PROXY")
        try:
            httpx.URL(pattern)
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
    transport_for: Callable[[httpx.Proxy], httpx.BaseTransport],
) -> dict[str, httpx.BaseTransport | None]:
    """httpx mounts for the proxies the environment names, each through
    ``transport_for(proxy)`` (``NO_PROXY`` hosts map to None: the client's own, direct,
    transport)."""
    return {
        pattern: None if url is None else transport_for(httpx.Proxy(url))
        for pattern, url in environment_proxies().items()
    }


def proxy_for(url: object) -> str | None:
    """``http://proxy:3128 (HTTPS_PROXY)`` when the environment sends ``url`` through a
    proxy (user info dropped), else None: the mount httpx picks, the most specific
    pattern first."""
    try:
        target = httpx.URL(str(url))
    except httpx.InvalidURL:
        return None
    if any(_matches(pattern, target) for pattern in LOOPBACK):
        return None  # the mounts every client has: these hosts are never proxied
    mounts = sorted(environment_proxies().items(), key=lambda mount: _priority(mount[0]))
    for pattern, proxy in mounts:
        if _matches(pattern, target):
            if proxy is None:
                return None
            variable = _VARIABLES.get(httpx.URL(pattern).scheme, "ALL_PROXY")
            return f"{redact_url(proxy)} ({variable})"
    return None


def _priority(pattern: str) -> tuple[bool, int, int]:
    """httpx's order of mounts: a port first, then the longest host, then a scheme."""
    url = httpx.URL(pattern)
    host = "" if url.host == "*" else url.host
    scheme = "" if url.scheme == "all" else url.scheme
    return (url.port is None, -len(host), -len(scheme))


def _matches(pattern: str, target: httpx.URL) -> bool:
    """Whether mount ``pattern`` (``all://*example.com``, ``https://``) takes ``target``:
    a ``*name`` host is the name and its subdomains, ``*.name`` its subdomains only."""
    url = httpx.URL(pattern)
    if url.scheme != "all" and url.scheme != target.scheme:
        return False
    if url.port is not None and url.port != target.port:
        return False
    host = "" if url.host == "*" else url.host
    if host.startswith("*."):
        return target.host.endswith(host[1:])
    if host.startswith("*"):
        return target.host == host[1:] or target.host.endswith("." + host[1:])
    return not host or target.host == host
