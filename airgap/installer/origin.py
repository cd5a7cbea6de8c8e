"""Which offline installer the running airgap came from: ``install.sh`` copies the
installer's ``installer.json`` into the virtualenv, and ``airgap version`` names it."""

from __future__ import annotations

import sys
from pathlib import Path

from airgap.core.errors import AirgapError
from airgap.core.textfmt import printable
from airgap.formats import jsonsafe

ORIGIN_FILE = "airgap-installer.json"
MAX_ORIGIN_BYTES = 1024 * 1024  # a few hundred bytes per wheel


def origin_line(prefix: Path | None = None) -> str | None:
    """``installed from airgap-installer-0.1.0.tar (built …, wheels sha256:…)``, or
    None when this airgap was not installed by an installer; a damaged record is said
    so, in the same one line, never a traceback."""
    from airgap.core.inputfile import read_small

    path = (prefix if prefix is not None else Path(sys.prefix)) / ORIGIN_FILE
    if not path.exists():
        return None
    try:
        data = read_small(path, MAX_ORIGIN_BYTES, "installer record")
        record = jsonsafe.loads(data, str(path), max_bytes=MAX_ORIGIN_BYTES)
        name, created = record["installer"], record["created"]
        wheels, version = record["wheelsSha256"], record["airgapVersion"]
        if not all(isinstance(v, str) for v in (name, created, wheels, version)):
            raise TypeError
    except (AirgapError, OSError, KeyError, TypeError):
        return f"installed by an offline installer whose record {path} is unreadable"
    return printable(
        f"installed from {name[:200]} (airgap {version[:40]}, built {created[:40]}, "
        f"wheels sha256:{wheels[:12]})"
    )
