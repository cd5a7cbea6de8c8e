"""``airgap serve BUNDLE``: verify, then answer pulls until stopped.

The bundle is verified as ``airgap verify`` does (signature, every member hashed, tar
safety, layout, providers) before the socket is opened; a bundle that fails is not
served. Then the catalog is built from the verified manifests and requests are answered
straight from the tar or its parts (``airgap.serve.server``).
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from pathlib import Path

from airgap.bundle.format import IMAGES_DIR
from airgap.core import interrupt
from airgap.core.errors import AirgapError, InputError
from airgap.core.inputfile import check_small
from airgap.core.limits import MAX_TLS_FILE_BYTES
from airgap.core.names import shown
from airgap.serve.catalog import build_catalog
from airgap.serve.server import Content, RegistryServer
from airgap.verify.bundle import VerifiedBundle

DEFAULT_LISTEN = "127.0.0.1:5050"
_BLOBS = f"{IMAGES_DIR}/blobs/sha256/"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every interface); port 0 picks one."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise InputError(f"--listen {shown(text)}: expected HOST:PORT, [IPv6]:PORT or :PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "0.0.0.0", int(port)  # noqa: S104 (":PORT" asks for every interface)


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context (TLS 1.2 at least) from PEM files."""
    for path, what in ((cert, "--tls-cert"), (key, "--tls-key")):
        check_small(path, MAX_TLS_FILE_BYTES, what)  # a FIFO or /dev/zero fails here, at once
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise InputError(f"cannot use --tls-cert {cert} with --tls-key {key}: {reason}") from None
    return context


def content_of(bundle: VerifiedBundle) -> Content:
    """The catalog and blob locations of a verified bundle."""
    manifest = bundle.require_verified()
    blobs = {
        f"sha256:{name.removeprefix(_BLOBS)}": (member.offset, member.size)
        for name, member in bundle.members.items()
        if name.startswith(_BLOBS)
    }
    catalog = build_catalog(manifest, bundle.read, set(bundle.members))
    return Content(catalog, bundle.source, blobs)


def serve(
    bundle: VerifiedBundle,
    listen: tuple[str, int],
    *,
    tls: ssl.SSLContext | None = None,
    log: Callable[[str], None] | None = None,
    ready: Callable[[RegistryServer], None] = lambda server: None,
) -> None:
    """Serve ``bundle`` on ``listen`` until Ctrl-C or SIGTERM asks it to stop (then it
    returns; a second signal ends the process at once)."""
    content = content_of(bundle)
    try:
        server = RegistryServer(listen, content, tls=tls, log=log)
    except OSError as exc:
        host, port = listen
        raise AirgapError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    # a signal asks the loop to end (from a thread of its own: shutdown waits for it)
    # rather than raising into whatever the main thread is running
    def stop() -> None:
        threading.Thread(target=server.shutdown, name="serve-stop", daemon=True).start()

    with server, interrupt.stop_requests(stop):
        ready(server)
        server.serve_forever(poll_interval=0.5)
