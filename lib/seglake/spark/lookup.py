"""Job 2, lookup: answer millions of ``(topic, partition, offset | timestamp)`` queries.

    driver:    read the catalog once (pinned version) -> per (topic, partition) sorted
               numpy arrays (base_offset, next_offset, max_timestamp, path, size, run_id),
               broadcast
    pass 1:    mapInArrow: numpy.searchsorted maps each query to its segment
               (offset: floor on base_offset; timestamp: first segment whose running-max
               max_timestamp >= target); repartition + sort by (topic, partition, segment)
    pass 2:    mapInArrow: per segment, open it through the per-worker index cache, look
               all its targets up at once (OffsetIndex/TimeIndex.lookup_many), read only the
               index intervals and batches holding answers

Every query gets exactly one output row: the Kafka source columns of the record found
(for a timestamp, the first record with timestamp >= it, as ``offsetsForTimes``), plus
``query_offset``, ``query_timestamp`` and ``status``:

    ok                       record returned
    offset_out_of_range      offset < log start offset or >= log end offset
    no_record_at_offset      inside the log, but no data record there (control/compacted)
    no_record_for_timestamp  no record with timestamp >= target
    log_end_offset           timestamp -1 (latest): ``offset`` is the log end offset
    unknown_partition        no committed segment for (topic, partition)
    invalid_query            neither/both of offset and timestamp, or a timestamp < -3
    read_error               the segment could not be read (logged on the executor)

The pure functions :func:`read_offsets` and :func:`resolve_timestamps` are what the
executors run; they need no Spark (tests count their bytes in the driver process).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.catalog import Catalog
from seglake.record.batch import HEADER_SIZE, LOG_OVERHEAD
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, RECORD_SCHEMA, empty_records
from seglake.storage.index_cache import get_cache
from seglake.storage.segment import LogSegment

log = logging.getLogger(__name__)

EARLIEST, LATEST, MAX_TS = -2, -1, -3

LOOKUP_SCHEMA = pa.schema(list(KAFKA_SOURCE_SCHEMA) + [
    pa.field("query_offset", pa.int64()),
    pa.field("query_timestamp", pa.int64()),
    pa.field("status", pa.string()),
])
_KEYED_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("query_offset", pa.int64()), pa.field("query_timestamp", pa.int64()),
    pa.field("_seg", pa.int32()),
])

__all__ = ["LOOKUP_SCHEMA", "lookup", "partition_arrays", "read_offsets", "resolve_timestamps"]


# --------------------------------------------------------------------- pure read functions
def read_offsets(seg: LogSegment, targets: np.ndarray) -> pa.Table:
    """Records at ``targets`` (sorted, unique offsets of ``seg``); missing ones left out.

    Targets are grouped by offset-index interval; each group costs one ranged read of
    ``[floor(lo), next_entry(hi)) + header`` and, only if needed, the batch after it.
    Only the batches holding targets are decoded.
    """
    targets = np.unique(np.asarray(targets, dtype=np.int64))
    if not len(targets):
        return empty_records()
    oi = seg.offset_index
    _, start = oi.lookup_many(targets)
    nxt = np.searchsorted(oi.offsets, targets, side="right")
    parts = []
    for s in np.unique(np.stack([start, nxt], axis=1), axis=0):
        sel = targets[(start == s[0]) & (nxt == s[1])]
        w = seg._span(int(sel[0]), int(sel[-1]))
        if not len(w.scan):
            continue
        b = np.searchsorted(w.scan.last_offset, sel, side="left")
        inside = b < len(w.scan)
        inside[inside] &= w.scan.base_offset[b[inside]] <= sel[inside]
        if not inside.any():
            continue
        batches = np.unique(b[inside])
        t = w.decode(batches, path=seg.log_path)
        parts.append(t.filter(pc.is_in(t.column("offset"), pa.array(sel[inside]))))
    return pa.concat_tables(parts) if parts else empty_records()


def resolve_timestamps(seg: LogSegment, targets: np.ndarray, *, min_offset: int | None = None
                       ) -> tuple[np.ndarray, pa.Table]:
    """For each target timestamp (>= 0), the first record of ``seg`` with timestamp >= it.

    Returns ``(row, records)``: ``records`` holds the answers, ``row[i]`` the row of
    target ``i``'s answer in it, -1 when ``seg`` has none (look in the next segment).

    All targets are looked up at once in the time index (strict floor, exact under
    non-monotonic timestamps) and then the offset index; targets sharing a start position
    share the reads, which walk one index interval at a time.
    """
    targets = np.asarray(targets, dtype=np.int64)
    lo = seg.base_offset if min_offset is None else max(min_offset, seg.base_offset)
    row = np.full(len(targets), -1, dtype=np.int64)
    if not len(targets):
        return row, empty_records()
    ts_e, off_e = seg.time_index.lookup_many(targets, strict=True)
    from_off = np.maximum(np.where(ts_e >= 0, off_e, seg.base_offset), lo)
    _, pos = seg.offset_index.lookup_many(from_off)
    pos = np.where(from_off > seg.base_offset, pos, 0)
    oi_pos = seg.offset_index.positions
    windows: dict[int, object] = {}
    decoded: dict[int, pa.Table] = {}
    found: list[pa.Table] = []
    n_found = 0

    def chunk(p: int):
        w = windows.get(p)
        if w is None:
            i = int(np.searchsorted(oi_pos, p, side="right"))
            end = int(oi_pos[i]) if i < len(oi_pos) else seg.size
            w = seg.window(p, end)
            if not len(w.scan):  # a batch larger than the interval: read it whole
                head = seg.window(p, p + HEADER_SIZE, verify_crc=False).data
                if len(head) >= HEADER_SIZE:
                    w = seg.window(p, p + int.from_bytes(head[8:12], "big", signed=True)
                                   + LOG_OVERHEAD)
            windows[p] = w
        return w

    order = np.argsort(targets, kind="stable")
    for k in order:
        t, p = int(targets[k]), int(pos[k])
        while p < seg.size:
            w = chunk(p)
            if not len(w.scan):
                break
            hits = np.flatnonzero((w.scan.max_timestamp >= t) & (w.scan.last_offset >= lo)
                                  & ~w.scan.is_control)
            done = False
            for b in hits:
                bpos = int(w.positions[b])
                recs = decoded.get(bpos)
                if recs is None:
                    recs = decoded[bpos] = w.decode(slice(int(b), int(b) + 1),
                                                    path=seg.log_path)
                ts = recs.column("timestamp").to_numpy()
                offs = recs.column("offset").to_numpy()
                ok = np.flatnonzero((ts >= t) & (offs >= lo))
                if len(ok):
                    found.append(recs.slice(int(ok[0]), 1))
                    row[k] = n_found
                    n_found += 1
                    done = True
                    break
            if done:
                break
            p = w.end
    return row, (pa.concat_tables(found) if found else empty_records())


# ------------------------------------------------------------------------- driver side
def partition_arrays(segments: pa.Table) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """Catalog rows -> per (topic, partition) sorted numpy arrays (what is broadcast)."""
    out: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    if not segments.num_rows:
        return out
    cols = {c: segments.column(c).to_numpy(zero_copy_only=False)
            for c in ("topic", "partition", "base_offset", "next_offset", "max_timestamp",
                      "min_timestamp", "path", "size_bytes", "run_id")}
    keys = list(zip(cols["topic"].tolist(), cols["partition"].tolist(), strict=True))
    groups: dict[tuple[str, int], list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault((str(k[0]), int(k[1])), []).append(i)
    for k, idx in groups.items():
        ix = np.array(idx)
        ix = ix[np.argsort(cols["base_offset"][ix], kind="stable")]
        a = {
            "base_offset": cols["base_offset"][ix].astype(np.int64),
            "next_offset": cols["next_offset"][ix].astype(np.int64),
            "max_timestamp": cols["max_timestamp"][ix].astype(np.int64),
            "min_timestamp": cols["min_timestamp"][ix].astype(np.int64),
            "path": cols["path"][ix].astype(object),
            "size": cols["size_bytes"][ix].astype(np.int64),
            "run_id": cols["run_id"][ix].astype(object),
        }
        a["running_max"] = np.maximum.accumulate(a["max_timestamp"])
        out[k] = a
    return out


def _segment_for(a: dict[str, np.ndarray], off: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Segment index of each query (-1: answered without a segment / no segment)."""
    n = len(a["base_offset"])
    seg = np.full(len(off), -1, dtype=np.int64)
    is_off = off >= 0
    if is_off.any():
        seg[is_off] = np.searchsorted(a["base_offset"], off[is_off], side="right") - 1
    is_ts = ~is_off & (ts >= 0)
    if is_ts.any():
        s = np.searchsorted(a["running_max"], ts[is_ts], side="left")
        seg[is_ts] = np.where(s < n, s, -1)
    seg[~is_off & (ts == EARLIEST)] = 0
    seg[~is_off & (ts == MAX_TS)] = int(np.argmax(a["max_timestamp"])) if n else -1
    return seg


def _normalize_queries(df):
    """topic, partition, query_offset, query_timestamp (ms) from the query DataFrame."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType, TimestampNTZType

    cols = set(df.columns)
    off = F.col("offset").cast("bigint") if "offset" in cols else F.lit(None).cast("bigint")
    if "timestamp" in cols:
        dt = df.schema["timestamp"].dataType
        if isinstance(dt, (TimestampType, TimestampNTZType)):
            ts = (F.unix_micros(F.col("timestamp").cast("timestamp")) / 1000).cast("bigint")
        else:
            ts = F.col("timestamp").cast("bigint")
    else:
        ts = F.lit(None).cast("bigint")
    return df.select(F.col("topic").cast("string").alias("topic"),
                     F.col("partition").cast("int").alias("partition"),
                     off.alias("query_offset"), ts.alias("query_timestamp"))


def lookup(spark, root: str, queries_df, *, version: int | None = None,
           cache_bytes: int | None = None, num_tasks: int | None = None):
    """Answer point queries; one output row (schema :data:`LOOKUP_SCHEMA`) per query.

    Args:
        spark: the session.
        root: lake root.
        queries_df: columns ``topic``, ``partition`` and ``offset`` and/or ``timestamp``
            (epoch ms, or a Spark timestamp; -2 earliest, -1 latest, -3 max timestamp).
            Per row exactly one of offset/timestamp is non-null.
        version: catalog version to read (default: the current one, pinned).
        cache_bytes: ``seglake.index.cache.bytes`` for the executors' index cache.
        num_tasks: partitions of the grouped queries (default: Spark's shuffle partitions).
    """
    from pyspark.sql import functions as F

    from seglake.config import LogConfig
    from seglake.spark.extract import spark_ddl

    catalog = Catalog(root)
    version = catalog.version() if version is None else version
    arrays = partition_arrays(catalog.segments(version=version))
    bc = spark.sparkContext.broadcast(arrays)
    cache_bytes = LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes

    def key(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = bc.value
        for b in batches:
            seg = np.full(b.num_rows, -1, dtype=np.int32)
            topics = b.column(0).to_numpy(zero_copy_only=False)
            partn = b.column(1).to_numpy(zero_copy_only=False)
            off = b.column(2).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            ts = b.column(3).fill_null(-9).to_numpy(zero_copy_only=False).astype(np.int64)
            for k, idx in _groups(topics, partn):
                a = parts.get(k)
                if a is not None:
                    seg[idx] = _segment_for(a, off[idx], ts[idx])
            yield pa.RecordBatch.from_arrays(list(b.columns) + [pa.array(seg, pa.int32())],
                                             schema=_KEYED_SCHEMA)

    def answer(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = bc.value
        cache = get_cache(cache_bytes)
        for b in batches:
            if b.num_rows:
                yield from _answer_batch(root, parts, cache, b).to_batches()

    q = _normalize_queries(queries_df)
    keyed = q.mapInArrow(key, spark_ddl(_KEYED_SCHEMA))
    n = num_tasks or int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
    grouped = (keyed.repartition(n, "topic", "partition", "_seg")
               .sortWithinPartitions("topic", "partition", "_seg", "query_offset",
                                     "query_timestamp"))
    return grouped.mapInArrow(answer, spark_ddl(LOOKUP_SCHEMA))


def _groups(topics: np.ndarray, parts: np.ndarray) -> list[tuple[tuple[str, int], np.ndarray]]:
    out: dict[tuple[str, int], list[int]] = {}
    for i, (t, p) in enumerate(zip(topics.tolist(), parts.tolist(), strict=True)):
        out.setdefault((t, p), []).append(i)
    return [(k, np.array(v, dtype=np.int64)) for k, v in out.items()]


def _answer_batch(root: str, parts: dict, cache, b: pa.RecordBatch) -> pa.Table:
    n = b.num_rows
    topics = b.column(0).to_numpy(zero_copy_only=False)
    partn = b.column(1).to_numpy(zero_copy_only=False)
    q_off_col, q_ts_col = b.column(2), b.column(3)
    off = q_off_col.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    has_off = q_off_col.is_valid().to_numpy(zero_copy_only=False)
    ts = q_ts_col.fill_null(-9).to_numpy(zero_copy_only=False).astype(np.int64)
    has_ts = q_ts_col.is_valid().to_numpy(zero_copy_only=False)
    segs = b.column(4).to_numpy(zero_copy_only=False).astype(np.int64)

    status = np.full(n, "ok", dtype=object)
    resolved = np.full(n, -1, dtype=np.int64)  # offsets for log_end_offset answers
    rec_row = np.full(n, -1, dtype=np.int64)
    found: list[pa.Table] = []
    n_found = 0

    def add(table: pa.Table, qidx: np.ndarray) -> None:
        nonlocal n_found
        rec_row[qidx] = np.arange(n_found, n_found + len(qidx))
        found.append(table)
        n_found += len(qidx)

    invalid = (has_off == has_ts) | (has_off & (off < 0)) | (has_ts & (ts < MAX_TS))
    status[invalid] = "invalid_query"
    for k, idx in _groups(topics, partn):
        a = parts.get(k)
        if a is None:
            status[idx[~invalid[idx]]] = "unknown_partition"
            continue
        log_start, leo = int(a["base_offset"][0]), int(a["next_offset"][-1])
        # offset queries (and -2 earliest, as the log start offset)
        q_o = idx[~invalid[idx] & has_off[idx]]
        out_of_range = (off[q_o] < log_start) | (off[q_o] >= leo)
        status[q_o[out_of_range]] = "offset_out_of_range"
        targets = off.copy()
        early = idx[~invalid[idx] & has_ts[idx] & (ts[idx] == EARLIEST)]
        targets[early] = log_start
        if log_start >= leo:
            status[early] = "no_record_at_offset"
            early = early[:0]
        latest = idx[~invalid[idx] & has_ts[idx] & (ts[idx] == LATEST)]
        status[latest] = "log_end_offset"
        resolved[latest] = leo
        by_off = np.concatenate([q_o[~out_of_range], early])
        by_ts = idx[~invalid[idx] & has_ts[idx] & ((ts[idx] >= 0) | (ts[idx] == MAX_TS))]
        ts_target = ts.copy()
        if len(by_ts):
            m = by_ts[ts[by_ts] == MAX_TS]
            ts_target[m] = int(a["max_timestamp"].max())
            if ts_target[m[:1]].size and ts_target[m[0]] < 0:
                status[m] = "no_record_for_timestamp"
                by_ts = by_ts[ts[by_ts] != MAX_TS]
        # offset queries: per segment, all at once
        if len(by_off):
            s_of = np.searchsorted(a["base_offset"], targets[by_off], side="right") - 1
            for s in np.unique(s_of):
                qi = by_off[s_of == s]
                try:
                    seg = _open(cache, root, a, int(s))
                    recs = read_offsets(seg, targets[qi])
                except Exception as exc:  # never fail the job on one segment
                    log.warning("lookup %s-%s segment %s: %s", k[0], k[1], a["path"][s], exc)
                    status[qi] = "read_error"
                    continue
                roffs = recs.column("offset").to_numpy()
                at = np.searchsorted(roffs, targets[qi])
                hit = at < len(roffs)
                hit[hit] &= roffs[at[hit]] == targets[qi][hit]
                status[qi[~hit]] = "no_record_at_offset"
                if hit.any():
                    add(recs.take(pa.array(at[hit])), qi[hit])
        # timestamp queries: first segment with running max >= target, then onwards
        if len(by_ts):
            nseg = len(a["base_offset"])
            s_of = np.searchsorted(a["running_max"], ts_target[by_ts], side="left")
            m = ts[by_ts] == MAX_TS
            s_of[m] = int(np.argmax(a["max_timestamp"]))
            status[by_ts[s_of >= nseg]] = "no_record_for_timestamp"
            pending = by_ts[s_of < nseg]
            s_of = s_of[s_of < nseg]
            while len(pending):
                s = int(s_of.min())
                here = s_of == s
                qi = pending[here]
                try:
                    seg = _open(cache, root, a, s)
                    rows, recs = resolve_timestamps(seg, ts_target[qi], min_offset=log_start)
                except Exception as exc:
                    log.warning("lookup %s-%s segment %s: %s", k[0], k[1], a["path"][s], exc)
                    status[qi] = "read_error"
                    rows, recs = np.full(len(qi), -2), empty_records()
                ok = rows >= 0
                if ok.any():
                    add(recs.take(pa.array(rows[ok])), qi[ok])
                # not in this segment: try the next one (rare: control batches only)
                again = rows == -1
                nxt_q = qi[again]
                if s + 1 >= nseg:
                    status[nxt_q] = "no_record_for_timestamp"
                    nxt_q = nxt_q[:0]
                pending = np.concatenate([pending[~here], nxt_q])
                s_of = np.concatenate([s_of[~here], np.full(len(nxt_q), s + 1)])
    return _assemble(b, status, resolved, rec_row, found)


def _open(cache, root: str, a: dict[str, np.ndarray], s: int) -> LogSegment:
    return cache.segment(root, str(a["path"][s]), size=int(a["size"][s]),
                         next_offset=int(a["next_offset"][s]),
                         max_timestamp=int(a["max_timestamp"][s]),
                         run_id=a["run_id"][s] or None)


def _assemble(b: pa.RecordBatch, status: np.ndarray, resolved: np.ndarray,
              rec_row: np.ndarray, found: list[pa.Table]) -> pa.Table:
    recs = pa.concat_tables(found) if found else empty_records()
    recs = recs.select(RECORD_SCHEMA.names)
    idx = pa.array(rec_row, mask=rec_row < 0)
    t = recs.take(idx)
    ts_us = pc.multiply(t.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
    offset = np.where(rec_row >= 0, t.column("offset").fill_null(-1).to_numpy(), resolved)
    headers = t.column("headers").cast(KAFKA_SOURCE_SCHEMA.field("headers").type)
    return pa.Table.from_arrays([
        t.column("key"), t.column("value"), b.column(0), b.column(1),
        pa.array(offset, mask=offset < 0), ts_us, t.column("timestamp_type"), headers,
        b.column(2), b.column(3), pa.array(status.tolist(), pa.string()),
    ], schema=LOOKUP_SCHEMA)
