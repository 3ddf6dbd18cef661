"""Point-read requests (no I/O): the targets of one segment (:class:`Request`), the byte
ranges the offset index gives them (:func:`byte_ranges`, what ``LogSegment._span``
reads) and the groups of targets that share one read (:func:`touching`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from seglake.storage.segment import LogSegment
from seglake.storage.time_index import NO_ENTRY

__all__ = [
    "LOCAL_READ_GAP",
    "READ_GAP",
    "Request",
    "byte_ranges",
    "offset_request",
    "read_groups",
    "time_request",
    "touching",
]

_NO_OFFSET = 2**62  # an offset past any segment's end
READ_GAP = 32 * 1024  # reads of one segment closer than this are merged
LOCAL_READ_GAP = 4 * 1024  # ... of a local file (a read is one preadv: copying more costs more)


def touching(start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Groups of requests whose byte ranges ``[start, end)`` overlap or lie less than
    :data:`READ_GAP` apart (one read of the gap costs less than another read)."""
    group, _, _ = read_groups(start, end)
    order = np.argsort(group, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(group[order])) + 1) if len(start) else []


def read_groups(
    start: np.ndarray, end: np.ndarray, gap: int = READ_GAP
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`touching` as arrays: ``(group, first, last)``, the group of each range and
    each group's ``[first, last)`` (groups in the order of their positions)."""
    if not len(start):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    order = np.argsort(start, kind="stable")
    reach = np.maximum.accumulate(end[order])
    cut = np.flatnonzero(start[order][1:] > reach[:-1] + gap) + 1
    bounds = np.concatenate(([0], cut))
    group = np.empty(len(start), dtype=np.int64)
    group[order] = np.cumsum(np.isin(np.arange(len(order)), cut))
    return group, start[order][bounds], np.maximum.reduceat(end[order], bounds)


def byte_ranges(
    seg: LogSegment, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :meth:`LogSegment._span` reads for offsets ``[lo, hi]``: ``(floor, start,
    end)``, the offset index floor of ``lo`` (its offset, and its position: 0 when
    there is none) to the first entry after ``hi``."""
    floor, start = seg.floor_positions(lo)
    return floor, start, seg.upper_positions(hi)


@dataclasses.dataclass
class Request:
    """Targets in one segment. Offsets (``ts`` None): the first data batch holding
    offsets >= ``lo`` (= ``hi``): the one holding ``lo``, or after a gap the cleaner left
    (or a marker) the next, as a fetch from ``lo`` returns it. Timestamps: the first data
    batch holding offsets >= ``lo`` (and starting at or before ``hi``) whose largest
    timestamp is >= ``ts``. :func:`plan_requests` sets ``ids`` (batch ids in the gather,
    -1: none in this segment) or ``error``."""

    seg: LogSegment
    lo: np.ndarray
    hi: np.ndarray
    ts: np.ndarray | None = None
    ids: np.ndarray | None = None
    error: Exception | None = None


def offset_request(seg: LogSegment, targets: np.ndarray) -> Request:
    return Request(seg, targets, targets)


def time_request(seg: LogSegment, targets: np.ndarray, lo: int) -> Request:
    """The time index bounds every answer at once: after the strict floor's offset (each
    entry holds the largest timestamp so far, so no record up to it is >= the target)
    and at or before the next entry's offset (which holds a timestamp >= it)."""
    first, last = seg.time_index.bounds_many(targets)
    first = np.maximum(first, max(lo, seg.base_offset))
    last = np.where(last == NO_ENTRY, _NO_OFFSET, last)  # none >= the target: to the end
    return Request(seg, first, np.maximum(last, first), np.asarray(targets, np.int64))
