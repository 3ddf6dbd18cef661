"""The lookup's plan (no Spark), its :class:`~seglake.lake.scan.Scan`: a
:class:`~seglake.lake.snapshot.Snapshot`'s partitions as sorted numpy arrays
(:func:`partition_arrays`, what the lookup job broadcasts) and each query's segment in
them (:func:`segment_for`, by :class:`~seglake.storage.log_segments.LogSegments`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.lake.snapshot import Snapshot, TopicPartition
from seglake.storage.log_segments import NONE, LogSegments

__all__ = ["EARLIEST", "LATEST", "MAX_TS", "groups", "partition_arrays", "segment_for"]

EARLIEST, LATEST, MAX_TS = -2, -1, -3  # special query timestamps

# array name -> catalog column, dtype
_COLUMNS = {
    "base_offset": ("base_offset", np.int64),
    "next_offset": ("next_offset", np.int64),
    "max_timestamp": ("max_timestamp", np.int64),
    "min_timestamp": ("min_timestamp", np.int64),
    "path": ("path", object),
    "size": ("size_bytes", np.int64),
    "run_id": ("run_id", object),
}


def partition_arrays(snapshot: Snapshot) -> dict[TopicPartition, dict[str, np.ndarray]]:
    """``snapshot``'s rows -> per (topic, partition) numpy arrays sorted by base offset,
    with their ``segments`` (:class:`LogSegments`): what is broadcast."""
    if not snapshot.rows:
        return {}
    tables = list(snapshot.rows.values())
    rows = pa.concat_tables(tables)  # one conversion per column, not per partition
    cols = {
        name: rows.column(c).to_numpy(zero_copy_only=False).astype(dtype)
        for name, (c, dtype) in _COLUMNS.items()
    }
    cols["index_interval_bytes"] = (  # 0: not recorded (an older row)
        rows.column("index_interval_bytes").fill_null(0).to_numpy().astype(np.int64)
        if "index_interval_bytes" in rows.column_names
        else np.zeros(rows.num_rows, dtype=np.int64)
    )
    bounds = np.cumsum([0, *(t.num_rows for t in tables)]).tolist()
    out: dict[TopicPartition, dict[str, np.ndarray]] = {}
    for tp, lo, hi in zip(snapshot.rows, bounds[:-1], bounds[1:], strict=True):
        ix = lo + np.argsort(cols["base_offset"][lo:hi], kind="stable")
        a = {name: col[ix] for name, col in cols.items()}
        a["segments"] = LogSegments(a["base_offset"], a["max_timestamp"])
        out[tp] = a
    return out


def segment_for(
    a: dict[str, np.ndarray], off: np.ndarray, ts: np.ndarray | None = None
) -> np.ndarray:
    """The one segment choice of a point query (the Spark side's grouping and the
    answers alike): each query's segment index in the partition arrays ``a``, by
    :class:`LogSegments` (-1: answered without a segment / no segment). An offset
    (``off >= 0``): the floor segment; else a timestamp (``ts``; ``None``: offsets
    only): the first segment whose largest timestamp reaches it, -2 (earliest) the
    first, -3 (the largest timestamp) the segment holding it."""
    segments: LogSegments = a["segments"]  # type: ignore[assignment]
    seg = np.full(len(off), NONE, dtype=np.int64)
    is_off = off >= 0
    if is_off.any():
        seg[is_off] = segments.floor_many(off[is_off])
    if ts is None:
        return seg
    is_ts = ~is_off & (ts >= 0)
    if is_ts.any():
        seg[is_ts] = segments.for_time_many(ts[is_ts])
    seg[~is_off & (ts == EARLIEST)] = 0
    seg[~is_off & (ts == MAX_TS)] = segments.largest()
    return seg


def groups(
    topics: pa.Array | pa.ChunkedArray, parts: pa.Array | pa.ChunkedArray
) -> list[tuple[tuple[str | None, int | None], np.ndarray]]:
    """Row indices per (topic, partition) (``None`` for nulls), without a loop over rows."""
    if not len(topics):
        return []
    codes = pc.dictionary_encode(topics)
    if isinstance(codes, pa.ChunkedArray):
        codes = codes.combine_chunks()
    names = [*codes.dictionary.to_pylist(), None]
    code = codes.indices.fill_null(len(names) - 1).to_numpy().astype(np.int64)
    part = pc.fill_null(parts, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    null_part = pc.is_null(parts).to_numpy(zero_copy_only=False).astype(np.int64)
    key = (code << 33) | (null_part << 32) | (part & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    uniq, first = np.unique(key[order], return_index=True)
    out = []
    for u, idx in zip(uniq.tolist(), np.split(order, first[1:]), strict=True):
        p = None if (u >> 32) & 1 else int(np.uint32(u & 0xFFFFFFFF).view(np.int32))
        out.append(((names[u >> 33], p), idx))
    return out
