"""Point-read requests (no I/O): the targets of one segment (:class:`Request`), the byte
ranges the offset index gives them (:func:`byte_ranges`, what ``LogSegment._span``
reads), the groups of targets that share one read (:func:`touching`) and the rule that
says which batch answers a target (:func:`batch_hits`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from seglake.storage.segment import LogSegment
from seglake.storage.time_index import NO_ENTRY

__all__ = [
    "LOCAL_READ_GAP",
    "READ_GAP",
    "Request",
    "batch_hits",
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
    seg: LogSegment, lo: np.ndarray, hi: np.ndarray, *, whole: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :meth:`LogSegment._span` reads for offsets ``[lo, hi]``: ``(floor, start,
    end)``, the offset index floor of ``lo`` (its offset, and its position: 0 when
    there is none) to the first entry after ``hi``. With ``whole``, to the entry after
    that one: the batch at the first entry read whole too (the header chains' first
    reads: where every batch has an entry, a target's batch is most often that one, and
    needs no second read)."""
    floor, start = seg.floor_positions(lo)
    return floor, start, seg.upper_positions(hi, beyond=int(whole))


def batch_hits(
    base: np.ndarray,
    last: np.ndarray,
    max_ts: np.ndarray,
    control: np.ndarray,
    lo: np.ndarray,
    ts: np.ndarray,
    is_ts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Which batches (headers ``base``, ``last`` offset, ``max_ts``, ``control``) answer
    their targets, one batch per target, walked in offset order: ``(hit, turn)``.

    ``hit``: a data batch holding the answer. An offset target (``~is_ts``): the first
    data batch holding offsets >= ``lo`` (the record there, or the next where the cleaner
    removed it or it is a marker, as a fetch from ``lo`` returns it). A timestamp target:
    the first batch, data *or control*, holding offsets >= ``lo`` whose largest timestamp
    is >= ``ts`` (Kafka's ``FileRecords.searchForTimestamp``, as ``find_offset_by_timestamp``).

    ``turn``: a control batch whose marker answers a timestamp target (a marker carries
    the broker's clock: ListOffsets answers its offset). A fetch from there returns the
    next data record, whatever its timestamp: the target goes on as an offset target
    from the marker's ``base`` (when ``base`` < ``lo``, inside a control batch of many
    records, which record answers is not known from the header: the caller scans).
    """
    reach = last >= lo
    by_time = is_ts & reach & (max_ts >= ts)
    hit = ~control & np.where(is_ts, by_time, reach)
    return hit, by_time & control


@dataclasses.dataclass
class Request:
    """Targets in one segment, their batches found by :func:`batch_hits`: offsets (``ts``
    None) from ``lo`` (= ``hi``); timestamps ``ts`` from ``lo`` (the answer starts at or
    before ``hi``). :func:`plan_requests` sets ``ids`` (batch ids in the gather, -1: none
    in this segment) or ``error``, and ``after``: for a timestamp a marker answered, the
    marker's offset (the answer is the first record of batch ``ids`` at or after it), else
    -1."""

    seg: LogSegment
    lo: np.ndarray
    hi: np.ndarray
    ts: np.ndarray | None = None
    ids: np.ndarray | None = None
    error: Exception | None = None
    after: np.ndarray | None = None

    def picks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(target, is_ts)``: what each target picks in its batch (``ids``): the first
        record with offset >= ``target``, or where ``is_ts`` the first with timestamp >=
        ``target`` (:meth:`~seglake.storage.point_gather.Gather.pick`)."""
        if self.ts is None:
            return self.lo, np.zeros(len(self.lo), dtype=bool)
        after = self.after if self.after is not None else np.full(len(self.ts), -1)
        return np.where(after >= 0, after, self.ts), after < 0


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
