"""Request bodies that are spans of files: sent by the kernel, never copied by Python.

Why: import moves gigabytes of blobs from the bundle to a registry that shares the
machine's cores. Read into Python and written out again, every byte costs two copies
through user space under the GIL; ``os.sendfile`` moves it from the page cache to the
socket in the kernel. ``airgap.net.fasthttp`` sends a ``FileBody`` that way on a plain
socket; any other transport (TLS, a proxy) iterates it like any body, in ``pread``
chunks that leave no shared file position to race on.

A ``FileBody`` is not hashed on its way out: it is for uploads committed under a digest
that the receiver checks (a registry's ``PUT ?digest=``), so the receiver refuses bytes
that changed under it. A file that ends early raises the error its owner gave.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence

import httpx

READ_CHUNK = 1 << 20  # per pread when the body is iterated

Span = tuple[int, int, int]  # (descriptor, offset in that file, length)


class FileBody(httpx.SyncByteStream):
    """``spans`` of open files, in order, as one request body.

    ``ended_early`` builds the error raised when a file holds fewer bytes than its span
    (truncated since it was opened); ``reached`` is told how many bytes of the body have
    been handed to the connection, as they go, for progress."""

    def __init__(
        self,
        spans: Sequence[Span],
        *,
        ended_early: Callable[[], Exception],
        reached: Callable[[int], None] | None = None,
    ) -> None:
        self.spans = tuple(spans)
        self.ended_early = ended_early
        self._reached = reached

    def reached(self, position: int) -> None:
        """``position`` bytes of the body are with the connection."""
        if self._reached is not None:
            self._reached(position)

    def __iter__(self) -> Iterator[bytes]:
        position = 0
        for fd, offset, length in self.spans:
            end = offset + length
            while offset < end:
                data = os.pread(fd, min(READ_CHUNK, end - offset), offset)
                if not data:
                    raise self.ended_early()
                yield data
                offset += len(data)
                position += len(data)
                self.reached(position)
