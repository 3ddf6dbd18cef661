"""Bytes read, reads and file opens of this process (:data:`IO_STATS`), counted by the
reads of :mod:`seglake.fs`, so tests can assert that a lookup reads an index interval and
one batch, not a whole segment, and jobs can report bytes read through accumulators."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["IO_STATS", "IOStats"]


class IOStats:
    """Bytes and reads done by the reads of :mod:`seglake.fs` in this process.

    Attributes:
        bytes_read: bytes returned by reads since the last :meth:`reset`.
        reads: read calls.
        files_opened: files opened for reading.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.reads = 0
        self.files_opened = 0

    def record(self, nbytes: int, *, opened: int = 1, reads: int = 1) -> None:
        """Count ``reads`` reads of ``nbytes`` bytes in all (and ``opened`` file opens)."""
        with self._lock:
            self.bytes_read += nbytes
            self.reads += reads
            self.files_opened += opened

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self.bytes_read = 0
            self.reads = 0
            self.files_opened = 0

    def snapshot(self) -> dict[str, int]:
        """The counters as a dict, read under the lock."""
        with self._lock:
            return {
                "bytes_read": self.bytes_read,
                "reads": self.reads,
                "files_opened": self.files_opened,
            }

    @contextlib.contextmanager
    def counting(
        self, *accumulators: Any, keys: tuple[str, ...] = ("bytes_read",)
    ) -> Iterator[None]:
        """Add what this process reads inside the block to Spark accumulators, one per
        counter in ``keys`` (``None`` accumulators are skipped)."""
        before = self.snapshot()
        try:
            yield
        finally:
            after = self.snapshot()
            for acc, k in zip(accumulators, keys, strict=True):
                if acc is not None:
                    acc.add(after[k] - before[k])

    def __repr__(self) -> str:
        s = self.snapshot()
        return (
            f"IOStats(bytes_read={s['bytes_read']}, reads={s['reads']}, "
            f"files_opened={s['files_opened']})"
        )


IO_STATS = IOStats()
