"""Point reads of many targets in one segment, or in many (no Spark): the offset or
time index searched for all targets at once, one ranged read per group of targets whose
index intervals lie within :data:`READ_GAP`, every target's batch-header chain followed
from its index floor together (numpy), and the answer batches gathered so that their
records are walked and decoded in one call (:class:`Gather`). Where the index and the
log disagree, the careful path (``LogSegment._span``, which rebuilds the index).

:func:`read_offsets` and :func:`resolve_timestamps` answer one segment's targets; the
lookup job plans all segments' :class:`Request` s together (:func:`plan_requests`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.errors import SeglakeError
from seglake.format import NO_TIMESTAMP
from seglake.record.batch import HEADER_SIZE, claimed_size
from seglake.record.reader import record_times
from seglake.record.schema import empty_records
from seglake.storage.header_chains import locate as _locate
from seglake.storage.point_gather import Gather
from seglake.storage.point_requests import (
    READ_GAP,
    Request,
    batch_hits,
    byte_ranges,
    offset_request,
    time_request,
    touching,
)
from seglake.storage.segment import LogSegment
from seglake.storage.segment_window import Window

__all__ = [
    "READ_GAP",
    "Gather",
    "Request",
    "offset_request",
    "plan_requests",
    "read_offsets",
    "read_offsets_many",
    "resolve_timestamps",
    "scan_times",
    "time_request",
]


def plan_requests(reqs: list[Request], gather: Gather) -> None:
    """Set every request's ``ids`` (or ``error``): :func:`_locate`, then the careful
    path (:meth:`LogSegment._span`, which rebuilds a bad index) where the index and the
    log disagree."""
    _locate(reqs, gather)
    for r in reqs:
        if r.error is not None or r.ids is None:
            continue
        if r.after is None:
            r.after = np.full(len(r.ids), -1, dtype=np.int64)
        careful = np.flatnonzero(r.ids == -2)
        if not len(careful):
            continue
        try:
            if r.ts is None:
                r.ids[careful] = _careful_offsets(r.seg, r.lo[careful], gather)
            else:
                r.ids[careful], r.after[careful] = _careful_timestamps(
                    r.seg, r.ts[careful], r.lo[careful], r.hi[careful], gather
                )
        except (SeglakeError, OSError) as exc:
            r.error = exc


def _careful_offsets(seg: LogSegment, targets: np.ndarray, gather: Gather) -> np.ndarray:
    out = np.full(len(targets), -1, dtype=np.int64)
    for qi in touching(*byte_ranges(seg, targets, targets)[1:]):
        sel = targets[qi]
        w = seg._span(int(sel.min()), int(sel.max()))
        # the first data batch holding offsets >= the target (-1 past the window: the
        # answer's caller reads on from there)
        data = np.flatnonzero(~w.scan.is_control)
        at = np.searchsorted(data, np.searchsorted(w.scan.last_offset, sel, side="left"))
        inside = at < len(data)
        b = data[np.minimum(at, max(len(data) - 1, 0))] if len(data) else at
        if inside.any():
            batches, which = np.unique(b[inside], return_inverse=True)
            out[qi[inside]] = gather.add(w, batches, seg.log_path)[which]
    return out


def _careful_timestamps(
    seg: LogSegment, targets: np.ndarray, first: np.ndarray, last: np.ndarray, gather: Gather
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, after)`` of timestamp targets (:class:`Request`) from the batches of
    ``seg._span`` (:func:`batch_hits`; -1 where the window holds no answer: the scan
    takes those)."""
    out = np.full(len(targets), -1, dtype=np.int64)
    after = np.full(len(targets), -1, dtype=np.int64)
    for qi in touching(*byte_ranges(seg, first, last)[1:]):
        w = seg._span(int(first[qi].min()), int(last[qi].max()))
        s, t, lo = w.scan, targets[qi], first[qi].copy()
        b = np.searchsorted(s.last_offset, lo, side="left")
        hit = np.full(len(qi), -1, dtype=np.int64)
        is_ts, mark = np.ones(len(qi), dtype=bool), np.full(len(qi), -1, dtype=np.int64)
        while True:  # from each target's first batch on: usually one or two steps
            open_ = np.flatnonzero((hit == -1) & (b < len(s)))
            if not len(open_):
                break
            bb = b[open_]
            base = s.base_offset[bb]
            found, marker = batch_hits(
                base,
                s.last_offset[bb],
                s.max_timestamp[bb],
                s.is_control[bb],
                lo[open_],
                t[open_],
                is_ts[open_],
            )
            turn = marker & (base >= lo[open_])  # on from the marker as an offset
            hit[open_[found]] = bb[found]
            hit[open_[marker & ~turn]] = -2  # the scan decides
            mark[open_[turn]] = lo[open_[turn]] = base[turn]
            is_ts[open_[turn]] = False
            b[open_] += 1
        ok = hit >= 0
        if ok.any():
            batches, which = np.unique(hit[ok], return_inverse=True)
            out[qi[ok]] = gather.add(w, batches, seg.log_path)[which]
            after[qi[ok]] = mark[ok]
    return out, after


SCAN_CHUNK = 1 << 20  # bytes of a segment :func:`scan_times` reads at a time


def scan_times(
    seg: LogSegment, targets: np.ndarray, lo: np.ndarray | int
) -> tuple[np.ndarray, pa.Table, np.ndarray]:
    """For each target, the record a fetch from ``seg``'s offsetsForTimes(target)
    (offset >= its ``lo``) returns, by a forward scan, for the targets the index and the
    header chains cannot place: all of them together, read :data:`SCAN_CHUNK` bytes at
    a time from the earliest place a pending answer can start (the strict time index
    floor, or ``lo``'s offset index floor), each chunk once for every target in it.
    :data:`NO_TIMESTAMP` (every record) asks for the next record from ``lo``.

    Returns ``(row, records, carry)``: ``row[i]`` the row of target ``i``'s answer in
    ``records`` (-1: none in ``seg``), ``carry[i]`` the target of the next segment's scan:
    the target, or :data:`NO_TIMESTAMP` once a transaction marker answered (Kafka's
    ListOffsets gives its offset; a fetch from it reads on to the next data record,
    whatever its timestamp)."""
    targets = np.asarray(targets, dtype=np.int64)
    n = len(targets)
    lo = np.maximum(np.broadcast_to(np.asarray(lo, dtype=np.int64), (n,)), seg.base_offset)
    row, carry = np.full(n, -1, dtype=np.int64), targets.copy()
    if not n:
        return row, empty_records(), carry
    _, pos = seg.floor_positions(np.maximum(seg.time_index.bounds_many(targets)[0], lo))
    pending, tables, rows = np.ones(n, bool), [], 0
    while pending.any():
        start = int(pos[pending].min())
        if start >= seg.size:
            break
        w = seg.window(start, start + SCAN_CHUNK)
        if w.end == start:  # a batch larger than the chunk (or a torn tail): read it whole
            head = seg.window(start, start + HEADER_SIZE, verify_crc=False).data
            if len(head) == HEADER_SIZE:
                w = seg.window(start, start + claimed_size(head))
        if seg._bad_start(w, start):  # the index was rebuilt: start over
            return scan_times(seg, targets, lo)
        if w.end == start:
            break  # a torn tail: nothing more
        on = np.flatnonzero(pending & (pos < w.end))
        got, table, carry[on] = _scan_window(seg, w, carry[on], lo[on])
        hit = got >= 0
        row[on[hit]] = got[hit] + rows
        pending[on[hit]], pos[on] = False, w.end
        tables.append(table)
        rows += table.num_rows
    return row, pa.concat_tables(tables) if tables else empty_records(), carry


def _scan_window(
    seg: LogSegment, w: Window, targets: np.ndarray, lo: np.ndarray
) -> tuple[np.ndarray, pa.Table, np.ndarray]:
    """:func:`scan_times` within the whole batches of one window ``w`` of ``seg``."""
    n = len(targets)
    row, carry = np.full(n, -1, dtype=np.int64), targets.copy()
    offs, ts = record_times(w.data, w.scan, skip_control=False, path=seg.log_path)
    m = len(offs)
    if not m:
        return row, empty_records(), carry
    batch = np.searchsorted(w.scan.last_offset, offs)  # each record's batch
    is_data = ~w.scan.is_control[batch]
    # first record at offset >= lo with timestamp >= target: where ``lo`` starts, else
    # the first reaching the target (running max), else (rare) searched on from ``lo``
    k = np.searchsorted(offs, lo)
    done = k >= m
    done[~done] = ts[k[~done]] >= targets[~done]
    reach = np.searchsorted(np.maximum.accumulate(ts), targets)
    later = ~done & (reach >= k)
    k[later] = reach[later]
    for i in np.flatnonzero(~done & ~later).tolist():
        hit = np.flatnonzero(ts[k[i] :] >= targets[i])
        k[i] = k[i] + hit[0] if len(hit) else m
    # its answer: that record, or after a marker the next data record
    nxt = np.full(m + 1, m, dtype=np.int64)
    nxt[:m][is_data] = np.flatnonzero(is_data)
    nxt = np.minimum.accumulate(nxt[::-1])[::-1]
    answer = nxt[k]
    carry[(k < m) & (answer >= m)] = NO_TIMESTAMP
    found = np.flatnonzero(answer < m)
    if not len(found):
        return row, empty_records(), carry
    keep = np.zeros(len(w.scan), bool)
    keep[batch[answer[found]]] = True
    records = w.decode(keep, path=seg.log_path)
    row[found] = np.searchsorted(records.column("offset").to_numpy(), offs[answer[found]])
    return row, records, carry


def read_offsets(seg: LogSegment, targets: np.ndarray) -> pa.Table:
    """Records at ``targets`` (offsets of ``seg``); missing ones left out:
    :func:`read_offsets_many` of one segment."""
    return read_offsets_many([(seg, targets)])[0]


def read_offsets_many(parts: list[tuple[LogSegment, np.ndarray]]) -> list[pa.Table]:
    """For each ``(segment, targets)`` of ``parts``, the records at those offsets (missing
    ones left out), in offset order; all parts' reads planned, their records picked and
    decoded together (one call each). The first part's error (in order) is raised.

    Targets whose index intervals touch share one ranged read of
    ``[floor(lo), next_entry(hi)) + header`` and, only if needed, the batch after it.
    Only the batches holding targets are decoded.
    """
    wanted = [np.unique(np.asarray(t, dtype=np.int64)) for _, t in parts]
    reqs = [offset_request(seg, t) for (seg, _), t in zip(parts, wanted, strict=True) if len(t)]
    if not reqs:
        return [empty_records() for _ in parts]
    gather = Gather()
    plan_requests(reqs, gather)
    for r in reqs:
        if r.error is not None:
            raise r.error
    ids = np.concatenate([r.ids for r in reqs if r.ids is not None])  # set by plan_requests
    targets = np.concatenate([r.lo for r in reqs])
    rec, _ = gather.pick(ids, targets, targets, np.zeros(len(targets), bool))
    assert gather.records is not None  # walked
    hit = rec >= 0
    rec[hit] = np.where(gather.records.offset[rec[hit]] == targets[hit], rec[hit], -1)
    table, row = gather.decode(rec)  # exactly the targets (no next record)
    out, at = [], 0
    for t in wanted:
        mine = row[at : at + len(t)]
        out.append(table.take(pa.array(mine[mine >= 0])) if len(t) else empty_records())
        at += len(t)
    return out


def resolve_timestamps(
    seg: LogSegment, targets: np.ndarray, *, min_offset: int | None = None
) -> tuple[np.ndarray, pa.Table]:
    """For each target timestamp (>= 0), the record of ``seg`` a fetch from its
    offsetsForTimes returns: the first with timestamp >= it, or where that is a
    transaction marker (as Kafka's ListOffsets answers it), the next data record.

    Returns ``(row, records)``: ``records`` holds the answers, ``row[i]`` the row of
    target ``i``'s answer in it, -1 when ``seg`` has none (look in the next segment).
    All targets are placed by the time index at once; targets whose ranges touch share
    the reads; the batches holding answers are decoded in one call.
    """
    targets = np.asarray(targets, dtype=np.int64)
    lo = seg.base_offset if min_offset is None else max(min_offset, seg.base_offset)
    req = time_request(seg, targets, lo)
    gather = _planned(req)
    assert req.ids is not None  # set by plan_requests
    picks, is_ts = req.picks()
    record, _ = gather.pick(req.ids, picks, np.full(len(picks), lo, np.int64), is_ts)
    table, answer = gather.decode(record)
    left = np.flatnonzero(answer < 0)  # the index could not place them: scan
    if not len(left):
        return answer, table
    row, scanned, _ = scan_times(seg, targets[left], lo)
    answer[left[row >= 0]] = row[row >= 0] + table.num_rows
    return answer, pa.concat_tables([table, scanned])


def _planned(req: Request) -> Gather:
    """The reads of one segment's request planned (its error raised): the answer
    batches gathered, to be walked and picked at once (:meth:`Gather.pick`)."""
    gather = Gather()
    plan_requests([req], gather)
    if req.error is not None:
        raise req.error
    return gather
