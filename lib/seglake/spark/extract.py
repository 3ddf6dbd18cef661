"""Job 3, extract: the records of a time (or offset) range, in the Spark Kafka source schema.

    driver:    catalog (one pinned version) -> per partition [start, end) offsets
               offsets mode: offsetsForTimes(start) .. offsetsForTimes(end) (no record
                   >= end: the log end offset), intersected with start/end offsets
               filter mode: segments pruned by catalog min/max timestamp; every record
                   of them with start <= timestamp < end; a segment holding records older
                   than start is entered at its time index's strict floor of start (no
                   record before it can be >= start); CreateTime is not monotonic and
                   Kafka keeps no minimum timestamp, so a segment is read up to the first
                   of its catalog tail minima >= end (seglake.storage.tail_minima), or to
                   its end when they are unknown; past the end time only the records'
                   timestamps are read (min_timestamps) and only batches holding late
                   records are decoded
               -> splits: one per segment, large segments cut at offset-index positions
                  (``split_bytes`` apart), so one partition is read by many tasks
               -> tasks: splits packed into few Spark tasks (as Spark packs small files:
                  about total / parallelism bytes each, at least 4 MiB, at most
                  ``split_bytes``), no shuffle, no DataFrame of splits to ship
    executors: ``spark.range(tasks).mapInArrow``: each task reads its splits, one ranged
               read per split (plus the header and batch after it for the split that ends
               a range), and decodes the batches that overlap, all splits in one call;
               then filters offsets (and timestamps), drops control batches and, under
               read_committed, records of aborted transactions (``.txnindex``)

:func:`read_split` / :func:`read_splits` are the pure functions the executors run (no
Spark).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.errors import ConfigError, CorruptIndexError
from seglake.lake.catalog import Catalog
from seglake.record.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    scan_batches,
)
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, to_kafka_source
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment, Window
from seglake.storage.tail_minima import cutoff
from seglake.storage.txn_index import AbortedTxn, TransactionIndex
from seglake.storage.window_records import (
    NO_TS_HI,
    NO_TS_LO,
    decode_windows,
    min_timestamps,
)

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
MIN_TASK_BYTES = 4 * 1024 * 1024  # Spark's spark.sql.files.openCostInBytes
BROADCAST_SPLITS = 512  # more splits than this go to the tasks as a broadcast

SPLIT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("run_id", pa.string()),
        pa.field("start_pos", pa.int64()),
        pa.field("end_pos", pa.int64()),
        pa.field("extend", pa.bool_()),
        pa.field("lo", pa.int64()),
        pa.field("hi", pa.int64()),
        pa.field("ts_lo", pa.int64()),
        pa.field("ts_hi", pa.int64()),
        pa.field("aborted_pid", pa.list_(pa.int64())),
        pa.field("aborted_first", pa.list_(pa.int64())),
        pa.field("aborted_last", pa.list_(pa.int64())),
    ]
)

__all__ = [
    "ExtractPlan",
    "extract",
    "pack_splits",
    "parse_time",
    "plan_extract",
    "read_split",
    "read_splits",
    "spark_schema",
]


def spark_schema(schema: pa.Schema):
    """The Spark ``StructType`` of an Arrow schema (no DDL for the JVM to parse)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def parse_time(value: str | int | None) -> int | None:
    """Epoch ms from epoch-ms digits or ISO-8601 (no zone = UTC); ``None`` passes."""
    if value is None or isinstance(value, int):
        return value
    s = str(value).strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"time {value!r}: expected ISO-8601 or epoch milliseconds") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


# ------------------------------------------------------------------------ executor side
def read_split(
    cache: IndexCache, root: str, split: dict, *, isolation_level: str = "read_uncommitted"
) -> pa.Table:
    """Records of one split (Kafka source schema): one ranged read of its bytes."""
    return read_splits(cache, root, [split], isolation_level=isolation_level)


def read_splits(
    cache: IndexCache, root: str, splits: list[dict], *, isolation_level: str = "read_uncommitted"
) -> pa.Table:
    """Records of several splits: each read as :func:`read_split` does, the batches of
    all of them walked and decoded together (vectorised over all their batches)."""
    parts = [_split_batches(cache, root, s) for s in splits]
    # a batch whose largest timestamp is >= end may hold nothing older than end: read
    # its timestamps alone before decoding it (the tail of a segment, mostly)
    unsure = [
        (w, np.flatnonzero(keep & (w.scan.max_timestamp >= s["ts_hi"])))
        if s["ts_hi"] < NO_TS_HI
        else (w, np.zeros(0, np.int64))
        for s, (w, keep, _) in zip(splits, parts, strict=True)
    ]
    if any(len(u) for _, u in unsure):
        least, at = min_timestamps(unsure), 0
        for s, (_, u), (_, keep, _) in zip(splits, unsure, parts, strict=True):
            keep[u[least[at : at + len(u)] >= s["ts_hi"]]] = False
            at += len(u)
    table, rows = decode_windows([(w, np.flatnonzero(keep), path) for w, keep, path in parts])
    out, at = [], 0
    for split, n in zip(splits, rows.tolist(), strict=True):
        if n:
            out.append(_split_records(table.slice(at, n), split, isolation_level))
        at += n
    return pa.concat_tables(out) if out else KAFKA_SOURCE_SCHEMA.empty_table()


def _split_batches(cache: IndexCache, root: str, split: dict) -> tuple[Window, np.ndarray, str]:
    """The window of a split and which of its batches may hold records to return."""
    seg = cache.segment(
        root, split["path"], size=split["size"], run_id=split["run_id"], load_indexes=False
    )
    w = _split_window(seg, split["start_pos"], split["end_pos"], split["hi"], split["extend"])
    s = w.scan
    keep = (s.last_offset >= split["lo"]) & (s.base_offset < split["hi"]) & ~s.is_control
    if split["ts_lo"] > NO_TS_LO:
        keep &= s.max_timestamp >= split["ts_lo"]
    return w, keep, seg.log_path


def _split_records(t: pa.Table, split: dict, isolation_level: str) -> pa.Table:
    """Decoded records of a split's batches -> the split's rows (Kafka source schema)."""
    lo, hi, ts_lo, ts_hi = split["lo"], split["hi"], split["ts_lo"], split["ts_hi"]
    off = t.column("offset")
    mask = pc.and_(pc.greater_equal(off, lo), pc.less(off, hi))
    if ts_lo > NO_TS_LO or ts_hi < NO_TS_HI:
        ts = t.column("timestamp")
        mask = pc.and_(mask, pc.and_(pc.greater_equal(ts, ts_lo), pc.less(ts, ts_hi)))
    if isolation_level == "read_committed" and split["aborted_pid"]:
        txn = TransactionIndex()
        for p, f, last in sorted(
            zip(split["aborted_pid"], split["aborted_first"], split["aborted_last"], strict=True),
            key=lambda x: x[2],
        ):
            txn.append(AbortedTxn(p, f, last, last))
        aborted = txn.aborted_mask(off.to_numpy(), t.column("producer_id").to_numpy())
        tx = t.column("transactional").to_numpy(zero_copy_only=False)
        mask = pc.and_(mask, pa.array(~(aborted & tx)))
    return to_kafka_source(t.filter(mask), split["topic"], split["partition"])


def _split_window(seg: LogSegment, start: int, end: int, hi: int, extend: bool) -> Window:
    """The whole batches of ``[start, end)`` (one ranged read); with ``extend``, also the
    batch starting at ``end`` when it may hold offsets below ``hi`` (its header is read
    with the range, the rest only if needed)."""
    size = seg.size
    extend = extend and end < size
    w = seg.window(start, end + HEADER_SIZE if extend else end)
    if w.scan.valid_bytes < min(end, size) - start:
        raise CorruptIndexError(
            f"split [{start}, {end}) does not hold whole batches: {w.scan.error}", path=seg.log_path
        )
    if extend and (not len(w.scan) or int(w.scan.last_offset[-1]) < hi - 1):
        tail = w.data[end - start :]
        if len(tail) >= HEADER_SIZE:
            more = int.from_bytes(tail[8:12], "big", signed=True) + LOG_OVERHEAD
            data = w.data[: end - start] + seg.window(end, end + more, verify_crc=False).data
            w = Window(start, data, scan_batches(data))
    return w


# --------------------------------------------------------------------------- planning
@dataclasses.dataclass
class ExtractPlan:
    """What an extraction will read: the split rows, and the driver's own reads."""

    splits: pa.Table
    catalog_version: int
    segments: int
    planned_bytes: int
    driver_bytes: int
    ranges: dict[tuple[str, int], tuple[int, int]]
    seconds: float
    tail_bytes: int = 0  # planned bytes past the end time: timestamps read, little decoded

    def summary(self) -> str:
        return (
            f"catalog version {self.catalog_version}: {self.segments} segment(s), "
            f"{self.splits.num_rows} split(s), {self.planned_bytes} log bytes planned "
            f"({self.tail_bytes} past the end time), {self.driver_bytes} bytes read by "
            f"the driver to plan ({self.seconds:.2f} s)"
        )


def plan_extract(
    root: str,
    topic: str,
    *,
    partitions=None,
    start: int | str | None = None,
    end: int | str | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    mode: str = "offsets",
    isolation_level: str = "read_uncommitted",
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    version: int | None = None,
    cache: IndexCache | None = None,
    offset_ranges: dict[int, tuple[int, int]] | None = None,
) -> ExtractPlan:
    """The splits of an extraction (see the module docstring); runs on the driver.

    ``offset_ranges``: ``{partition: (start_offset, end_offset)}``, each partition's own
    bounds in place of ``start_offset``/``end_offset`` (and only these partitions): one
    catalog read for a read whose partitions start and end at different offsets.
    """
    if mode not in ("offsets", "filter"):
        raise ConfigError(f"mode {mode!r}: expected 'offsets' or 'filter'")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ConfigError(f"isolation_level {isolation_level!r}")
    start, end = parse_time(start), parse_time(end)
    started = time.time()
    before = lakefs.IO_STATS.snapshot()["bytes_read"]
    cache = cache or get_cache()
    catalog = Catalog(root)
    version = catalog.version() if version is None else version
    if isinstance(partitions, str):
        partitions = [int(p) for p in partitions.split(",") if p.strip()]
    if offset_ranges is not None:
        partitions = sorted(offset_ranges)
    rows = catalog.segments(topic, partitions, version=version)
    fs, base = cache.resolve(root)
    out: list[dict] = []
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    nsegs = tail = 0
    for p in sorted(set(rows.column("partition").to_pylist())):
        prow = rows.filter(pc.equal(rows.column("partition"), p))
        plog = PartitionLog.from_rows(fs, base, prow)
        # share opened segments with the cache (indexes read once per process)
        meta = prow.to_pylist()
        plog.segments = [
            cache.segment(
                root,
                r["path"],
                size=r["size_bytes"],
                next_offset=r["next_offset"],
                max_timestamp=r["max_timestamp"],
                run_id=r["run_id"],
                load_indexes=False,
            )
            for r in meta
        ]
        lso, leo = plog.log_start_offset, plog.log_end_offset
        lo, hi = lso, leo
        ts_lo, ts_hi = NO_TS_LO, NO_TS_HI
        if mode == "offsets":
            if start is not None:
                f = plog.offsets_for_times(start)
                lo = f.offset if f is not None else leo
            if end is not None:
                f = plog.offsets_for_times(end)
                hi = f.offset if f is not None else leo
        else:
            ts_lo = start if start is not None else NO_TS_LO
            ts_hi = end if end is not None else NO_TS_HI
        first_offset, end_offsets = (
            offset_ranges[p] if offset_ranges is not None else (start_offset, end_offset)
        )
        if first_offset is not None:
            lo = max(lo, first_offset)
        if end_offsets is not None:
            hi = min(hi, end_offsets)
        lo, hi = max(lo, lso), min(hi, leo)
        ranges[(topic, p)] = (lo, hi)
        if hi <= lo:
            continue
        chosen: list[tuple[int, int, int]] = []  # (segment, first, end offset)
        for i, r in enumerate(meta):
            if (
                r["next_offset"] <= lo
                or r["base_offset"] >= hi
                or r["next_offset"] == r["base_offset"]
            ):
                continue
            if mode == "filter" and (r["max_timestamp"] < ts_lo or r["min_timestamp"] >= ts_hi):
                continue
            first, last = lo, hi
            if ts_lo > r["min_timestamp"]:
                first = max(lo, _time_seek(plog.segments[i], ts_lo))
            stop = cutoff(r["tail_min_timestamps"], ts_hi) if mode == "filter" else None
            if stop is not None:  # no record from there on is older than the end
                last = min(hi, stop)
            if first < min(last, r["next_offset"]):
                chosen.append((i, first, last))
        aborted: tuple[list[int], list[int], list[int]] = ([], [], [])
        if isolation_level == "read_committed" and chosen:
            aborted = _aborted(plog, chosen[0][0], lo, hi)
        for i, first, last in chosen:
            nsegs += 1
            mine = _segment_splits(
                plog.segments[i],
                meta[i],
                topic,
                p,
                (lo, last, first),
                (ts_lo, ts_hi),
                split_bytes,
                aborted,
            )
            if meta[i]["max_timestamp"] >= ts_hi:
                tail += _tail_bytes(plog.segments[i], ts_hi, mine)
            out += mine
    splits = pa.Table.from_pylist(out, schema=SPLIT_SCHEMA)
    planned = int(
        pc.sum(pc.subtract(splits.column("end_pos"), splits.column("start_pos"))).as_py() or 0
    )
    return ExtractPlan(
        splits,
        version,
        nsegs,
        planned,
        lakefs.IO_STATS.snapshot()["bytes_read"] - before,
        ranges,
        time.time() - started,
        tail,
    )


def _tail_bytes(seg: LogSegment, ts_hi: int, splits: list[dict]) -> int:
    """Bytes of ``splits`` (of ``seg``) from the batch where the largest timestamp so far
    reaches ``ts_hi`` (time index) on: there, batches are mostly dropped by their
    timestamps alone."""
    ti = seg.time_index
    k = int(np.searchsorted(ti.timestamps, ts_hi, side="left"))
    if k >= len(ti):
        return 0
    at = (
        seg.offset_index.lookup(int(ti.offsets[k]))[1]
        if int(ti.offsets[k]) > seg.base_offset
        else 0
    )
    return sum(max(0, s["end_pos"] - max(s["start_pos"], at)) for s in splits)


def _time_seek(seg: LogSegment, ts_lo: int) -> int:
    """First offset of ``seg`` that may hold a timestamp >= ``ts_lo``: after the offset of
    the time index's strict floor (every record up to it is older: the entry holds the
    largest timestamp so far)."""
    ts, off = seg.time_index.lookup_strict(ts_lo)
    return int(off) + 1 if ts >= 0 else seg.base_offset


def _aborted(plog: PartitionLog, first: int, lo: int, hi: int):
    """Aborted transactions overlapping [lo, hi): Kafka's collectAbortedTxns walk."""
    pids, firsts, lasts = [], [], []
    for seg in plog.segments[first:]:
        idx = seg.txn_index
        if idx is None:
            continue
        res = idx.search(lo, hi)
        for a in res.aborted:
            pids.append(a.producer_id)
            firsts.append(a.first_offset)
            lasts.append(a.last_offset)
        if res.is_complete:
            break
    return pids, firsts, lasts


def _segment_splits(
    seg: LogSegment,
    r: dict,
    topic: str,
    p: int,
    offsets: tuple[int, int, int],
    ts: tuple[int, int],
    split_bytes: int,
    aborted,
) -> list[dict]:
    """Splits of one segment: ``offsets`` = (lo, hi, first offset to read)."""
    lo, hi, first = offsets
    size = int(r["size_bytes"])
    first_needs_index = first > r["base_offset"]
    last_needs_index = hi < r["next_offset"]
    if not first_needs_index and not last_needs_index and size <= split_bytes:
        bounds = [0, size]
        extend = False
    else:
        oi = seg.offset_index
        start = int(oi.lookup(first)[1]) if first_needs_index else 0
        if last_needs_index:
            j = int(np.searchsorted(oi.offsets, hi - 1, side="right"))
            end = int(oi.positions[j]) if j < len(oi) else size
        else:
            end = size
        extend = last_needs_index and end < size
        bounds = [start]
        if end - start > split_bytes:
            pos = oi.positions
            cut = pos[(pos > start) & (pos < end)]
            last = start
            for c in cut.tolist():
                if c - last >= split_bytes:
                    bounds.append(c)
                    last = c
        bounds.append(end)
    out = []
    for k in range(len(bounds) - 1):
        out.append(
            {
                "topic": topic,
                "partition": p,
                "path": r["path"],
                "size": size,
                "run_id": r["run_id"],
                "start_pos": bounds[k],
                "end_pos": bounds[k + 1],
                "extend": bool(extend and k == len(bounds) - 2),
                "lo": lo,
                "hi": hi,
                "ts_lo": ts[0],
                "ts_hi": ts[1],
                "aborted_pid": aborted[0],
                "aborted_first": aborted[1],
                "aborted_last": aborted[2],
            }
        )
    return out


def pack_splits(
    splits: list[dict],
    parallelism: int,
    *,
    max_bytes: int = DEFAULT_SPLIT_BYTES,
    min_bytes: int = MIN_TASK_BYTES,
) -> list[list[dict]]:
    """Splits grouped into tasks, as Spark groups files into input partitions.

    Tasks of about ``total / parallelism`` bytes, at least ``min_bytes`` (a tiny window
    is one task, not one per partition) and at most ``max_bytes`` (a split larger than
    that stays alone); largest splits first, each to the least loaded task.
    """
    if not splits:
        return []
    sizes = [s["end_pos"] - s["start_pos"] for s in splits]
    total = sum(sizes)
    target = min(max_bytes, max(min_bytes, -(-total // max(1, parallelism))))
    n = max(1, min(len(splits), -(-total // target)))
    heap = [(0, k) for k in range(n)]
    tasks: list[list[dict]] = [[] for _ in range(n)]
    for i in sorted(range(len(splits)), key=lambda i: -sizes[i]):
        load, k = heapq.heappop(heap)
        tasks[k].append(splits[i])
        heapq.heappush(heap, (load + sizes[i], k))
    # within a task, file order: neighbouring splits of a segment share its cached state
    return [sorted(t, key=lambda s: (s["partition"], s["path"], s["start_pos"])) for t in tasks]


# ------------------------------------------------------------------------------ Spark
def extract(
    spark,
    root: str,
    topic: str,
    *,
    partitions=None,
    start=None,
    end=None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    mode: str = "offsets",
    isolation_level: str = "read_uncommitted",
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    cache_bytes: int | None = None,
    plan: ExtractPlan | None = None,
    bytes_accumulator=None,
):
    """Records of ``topic`` in a time/offset range, exactly :data:`KAFKA_SOURCE_SCHEMA`.

    Args:
        spark: the session.
        root: lake root.
        topic: the topic.
        partitions: partition numbers (list or "0,3"); default all.
        start, end: ``[start, end)`` as epoch ms or ISO-8601 strings.
        start_offset, end_offset: ``[start_offset, end_offset)`` (intersected with the
            time range).
        mode: ``offsets`` (Kafka source startingOffsetsByTimestamp /
            endingOffsetsByTimestamp semantics) or ``filter`` (every record with
            start <= timestamp < end, exact under non-monotonic timestamps).
        isolation_level: ``read_committed`` drops records of aborted transactions.
        split_bytes: large segments are cut at offset-index positions this far apart;
            also the most bytes one task reads (unless one split is larger).
        cache_bytes: ``seglake.index.cache.bytes`` of the executors' cache.
        plan: a plan from :func:`plan_extract` (else made here).
        bytes_accumulator: a Spark accumulator that receives the log bytes tasks read.
    """
    from seglake.config import LogConfig

    plan = plan or plan_extract(
        root,
        topic,
        partitions=partitions,
        start=start,
        end=end,
        start_offset=start_offset,
        end_offset=end_offset,
        mode=mode,
        isolation_level=isolation_level,
        split_bytes=split_bytes,
    )
    cache_bytes = LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes
    acc, level = bytes_accumulator, isolation_level
    splits = plan.splits.to_pylist()
    tasks = pack_splits(splits, spark.sparkContext.defaultParallelism, max_bytes=split_bytes)
    # the task list travels with the function, or as a broadcast when it is large
    payload = spark.sparkContext.broadcast(tasks) if len(splits) > BROADCAST_SPLITS else tasks

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache = get_cache(cache_bytes)
        mine = payload if isinstance(payload, list) else payload.value
        for b in batches:
            for task in b.column(0).to_pylist():
                with lakefs.IO_STATS.counting(acc):
                    t = read_splits(cache, root, mine[task], isolation_level=level)
                yield from t.to_batches()

    return spark.range(len(tasks), numPartitions=max(1, len(tasks))).mapInArrow(
        read, spark_schema(KAFKA_SOURCE_SCHEMA)
    )
