"""Planning an extraction on the driver (no Spark): catalog (one pinned version) -> per
partition ``[start, end)`` offsets -> splits (a segment, or a piece of a large one cut at
offset-index positions) -> tasks (splits packed as Spark packs small files). See
:mod:`seglake.spark.extract` for the whole path.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.api.render import iso
from seglake.api.times import to_millis
from seglake.errors import ConfigError, SegmentNotFoundError
from seglake.lake.catalog import Catalog
from seglake.lake.packing import pack
from seglake.lake.rows import segment_refs
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from seglake.storage.tail_minima import cutoff
from seglake.storage.time_index import NO_ENTRY
from seglake.storage.txn_index import collect_aborted
from seglake.storage.window_records import (
    NO_TS_HI,
    NO_TS_LO,
)

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
MIN_TASK_BYTES = 4 * 1024 * 1024  # Spark's spark.sql.files.openCostInBytes
# a read task takes at most this many splits' bytes: 128 MiB of log at the default split
# size (Spark's spark.sql.files.maxPartitionBytes). A Python task costs 0.05-0.07 CPU s to
# start; its memory is bounded by iter_splits' groups, not by its bytes
SPLITS_PER_TASK = 4
BROADCAST_SPLITS = 512  # more splits than this go to the tasks as a broadcast

SPLIT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("next_offset", pa.int64()),
        pa.field("run_id", pa.string()),
        pa.field("index_interval_bytes", pa.int32()),
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


def parse_time(value: str | int | None) -> int | None:
    """Epoch ms from epoch-ms digits or ISO-8601 (no zone = UTC), or -1/-2/-3 (latest,
    earliest, max timestamp): :func:`seglake.api.times.to_millis`. ``None`` and ints
    (already ms, also the data source's open-range sentinels) pass unchanged."""
    if value is None or isinstance(value, (int, np.integer)):
        return None if value is None else int(value)
    return to_millis(value, allow_special=True)


def _check_bounds(start: int | None, end: int | None, lo: int | None, hi: int | None) -> None:
    """A range that ends before it starts is a mistake (Kafka's source refuses it), not
    an empty answer. ``start == end`` is an empty range, as in Kafka."""
    if start is not None and end is not None and 0 <= end < start:
        raise ConfigError(f"start time {start} ({iso(start)}) is after end time {end} ({iso(end)})")
    if lo is not None and hi is not None and hi < lo:
        raise ConfigError(f"start offset {lo} is after end offset {hi}")


def _check_partitions(
    catalog: Catalog, version: int, topic: str, partitions, rows: pa.Table
) -> None:
    """The topic, and each partition asked for, must be in the lake: a name that is not
    would otherwise read as an empty result."""
    found = set(rows.column("partition").to_pylist())
    wanted = set(found if partitions is None else partitions)
    if found and wanted <= found:
        return
    catalog.require_topic(topic, version=version)
    have = sorted(p for t, p in catalog.log_end_offsets(topic, version=version))
    raise SegmentNotFoundError(
        f"topic {topic!r} has no partition {sorted(wanted - found)} in the lake "
        f"(partitions: {have[:20]}{' ...' if len(have) > 20 else ''})"
    )


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
    on_corrupt: str = "raise",
) -> ExtractPlan:
    """The splits of an extraction (see the module docstring); runs on the driver.
    ``on_corrupt``: the offsetsForTimes lookups of a time range raise at a damaged
    batch, or skip it (``"skip"``, see :class:`~seglake.storage.segment.LogSegment`).

    ``offset_ranges``: ``{partition: (start_offset, end_offset)}``, each partition's own
    bounds in place of ``start_offset``/``end_offset`` (and only these partitions): one
    catalog read for a read whose partitions start and end at different offsets.
    """
    if mode not in ("offsets", "filter"):
        raise ConfigError(f"mode {mode!r}: expected 'offsets' or 'filter'")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ConfigError(f"isolation_level {isolation_level!r}")
    start, end = parse_time(start), parse_time(end)
    _check_bounds(start, end, start_offset, end_offset)
    started = time.time()
    before = lakefs.IO_STATS.snapshot()["bytes_read"]
    cache = cache or get_cache()
    catalog = Catalog(root)
    version = catalog.version() if version is None else version
    if isinstance(partitions, str):
        try:
            partitions = [int(p) for p in partitions.split(",") if p.strip()]
        except ValueError:
            raise ConfigError(f"partitions {partitions!r}: expected numbers like 0,3") from None
    if offset_ranges is not None:
        partitions = sorted(offset_ranges)
    rows = catalog.segments(topic, partitions, version=version)
    _check_partitions(catalog, version, topic, partitions, rows)
    out: list[dict] = []
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    nsegs = tail = 0
    for p in sorted(set(rows.column("partition").to_pylist())):
        prow = rows.filter(pc.equal(rows.column("partition"), p))
        plog = cache.partition_log(root, (topic, p), segment_refs(prow), on_corrupt)
        meta = prow.to_pylist()
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
        mine, n, t = plan_partition(
            plog,
            meta,
            (topic, p),
            (lo, hi),
            (ts_lo, ts_hi),
            mode=mode,
            isolation_level=isolation_level,
            split_bytes=split_bytes,
        )
        out, nsegs, tail = out + mine, nsegs + n, tail + t
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


def plan_partition(
    plog: PartitionLog,
    meta: list[dict],
    tp: tuple[str, int],
    offsets: tuple[int, int],
    ts: tuple[int, int],
    *,
    mode: str,
    isolation_level: str,
    split_bytes: int,
) -> tuple[list[dict], int, int]:
    """The splits of one partition's offsets ``[lo, hi)`` (inside its log) and time range
    ``ts`` (``meta``: its catalog rows, as ``plog``'s segments): ``(splits, segments
    read, bytes past the end time)``. plan_extract's and the data source's."""
    (topic, p), (lo, hi), (ts_lo, ts_hi) = tp, offsets, ts
    out: list[dict] = []
    nsegs = tail = 0
    chosen: list[tuple[int, int, int]] = []  # (segment, first, end offset)
    for i, r in enumerate(meta):
        if r["next_offset"] <= lo or r["base_offset"] >= hi or r["next_offset"] == r["base_offset"]:
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
    return out, nsegs, tail


def _tail_bytes(seg: LogSegment, ts_hi: int, splits: list[dict]) -> int:
    """Bytes of ``splits`` (of ``seg``) from the batch where the largest timestamp so far
    reaches ``ts_hi`` (time index) on: there, batches are mostly dropped by their
    timestamps alone."""
    nxt = int(seg.time_index.bounds_many([ts_hi])[1][0])
    if nxt == NO_ENTRY:
        return 0
    at = seg.floor_position(nxt)
    return sum(max(0, s["end_pos"] - max(s["start_pos"], at)) for s in splits)


def _time_seek(seg: LogSegment, ts_lo: int) -> int:
    """First offset of ``seg`` that may hold a timestamp >= ``ts_lo``: after the offset of
    the time index's strict floor (every record up to it is older: the entry holds the
    largest timestamp so far)."""
    return int(seg.time_index.bounds_many([ts_lo])[0][0])


def _aborted(plog: PartitionLog, first: int, lo: int, hi: int):
    """Aborted transactions overlapping [lo, hi): Kafka's collectAbortedTxns walk."""
    txns = list(collect_aborted((s.txn_index for s in plog.segments[first:]), lo, hi))
    return (
        [a.producer_id for a in txns],
        [a.first_offset for a in txns],
        [a.last_offset for a in txns],
    )


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
        start = seg.floor_position(first)
        end = seg.upper_position(hi - 1) if last_needs_index else size
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
                "next_offset": r.get("next_offset"),
                "run_id": r["run_id"],
                "index_interval_bytes": r.get("index_interval_bytes"),
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
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    min_bytes: int = MIN_TASK_BYTES,
    max_bytes: int | None = None,
) -> list[list[dict]]:
    """Splits grouped into tasks, as Spark groups files into input partitions
    (:func:`seglake.lake.packing.pack`): tasks of about ``total / parallelism`` bytes, at
    least ``min_bytes`` (a tiny window is one task, not one per partition) and at most
    ``max_bytes`` (default :data:`SPLITS_PER_TASK` x ``split_bytes``, the splits' size; a
    split larger than that stays alone); more than one task: a multiple of ``parallelism``.
    """
    if max_bytes is None:
        max_bytes = SPLITS_PER_TASK * split_bytes
    sizes = [s["end_pos"] - s["start_pos"] for s in splits]
    tasks = [
        [splits[i] for i in t]
        for t in pack(sizes, parallelism, max_bytes=max_bytes, min_bytes=min_bytes)
    ]
    # within a task, file order: neighbouring splits of a segment share its cached state
    return [sorted(t, key=lambda s: (s["partition"], s["path"], s["start_pos"])) for t in tasks]
