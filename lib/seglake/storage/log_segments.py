"""Kafka's ``LogSegments`` searches over a partition's segments, held as arrays.

    base offsets       b0 < b1 < ... < b(n-1)         (segments sorted by base offset)
    largest timestamps t0,  t1, ...,    t(n-1)          (per segment, any order)

    floor(o)   = last i with b_i <= o                   Kafka's floorSegment
    higher(o)  = first i with b_i > o                   Kafka's higherSegment
    for_time(t) = first i with max(t0..ti) >= t         where the first record with
                                                        timestamp >= t can be
    largest()  = first i holding the largest timestamp  ListOffsets' MAX_TIMESTAMP

Every answer is a segment index, ``-1`` for none; the ``*_many`` forms answer arrays of
targets at once (lookup's millions of queries). No I/O: the arrays come from the segments
a directory holds or from a catalog's rows. Picklable (broadcast to executors).
"""

from __future__ import annotations

import numpy as np

NONE = -1  # no such segment

__all__ = ["NONE", "LogSegments"]


class LogSegments:
    """A partition's segments as ``(base offset, largest timestamp)`` arrays."""

    __slots__ = ("base_offsets", "max_timestamps", "running_max")

    def __init__(self, base_offsets: np.ndarray, max_timestamps: np.ndarray) -> None:
        self.base_offsets = np.asarray(base_offsets, dtype=np.int64)
        self.max_timestamps = np.asarray(max_timestamps, dtype=np.int64)
        if len(self.base_offsets) != len(self.max_timestamps):
            raise ValueError(
                f"{len(self.base_offsets)} base offsets but {len(self.max_timestamps)} "
                "largest timestamps"
            )
        # max(t0..ti): the segments' largest timestamps need not increase (CreateTime)
        self.running_max = (
            np.maximum.accumulate(self.max_timestamps)
            if len(self.max_timestamps)
            else self.max_timestamps
        )

    def __len__(self) -> int:
        return len(self.base_offsets)

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.base_offsets, self.max_timestamps, self.running_max

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.base_offsets, self.max_timestamps, self.running_max = state

    # -- by offset --------------------------------------------------------------------
    def floor_many(self, offsets: np.ndarray) -> np.ndarray:
        """:meth:`floor` of each offset (int64 array, ``-1``: below the first segment)."""
        o = np.asarray(offsets, dtype=np.int64)
        return np.searchsorted(self.base_offsets, o, side="right").astype(np.int64) - 1

    def floor(self, offset: int) -> int:
        """Kafka's ``floorSegment``: the segment with the largest base offset <= ``offset``."""
        return int(np.searchsorted(self.base_offsets, int(offset), side="right")) - 1

    def higher(self, offset: int) -> int:
        """Kafka's ``higherSegment``: the first segment whose base offset > ``offset``."""
        i = int(np.searchsorted(self.base_offsets, int(offset), side="right"))
        return i if i < len(self) else NONE

    # -- by time ----------------------------------------------------------------------
    def for_time_many(self, timestamps: np.ndarray) -> np.ndarray:
        """:meth:`for_time` of each timestamp (int64 array, ``-1``: none)."""
        t = np.asarray(timestamps, dtype=np.int64)
        i = np.searchsorted(self.running_max, t, side="left").astype(np.int64)
        return np.where(i < len(self), i, NONE)

    def for_time(self, timestamp: int) -> int:
        """The first segment whose largest timestamp (or an earlier segment's) is >=
        ``timestamp``: no record before it has a timestamp >= it, so the first record that
        has is in it or after it."""
        i = int(np.searchsorted(self.running_max, int(timestamp), side="left"))
        return i if i < len(self) else NONE

    def largest(self) -> int:
        """The first segment holding the partition's largest timestamp (``-1``: none)."""
        return int(np.argmax(self.max_timestamps)) if len(self) else NONE
