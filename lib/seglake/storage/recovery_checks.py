"""The checks recovery runs on a segment's batch scan (:mod:`seglake.storage.recovery`):
the valid prefix of the batches, whether an existing ``.index`` / ``.timeindex`` is safe
for them, the aborted transactions of the ABORT markers (Kafka's producer-state walk),
the codec and timestamps of what is kept."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError, SegmentNotFoundError
from seglake.format import INT32_MAX
from seglake.record.batch import BatchScan
from seglake.record.codecs import NAMES as CODEC_NAMES
from seglake.record.control import parse_control_record
from seglake.record.reader import decode_batches, record_times
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.tail_minima import batch_minima, tail_minima
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import AbortedTxn

__all__ = [
    "aborted_txns",
    "codec_name",
    "offset_index_problem",
    "read_optional",
    "segment_timestamps",
    "time_index_problem",
    "valid_prefix",
]

log = logging.getLogger("seglake.storage.recovery")


def valid_prefix(scan: BatchScan, base_offset: int) -> tuple[int, str | None]:
    """Batches whose offsets go forward and fit a segment of ``base_offset``; beyond the
    structural checks of :func:`scan_batches` (Kafka's offset index append would fail)."""
    if not len(scan):
        return 0, None
    base, last = scan.base_offset, scan.last_offset
    bad = (base < base_offset) | (last - base_offset > INT32_MAX)
    bad[1:] |= base[1:] <= last[:-1]
    hits = np.flatnonzero(bad)
    if not len(hits):
        return len(scan), None
    i = int(hits[0])
    prev = int(last[i - 1]) if i else base_offset - 1
    return i, (
        f"position {int(scan.position[i])}: batch offsets {int(base[i])}..{int(last[i])} "
        f"do not follow {prev} in a segment of base offset {base_offset}"
    )


def offset_index_problem(oi: OffsetIndex, scan: BatchScan) -> str | None:
    """Why ``oi`` could send a lookup past the batch it wants (``None``: it is valid).

    An entry (o, p) is safe when a batch starts at p and that batch's base offset <= o:
    every offset >= o then lies at or after p."""
    try:
        oi.sanity_check()
    except CorruptRecordError as exc:
        return str(exc)
    if not len(oi):
        return None
    pos = (
        oi.positions.astype(np.int64)
        if hasattr(oi.positions, "astype")
        else np.asarray(oi.positions, np.int64)
    )
    offs = np.asarray(oi.offsets, np.int64)
    i = np.searchsorted(scan.position, pos)
    hit = (
        (i < len(scan)) & (scan.position[np.minimum(i, max(len(scan) - 1, 0))] == pos)
        if len(scan)
        else np.zeros(len(pos), bool)
    )
    if not hit.all():
        k = int(np.argmin(hit))
        return (
            f"entry {k} (offset {int(offs[k])}, position {int(pos[k])}) does not point "
            "at the start of a batch"
        )
    below = scan.base_offset[i] > offs
    if below.any():
        k = int(np.argmax(below))
        return (
            f"entry {k} (offset {int(offs[k])}) points at a batch starting at offset "
            f"{int(scan.base_offset[i[k]])}"
        )
    return None


def time_index_problem(
    ti: TimeIndex, scan: BatchScan, base_offset: int, next_offset: int
) -> str | None:
    """Why ``ti`` could skip a record (``None``: valid). An entry (t, o) is safe when no
    batch before the one holding o has a larger max timestamp than t."""
    try:
        ti.sanity_check()
    except CorruptRecordError as exc:
        return str(exc)
    if not len(ti):
        return None
    ts = np.asarray(ti.timestamps, np.int64)
    offs = np.asarray(ti.offsets, np.int64)
    out = (offs < base_offset) | (offs >= max(next_offset, base_offset + 1))
    if out.any():
        k = int(np.argmax(out))
        return f"entry {k} (offset {int(offs[k])}) is outside the log's offsets"
    if not len(scan):
        return None
    run = np.maximum.accumulate(scan.max_timestamp)
    j = np.searchsorted(scan.last_offset, offs, side="left")  # batch holding (or after) o
    before = np.where(j > 0, run[np.maximum(j - 1, 0)], -1)
    bad = before > ts
    if bad.any():
        k = int(np.argmax(bad))
        return (
            f"entry {k} ({int(ts[k])}, offset {int(offs[k])}) skips earlier batches with "
            f"timestamp up to {int(before[k])}"
        )
    return None


def aborted_txns(
    buf: bytes,
    scan: BatchScan,
    state: dict[int, int],
    known: dict[tuple[int, int], int],
    base_offset: int,
    path: str,
) -> list[AbortedTxn]:
    """Kafka's producer-state walk: ``state`` maps producer id -> first offset of its open
    transaction (updated in place, so a partition's segments chain). An ABORT marker
    closes it into an :class:`AbortedTxn`; lastStableOffset = first offset of the earliest
    other open transaction, else marker offset + 1."""
    txn = np.flatnonzero(scan.is_transactional)
    if not len(txn):
        return []
    control = scan.is_control
    kinds: dict[int, bool] = {}  # batch -> is abort
    ctrl = txn[control[txn]]
    if len(ctrl):
        try:
            recs = decode_batches(buf, scan.take(ctrl), skip_control=False, path=path)
            for k, (key, value) in enumerate(
                zip(recs.column("key").to_pylist(), recs.column("value").to_pylist(), strict=True)
            ):
                kinds[int(ctrl[k])] = parse_control_record(key, value).is_abort
        except CorruptRecordError as exc:
            log.warning(
                "%s: control records do not decode (%s); txnindex from markers that do", path, exc
            )
    out: list[AbortedTxn] = []
    for b in txn.tolist():
        pid = int(scan.producer_id[b])
        if not control[b]:
            state.setdefault(pid, int(scan.base_offset[b]))
            continue
        if b not in kinds:
            continue
        marker = int(scan.base_offset[b])
        first = state.pop(pid, None)
        if kinds[b]:
            if first is None:  # began before what was scanned: keep the index's word
                first = known.get((pid, marker), base_offset)
            lso = min(state.values(), default=marker + 1)
            out.append(AbortedTxn(pid, first, marker, lso))
    return out


def codec_name(scan: BatchScan) -> str:
    data = scan.codec[~scan.is_control] if (~scan.is_control).any() else scan.codec
    return codecs_name(CODEC_NAMES.get(int(c), f"codec{int(c)}") for c in np.unique(data))


def codecs_name(codecs: Iterable[str]) -> str:
    """A segment's ``codec`` from its batches' (or its parts') codecs: the one they
    share, ``none`` without any, else ``mixed``."""
    names = set(codecs)
    if not names:
        return "none"
    return names.pop() if len(names) == 1 else "mixed"


def segment_timestamps(
    buf: bytes, scan: BatchScan, path: str
) -> tuple[int, list[dict[str, Any]] | None]:
    """The smallest record timestamp (-1: none) and the tail minima of the kept batches
    (None, and the smallest batch base timestamp, when records do not decode)."""
    if not len(scan):
        return -1, []
    try:  # the walk checks each batch holds the records its header counts
        _, ts = record_times(buf, scan, skip_control=False, path=path)
    except CorruptRecordError:
        return int(scan.base_timestamp.min()), None
    tail = tail_minima(
        scan.base_offset, scan.position, batch_minima(ts, scan.records_count), scan.valid_bytes
    )
    return (int(ts.min()) if len(ts) else -1), tail


def read_optional(fs: pafs.FileSystem, path: str, limit: int | None = None) -> bytes | None:
    """The file at ``path`` (``None`` if missing); with ``limit``, at most its first
    ``limit`` bytes (an index beside a log: ``IndexBuffer.read_limit``)."""
    try:
        if limit is not None:
            return lakefs.read_head(fs, path, limit)[0]
        return lakefs.read_all(fs, path)
    except SegmentNotFoundError:
        return None
