"""The ``seglake`` data source's options and pushed filters as a
:class:`~seglake.lake.scan.Scan` (no Spark session needed: it runs where Spark plans
Python data sources): the pushed filters as ranges (:class:`Pushed`), the subscribed
partitions (:func:`subscribed`: a :class:`~seglake.lake.snapshot.Snapshot`), each
partition's bounds (:func:`plan_read`) and the scan of a read or of a stream's
micro-batch (:func:`scan`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from seglake.errors import ConfigError
from seglake.lake.key_plan import key_candidates
from seglake.lake.scan import Scan, SegmentTask
from seglake.lake.snapshot import Snapshot
from seglake.spark.read_options import (
    ALL,
    Range,
    ReadOptions,
    TopicPartition,
)
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.naming import internal_topic
from seglake.times import datetime_micros, micros_to_millis

__all__ = ["Pushed", "plan_read", "scan", "subscribed"]

logger = logging.getLogger(__name__)
# the key filters' line (plan_read) is INFO: silent on a console, kept by Spark's Python
# worker logging (spark.sql.pyspark.worker.logging.enabled: spark.tvf.python_worker_logs())
logger.setLevel(logging.INFO)


# ------------------------------------------------------------------------------ filters
def _intersect(a: Range, b: Range) -> Range:
    return max(a[0], b[0]), min(a[1], b[1])


def _both(current: frozenset[Any] | None, new: frozenset[Any]) -> frozenset[Any]:
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


def _key_bytes(values: tuple[Any, ...]) -> frozenset[bytes] | None:
    """The key bytes of string (UTF-8) or binary literals (a null equals no key), or
    ``None`` for any other literal."""
    out = set()
    for v in values:
        if isinstance(v, str):
            out.add(v.encode())
        elif isinstance(v, (bytes, bytearray, memoryview)):
            out.add(bytes(v))
        elif v is not None:
            return None
    return frozenset(out)


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
    keys: frozenset[bytes] | None = None  # key = / key IN: these key bytes only

    def push(self, f: Filter) -> bool:
        """Take ``f`` in; ``True`` when the read will honour it exactly."""
        if not isinstance(f, (*_COMPARISONS, In)) or len(f.attribute) != 1:
            return False
        col = f.attribute[0]
        values = tuple(f.value) if isinstance(f, In) else (f.value,)
        if col == "key":  # exact: the key index's records, key bytes compared
            keys = _key_bytes(values) if isinstance(f, (EqualTo, In)) else None
            if keys is None:
                return False
            self.keys = _both(self.keys, keys)
            return True
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
            or self.keys == frozenset()
            or any(lo >= hi for lo, hi in (self.partition, self.offset, self.timestamp))
        )

    def admits(self, tp: TopicPartition) -> bool:
        return (
            (self.topics is None or tp[0] in self.topics)
            and (self.partitions is None or tp[1] in self.partitions)
            and self.partition[0] <= tp[1] < self.partition[1]
        )


# ------------------------------------------------------------------------------ planning
def subscribed(
    opts: ReadOptions,
    *,
    version: int | None = None,
    cache: IndexCache | None = None,
    strict: bool = True,
) -> Snapshot:
    """The subscribed partitions at ``version`` (default: the options', else the newest):
    one catalog read; unknown topics/partitions are errors (unless not ``strict``: a
    stream waits for them)."""
    wanted = opts.topics or (tuple(opts.assign) if opts.assign is not None else None)
    snap = Snapshot.read(
        opts.root,
        wanted,
        version=opts.version if version is None else version,
        cache=cache,
        on_corrupt=opts.on_corrupt,
    )
    version, parts = snap.version, set(snap.rows)
    present = {t for t, _ in parts}
    # Kafka's source reads no internal topic, whatever names it (retrieveAllPartitions)
    parts = {tp for tp in parts if not internal_topic(tp[0])}
    if opts.pattern is not None:
        parts = {tp for tp in parts if opts.pattern.matches(tp[0])}
    if opts.assign is not None:
        want = {(t, p) for t, ps in opts.assign.items() for p in ps}
        missing = sorted(want - parts)
        if missing and strict:
            raise ConfigError(
                f"assign: no partition {_names(missing)} in the lake at "
                f"{opts.root} (catalog version {version}); it has "
                f"{_names(sorted(parts)) or 'none of these topics'}"
            )
        parts &= want
    elif strict and wanted and set(wanted) - present:
        every = Snapshot.read(opts.root, version=version).partitions
        known = [t for t, _ in every]
        raise ConfigError(
            f"subscribe: no topic {', '.join(sorted(set(wanted) - present))} in "
            f"the lake at {opts.root} (catalog version {version}); topics: "
            f"{', '.join(sorted(set(known))) or 'none'}"
        )
    for bound in (opts.starting, opts.ending):
        named = bound.named()
        if strict and named is not None and named[1] != parts:  # validateTopicPartitions
            name, given = named
            raise ConfigError(
                f"{name}: the partitions it names must be the ones the read is assigned, "
                "as in Kafka's source (Partitions specified for Kafka offsets don't match "
                "what are assigned; use -1 for latest, -2 for earliest). Specified: "
                f"{_names(sorted(given))}; assigned: {_names(sorted(parts)) or 'none'}"
            )
    return snap.select(parts)


def _names(tps: list[TopicPartition]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in tps[:20])
    return shown + (f" and {len(tps) - 20} more" if len(tps) > 20 else "")


def scan(opts: ReadOptions, snapshot: Snapshot, ranges: Mapping[TopicPartition, Range]) -> Scan:
    """The scan of ``ranges`` of ``snapshot`` the options ask for (isolation, split
    size, ``minPartitions``, ``maxRecordsPerPartition``), every timestamp."""
    return Scan(
        snapshot,
        ranges,
        isolation_level=opts.isolation_level,
        split_bytes=opts.split_bytes,
        min_partitions=opts.min_partitions,
        max_records_per_partition=opts.max_records_per_partition,
    )


def plan_read(
    opts: ReadOptions, pushed: Pushed | None = None, *, cache: IndexCache | None = None
) -> list[SegmentTask]:
    """The segment tasks a read with these options and pushed filters covers; runs where
    Spark plans the read (no Spark needed)."""
    pushed = pushed or Pushed()
    snap = subscribed(opts, cache=cache)
    if pushed.nothing():
        return []
    snap = snap.select(tp for tp in snap.partitions if pushed.admits(tp))
    ranges: dict[TopicPartition, Range] = {}
    for tp in snap.partitions:
        log, loss = snap.log(tp), opts.fail_on_data_loss
        # Kafka compares the resolved offsets before a reader meets the log (its
        # KafkaSourceRDD.resolveRange): a start past the end is an error even with
        # failOnDataLoss=false, which only lets the reader skip what is missing
        first, last = (
            b.resolve(tp, log, fail_on_data_loss=loss, within_log=False)
            for b in (opts.starting, opts.ending)
        )
        if first > last:
            raise ConfigError(
                f"{opts.starting.option(tp)} / {opts.ending.option(tp)}: the resolved "
                f"start offset {first} is greater than the resolved end offset {last} "
                f"for topic {tp[0]} partition {tp[1]} (as in Kafka's source)"
            )
        start, end = (
            b.resolve(tp, log, fail_on_data_loss=loss) for b in (opts.starting, opts.ending)
        )
        lo, hi = _intersect((start, end), pushed.offset)
        if lo < hi:  # a pushed time range: the scan prunes and seeks (a time filter)
            ranges[tp] = (lo, hi)
    tasks = dataclasses.replace(scan(opts, snap, ranges), times=pushed.timestamp).plan()
    if pushed.keys is None:
        return tasks
    cache = cache or get_cache()
    keyed = key_candidates(
        opts.root.location, cache, tasks, pushed.keys, on_corrupt=opts.on_corrupt
    )
    logger.info(keyed.line(len(pushed.keys)))
    return keyed.tasks
