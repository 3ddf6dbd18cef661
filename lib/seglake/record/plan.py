"""Batch planning of :func:`seglake.record.encode.encode_batches`: where batches start.

Batch boundaries follow kafka-python's producer rule (a batch takes records while
61 + their sizes <= ``batch.size``), where a record's size depends on the batch it lands
in: its offset and timestamp deltas, and so its length, are varints relative to the
batch's first record (:class:`RelVarints`). See :func:`plan_exact`. One ``searchsorted``
per batch, everything per record is numpy.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np

from seglake.errors import ConfigError, InputSchemaError, OffsetOrderError
from seglake.format import INT32_MAX
from seglake.record.batch import HEADER_SIZE
from seglake.record.encode_input import first_not_increasing
from seglake.record.varint import zigzag
from seglake.record.varint_columns import vsize_z

__all__ = [
    "RelVarints",
    "check_deltas",
    "check_plan_args",
    "check_starts",
    "plan_batches",
    "plan_exact",
    "rel_varints",
    "rel_varints_for",
]

_CHUNK = 1 << 16  # records per numpy pass: keeps the temporaries in cache


class RelVarints(NamedTuple):
    """Per-record varints that depend on the batch start: zig-zagged values and sizes."""

    z_off: np.ndarray  # offsetDelta
    s_off: np.ndarray
    z_ts: np.ndarray  # timestampDelta
    s_ts: np.ndarray
    z_len: np.ndarray  # length: bytes after the length varint
    s_len: np.ndarray

    @property
    def size(self) -> np.ndarray:
        """Whole encoded size of each record, length varint included (int64)."""
        return cast(np.ndarray, (self.z_len >> np.uint64(1)).view(np.int64) + self.s_len)

    def head(self, k: int) -> RelVarints:
        return RelVarints(*(a[:k] for a in self))

    @staticmethod
    def concat(parts: list[RelVarints]) -> RelVarints:
        if len(parts) == 1:
            return parts[0]
        return RelVarints(*(np.concatenate(arrays) for arrays in zip(*parts, strict=True)))


def rel_varints(
    fixed: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    idx: slice | np.ndarray,
    base_off: np.ndarray | np.integer,
    base_ts: np.ndarray | np.integer,
) -> RelVarints:
    """The start-dependent varints of records ``idx`` in batches whose first record has
    offset ``base_off`` and timestamp ``base_ts`` (one value, or one per record).
    ``fixed``: each record's size without these varints."""
    z_off = ((off[idx] - base_off) << 1).view(np.uint64)  # offset deltas are >= 0
    s_off = vsize_z(z_off)
    z_ts = zigzag(ts[idx] - base_ts)
    s_ts = vsize_z(z_ts)
    body = fixed[idx] + s_off + s_ts
    z_len = (body << 1).view(np.uint64)
    return RelVarints(z_off, s_off, z_ts, s_ts, z_len, vsize_z(z_len))


def rel_varints_for(
    fixed: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    starts: np.ndarray,
    bases: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[RelVarints]:
    """:class:`RelVarints` of all records for the given batch starts, in cache-sized pieces;
    deltas relative to each batch's first record, or to ``bases`` (base offset, base
    timestamp per batch)."""
    n = len(fixed)
    counts = np.diff(np.append(starts, n))
    first_off, first_ts = (off[starts], ts[starts]) if bases is None else bases
    base_off, base_ts = np.repeat(first_off, counts), np.repeat(first_ts, counts)
    return [
        rel_varints(
            fixed, off, ts, slice(a, a + _CHUNK), base_off[a : a + _CHUNK], base_ts[a : a + _CHUNK]
        )
        for a in range(0, n, _CHUNK)
    ]


def check_plan_args(batch_size: int, max_records: int) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch.size={batch_size} must be >= 1")
    if max_records < 0:
        raise ConfigError(f"batch.max.records={max_records} must be >= 0")


def _chain(
    cum: np.ndarray,
    start: int,
    budget: int,
    max_records: int,
    limit_offsets: np.ndarray | None,
    max_batches: int,
    stop_at: int | None = None,
) -> list[int]:
    """Greedy batches over fixed sizes (``cum``: prefix sums, ``cum[0] = 0``) from record
    ``start``: the starts of up to ``max_batches`` batches (or until one ends at or past
    record ``stop_at``), then the end of the last one. One ``searchsorted`` per batch."""
    n = len(cum) - 1
    stop = n if stop_at is None else min(n, stop_at)
    out = [start]
    s = start
    search = cum.searchsorted
    for _ in range(max_batches):
        if s >= stop:
            break
        e = int(search(cum[s] + budget, "right")) - 1
        if e <= s:
            e = s + 1
        if max_records and e - s > max_records:
            e = s + max_records
        if limit_offsets is not None:
            lim = int(limit_offsets.searchsorted(limit_offsets[s] + INT32_MAX, "right"))
            e = min(e, lim)
        out.append(e)
        s = e
    return out


def plan_batches(record_sizes: np.ndarray, *, batch_size: int, max_records: int = 0) -> np.ndarray:
    """Start index of each batch when records of these sizes are appended in order.

    kafka-python's ``DefaultRecordBatchBuilder`` rule: a batch takes the next record
    unless ``61 + (sizes already in it) + size > batch_size`` and it is not empty, so a
    record bigger than ``batch_size`` gets a batch of its own. With ``max_records > 0``
    a batch also holds at most that many records. Cost: one ``searchsorted`` per batch.

    Args:
        record_sizes: encoded size of each record, length varint included (int).
        batch_size: ``batch.size`` in bytes, header included.
        max_records: ``batch.max.records`` (0: no limit).

    Returns:
        int64 array ``[0, ...]`` (empty when there are no records).
    """
    check_plan_args(batch_size, max_records)
    sizes = np.asarray(record_sizes)
    if sizes.ndim != 1 or not (len(sizes) == 0 or np.issubdtype(sizes.dtype, np.integer)):
        raise InputSchemaError(
            f"record_sizes must be a 1-D integer array, got {sizes.dtype} of shape {sizes.shape}"
        )
    sizes = sizes.astype(np.int64, copy=False)
    n = len(sizes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if int(sizes.min()) < 1:
        i = int(np.argmax(sizes < 1))
        raise InputSchemaError(f"record {i}: size {int(sizes[i])} must be >= 1")
    budget = batch_size - HEADER_SIZE
    if max_records == 1 or n == 1 or int((sizes[:-1] + sizes[1:]).min()) > budget:
        return np.arange(n, dtype=np.int64)  # no two neighbours fit: one record per batch
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    return np.array(_chain(cum, 0, budget, max_records, None, n)[:-1], dtype=np.int64)


def plan_exact(
    fixed: np.ndarray, off: np.ndarray, ts: np.ndarray, *, batch_size: int, max_records: int
) -> tuple[np.ndarray, list[RelVarints]]:
    """:func:`plan_batches` with each record's size taken in the batch it lands in
    (its offset and timestamp deltas depend on the batch start), exactly as
    kafka-python's builder measures it. Also returns the records' :class:`RelVarints`, in
    pieces of whole batches, in order.

    Sizes depend on the plan, so the greedy rule cannot run on one size array. This
    guesses sizes (deltas taken from a grid of batches as long as the lower-bound sizes
    allow), walks the greedy chain over them a run of batches at a time, and verifies
    each run with exact sizes in one numpy pass: the verified prefix is kept and the
    first wrong batch is computed exactly. A batch also ends where an offset delta would
    exceed int32. Numpy work goes in cache-sized runs of about ``_CHUNK`` records.
    """
    n = len(fixed)
    budget = batch_size - HEADER_SIZE
    limit = off if int(off[-1]) - int(off[0]) > INT32_MAX else None
    cum = _guessed_sizes(fixed, off, ts, budget, max_records)
    starts: list[int] = []
    pieces: list[RelVarints] = []
    s, run = 0, n
    while s < n:
        chain = _chain(cum, s, budget, max_records, limit, run, s + _CHUNK)
        c = np.array(chain[:-1], dtype=np.int64)
        ends = np.array(chain[1:], dtype=np.int64)
        lens = ends - c
        rel = rel_varints(
            fixed, off, ts, slice(s, chain[-1]), np.repeat(off[c], lens), np.repeat(ts[c], lens)
        )
        total = np.add.reduceat(rel.size, c - s)
        nxt = np.minimum(ends, n - 1)  # the record that did not fit, if any
        closed = (ends >= n) | (
            total + rel_varints(fixed, off, ts, nxt, off[c], ts[c]).size > budget
        )
        if max_records:
            closed |= lens == max_records
        if limit is not None:
            closed |= off[nxt] - off[c] > INT32_MAX
        bad = np.flatnonzero(~(closed & ((total <= budget) | (lens == 1))))
        if not len(bad):
            starts.extend(chain[:-1])
            pieces.append(rel)
            s, run = chain[-1], run * 2
            continue
        f = int(bad[0])  # batches before f are right; f starts right but ends wrong
        starts.extend(chain[: f + 1])
        if f:
            pieces.append(rel.head(chain[f] - s))
        s, rel = _exact_batch(fixed, off, ts, chain[f], int(lens[f]), budget, max_records, limit)
        pieces.append(rel)
        run = max(2 * f, 16)
    return np.array(starts, dtype=np.int64), pieces


def _guessed_sizes(
    fixed: np.ndarray, off: np.ndarray, ts: np.ndarray, budget: int, max_records: int
) -> np.ndarray:
    """:func:`plan_exact`'s guess: the cumulative record sizes (``[0, ...]``, ``n + 1``)
    with deltas taken from a grid of batches of about as many records as fit in one
    (sizes taken as fixed + 3), in cache-sized runs."""
    n = len(fixed)
    period = max(1, min(n, budget * n // (int(fixed.sum()) + 3 * n), max_records or n))
    cum = np.zeros(n + 1, dtype=np.int64)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        base = np.arange(a, b) // period * period
        np.cumsum(
            rel_varints(fixed, off, ts, slice(a, b), off[base], ts[base]).size,
            out=cum[a + 1 : b + 1],
        )
        cum[a + 1 : b + 1] += cum[a]
    return cum


def _exact_batch(
    fixed: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    s: int,
    hint: int,
    budget: int,
    max_records: int,
    limit: np.ndarray | None,
) -> tuple[int, RelVarints]:
    """The batch starting at record ``s``, computed directly over a window of records
    that doubles until the batch ends inside it (``hint``: a guess of its length):
    ``(its end, its records' varints)``."""
    n = len(fixed)
    cap = n if not max_records else min(n, s + max_records)
    if limit is not None:
        cap = min(cap, int(limit.searchsorted(limit[s] + INT32_MAX, "right")))
    width = hint + 16
    while True:
        e = min(cap, s + width)
        rel = rel_varints(fixed, off, ts, slice(s, e), off[s], ts[s])
        k = max(1, int(np.cumsum(rel.size).searchsorted(budget, "right")))
        if k < e - s or e == cap:
            return s + k, rel.head(k)
        width *= 2


def check_deltas(off: np.ndarray, starts: np.ndarray) -> None:
    """Offset deltas inside the given batches must fit int32."""
    last = np.append(starts[1:], len(off)) - 1
    span = off[last] - off[starts]
    if int(span.max()) > INT32_MAX:
        b = int(np.argmax(span > INT32_MAX))
        lo, hi = int(starts[b]), int(last[b])
        i = lo + int(np.argmax(off[lo : hi + 1] - off[lo] > INT32_MAX))
        raise OffsetOrderError(
            f"row {i}: offset {int(off[i])} is {int(off[i]) - int(off[lo])} past the base "
            f"offset {int(off[lo])} of its batch (row {lo}); offset deltas must fit int32"
        )


def check_starts(batch_starts: np.ndarray, n: int) -> np.ndarray:
    s = np.asarray(batch_starts)
    if s.ndim != 1 or not (len(s) == 0 or np.issubdtype(s.dtype, np.integer)):
        raise InputSchemaError(
            f"batch_starts must be a 1-D integer array, got {s.dtype} of shape {s.shape}"
        )
    s = s.astype(np.int64)
    if not len(s) or s[0] != 0:
        raise InputSchemaError(f"batch_starts must begin with 0, got {s[:3].tolist()}")
    i = first_not_increasing(s)
    if i is not None:
        raise InputSchemaError(
            f"batch_starts[{i}] = {int(s[i])} is not greater than "
            f"batch_starts[{i - 1}] = {int(s[i - 1])}"
        )
    if s[-1] >= n:
        raise InputSchemaError(f"batch_starts[-1] = {int(s[-1])} is past the last row ({n - 1})")
    return s
