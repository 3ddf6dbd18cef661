"""The ``seglake`` Spark data source: a lake read the way the Spark Kafka source reads Kafka.

    import seglake.spark
    seglake.spark.register(spark)
    df = (spark.read.format("seglake")
          .option("subscribe", "orders,clicks")
          .option("startingTimestamp", "2026-01-01T00:00:00Z")
          .load("/data/lake"))
    df.filter("partition = 3 AND timestamp >= '2026-01-01 00:05'").count()  # pushed down

Columns are the Spark Kafka source's (``key, value, topic, partition, offset, timestamp,
timestampType``, and ``headers`` with ``includeHeaders``); :data:`OPTIONS` lists the
options: Kafka's names and batch rules, and a few of seglake's.

Planning runs where Spark plans Python data sources (a planner worker, when the query is
optimised): one pinned catalog version; per partition ``[start, end)`` offsets from the
options (Kafka's ``offsetsForTimes`` for timestamps), narrowed by the pushed filters:
``topic`` and ``partition`` choose partitions, ``offset`` comparisons cut the range, a
``timestamp`` lower bound becomes an ``offsetsForTimes`` seek, and both timestamp bounds
prune segments by the catalog's min/max timestamps. :func:`plan_extract` (filter mode)
then cuts the splits; every split is one Spark input partition, read by
:func:`read_split` and handed to Spark as Arrow batches.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.config import LogConfig
from seglake.errors import ConfigError, SeglakeError
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark.extract import (
    DEFAULT_SPLIT_BYTES,
    NO_TS_HI,
    NO_TS_LO,
    parse_time,
    plan_extract,
    read_split,
)
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import EARLIEST_TIMESTAMP as EARLIEST
from seglake.storage.log import LATEST_TIMESTAMP as LATEST
from seglake.storage.log import PartitionLog
from seglake.storage.naming import partition_dir_name, validate_partition, validate_topic

__all__ = ["OPTIONS", "Pushed", "ReadOptions", "SeglakeDataSource", "SeglakeReader",
           "parse_options", "plan_read", "register"]

TopicPartition = tuple[str, int]
Range = tuple[int, int]  # [lo, hi)
ALL: Range = (NO_TS_LO, NO_TS_HI)  # unbounded (extract's "no timestamp filter" too)

OPTIONS: dict[str, str] = {
    "subscribe": "comma-separated topics (default: every topic in the lake)",
    "subscribePattern": "regular expression a whole topic name matches",
    "assign": 'JSON `{"topic":[0,1]}`: these partitions only',
    "startingOffsets": '`earliest` (default) or JSON `{"topic":{"0":23}}`, -2 = earliest',
    "endingOffsets": '`latest` (default) or JSON `{"topic":{"0":42}}`, -1 = latest',
    "startingTimestamp": "epoch ms (or ISO-8601) for every partition: its first offset "
                         "with timestamp >= it",
    "endingTimestamp": "epoch ms (or ISO-8601): first offset with timestamp >= it, "
                       "else the log end",
    "startingOffsetsByTimestamp": 'JSON `{"topic":{"0":1767225600000}}`',
    "endingOffsetsByTimestamp": 'JSON `{"topic":{"0":1767225660000}}`',
    "startingOffsetsByTimestampStrategy": "`error` (default) or `latest`: no record at or "
                                          "after a starting timestamp",
    "failOnDataLoss": "`true` (default): an offset outside a partition's log is an error; "
                      "`false`: clamped to it",
    "includeHeaders": "`false` (default) or `true`: the `headers` column",
    "isolationLevel": "`read_uncommitted` (default) or `read_committed` (drops aborted "
                      "transactions); also `kafka.isolation.level`",
    "splitBytes": f"largest piece of a segment one task reads (default {DEFAULT_SPLIT_BYTES})",
    "versionAsOf": "catalog version to read (default: the newest)",
}
_KNOWN = {name.lower() for name in OPTIONS} | {"path", "kafka.isolation.level"}
_LEVELS = ("read_uncommitted", "read_committed")


# ------------------------------------------------------------------------------ options
def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = str(options.get(name, default)).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}: {options[name]!r} is not 'true' or 'false'")
    return value == "true"


def _int(name: str, value: Any, *, minimum: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None
    if n < minimum:
        raise ConfigError(f"{name}: {n} is below {minimum}")
    return n


def _millis(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: {value!r} is not epoch ms or ISO-8601")
    try:
        ms = parse_time(value if isinstance(value, int) else str(value))
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    if ms is None or ms < 0:
        raise ConfigError(f"{name}: {value!r} is not a time at or after 1970 (epoch ms >= 0)")
    return ms


def _json(name: str, value: str, example: str) -> dict:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {value!r} is not JSON like {example} ({exc})") from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name}: {value!r} is not a JSON object like {example}")
    return parsed


def _per_partition(name: str, value: str, convert: Callable[[Any], int]
                   ) -> dict[TopicPartition, int]:
    """``{"topic": {"0": v, ...}}`` -> ``{(topic, 0): convert(v)}``."""
    example = '{"topic":{"0":23}}'
    out: dict[TopicPartition, int] = {}
    for topic, parts in _json(name, value, example).items():
        if not isinstance(parts, dict):
            raise ConfigError(f"{name}: {topic!r} maps to {parts!r}, not an object like "
                              f"{example}")
        topic = _topic(name, topic)
        for p, v in parts.items():
            out[(topic, _partition(name, topic, p))] = convert(v)  # names the option
    return out


def _topic(name: str, topic: Any) -> str:
    try:
        return validate_topic(topic)
    except SeglakeError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _partition(name: str, topic: str, p: Any) -> int:
    """A partition number from JSON: an integer, or (an object key) its digits."""
    try:
        if isinstance(p, bool) or not isinstance(p, int | str):
            raise ValueError
        return validate_partition(int(p))
    except (SeglakeError, ValueError):
        raise ConfigError(f"{name}: {topic}: {p!r} is not a partition number") from None


@dataclasses.dataclass(frozen=True)
class Bound:
    """One end of the read: Kafka's ``starting*`` or ``ending*`` options.

    Precedence as in Kafka: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``, then
    ``<side>Offsets`` (partitions a JSON option does not name take the next one's value).
    """

    side: str                                  # "starting" or "ending"
    default: int                               # EARLIEST or LATEST
    offsets: Mapping[TopicPartition, int]
    by_timestamp: Mapping[TopicPartition, int]
    timestamp: int | None = None
    strict: bool = False                       # no record at/after the timestamp: error

    @classmethod
    def parse(cls, options: Mapping[str, str], side: str) -> Bound:
        """The ``side`` options of a read, checked against Kafka's batch rules."""
        start = side == "starting"
        default, refused = (EARLIEST, LATEST) if start else (LATEST, EARLIEST)
        name = f"{side}Offsets"
        word = {EARLIEST: "earliest", LATEST: "latest"}
        raw = str(options.get(name, word[default])).strip()
        offsets: dict[TopicPartition, int] = {}
        if raw.lower() == word[refused]:
            raise ConfigError(f"{name}: {raw!r} is not allowed in a batch read (as in "
                              f"Kafka's source); use {word[default]!r} or JSON offsets")
        if raw.lower() != word[default]:
            offsets = _per_partition(name, raw, lambda v: _int(name, v, minimum=-2))
            bad = {f"{t}-{p}": o for (t, p), o in offsets.items() if o == refused}
            if bad:
                raise ConfigError(f"{name}: {refused} ({word[refused]}) is not allowed in a "
                                  f"batch read (as in Kafka's source): {bad}")
        by_name = f"{side}OffsetsByTimestamp"
        by_ts = options.get(by_name)
        ts = options.get(f"{side}Timestamp")
        strategy = str(options.get("startingOffsetsByTimestampStrategy", "error")).lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(f"startingOffsetsByTimestampStrategy: {strategy!r} is not "
                              "'error' or 'latest'")
        return cls(side, default, offsets,
                   _per_partition(by_name, by_ts, lambda v: _millis(by_name, v))
                   if by_ts is not None else {},
                   _millis(f"{side}Timestamp", ts) if ts is not None else None,
                   strict=start and strategy == "error")

    def named(self) -> dict[TopicPartition, str]:
        """Partitions a JSON option names, with the option's name."""
        return {**{tp: f"{self.side}Offsets" for tp in self.offsets},
                **{tp: f"{self.side}OffsetsByTimestamp" for tp in self.by_timestamp}}

    def option(self, tp: TopicPartition) -> str:
        """The option that decides ``tp``'s offset."""
        if self.timestamp is not None:
            return f"{self.side}Timestamp"
        return self.named().get(tp, f"{self.side}Offsets")

    def resolve(self, tp: TopicPartition, log: PartitionLog, *, fail_on_data_loss: bool
                ) -> int:
        """``tp``'s offset for this end of the read."""
        lso, leo = log.log_start_offset, log.log_end_offset
        ts = self.timestamp if self.timestamp is not None else self.by_timestamp.get(tp)
        if ts is not None:
            hit = log.offsets_for_times(ts)
            if hit is not None:
                return hit.offset
            if self.strict:
                raise ConfigError(
                    f"{self.option(tp)}: no record of {tp[0]}-{tp[1]} has a timestamp >= "
                    f"{ts} (largest {int(log.max_timestamps.max())}); "
                    "startingOffsetsByTimestampStrategy=latest starts at the log end instead")
            return leo
        offset = self.offsets.get(tp, self.default)
        if offset == EARLIEST:
            return lso
        if offset == LATEST:
            return leo
        if lso <= offset <= leo or not fail_on_data_loss:
            return min(max(offset, lso), leo)
        raise ConfigError(f"{self.option(tp)}: offset {offset} of {tp[0]}-{tp[1]} is outside "
                          f"its log [{lso}, {leo}] (failOnDataLoss=false clamps it)")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The options of one ``spark.read.format("seglake")``, parsed and checked."""

    root: str
    topics: tuple[str, ...] | None
    pattern: str | None
    assign: Mapping[str, tuple[int, ...]] | None
    starting: Bound
    ending: Bound
    include_headers: bool = False
    isolation_level: str = "read_uncommitted"
    fail_on_data_loss: bool = True
    split_bytes: int = DEFAULT_SPLIT_BYTES
    version: int | None = None

    @property
    def arrow_schema(self) -> pa.Schema:
        """Kafka source columns (without ``headers`` unless ``includeHeaders``)."""
        if self.include_headers:
            return KAFKA_SOURCE_SCHEMA
        return KAFKA_SOURCE_SCHEMA.remove(KAFKA_SOURCE_SCHEMA.get_field_index("headers"))


def _topic_choice(options: Mapping[str, str]) -> tuple[tuple[str, ...] | None, str | None,
                                                       dict[str, tuple[int, ...]] | None]:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n in options]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)}: give only one of subscribe, "
                          "subscribePattern, assign (as in Kafka's source)")
    topics = pattern = assign = None
    try:
        if "subscribe" in options:
            topics = tuple(dict.fromkeys(validate_topic(t.strip())
                                         for t in options["subscribe"].split(",")))
        if "subscribePattern" in options:
            pattern = options["subscribePattern"]
            re.compile(pattern)
    except (SeglakeError, re.error) as exc:
        raise ConfigError(f"{given[0]}: {exc}") from None
    if "assign" in options:
        example = '{"topic":[0,1]}'
        assign = {}
        for t, ps in _json("assign", options["assign"], example).items():
            if not isinstance(ps, list) or not all(isinstance(p, int) for p in ps):
                raise ConfigError(f"assign: {t!r} maps to {ps!r}, not a list of partition "
                                  f"numbers like {example}")
            topic = _topic("assign", t)
            assign[topic] = tuple(_partition("assign", topic, p) for p in ps)
    return topics, pattern, assign


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check a read's options (case-insensitive names); unknown names are an error.

    ``kafka.*`` options other than ``kafka.isolation.level`` are accepted and ignored, so a
    Kafka source's option map can be reused.

    Raises:
        ConfigError: naming the option and the value that is wrong.
    """
    options = CaseInsensitiveDict(options)
    unknown = sorted(k for k in options if k.lower() not in _KNOWN
                     and not k.lower().startswith("kafka."))
    if unknown:
        raise ConfigError(f"seglake: unknown option(s) {', '.join(unknown)}; known: "
                          f"{', '.join(OPTIONS)}")
    root = options.get("path")
    if not root:
        raise ConfigError('seglake: no lake root: spark.read.format("seglake").load(root)')
    levels = {options[n].strip().lower() for n in ("isolationLevel", "kafka.isolation.level")
              if n in options}
    if len(levels) > 1:
        raise ConfigError(f"isolationLevel, kafka.isolation.level: {sorted(levels)} disagree")
    if not levels <= set(_LEVELS):
        raise ConfigError(f"isolationLevel: {levels.pop()!r} is not one of {list(_LEVELS)}")
    version = options.get("versionAsOf")
    return ReadOptions(
        str(root), *_topic_choice(options), Bound.parse(options, "starting"),
        Bound.parse(options, "ending"),
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=levels.pop() if levels else "read_uncommitted",
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        split_bytes=_int("splitBytes", options.get("splitBytes", DEFAULT_SPLIT_BYTES),
                         minimum=1),
        version=None if version is None else _int("versionAsOf", version, minimum=0))


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


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _as_micros(v: Any) -> int:
    """Epoch microseconds of a Spark timestamp literal (naive: UTC), exactly."""
    if not isinstance(v, dt.datetime):
        raise TypeError(v)
    aware = v if v.tzinfo else v.replace(tzinfo=dt.UTC)
    return (aware - _EPOCH) // dt.timedelta(microseconds=1)


def _ceil_ms(us: int) -> int:
    return us if us in ALL else -(-us // 1000)


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
        return (self.topics == frozenset() or self.partitions == frozenset()
                or any(lo >= hi for lo, hi in (self.partition, self.offset, self.timestamp)))

    def admits(self, tp: TopicPartition) -> bool:
        return ((self.topics is None or tp[0] in self.topics)
                and (self.partitions is None or tp[1] in self.partitions)
                and self.partition[0] <= tp[1] < self.partition[1])


# ------------------------------------------------------------------------------ planning
def _partition_log(cache: IndexCache, root: str, tp: TopicPartition, rows: pa.Table
                   ) -> PartitionLog:
    """A partition's log whose segments come from ``cache`` (plan_extract's too)."""
    fs, base = cache.resolve(root)
    segs = [cache.segment(root, r["path"], size=r["size_bytes"], next_offset=r["next_offset"],
                          max_timestamp=r["max_timestamp"], run_id=r["run_id"],
                          load_indexes=False) for r in rows.to_pylist()]
    return PartitionLog(fs, lakefs.join(base, partition_dir_name(*tp)), segs)


def _by_partition(rows: pa.Table) -> dict[TopicPartition, pa.Table]:
    """Catalog rows (sorted by topic, partition) split per topic-partition."""
    keys = list(zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(),
                    strict=True))
    out: dict[TopicPartition, pa.Table] = {}
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            out[keys[start]] = rows.slice(start, i - start)
            start = i
    return out


def _select(opts: ReadOptions, catalog: Catalog, version: int
            ) -> dict[TopicPartition, pa.Table]:
    """The subscribed partitions' catalog rows; unknown topics/partitions are errors."""
    wanted = opts.topics or (tuple(opts.assign) if opts.assign is not None else None)
    parts = _by_partition(catalog.segments(wanted, version=version))
    present = {t for t, _ in parts}
    if opts.pattern is not None:
        parts = {tp: r for tp, r in parts.items() if re.fullmatch(opts.pattern, tp[0])}
    if opts.assign is not None:
        want = {(t, p) for t, ps in opts.assign.items() for p in ps}
        missing = sorted(want - set(parts))
        if missing:
            raise ConfigError(f"assign: no partition {_names(missing)} in the lake at "
                              f"{opts.root} (catalog version {version}); it has "
                              f"{_names(sorted(parts)) or 'none of these topics'}")
        parts = {tp: r for tp, r in parts.items() if tp in want}
    elif wanted and set(wanted) - present:
        known = sorted(set(catalog.segments(version=version).column("topic").to_pylist()))
        raise ConfigError(f"subscribe: no topic {', '.join(sorted(set(wanted) - present))} in "
                          f"the lake at {opts.root} (catalog version {version}); topics: "
                          f"{', '.join(known) or 'none'}")
    for bound in (opts.starting, opts.ending):
        for tp, name in bound.named().items():
            if tp not in parts:
                raise ConfigError(f"{name}: {tp[0]}-{tp[1]} is not a partition this read "
                                  f"covers ({_names(sorted(parts)) or 'none'})")
    return parts


def _names(tps: list[TopicPartition]) -> str:
    shown = ", ".join(f"{t}-{p}" for t, p in tps[:20])
    return shown + (f" and {len(tps) - 20} more" if len(tps) > 20 else "")


def plan_read(opts: ReadOptions, pushed: Pushed | None = None, *,
              cache: IndexCache | None = None) -> list[dict]:
    """The splits (rows of extract's ``SPLIT_SCHEMA``) a read with these options and
    pushed filters covers; runs where Spark plans the read (no Spark needed)."""
    pushed = pushed or Pushed()
    cache = cache or get_cache()
    catalog = Catalog(opts.root)
    version = catalog.version() if opts.version is None else opts.version
    parts = _select(opts, catalog, version)
    if pushed.nothing():
        return []
    ranges: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)  # per topic
    for tp, rows in parts.items():
        if not pushed.admits(tp):
            continue
        log = _partition_log(cache, opts.root, tp, rows)
        start, end = (b.resolve(tp, log, fail_on_data_loss=opts.fail_on_data_loss)
                      for b in (opts.starting, opts.ending))
        if start > end:
            raise ConfigError(f"{opts.starting.option(tp)} / {opts.ending.option(tp)}: "
                              f"{tp[0]}-{tp[1]} would start at offset {start}, after its "
                              f"ending offset {end}")
        lo, hi = _intersect((start, end), pushed.offset)
        if lo < hi:  # a pushed time range: plan_extract prunes and seeks (filter mode)
            ranges[tp[0]][tp[1]] = (lo, hi)
    splits: list[dict] = []
    for topic, bounds in ranges.items():  # one plan (one catalog read) per topic
        plan = plan_extract(opts.root, topic, start=pushed.timestamp[0],
                            end=pushed.timestamp[1], offset_ranges=bounds, mode="filter",
                            isolation_level=opts.isolation_level, split_bytes=opts.split_bytes,
                            version=version, cache=cache)
        splits += plan.splits.to_pylist()
    return splits


# ------------------------------------------------------------------------------ Spark
class SeglakeReader(DataSourceReader):
    """Plans splits (with pushed filters) on the planner, reads one split per task."""

    def __init__(self, opts: ReadOptions, bytes_accumulator: Any = None) -> None:
        self.opts = opts
        self.pushed = Pushed()
        self.bytes_accumulator = bytes_accumulator
        self.cache_bytes = LogConfig().index_cache_bytes

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take topic/partition/offset/timestamp comparisons; return the rest to Spark."""
        return iter([f for f in filters if not self.pushed.push(f)])

    def partitions(self) -> list[InputPartition]:
        """One input partition per split."""
        with lakefs.IO_STATS.counting(self.bytes_accumulator):
            return [InputPartition(s) for s in plan_read(self.opts, self.pushed)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The split's records as Arrow batches (nothing for Spark's placeholder)."""
        if partition.value is None:  # no splits: Spark reads one InputPartition(None)
            return
        with lakefs.IO_STATS.counting(self.bytes_accumulator):
            t = read_split(get_cache(self.cache_bytes), self.opts.root, partition.value,
                           isolation_level=self.opts.isolation_level)
        yield from t.select(self.opts.arrow_schema.names).to_batches()

class SeglakeDataSource(DataSource):
    """``spark.read.format("seglake").load(root)``; see the module docstring."""

    bytes_accumulator: Any = None

    @classmethod
    def name(cls) -> str:
        return "seglake"

    def schema(self) -> StructType:
        return from_arrow_schema(parse_options(self.options).arrow_schema)

    def reader(self, schema: StructType) -> SeglakeReader:
        opts = parse_options(self.options)
        expected = from_arrow_schema(opts.arrow_schema)
        if schema.simpleString() != expected.simpleString():
            raise ConfigError("seglake: the schema is the Kafka source's, "
                              f"{expected.simpleString()}; got {schema.simpleString()}")
        return SeglakeReader(opts, self.bytes_accumulator)


def register(spark: Any, *, bytes_accumulator: Any = None) -> None:
    """Register the ``seglake`` format on ``spark`` and enable Python filter pushdown.

    Args:
        spark: the session.
        bytes_accumulator: a Spark accumulator the planner and the tasks add the lake
            bytes they read to (tests and benchmarks).
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    source = SeglakeDataSource
    if bytes_accumulator is not None:
        source = type("CountingSeglakeDataSource", (SeglakeDataSource,),
                      {"bytes_accumulator": bytes_accumulator})
    spark.dataSource.register(source)
