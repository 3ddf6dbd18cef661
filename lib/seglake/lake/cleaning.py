"""A compaction round of one partition (Kafka's ``LogCleanerManager`` + ``Cleaner.doClean``),
driver and task sides, no Spark.

    first dirty        the partition's cleaner checkpoint (largest ``cleaner_checkpoint``
                       of its rows), reset to the log start if outside the log
    first uncleanable  min(last stable offset, the active (newest) segment's base, the
                       first dirty segment whose largest timestamp is newer than
                       now - min.compaction.lag.ms)
    dirty ratio        bytes of segments in [first dirty, first uncleanable) over bytes of
                       segments in [log start, first uncleanable); cleaned when >=
                       min.cleanable.dirty.ratio, or when a dirty segment's earliest
                       timestamp is older than now - max.compaction.lag.ms
    analysis task      reads the partition (:func:`analyze_partition`): the transaction
                       walk, the offset map of [first dirty, first uncleanable)
    group tasks        every segment below the first uncleanable offset, grouped by
                       ``groupSegmentsBySize``, cleaned into one (:func:`clean_group`);
                       new rows carry ``cleaner_checkpoint`` = first uncleanable offset
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from seglake.config import LogConfig
from seglake.errors import CorruptRecordError
from seglake.lake.handle import LakeHandle
from seglake.lake.rewrite import open_sources, staging_dir
from seglake.lake.rows import segment_row
from seglake.record.batch import BatchScan, scan_batches
from seglake.record.control import ControlType, parse_control_record
from seglake.record.reader import decode_batches
from seglake.storage.clean import CleanRound, CleanStats, clean_segments
from seglake.storage.cleaner import ABORT, COMMIT, EMPTY, OTHER, build_offset_map, walk_partition
from seglake.storage.recovery_checks import aborted_txns

__all__ = ["analyze_partition", "clean_group", "cleanable", "first_dirty_offset"]


def first_dirty_offset(rows: pa.Table) -> int:
    """The partition's cleaner checkpoint, or its log start offset."""
    start = int(rows["base_offset"][0].as_py())
    end = int(rows["next_offset"][-1].as_py())
    ckpt = pa.compute.max(rows["cleaner_checkpoint"]).as_py()
    return start if ckpt is None or not start <= ckpt <= end else int(ckpt)


def _overlapping(base: np.ndarray, nxt: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return (base < hi) & (nxt > lo)


def cleanable(
    rows: pa.Table, cfg: LogConfig, now_ms: int, lso: int | None = None
) -> dict[str, Any]:
    """The round's bounds and whether it is due (``lso``: known last stable offset)."""
    base = rows["base_offset"].to_numpy()
    nxt = rows["next_offset"].to_numpy()
    size = rows["size_bytes"].to_numpy()
    largest = rows["max_timestamp"].to_numpy()
    first_dirty = first_dirty_offset(rows)
    bounds = [int(base[-1])]  # the active segment
    if lso is not None:
        bounds.append(lso)
    dirty = np.flatnonzero(nxt > first_dirty)[:-1]  # non-active segments from first dirty
    if cfg.min_compaction_lag_ms > 0:
        young = dirty[largest[dirty] > now_ms - cfg.min_compaction_lag_ms]
        if len(young):
            bounds.append(int(base[young[0]]))
    first_uncleanable = min(bounds)
    clean_bytes = int(size[_overlapping(base, nxt, -1, first_dirty)].sum())
    dirty_bytes = int(size[_overlapping(base, nxt, first_dirty, first_uncleanable)].sum())
    ratio = dirty_bytes / (clean_bytes + dirty_bytes) if clean_bytes + dirty_bytes else 0.0
    earliest = rows["min_timestamp"].to_numpy()[dirty]
    earliest = earliest[earliest > 0]
    must = bool(len(earliest)) and int(earliest.min()) < now_ms - cfg.max_compaction_lag_ms
    due = first_uncleanable > first_dirty and (ratio >= cfg.min_cleanable_dirty_ratio or must)
    return {
        "first_dirty": first_dirty,
        "first_uncleanable": first_uncleanable,
        "dirty_ratio": ratio,
        "due": due,
    }


def _control_kinds(data: bytes, scan: BatchScan, path: str) -> np.ndarray:
    kinds = np.full(len(scan), OTHER, dtype=np.int64)
    ctrl = np.flatnonzero(scan.is_control)
    kinds[ctrl[scan.records_count[ctrl] == 0]] = EMPTY
    ctrl = ctrl[scan.records_count[ctrl] > 0]
    if len(ctrl):
        recs = decode_batches(data, scan.take(ctrl), skip_control=False, path=path)
        first = np.concatenate([[0], np.cumsum(scan.records_count[ctrl])[:-1]])
        keys, values = recs.column("key").to_pylist(), recs.column("value").to_pylist()
        for b, r in zip(ctrl.tolist(), first.tolist(), strict=True):
            kind = parse_control_record(keys[r], values[r], path=path).type
            kinds[b] = {ControlType.ABORT: ABORT, ControlType.COMMIT: COMMIT}.get(kind, OTHER)
    return kinds


def analyze_partition(
    lake: LakeHandle, rows: list[dict[str, Any]], *, cfg: LogConfig, now_ms: int
) -> tuple[dict[str, Any], CleanRound | None, int]:
    """Task: read the whole partition once; the round's bounds and, if it is due, what
    every group task needs (:class:`CleanRound`). Also returns the bytes read."""
    sources = open_sources(lake, rows)
    cols: dict[str, list[np.ndarray]] = {}
    state: dict[int, int] = {}
    txns = []
    kept = []
    read = 0
    for src in sources:
        path = src.segment.log_path
        data = src.segment.log_bytes()
        read += len(data)
        scan = scan_batches(data)
        if scan.error is not None or scan.valid_bytes != len(data):
            raise CorruptRecordError(
                f"not whole valid batches ({scan.error}); run `recover`",
                path=path,
                position=scan.valid_bytes,
            )
        txns += aborted_txns(data, scan, state, {}, src.segment.base_offset, path)
        for name in ("base_offset", "last_offset", "attributes", "producer_id"):
            cols.setdefault(name, []).append(getattr(scan, name))
        cols.setdefault("producer_epoch", []).append(scan.producer_epoch)
        cols.setdefault("max_timestamp", []).append(scan.max_timestamp)
        cols.setdefault("kind", []).append(_control_kinds(data, scan, path))
        kept.append((data, scan, path))
    c = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    walk = walk_partition(
        c["base_offset"],
        c["last_offset"],
        c["attributes"],
        c["producer_id"],
        c["producer_epoch"],
        c["max_timestamp"],
        c["kind"],
        txns,
        log_end_offset=int(rows[-1]["next_offset"]),
        now_ms=now_ms,
    )
    bounds = cleanable(pa.Table.from_pylist(rows), cfg, now_ms, walk.last_stable_offset)
    if not bounds["due"]:
        return bounds, None, read
    lo, hi = bounds["first_dirty"], bounds["first_uncleanable"]
    map_keys, map_offsets = _offset_map(kept, walk.aborted, lo, hi)
    rnd = CleanRound(
        walk_bases=c["base_offset"],
        walk=walk,
        map_keys=map_keys,
        map_offsets=map_offsets,
        latest_offset=hi - 1,
        upper_bound=hi,
        now_ms=now_ms,
        delete_retention_ms=cfg.delete_retention_ms,
    )
    return bounds, rnd, read


def _offset_map(
    kept: list[tuple[bytes, BatchScan, str]], aborted: np.ndarray, lo: int, hi: int
) -> tuple[pa.Array, np.ndarray]:
    """Kafka's ``buildOffsetMap`` over the dirty section ``[lo, hi)`` of the partition's
    batches (``kept``: each segment's bytes, scan and path; ``aborted``: per batch, in
    that order): data records of batches not aborted, the latest offset of each key."""
    keys, offsets = [], []
    i = 0
    for data, scan, path in kept:
        skip = aborted[i : i + len(scan)]
        i += len(scan)
        take = ~scan.is_control & ~skip & (scan.last_offset >= lo) & (scan.base_offset < hi)
        if not take.any():
            continue
        recs = decode_batches(data, scan.take(np.flatnonzero(take)), path=path)
        off = recs.column("offset").to_numpy()
        sel = (off >= lo) & (off < hi)
        keys.append(recs.column("key").filter(pa.array(sel)))
        offsets.append(off[sel])
    return build_offset_map(
        pa.chunked_array(keys, pa.binary()) if keys else pa.array([], pa.binary()),
        np.concatenate(offsets) if offsets else np.zeros(0, np.int64),
    )


def clean_group(
    lake: LakeHandle,
    run_id: str,
    rows: list[dict[str, Any]],
    rnd: CleanRound,
    *,
    index_interval_bytes: int,
) -> tuple[dict[str, Any], CleanStats]:
    """Task: clean one group into the run's staging; its catalog row and the stats."""
    fs = lake.fs
    topic, partition = rows[0]["topic"], rows[0]["partition"]
    info, stats = clean_segments(
        fs,
        staging_dir(lake, run_id, topic, partition),
        open_sources(lake, rows),
        rnd,
        index_interval_bytes=index_interval_bytes,
    )
    row = segment_row(topic, partition, info, rows[0]["path"])
    row["cleaner_checkpoint"] = rnd.upper_bound
    return row, stats
