"""The records point reads' queries pick, found by the compiled kernel (``sl_pick``) in one
call for the batches of many windows: each batch's records block decompressed (as the
record walk does), walked and checked as ``sl_walk`` checks it, and each query's record
taken (the first at or after its offset; or the first with timestamp >= its target and
offset >= its lower bound), keeping nothing of the other records. ``None`` (the caller
walks every record the usual way, :meth:`~seglake.storage.point_gather.Gather.walk`,
which names any problem) where there is no kernel or a batch does not walk in it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.record import native
from seglake.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, BatchScan
from seglake.record.codecs import MAX_BLOCK_OUTPUT, inflate_budget
from seglake.record.inflate_native import Sources, sources
from seglake.record.native import address, int64s
from seglake.record.walk import MIN_RECORD_SIZE
from seglake.storage.segment_window import Window
from seglake.storage.window_records import RecordWalk, gathered

__all__ = ["pick_records"]


MAX_ROOM = 1 << 20  # the scratch buffer a batch's records block is decoded into (grows)


def _pooled(n: int) -> np.ndarray:
    """``n`` bytes from Arrow's memory pool (reused memory: no page faults)."""
    return np.frombuffer(pa.allocate_buffer(max(n, 1)), np.uint8)


def _sources(scan: BatchScan, views: list[memoryview], one: bytes | None) -> Sources | None:
    """Where each batch's records block is (after its header); None where the scan does
    not fit its bytes."""
    if (scan.size < HEADER_SIZE).any():
        return None
    if one is None:
        return sources([memoryview(v).cast("B")[HEADER_SIZE:] for v in views])
    data = np.frombuffer(memoryview(one).cast("B"), np.uint8)
    pos, end = scan.position, scan.position + scan.size
    if len(pos) and (int(pos.min()) < 0 or int(end.max()) > len(data)):
        return None
    return sources((data, pos + HEADER_SIZE, end))


def pick_records(
    parts: list[tuple[Window, np.ndarray]],
    ids: np.ndarray,
    targets: np.ndarray,
    lo: np.ndarray,
    is_ts: np.ndarray,
) -> tuple[RecordWalk, np.ndarray] | None:
    """``(walk, record)``: the picked records only (a :class:`RecordWalk` of the batches
    ``sel`` of each ``(window, sel)``, parts one after the other, holding just them) and
    the one each query picks (-1: none in its batch, or ``ids`` < 0). Query ``i`` looks
    in batch ``ids[i]`` for the first record with offset >= ``targets[i]`` or, where
    ``is_ts[i]``, with timestamp >= ``targets[i]`` and offset >= ``lo[i]``."""
    lib = native.kernel()
    if lib is None or not parts:
        return None
    scan, views, one = gathered(parts)
    src = _sources(scan, views, one)
    if src is None:
        return None
    want = np.flatnonzero(ids >= 0)
    order = want[np.argsort(ids[want], kind="stable")]
    q_first = int64s(np.searchsorted(ids[order], np.arange(len(scan) + 1)))
    size = src.length
    rec_cap = max(1, int(scan.records_count.max()))
    rec_cap = min(rec_cap, max(1, int(max(size.max(), MAX_ROOM)) // MIN_RECORD_SIZE))
    out = [np.full(len(order), -1, np.int64) for _ in range(4)]  # start, end, offset, ts
    ok = np.zeros(len(scan), np.uint8)
    codec = int64s(np.where(size > 0, scan.codec, 0))
    arrays = [
        int64s(a)
        for a in (scan.records_count, scan.base_offset, scan.base_timestamp, scan.max_timestamp)
    ]
    log_append = np.ascontiguousarray((scan.attributes & TIMESTAMP_TYPE_BIT) != 0, np.uint8)
    last_delta = int64s(scan.last_offset - scan.base_offset)
    q = [int64s(targets[order]), int64s(lo[order]), np.ascontiguousarray(is_ts[order], np.uint8)]
    recs = np.empty(4 * rec_cap, np.int64)
    scratch = _pooled(MAX_ROOM)
    picked = _pooled(4096 + 1024 * len(order))
    state = np.array([0, inflate_budget(int(size[codec != 0].sum())), 0, 0], np.int64)
    b = 0
    while b < len(scan):
        b = lib.sl_pick(
            len(scan),
            address(src.addr),
            address(size),
            address(codec),
            *(address(a) for a in arrays),
            address(log_append),
            address(last_delta),
            address(q_first),
            *(address(a) for a in q),
            b,
            address(scratch),
            len(scratch),
            address(recs),
            rec_cap,
            address(picked),
            len(picked),
            MAX_BLOCK_OUTPUT,
            address(state),
            *(address(a) for a in out),
            address(ok),
        )
        if state[3] == 1:  # a frame that may need more room than the scratch buffer
            scratch = _pooled(int(state[2]))
        elif state[3] == 2:  # the picked records need more room
            grown = _pooled(max(2 * len(picked), int(state[0] + state[2])))
            grown[: state[0]] = picked[: state[0]]
            picked = grown
    if not ok.all():
        return None
    data = picked[: state[0]]
    q_start, q_end, q_offset, q_ts = out
    found = np.flatnonzero(q_start >= 0)
    batch = ids[order][found]
    # each record once, numbered batch after batch (in data order within a batch)
    keys, first_at, which = np.unique(
        (batch << 40) | q_start[found], return_index=True, return_inverse=True
    )
    picked = found[first_at]
    per_batch = (
        np.bincount(keys >> 40, minlength=len(scan)) if len(keys) else np.zeros(len(scan), np.int64)
    )
    walk = RecordWalk(
        scan,
        np.ones(len(scan), dtype=bool),
        np.concatenate(([0], np.cumsum(per_batch))),
        data,
        q_start[picked],
        q_end[picked],
        q_offset[picked],
        q_ts[picked],
    )
    record = np.full(len(ids), -1, dtype=np.int64)
    record[order[found]] = which.ravel()
    return walk, record
