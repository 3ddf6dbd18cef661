"""Job 3, extract: the records of a time (or offset) range, in the Spark Kafka source schema.

    driver:    catalog (one pinned version) -> per partition [start, end) offsets
               offsets mode: offsetsForTimes(start) .. offsetsForTimes(end) (no record
                   >= end: the log end offset), intersected with start/end offsets
               filter mode: segments pruned by catalog min/max timestamp; every record
                   of them with start <= timestamp < end
               -> splits: one per segment, large segments cut at offset-index positions
                  (``split_bytes`` apart), so one partition is read by many tasks
    executors: mapInArrow over the splits: one ranged read per split (plus the header and
               batch after it for the split that ends a range), decode the batches that
               overlap, filter offsets (and timestamps), drop control batches and, under
               read_committed, records of aborted transactions (``.txnindex``)

:func:`read_split` is the pure function the executors run (no Spark).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.errors import ConfigError, CorruptIndexError
from seglake.record.batch import HEADER_SIZE, LOG_OVERHEAD, scan_batches
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, to_kafka_source
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import PartitionLog
from seglake.storage.segment import Window
from seglake.storage.txn_index import AbortedTxn, TransactionIndex

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
NO_TS_LO, NO_TS_HI = -(2**63), 2**63 - 1

SPLIT_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("path", pa.string()), pa.field("size", pa.int64()),
    pa.field("run_id", pa.string()),
    pa.field("start_pos", pa.int64()), pa.field("end_pos", pa.int64()),
    pa.field("extend", pa.bool_()),
    pa.field("lo", pa.int64()), pa.field("hi", pa.int64()),
    pa.field("ts_lo", pa.int64()), pa.field("ts_hi", pa.int64()),
    pa.field("aborted_pid", pa.list_(pa.int64())),
    pa.field("aborted_first", pa.list_(pa.int64())),
    pa.field("aborted_last", pa.list_(pa.int64())),
])

__all__ = ["ExtractPlan", "extract", "parse_time", "plan_extract", "read_split", "spark_ddl"]


def spark_ddl(schema: pa.Schema) -> str:
    """Spark DDL string of an Arrow schema (via pyspark's converter)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema).simpleString()[len("struct<"):-1]


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
def read_split(cache: IndexCache, root: str, split: dict, *,
               isolation_level: str = "read_uncommitted") -> pa.Table:
    """Records of one split (Kafka source schema): one ranged read of its bytes."""
    seg = cache.segment(root, split["path"], size=split["size"], run_id=split["run_id"],
                        load_indexes=False)
    start, end, lo, hi = split["start_pos"], split["end_pos"], split["lo"], split["hi"]
    size = seg.size
    extend = split["extend"] and end < size
    w = seg.window(start, end + HEADER_SIZE if extend else end)
    if w.scan.valid_bytes < min(end, size) - start:
        raise CorruptIndexError(f"split [{start}, {end}) does not hold whole batches: "
                                f"{w.scan.error}", path=seg.log_path)
    if extend and (not len(w.scan) or int(w.scan.last_offset[-1]) < hi - 1):
        tail = w.data[end - start:]
        if len(tail) >= HEADER_SIZE:
            more = int.from_bytes(tail[8:12], "big", signed=True) + LOG_OVERHEAD
            data = w.data[: end - start] + seg.window(end, end + more, verify_crc=False).data
            w = Window(start, data, scan_batches(data))
    s = w.scan
    keep = (s.last_offset >= lo) & (s.base_offset < hi) & ~s.is_control
    if split["ts_lo"] > NO_TS_LO:
        keep &= s.max_timestamp >= split["ts_lo"]
    if not keep.any():
        return KAFKA_SOURCE_SCHEMA.empty_table()
    t = w.decode(keep, path=seg.log_path)
    off = t.column("offset")
    mask = pc.and_(pc.greater_equal(off, lo), pc.less(off, hi))
    if split["ts_lo"] > NO_TS_LO or split["ts_hi"] < NO_TS_HI:
        ts = t.column("timestamp")
        mask = pc.and_(mask, pc.and_(pc.greater_equal(ts, split["ts_lo"]),
                                     pc.less(ts, split["ts_hi"])))
    if isolation_level == "read_committed" and split["aborted_pid"]:
        txn = TransactionIndex()
        for p, f, last in sorted(zip(split["aborted_pid"], split["aborted_first"],
                                     split["aborted_last"], strict=True), key=lambda x: x[2]):
            txn.append(AbortedTxn(p, f, last, last))
        aborted = txn.aborted_mask(off.to_numpy(), t.column("producer_id").to_numpy())
        tx = t.column("transactional").to_numpy(zero_copy_only=False)
        mask = pc.and_(mask, pa.array(~(aborted & tx)))
    t = t.filter(mask)
    return to_kafka_source(t, split["topic"], split["partition"])


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

    def summary(self) -> str:
        return (f"catalog version {self.catalog_version}: {self.segments} segment(s), "
                f"{self.splits.num_rows} split(s), {self.planned_bytes} log bytes planned, "
                f"{self.driver_bytes} bytes read by the driver to plan "
                f"({self.seconds:.2f} s)")


def plan_extract(root: str, topic: str, *, partitions=None, start: int | str | None = None,
                 end: int | str | None = None, start_offset: int | None = None,
                 end_offset: int | None = None, mode: str = "offsets",
                 isolation_level: str = "read_uncommitted",
                 split_bytes: int = DEFAULT_SPLIT_BYTES, version: int | None = None,
                 cache: IndexCache | None = None) -> ExtractPlan:
    """The splits of an extraction (see the module docstring); runs on the driver."""
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
    rows = catalog.segments(topic, partitions, version=version)
    fs, base = cache.resolve(root)
    out: list[dict] = []
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    nsegs = 0
    for p in sorted(set(rows.column("partition").to_pylist())):
        prow = rows.filter(pc.equal(rows.column("partition"), p))
        plog = PartitionLog.from_rows(fs, base, prow)
        # share opened segments with the cache (indexes read once per process)
        meta = prow.to_pylist()
        plog.segments = [cache.segment(root, r["path"], size=r["size_bytes"],
                                       next_offset=r["next_offset"],
                                       max_timestamp=r["max_timestamp"], run_id=r["run_id"],
                                       load_indexes=False) for r in meta]
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
        if start_offset is not None:
            lo = max(lo, start_offset)
        if end_offset is not None:
            hi = min(hi, end_offset)
        lo, hi = max(lo, lso), min(hi, leo)
        ranges[(topic, p)] = (lo, hi)
        if hi <= lo:
            continue
        chosen = []
        for i, r in enumerate(meta):
            if r["next_offset"] <= lo or r["base_offset"] >= hi or r["next_offset"] == r[
                    "base_offset"]:
                continue
            if mode == "filter" and (r["max_timestamp"] < ts_lo or r["min_timestamp"] >= ts_hi):
                continue
            chosen.append(i)
        aborted: tuple[list[int], list[int], list[int]] = ([], [], [])
        if isolation_level == "read_committed" and chosen:
            aborted = _aborted(plog, chosen[0], lo, hi)
        for i in chosen:
            nsegs += 1
            out += _segment_splits(plog, i, meta[i], topic, p, lo, hi, ts_lo, ts_hi,
                                   split_bytes, aborted)
    splits = pa.Table.from_pylist(out, schema=SPLIT_SCHEMA)
    planned = int(pc.sum(pc.subtract(splits.column("end_pos"),
                                     splits.column("start_pos"))).as_py() or 0)
    return ExtractPlan(splits, version, nsegs, planned,
                       lakefs.IO_STATS.snapshot()["bytes_read"] - before, ranges,
                       time.time() - started)


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


def _segment_splits(plog: PartitionLog, i: int, r: dict, topic: str, p: int, lo: int, hi: int,
                    ts_lo: int, ts_hi: int, split_bytes: int, aborted) -> list[dict]:
    seg = plog.segments[i]
    size = int(r["size_bytes"])
    first_needs_index = lo > r["base_offset"]
    last_needs_index = hi < r["next_offset"]
    if not first_needs_index and not last_needs_index and size <= split_bytes:
        bounds = [0, size]
        extend = False
    else:
        oi = seg.offset_index
        start = int(oi.lookup(lo)[1]) if first_needs_index else 0
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
        out.append({
            "topic": topic, "partition": p, "path": r["path"], "size": size,
            "run_id": r["run_id"], "start_pos": bounds[k], "end_pos": bounds[k + 1],
            "extend": bool(extend and k == len(bounds) - 2), "lo": lo, "hi": hi,
            "ts_lo": ts_lo, "ts_hi": ts_hi, "aborted_pid": aborted[0],
            "aborted_first": aborted[1], "aborted_last": aborted[2],
        })
    return out


# ------------------------------------------------------------------------------ Spark
def extract(spark, root: str, topic: str, *, partitions=None, start=None, end=None,
            start_offset: int | None = None, end_offset: int | None = None,
            mode: str = "offsets", isolation_level: str = "read_uncommitted",
            split_bytes: int = DEFAULT_SPLIT_BYTES, cache_bytes: int | None = None,
            plan: ExtractPlan | None = None, bytes_accumulator=None):
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
        split_bytes: large segments are cut at offset-index positions this far apart.
        cache_bytes: ``seglake.index.cache.bytes`` of the executors' cache.
        plan: a plan from :func:`plan_extract` (else made here).
        bytes_accumulator: a Spark accumulator that receives the log bytes tasks read.
    """
    from seglake.config import LogConfig

    plan = plan or plan_extract(root, topic, partitions=partitions, start=start, end=end,
                                start_offset=start_offset, end_offset=end_offset, mode=mode,
                                isolation_level=isolation_level, split_bytes=split_bytes)
    cache_bytes = LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes
    acc = bytes_accumulator
    level = isolation_level

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache = get_cache(cache_bytes)
        for b in batches:
            for split in b.to_pylist():
                before = lakefs.IO_STATS.snapshot()["bytes_read"]
                t = read_split(cache, root, split, isolation_level=level)
                if acc is not None:
                    acc.add(lakefs.IO_STATS.snapshot()["bytes_read"] - before)
                yield from t.to_batches()

    n = max(1, plan.splits.num_rows)
    splits_df = spark.createDataFrame(plan.splits.to_pandas() if plan.splits.num_rows else [],
                                      schema=spark_ddl(SPLIT_SCHEMA)) \
        if plan.splits.num_rows == 0 else _splits_df(spark, plan.splits, n)
    return splits_df.mapInArrow(read, spark_ddl(KAFKA_SOURCE_SCHEMA))


def _splits_df(spark, splits: pa.Table, n: int):
    """One Spark partition per split (splits are the unit of work)."""
    df = spark.createDataFrame(splits.to_pandas(), schema=spark_ddl(SPLIT_SCHEMA))
    return df.repartition(min(n, 10_000))
