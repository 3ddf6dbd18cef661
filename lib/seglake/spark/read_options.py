"""Options of a ``spark.read.format("seglake")`` read (:data:`OPTIONS`): the Spark Kafka
source's names and batch rules, and a few of seglake's (:data:`SEGLAKE_OPTIONS`), parsed
and checked into a :class:`ReadOptions`; which of Spark's are taken, ignored or refused is
:mod:`seglake.spark.kafka_options`' table. :class:`Bound` resolves a start or end to an
offset per partition. Errors name the option and the value
(:class:`~seglake.errors.ConfigError`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import CaseInsensitiveDict

from seglake.errors import ConfigError, SeglakeError
from seglake.format import ISOLATION_LEVELS
from seglake.lake.handle import LakeHandle
from seglake.lake.scan import offset_bound
from seglake.lake.time_travel import version_as_of
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark.extract_plan import DEFAULT_SPLIT_BYTES, parse_time
from seglake.spark.kafka_options import BATCH_SOURCE, STREAM_SOURCE, check_options
from seglake.spark.topic_pattern import TopicPattern
from seglake.storage.log import EARLIEST_TIMESTAMP as EARLIEST
from seglake.storage.log import LATEST_TIMESTAMP as LATEST
from seglake.storage.log import PartitionLog
from seglake.storage.naming import validate_partition, validate_topic
from seglake.storage.window_records import NO_TS_HI, NO_TS_LO

__all__ = [
    "ALL",
    "OPTIONS",
    "Bound",
    "Range",
    "ReadOptions",
    "TopicPartition",
    "int_option",
    "parse_options",
]

TopicPartition = tuple[str, int]
Range = tuple[int, int]  # [lo, hi)
ALL: Range = (NO_TS_LO, NO_TS_HI)  # unbounded (extract's "no timestamp filter" too)

OPTIONS: dict[str, str] = {
    "subscribe": "comma-separated topics (one of subscribe, subscribePattern, assign "
    "is required, as in Kafka's source)",
    "subscribePattern": "a Java regular expression found in a topic name (`topic` reads "
    "`topic1` and `my-topic`; `^topic$` only `topic`); never an internal topic",
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
    "ignoreCorruptBatches": "`false` (default): a damaged batch (CRC, magic, length) fails "
    "the read with CorruptRecordError naming file, position and offsets; `true`: skip it "
    "(every other record is read; each skipped batch is logged by its task), as Spark's "
    "ignoreCorruptFiles does for files",
    "isolationLevel": "`read_uncommitted` (default) or `read_committed` (drops aborted "
    "transactions); also `kafka.isolation.level`",
    "splitBytes": f"largest piece of a segment one task reads (default {DEFAULT_SPLIT_BYTES})",
    "versionAsOf": "catalog version to read (default: the newest)",
    "timestampAsOf": "the catalog version at this time (epoch ms or ISO-8601), as Delta's "
    "`timestampAsOf` picks it: the last commit at or before it",
}
STREAM_OPTIONS: dict[str, str] = {
    "maxOffsetsPerTrigger": "about this many offsets per micro-batch, each partition's share "
    "by its lag, floored (Kafka's rateLimit)",
    "minOffsetsPerTrigger": "fewest new offsets that start a micro-batch (until maxTriggerDelay)",
    "maxTriggerDelay": "longest wait for minOffsetsPerTrigger (Spark's time string, default "
    "15m; 500ms, 30s, 5m, 1h, 1d)",
}
# seglake's own options of a read (the rest are Spark's Kafka source's: kafka_options)
SEGLAKE_OPTIONS = (
    "path",
    "isolationLevel",
    "ignoreCorruptBatches",
    "splitBytes",
    "versionAsOf",
    "timestampAsOf",
)
BATCH_ONLY = ("versionAsOf", "timestampAsOf")  # a stream follows the newest version
_LEVELS = ISOLATION_LEVELS


# ------------------------------------------------------------------------------ options
def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = str(options.get(name, default)).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}: {options[name]!r} is not 'true' or 'false'")
    return value == "true"


def int_option(name: str, value: Any, *, minimum: int) -> int:
    """Option `name`'s integer value, at least `minimum` (ConfigError naming both)."""
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


def _json(name: str, value: str, example: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"{name}: {value!r} is not JSON like {example} ({exc})") from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{name}: {value!r} is not a JSON object like {example}")
    return parsed


def _per_partition(
    name: str, value: str, convert: Callable[[Any], int]
) -> dict[TopicPartition, int]:
    """``{"topic": {"0": v, ...}}`` -> ``{(topic, 0): convert(v)}``."""
    example = '{"topic":{"0":23}}'
    out: dict[TopicPartition, int] = {}
    for topic, parts in _json(name, value, example).items():
        if not isinstance(parts, dict):
            raise ConfigError(f"{name}: {topic!r} maps to {parts!r}, not an object like {example}")
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

    Precedence as in Kafka (KafkaSourceProvider.getKafkaOffsetRangeLimit): the first
    given of ``<side>Timestamp``, ``<side>OffsetsByTimestamp``, ``<side>Offsets``; a JSON
    one must name every partition the read is assigned (:meth:`named`).
    """

    side: str  # "starting" or "ending"
    default: int  # EARLIEST or LATEST
    offsets: Mapping[TopicPartition, int]
    by_timestamp: Mapping[TopicPartition, int]
    timestamp: int | None = None
    strict: bool = False  # no record at/after the timestamp: error

    @classmethod
    def parse(cls, options: Mapping[str, str], side: str, *, stream: bool = False) -> Bound:
        """The ``side`` options of a read, checked against Kafka's batch rules (a stream
        starts at ``latest`` by default and may start at either end)."""
        start = side == "starting"
        refused: int | None
        default, refused = (EARLIEST, LATEST) if start else (LATEST, EARLIEST)
        if stream:
            default, refused = LATEST, None
        name = f"{side}Offsets"
        word: dict[int | None, str | None] = {EARLIEST: "earliest", LATEST: "latest", None: None}
        raw = str(options.get(name, word[default])).strip()
        offsets: dict[TopicPartition, int] = {}
        if stream and raw.lower() in ("earliest", "latest"):
            default = EARLIEST if raw.lower() == "earliest" else LATEST
        elif raw.lower() == word[refused]:
            raise ConfigError(
                f"{name}: {raw!r} is not allowed in a batch read (as in "
                f"Kafka's source); use {word[default]!r} or JSON offsets"
            )
        if raw.lower() != word[default]:
            offsets = _per_partition(name, raw, lambda v: int_option(name, v, minimum=-2))
            bad = {f"{t}-{p}": o for (t, p), o in offsets.items() if o == refused}
            if bad:
                raise ConfigError(
                    f"{name}: {refused} ({word[refused]}) is not allowed in a "
                    f"batch read (as in Kafka's source): {bad}"
                )
        by_name = f"{side}OffsetsByTimestamp"
        by_ts = options.get(by_name)
        ts = options.get(f"{side}Timestamp")
        strategy = str(options.get("startingOffsetsByTimestampStrategy", "error")).lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(
                f"startingOffsetsByTimestampStrategy: {strategy!r} is not 'error' or 'latest'"
            )
        return cls(
            side,
            default,
            offsets,
            _per_partition(by_name, by_ts, lambda v: _millis(by_name, v))
            if by_ts is not None
            else {},
            _millis(f"{side}Timestamp", ts) if ts is not None else None,
            strict=start and strategy == "error",
        )

    def named(self) -> tuple[str, frozenset[TopicPartition]] | None:
        """The JSON option in force (Kafka uses one: ``<side>Timestamp``, else
        ``<side>OffsetsByTimestamp``, else ``<side>Offsets``) and the partitions it
        names; None when no JSON option is."""
        if self.timestamp is not None:
            return None
        if self.by_timestamp:
            return f"{self.side}OffsetsByTimestamp", frozenset(self.by_timestamp)
        if self.offsets:
            return f"{self.side}Offsets", frozenset(self.offsets)
        return None

    def option(self, tp: TopicPartition) -> str:
        """The option that decides ``tp``'s offset."""
        if self.timestamp is not None:
            return f"{self.side}Timestamp"
        named = self.named()
        return named[0] if named is not None else f"{self.side}Offsets"

    def resolve(
        self,
        tp: TopicPartition,
        log: PartitionLog,
        *,
        fail_on_data_loss: bool,
        within_log: bool = True,
    ) -> int:
        """``tp``'s offset for this end of the read (:func:`seglake.lake.scan.offset_bound`;
        ``within_log=False``: as Kafka resolves it, before any check against the log)."""
        by_ts = self.by_timestamp.get(tp) if self.by_timestamp else None
        return offset_bound(
            log,
            tp,
            offset=self.default if self.by_timestamp else self.offsets.get(tp, self.default),
            timestamp=self.timestamp if self.timestamp is not None else by_ts,
            strict=self.strict,
            fail_on_data_loss=fail_on_data_loss,
            option=self.option(tp),
            within_log=within_log,
        )


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """The options of one ``spark.read.format("seglake")``, parsed and checked."""

    root: LakeHandle  # from parse_options: parsed once, pickled to the tasks
    topics: tuple[str, ...] | None
    pattern: TopicPattern | None
    assign: Mapping[str, tuple[int, ...]] | None
    starting: Bound
    ending: Bound
    include_headers: bool = False
    isolation_level: str = "read_uncommitted"
    fail_on_data_loss: bool = True
    split_bytes: int = DEFAULT_SPLIT_BYTES
    version: int | None = None
    on_corrupt: str = "raise"
    timestamp_as_of: int | None = None  # resolved to ``version`` by :meth:`time_travelled`
    min_partitions: int | None = None  # minPartitions: at least this many tasks
    max_records_per_partition: int | None = None  # maxRecordsPerPartition: offsets a task
    ignored: tuple[str, ...] = ()  # Kafka options without a lake meaning (one warning)

    def time_travelled(self) -> ReadOptions:
        """These options with ``timestampAsOf`` resolved to its catalog version (Delta's
        rule, :func:`seglake.lake.time_travel.version_as_of`; one listing of the log)."""
        if self.timestamp_as_of is None:
            return self
        version = version_as_of(self.root, self.timestamp_as_of)
        return dataclasses.replace(self, version=version, timestamp_as_of=None)

    @property
    def arrow_schema(self) -> pa.Schema:
        """Kafka source columns (without ``headers`` unless ``includeHeaders``)."""
        if self.include_headers:
            return KAFKA_SOURCE_SCHEMA
        return KAFKA_SOURCE_SCHEMA.remove(KAFKA_SOURCE_SCHEMA.get_field_index("headers"))


_STRATEGIES = ("subscribe", "subscribePattern", "assign")


def _topic_choice(
    options: Mapping[str, str],
) -> tuple[tuple[str, ...] | None, TopicPattern | None, dict[str, tuple[int, ...]] | None]:
    """Exactly one of Kafka's three ways to name what is read, as Spark's
    KafkaSourceProvider.validateGeneralOptions checks them (its messages)."""
    given = [n for n in _STRATEGIES if n in options]
    if len(given) != 1:
        how = "Only one" if given else "One"
        raise ConfigError(
            f"{how} of the following options {'can' if given else 'must'} be specified for "
            f"Kafka source: {', '.join(_STRATEGIES)}. See the docs for more details."
            + (f" (given: {', '.join(given)})" if given else "")
        )
    topics = pattern = assign = None
    if "subscribe" in options:  # Spark: split(","), trimmed, empty names dropped
        raw = options["subscribe"]
        names = [t.strip() for t in raw.split(",") if t.strip()]
        if not names:
            raise ConfigError(
                f"No topics to subscribe to as specified value for option 'subscribe' is {raw!r}"
            )
        try:
            topics = tuple(dict.fromkeys(validate_topic(t) for t in names))
        except SeglakeError as exc:
            raise ConfigError(f"subscribe: {exc}") from None
    if "subscribePattern" in options:
        pattern = TopicPattern(options["subscribePattern"].strip())
    if "assign" in options:
        example = '{"topic":[0,1]}'
        assign = {}
        for t, ps in _json("assign", options["assign"], example).items():
            if not isinstance(ps, list) or not all(isinstance(p, int) for p in ps):
                raise ConfigError(
                    f"assign: {t!r} maps to {ps!r}, not a list of partition numbers like {example}"
                )
            topic = _topic("assign", t)
            assign[topic] = tuple(_partition("assign", topic, p) for p in ps)
        if not any(assign.values()):
            raise ConfigError(
                "No topicpartitions to assign as specified value for option 'assign' is "
                f"{options['assign']!r}"
            )
    return topics, pattern, assign


def parse_options(options: Mapping[str, str], *, stream: bool = False) -> ReadOptions:
    """Check a read's options (case-insensitive names): Spark's Kafka source's
    (:mod:`seglake.spark.kafka_options`: broker-only ones are kept in ``ignored``, for
    one warning of the read) and seglake's (:data:`SEGLAKE_OPTIONS`); any other name is
    an error.

    ``stream``: a ``readStream`` (``startingOffsets`` defaults to ``latest``, the
    :data:`STREAM_OPTIONS` work, ``endingOffsets*`` and ``versionAsOf`` are refused).

    Raises:
        ConfigError: naming the option and the value that is wrong.
    """
    place = STREAM_SOURCE if stream else BATCH_SOURCE
    if stream:
        batch_only = [n for n in BATCH_ONLY if n in CaseInsensitiveDict(options)]
        if batch_only:
            raise ConfigError(
                f"{', '.join(batch_only)}: not for a streaming read: a stream follows the "
                "newest catalog version"
            )
    ignored = check_options(options, place, SEGLAKE_OPTIONS)
    options = CaseInsensitiveDict({k: v for k, v in options.items() if k not in ignored})
    root = options.get("path")
    if not root:
        raise ConfigError('seglake: no lake root: spark.read.format("seglake").load(root)')
    levels = {
        options[n].strip().lower()
        for n in ("isolationLevel", "kafka.isolation.level")
        if n in options
    }
    if len(levels) > 1:
        raise ConfigError(f"isolationLevel, kafka.isolation.level: {sorted(levels)} disagree")
    if not levels <= set(_LEVELS):
        raise ConfigError(f"isolationLevel: {levels.pop()!r} is not one of {list(_LEVELS)}")
    version = options.get("versionAsOf")
    at = options.get("timestampAsOf")
    if version is not None and at is not None:
        raise ConfigError(
            "versionAsOf, timestampAsOf: cannot specify both version and timestamp when "
            "time travelling (as in Delta)"
        )
    return ReadOptions(
        LakeHandle.open(str(root)),  # the data source's options: the lake opened once
        *_topic_choice(options),
        Bound.parse(options, "starting", stream=stream),
        Bound.parse(options, "ending"),
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=levels.pop() if levels else "read_uncommitted",
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        split_bytes=int_option(
            "splitBytes", options.get("splitBytes", DEFAULT_SPLIT_BYTES), minimum=1
        ),
        version=None if version is None else int_option("versionAsOf", version, minimum=0),
        on_corrupt="skip" if _bool(options, "ignoreCorruptBatches", False) else "raise",
        timestamp_as_of=None if at is None else _millis("timestampAsOf", at),
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        ignored=ignored,
    )


def _positive(options: Mapping[str, str], name: str) -> int | None:
    """Option ``name`` as an integer >= 1 (Spark: "must be positive"), or None."""
    value = options.get(name)
    return None if value is None else int_option(name, value, minimum=1)
