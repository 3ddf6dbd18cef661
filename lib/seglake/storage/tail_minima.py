"""Tail minima: the smallest timestamp from an offset to the end of a segment.

Kafka keeps only maxima (batch ``maxTimestamp``, the time index's running maximum), so
under non-monotonic CreateTime a record older than ``t`` may sit anywhere after the
first record >= ``t``: an exact time filter (extract ``mode="filter"``) would read every
segment that overlaps its window to the end. seglake's writer and recovery know every
record's timestamp, so they keep a few checkpoints per segment in the catalog (column
``tail_min_timestamps``, like a parquet page's minimum)::

    [(offset, min_timestamp), ...]   offset: the first offset of a batch, increasing
                                     min_timestamp: min over every record at or after
                                     offset in the segment (non-decreasing)

one every ``max(size / TAIL_POINTS, TAIL_STEP)`` bytes (at the first batch starting
there; the first batch included), equal minima collapsed to their first offset: at most
64 per segment (a 1 GiB segment: one per 16 MiB; 8 MiB: per 128 KiB). No record at or
after the first checkpoint whose minimum is >= ``end`` can be < ``end``: the filter stops
there (:func:`cutoff`).
Null (unknown, e.g. a catalog written before the column): read to the segment's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from seglake.format import LONG_MAX

TAIL_POINTS = 64
TAIL_STEP = 16 * 1024  # no closer than this: a smaller read gains nothing
TAIL_TYPE = pa.list_(pa.struct([("offset", pa.int64()), ("min_timestamp", pa.int64())]))

__all__ = [
    "TAIL_POINTS",
    "TAIL_STEP",
    "TAIL_TYPE",
    "batch_minima",
    "cutoff",
    "tail_minima",
    "tail_step",
]


def tail_step(size: int, *, points: int = TAIL_POINTS, min_step: int = TAIL_STEP) -> int:
    """Bytes between the checkpoints of a segment of ``size`` bytes."""
    return max(-(-int(size) // points), min_step, 1)


def tail_minima(
    first_offsets: np.ndarray | Sequence[int],
    positions: np.ndarray | Sequence[int],
    min_timestamps: np.ndarray | Sequence[int],
    size: int,
    *,
    points: int = TAIL_POINTS,
    min_step: int = TAIL_STEP,
) -> list[dict[str, Any]]:
    """Checkpoints of one segment from its batches (in file order): their first offsets,
    byte positions and smallest record timestamps (an empty batch: ``int64`` max)."""
    first = np.asarray(first_offsets, dtype=np.int64)
    pos = np.asarray(positions, dtype=np.int64)
    low = np.asarray(min_timestamps, dtype=np.int64)
    if not len(first):
        return []
    suffix = np.minimum.accumulate(low[::-1])[::-1]
    grid = np.arange(
        0, max(int(size), 1), tail_step(size, points=points, min_step=min_step), dtype=np.int64
    )
    pick = np.unique(np.searchsorted(pos, grid, side="left"))
    pick = pick[pick < len(first)]
    ts = suffix[pick]
    keep = np.concatenate([[True], ts[1:] != ts[:-1]])
    return [
        {"offset": o, "min_timestamp": t}
        for o, t in zip(first[pick][keep].tolist(), ts[keep].tolist(), strict=True)
    ]


def batch_minima(timestamps: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Smallest of each batch's ``counts[i]`` consecutive ``timestamps`` (``int64`` max
    for an empty batch)."""
    counts = np.asarray(counts, dtype=np.int64)
    out = np.full(len(counts), LONG_MAX, dtype=np.int64)
    full = counts > 0
    if full.any():
        starts = (np.cumsum(counts) - counts)[full]
        out[full] = np.minimum.reduceat(np.asarray(timestamps, dtype=np.int64), starts)
    return out


def cutoff(tail: list[dict[str, Any]] | None, end: int) -> int | None:
    """The first offset from which every record of the segment is >= ``end`` (None:
    unknown, or some record near the end is older)."""
    for point in tail or ():
        if point["min_timestamp"] >= end:
            return int(point["offset"])
    return None
