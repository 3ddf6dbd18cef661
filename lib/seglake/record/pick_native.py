"""The records queries pick, found by the compiled kernel (``sl_pick``) in one call for
many batches: each batch's records block decompressed (as the record walk does), walked
and checked as ``sl_walk`` checks it, and each query's record taken (the first at or
after its offset; or the first with timestamp >= its target and offset >= its lower
bound), keeping nothing of the other records. The path of
:func:`seglake.record.reader.pick_records`; ``None`` where a batch does not walk in it
(the reader's caller then walks every record, which names any problem)."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from seglake.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, BatchScan
from seglake.record.codecs import MAX_BLOCK_OUTPUT, inflate_budget
from seglake.record.inflate_native import Sources, sources
from seglake.record.native import address, int64s
from seglake.record.walk import MIN_RECORD_SIZE

__all__ = ["Picked", "pick_native"]

Bytes = bytes | bytearray | memoryview


MAX_ROOM = 1 << 20  # the scratch buffer a batch's records block is decoded into (grows)


class Picked(NamedTuple):
    """What ``sl_pick`` found: the picked records' bytes (``data``) and, per query of
    ``order`` (the queries with a batch, by batch), its record's place in ``data``
    (``start``, ``end``; -1: none), offset and timestamp."""

    data: np.ndarray
    order: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray


def _pooled(n: int) -> np.ndarray:
    """``n`` bytes from Arrow's memory pool (reused memory: no page faults)."""
    return np.frombuffer(pa.allocate_buffer(max(n, 1)), np.uint8)


def _sources(scan: BatchScan, views: list[memoryview], one: Bytes | None) -> Sources | None:
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


def pick_native(
    lib: ctypes.CDLL,
    gathered: tuple[BatchScan, list[memoryview], Bytes | None],
    ids: np.ndarray,
    targets: np.ndarray,
    lo: np.ndarray,
    is_ts: np.ndarray,
) -> Picked | None:
    """The record each query picks in the batches of ``gathered`` (``(scan, views, one)``
    of :func:`seglake.record.reader.gathered`): query ``i`` looks in batch ``ids[i]`` (< 0:
    none) for the first record with offset >= ``targets[i]`` or, where ``is_ts[i]``, with
    timestamp >= ``targets[i]`` and offset >= ``lo[i]``. None where a batch does not walk."""
    scan, views, one = gathered
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
    return Picked(picked[: state[0]], order, *out)
