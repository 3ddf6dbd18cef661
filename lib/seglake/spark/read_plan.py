"""Planning the ``seglake`` data source's reads (no Spark session needed: it runs where
Spark plans Python data sources): the pushed filters as ranges (:class:`Pushed`), the
subscribed partitions' catalog rows (:func:`subscribed`) and logs
(:func:`partition_logs`), and the splits of a read (:func:`plan_read`) or of a stream's
micro-batch (:func:`plan_splits`), each partition's cut by extract's
:func:`~seglake.spark.extract_plan.plan_partition` (filter mode).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import defaultdict
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from seglake.api.times import datetime_micros, micros_to_millis
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.rows import segment_refs
from seglake.spark.extract_plan import plan_partition
from seglake.spark.read_options import (
    ALL,
    Range,
    ReadOptions,
    TopicPartition,
)
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import PartitionLog

__all__ = ["Logs", "Pushed", "partition_logs", "plan_read", "plan_splits", "subscribed"]

Logs = dict[TopicPartition, tuple[pa.Table, PartitionLog]]  # catalog rows and log


# ------------------------------------------------------------------------------ filters
def _intersect(a: Range, b: Range) -> Range:
    return max(a[0], b[0]), min(a[1], b[1])


def _both(current: frozenset | None, new: frozenset) -> frozenset:
    return new if current is None else current & new


def _comparison(f: Filter, v: int) -> Range:
    """The integers ``x`` with ``x <op> v``, as a half-open range."""
    if isinstance(f, EqualTo):
        return v, v + 1
    if isinstance(f, GreaterThan):
        return v + 1, ALL[1]
    if isinstance(f, GreaterThanOrEqual):
        return v, ALL[1]
    if isinstance(f, LessThan):
        return ALL[0], v
    return ALL[0], v + 1  # LessThanOrEqual


def _as_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(v)
    return v


def _as_micros(v: Any) -> int:
    """Epoch microseconds of a Spark timestamp literal (naive: UTC), exactly."""
    if not isinstance(v, dt.datetime):
        raise TypeError(v)
    return datetime_micros(v)


def _ceil_ms(us: int) -> int:
    """The first ms at or after ``us`` (:func:`micros_to_millis`' rule turned into a
    bound: a record of ms ``r`` passes ``lo_us <= 1000 r`` iff ``r >= _ceil_ms(lo_us)``)."""
    return us if us in ALL else -micros_to_millis(-us)


_CONVERT = {"partition": _as_int, "offset": _as_int, "timestamp": _as_micros}
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclasses.dataclass
class Pushed:
    """Filters Spark pushed, as sets and ``[lo, hi)`` ranges (timestamps in epoch ms)."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition: Range = ALL
    offset: Range = ALL
    timestamp: Range = ALL

    def push(self, f: Filter) -> bool:
        """Take ``f`` in; ``True`` when the read will honour it exactly."""
        if not isinstance(f, (*_COMPARISONS, In)) or len(f.attribute) != 1:
            return False
        col = f.attribute[0]
        values = tuple(f.value) if isinstance(f, In) else (f.value,)
        if col == "topic":
            if not isinstance(f, (EqualTo, In)) or not all(isinstance(v, str) for v in values):
                return False
            self.topics = _both(self.topics, frozenset(values))
            return True
        convert = _CONVERT.get(col)
        try:
            ints = [convert(v) for v in values] if convert else None
        except TypeError:
            return False
        if ints is None:
            return False
        exact = not isinstance(f, In)
        if not ints:
            r: Range = (0, 0)
        elif exact:
            r = _comparison(f, ints[0])
        elif col == "partition":
            self.partitions = _both(self.partitions, frozenset(ints))
            return True
        else:  # the hull of an IN list: Spark filters the rest
            r = (min(ints), max(ints) + 1)
        if col == "timestamp":  # record r (ms) passes iff lo_us <= 1000 r < hi_us
            r = (_ceil_ms(r[0]), _ceil_ms(r[1]))
        setattr(self, col, _intersect(getattr(self, col), r))
        return exact

    def nothing(self) -> bool:
        """Whether no record can pass."""
        return (
            self.topics == frozenset()
            or self.partitions == frozenset()
            or any(lo >= hi for lo, hi in (self.partition, self.offset, self.timestamp))
        )

    def admits(self, tp: TopicPartition) -> bool:
        return (
            (self.topics is None or tp[0] in self.topics)
            and (self.partitions is None or tp[1] in self.partitions)
            and self.partition[0] <= tp[1] < self.partition[1]
        )


# ------------------------------------------------------------------------------ planning
def _by_partition(rows: pa.Table) -> dict[TopicPartition, pa.Table]:
    """Catalog rows (sorted by topic, partition) split per topic-partition."""
    keys = list(
        zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(), strict=True)
    )
    out: dict[TopicPartition, pa.Table] = {}
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            out[keys[start]] = rows.slice(start, i - start)
            start = i
    return out


def subscribed(
    opts: ReadOptions, catalog: Catalog, version: int, *, strict: bool = True
) -> dict[TopicPartition, pa.Table]:
    """The subscribed partitions' catalog rows; unknown topics/partitions are errors
    (unless not ``strict``: a stream waits for them)."""
    wanted = opts.topics or (tuple(opts.assign) if opts.assign is not None else None)
    parts = _by_partition(catalog.segments(wanted, version=version))
    present = {t for t, _ in parts}
    if opts.pattern is not None:
        parts = {tp: r for tp, r in parts.items() if re.fullmatch(opts.pattern, tp[0])}
    if opts.assign is not None:
        want = {(t, p) for t, ps in opts.assign.items() for p in ps}
        missing = sorted(want - set(parts))
        if missing and strict:
            raise ConfigError(
                f"assign: no partition {_names(missing)} in the lake at "
                f"{opts.root} (catalog version {version}); it has "
                f"{_names(sorted(parts)) or 'none of these topics'}"
            )
        parts = {tp: r for tp, r in parts.items() if tp in want}
    elif strict and wanted and set(wanted) - present:
        known = sorted(set(catalog.segments(version=version).column("topic").to_pylist()))
        raise ConfigError(
            f"subscribe: no topic {', '.join(sorted(set(wanted) - present))} in "
            f"the lake at {opts.root} (catalog version {version}); topics: "
            f"{', '.join(known) or 'none'}"
        )
    for bound in (opts.starting, opts.ending):
        for tp, name in bound.named().items():
            if strict and tp not in parts:
                raise ConfigError(
                    f"{name}: {tp[0]}-{tp[1]} is not a partition this read "
                    f"covers ({_names(sorted(parts)) or 'none'})"
                )
    return parts


def partition_logs(
    opts: ReadOptions, parts: dict[TopicPartition, pa.Table], cache: IndexCache
) -> Logs:
    """Each partition's catalog rows and its log (segments from ``cache``)."""
    return {
        tp: (rows, cache.partition_log(opts.root, tp, segment_refs(rows), opts.on_corrupt))
        for tp, rows in parts.items()
    }


def _names(tps: list[TopicPartition]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in tps[:20])
    return shown + (f" and {len(tps) - 20} more" if len(tps) > 20 else "")


def plan_read(
    opts: ReadOptions, pushed: Pushed | None = None, *, cache: IndexCache | None = None
) -> list[dict]:
    """The splits (rows of extract's ``SPLIT_SCHEMA``) a read with these options and
    pushed filters covers; runs where Spark plans the read (no Spark needed)."""
    pushed = pushed or Pushed()
    cache = cache or get_cache()
    catalog = Catalog(opts.root)
    version = catalog.version() if opts.version is None else opts.version
    parts = subscribed(opts, catalog, version)
    if pushed.nothing():
        return []
    ranges: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)  # per topic
    logs = partition_logs(opts, {tp: r for tp, r in parts.items() if pushed.admits(tp)}, cache)
    for tp, (_, log) in logs.items():
        start, end = (
            b.resolve(tp, log, fail_on_data_loss=opts.fail_on_data_loss)
            for b in (opts.starting, opts.ending)
        )
        if start > end:
            raise ConfigError(
                f"{opts.starting.option(tp)} / {opts.ending.option(tp)}: "
                f"{tp[0]}-{tp[1]} would start at offset {start}, after its "
                f"ending offset {end}"
            )
        lo, hi = _intersect((start, end), pushed.offset)
        if lo < hi:  # a pushed time range: plan_partition prunes and seeks (filter mode)
            ranges[tp[0]][tp[1]] = (lo, hi)
    return plan_splits(
        opts, ranges, version=version, cache=cache, timestamp=pushed.timestamp, logs=logs
    )


def plan_splits(
    opts: ReadOptions,
    ranges: dict[str, dict[int, tuple[int, int]]],
    *,
    version: int,
    cache: IndexCache,
    timestamp: Range = ALL,
    logs: Logs | None = None,
) -> list[dict]:
    """Splits of the ``[lo, hi)`` offset ranges per topic and partition at catalog
    ``version`` (a batch read's, or a stream's micro-batch), within ``timestamp``:
    extract's :func:`plan_partition` (filter mode) per partition. ``logs``: each
    partition's catalog rows and log, when the caller has them (else one catalog read).
    Each split names ``version`` (a task that meets a file removed since says so)."""
    if logs is None:
        rows = _by_partition(Catalog(opts.root).segments(tuple(ranges), version=version))
        logs = partition_logs(opts, rows, cache)
    splits: list[dict] = []
    for topic, bounds in ranges.items():
        for p, (lo, hi) in sorted(bounds.items()):
            if (topic, p) not in logs:
                continue
            rows_p, log = logs[(topic, p)]
            lo, hi = max(lo, log.log_start_offset), min(hi, log.log_end_offset)
            if lo < hi:
                splits += plan_partition(
                    log,
                    rows_p.to_pylist(),
                    (topic, p),
                    (lo, hi),
                    timestamp,
                    mode="filter",
                    isolation_level=opts.isolation_level,
                    split_bytes=opts.split_bytes,
                )[0]
    for s in splits:
        s["version"] = version
    return splits
