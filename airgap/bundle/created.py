"""When a bundle (or an installer) was made: ``SOURCE_DATE_EPOCH`` if set, else now.

Both ``collect`` and ``airgap installer`` stamp what they write with this time, so a
reproducible build gets the same bytes twice."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airgap.core.errors import InputError
from airgap.core.names import shown

EPOCH_ENV = "SOURCE_DATE_EPOCH"
MAX_EPOCH = 253_402_300_799  # 9999-12-31T23:59:59Z: the last second a datetime holds


def source_date_epoch() -> datetime | None:
    """``SOURCE_DATE_EPOCH`` (reproducible builds), or None when it is unset or empty.

    Read before any fetch: a malformed value is an InputError, as the specification
    (reproducible-builds.org) asks, since a bundle silently stamped "now" is not the
    reproducible one its user asked for; and a value past year 9999 once ended a whole
    collect in a traceback at the end."""
    text = os.environ.get(EPOCH_ENV, "")
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or int(text) > MAX_EPOCH:
        raise InputError(
            f"{EPOCH_ENV}={shown(text)}: expected a Unix time in whole seconds, "
            f"0 to {MAX_EPOCH} (9999-12-31T23:59:59Z)"
        )
    return datetime.fromtimestamp(int(text), tz=UTC)


def created_timestamp(epoch: datetime | None) -> datetime:
    """The bundle's creation time: ``epoch`` (``source_date_epoch``), else now."""
    return epoch if epoch is not None else datetime.now(tz=UTC).replace(microsecond=0)
