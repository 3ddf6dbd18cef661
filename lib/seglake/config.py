"""Settings, named as Kafka names them (``log.segment.bytes``, ``segment.bytes``, ``batch.size``).

One table, :data:`SETTINGS`, modelled on Kafka's ``LogConfig``: each row has the broker-level
name (``log.segment.bytes``), the topic-level name (``segment.bytes``; ``None`` for a job
setting), type, default, bounds and what seglake does with it. :class:`LogConfig` (a job's
and a topic's resolved values) and the topic configs kept in the lake
(:mod:`seglake.lake.topic_config`) both check values against it, so the bounds agree.

Values come from, in order of precedence: explicit overrides, a ``.properties`` file
(``conf/seglake.properties``), then the defaults below. Unknown names (with a "did you
mean") and bad values raise :class:`~seglake.errors.ConfigError` naming the key and value.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seglake.errors import ConfigError
from seglake.format import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_INDEX_SIZE_MAX_BYTES,
    INT32_MAX,
    LONG_MAX,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
)
from seglake.properties import read_properties

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
POLICIES = ("compact", "delete")  # cleanup.policy: a list of these
NO_LAKE_MEANING = "accepted and kept; no meaning in a lake"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of the table: a Kafka setting and what seglake does with it."""

    broker: str | None  # broker-level (or job) name; None: a topic config without one
    topic: str | None  # topic-level name; None: not a topic config
    attr: str | None  # LogConfig attribute; None: accepted, not used by seglake
    kind: type  # int, float, str, bool or list (comma-separated names)
    default: Any
    doc: str  # what seglake does with it
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    pattern: tuple[str, str] | None = None  # (regex a str value matches whole, its form)

    @property
    def name(self) -> str:
        """The name seglake shows for it: the broker-level one, else the topic-level one."""
        return self.broker or self.topic or ""

    def parse(self, raw: Any, key: str | None = None) -> Any:
        """``raw`` (a string from a file, a flag or the lake) as this setting's type, in
        bounds; :class:`ConfigError` names ``key`` (the name given) and the value."""
        key = key or self.name
        text = printable(key, raw).strip()
        if self.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ConfigError(f"{key}={raw!r}: expected true or false")
            return text.lower() == "true"
        if self.kind is list:
            parts = sorted({p.strip().lower() for p in text.split(",") if p.strip()})
            bad = [p for p in parts if self.choices and p not in self.choices]
            if bad or (self.choices and not parts):
                raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(self.choices or ())}")
            return ",".join(parts)
        if self.kind is str:
            if self.choices and text not in self.choices:
                raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(self.choices)}")
            if self.pattern and not re.fullmatch(self.pattern[0], text):
                raise ConfigError(f"{key}={raw!r}: expected {self.pattern[1]}")
            return text
        try:
            value = self.kind(text.replace("_", ""))
        except ValueError:
            what = "a number" if self.kind is float else "an integer"
            raise ConfigError(f"{key}={raw!r} is not {what}") from None
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{key}={value} is below its minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{key}={value} is above its maximum {self.maximum}")
        return value


def printable(key: str, raw: Any) -> str:
    """``raw`` as text, refused (:class:`ConfigError` naming ``key`` and the character)
    if it holds a character that is not printable (control, format, line or paragraph
    separators, other than spaces around it): no Kafka setting's value has one, and a
    newline in a stored value would forge a line of ``seglake config``'s output."""
    text = str(raw)
    inner = text.strip()
    if not inner.isprintable():
        i = next(i for i, c in enumerate(inner) if not c.isprintable())
        raise ConfigError(
            f"{key}={raw!r}: character {inner[i]!r} at {i} is not printable "
            "(no setting's value has control characters)"
        )
    return text


def _s(
    broker: str | None,
    topic: str | None,
    attr: str | None,
    kind: type,
    default: Any,
    doc: str,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    pattern: tuple[str, str] | None = None,
) -> Setting:
    if maximum is None and kind is int and minimum is not None:
        maximum = LONG_MAX
    return Setting(broker, topic, attr, kind, default, doc, minimum, maximum, choices, pattern)


def _kept(
    broker: str | None,
    topic: str,
    kind: type,
    default: Any,
    why: str,
    minimum: int | None = None,
    maximum: int | None = None,
    pattern: tuple[str, str] | None = None,
) -> Setting:
    """A topic config seglake accepts, checks and keeps but has no use for (``why``)."""
    doc = f"{NO_LAKE_MEANING} ({why})"
    return _s(broker, topic, None, kind, default, doc, minimum, maximum, pattern=pattern)


WEEK_MS = 168 * 3600 * 1000
NO_CLOCK = "a lake ingests history: no broker clock to compare"
REMOTE = "the lake is the remote storage"
# Kafka's ThrottledReplicaListValidator: '*' or [partitionId]:[brokerId],... (empty entries too)
REPLICAS = (
    r"\*|([0-9]+:[0-9]+)?( *, *([0-9]+:[0-9]+)?)*",
    "the literal '*' or a list of replicas [partitionId]:[brokerId],...",
)
# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # Kafka's topic configs (LogConfig) with their broker-level synonyms
    _s("log.segment.bytes", "segment.bytes", "segment_bytes", int, 1 << 30,
       "roll when segment size + batch size would exceed this (every writing job)",
       14, INT32_MAX),
    _s("log.roll.ms", "segment.ms", "roll_ms", int, WEEK_MS,
       "roll when a batch is this much later than the segment's first", 1),
    _s("log.roll.jitter.ms", "segment.jitter.ms", "roll_jitter_ms", int, 0,
       "up to this much is subtracted from segment.ms (per segment, from its base offset)", 0),
    _s("log.index.size.max.bytes", "segment.index.bytes", "index_size_max_bytes", int,
       DEFAULT_INDEX_SIZE_MAX_BYTES,
       "index size; a full offset or time index rolls the segment (12: one time index entry)",
       12, INT32_MAX),
    _s("log.index.interval.bytes", "index.interval.bytes", "index_interval_bytes", int,
       DEFAULT_INDEX_INTERVAL_BYTES, "bytes of batches between two index entries", 0, INT32_MAX),
    _s("log.retention.ms", "retention.ms", "retention_ms", int, WEEK_MS,
       "retention: delete segments older than this (-1: never)", -1),
    _s("log.retention.bytes", "retention.bytes", "retention_bytes", int, -1,
       "retention: delete oldest segments while a partition is larger (-1: unlimited)", -1),
    _s("log.segment.delete.delay.ms", "file.delete.delay.ms", "file_delete_delay_ms", int,
       3600 * 1000, "files of segments a commit removed are deleted this long after it "
       "(readers pinned to an older catalog version keep working until then)", 0),
    _s("log.cleanup.policy", "cleanup.policy", "cleanup_policy", list, "delete",
       "compact: the compact job cleans; delete: retention by time and size", choices=POLICIES),
    _s("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio",
       "min_cleanable_dirty_ratio", float, 0.5, "compact: clean when the dirty ratio reaches it",
       0.0, 1.0),
    _s("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms", "min_compaction_lag_ms",
       int, 0, "compact: records younger than this stay uncleaned", 0),
    _s("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms", "max_compaction_lag_ms",
       int, LONG_MAX, "compact: a segment older than this is cleaned whatever the ratio", 1),
    _s("log.cleaner.delete.retention.ms", "delete.retention.ms", "delete_retention_ms", int,
       86_400_000, "compact: tombstones and markers are kept this long after cleaning", 0),
    _s("compression.type", "compression.type", "compression_type", str, "none",
       "codec of the batches written (producer, uncompressed: none)",
       choices=("none", "gzip", "snappy", "lz4", "zstd", "producer", "uncompressed")),
    _s("compression.gzip.level", "compression.gzip.level", "gzip_level", int, 6,
       "gzip level 1-9", 1, 9),
    _s("compression.lz4.level", "compression.lz4.level", "lz4_level", int, 9,
       "lz4 level 1-17; 9 uses the fast compressor, others LZ4 HC (Kafka's rule)", 1, 17),
    _s("compression.zstd.level", "compression.zstd.level", "zstd_level", int, 3,
       "zstd level -131072..22", -131072, 22),
    _s("log.message.timestamp.type", "message.timestamp.type", "timestamp_type", str,
       "CreateTime", "LogAppendTime: every record of the run gets the run's start time; "
       "CreateTime: the input's timestamp (none: the run's start)",
       choices=("CreateTime", "LogAppendTime")),
    _s("message.max.bytes", "max.message.bytes", "max_message_bytes", int, 1048588,
       "a batch larger than this is refused (Kafka's RecordTooLargeException)", 0, INT32_MAX),
    _kept("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms", int,
          LONG_MAX, NO_CLOCK, 0),
    _kept("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms", int,
          3600 * 1000, NO_CLOCK, 0),
    _kept("log.flush.interval.messages", "flush.messages", int, LONG_MAX,
          "a run's files are complete before its commit", 1),
    _kept("log.flush.interval.ms", "flush.ms", int, LONG_MAX,
          "a run's files are complete before its commit", 0),
    _kept("log.preallocate", "preallocate", bool, False, "segments are written whole"),
    _kept("min.insync.replicas", "min.insync.replicas", int, 1, "no replicas", 1, INT32_MAX),
    _kept("unclean.leader.election.enable", "unclean.leader.election.enable", bool, False,
          "no leaders"),
    _kept(None, "leader.replication.throttled.replicas", str, "", "no replication",
          pattern=REPLICAS),
    _kept(None, "follower.replication.throttled.replicas", str, "", "no replication",
          pattern=REPLICAS),
    _kept(None, "remote.storage.enable", bool, False, REMOTE),
    _kept(None, "remote.log.copy.disable", bool, False, REMOTE),
    _kept(None, "remote.log.delete.on.disable", bool, False, REMOTE),
    _kept("log.local.retention.ms", "local.retention.ms", int, -2, "no local tier", -2),
    _kept("log.local.retention.bytes", "local.retention.bytes", int, -2, "no local tier", -2),
    # producer and job settings (no topic config)
    _s("batch.size", None, "batch_size", int, 16384,
       "target record batch size in bytes (uncompressed records)", 1, INT32_MAX),
    _s("batch.max.records", None, "batch_max_records", int, 0,
       "at most this many records per batch (0: only batch.size limits)", 0, INT32_MAX),
    _s("num.partitions", None, "num_partitions", int, 1,
       "partitions of a topic when the input has no partition column", 1, INT32_MAX),
    _s("seglake.index.cache.bytes", None, "index_cache_bytes", int, 256 * 1024 * 1024,
       "per-worker cache of open index files", 0),
    _s("seglake.read.corrupt", None, "read_corrupt", str, "raise",
       "a damaged batch (CRC, magic, length): raise (the job fails, exit 2) or skip it "
       "(every other record is read; the job prints each batch skipped)",
       choices=("raise", "skip")),
    _s("seglake.ingest.task.max.records", None, "task_max_records", int, 4_000_000,
       "a partition with more records is split across tasks by offset range", 1),
    _s("seglake.ingest.order", None, "ingest_order", str, "input",
       "order of records when offsets are assigned: input or timestamp",
       choices=("input", "timestamp")),
    _s("seglake.ingest.shuffle", None, "ingest_shuffle", str, "auto",
       "auto, always or never: never writes each input task's records of a partition "
       "as its own segments (no shuffle); auto does so when the pieces are large",
       choices=("auto", "always", "never")),
    _s("seglake.ingest.local.min.records", None, "local_min_records", int, 10_000,
       "auto: skip the shuffle when (input task, partition) pieces average this many records", 1),
    _s("seglake.ingest.staging.grace.ms", None, "staging_grace_ms", int, 3600 * 1000,
       "an ingest removes staged files of uncommitted runs untouched this long", 0),
    _s("seglake.ingest.buffer.bytes", None, "ingest_buffer_bytes", int, 16 * 1024 * 1024,
       "without a shuffle: records buffered per task before encoding, over all its partitions",
       1),
    _s("seglake.key.index.enable", None, "key_index_enable", bool, True,
       "false: the segments SegmentWriter writes (ingest, ingest_batch, the sinks' pieces) "
       "get no .keyindex: key lookups scan them and say so, `seglake index build` adds it; "
       "the writers that copy batches (stream commits, cleaning, merge, recover) still do"),
)
# fmt: on
# broker-level names Kafka also takes, with the factor to the setting's unit (ms)
ALIASES = {
    "log.roll.hours": ("log.roll.ms", 3600 * 1000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3600 * 1000),
    "log.retention.hours": ("log.retention.ms", 3600 * 1000),
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
    "log.flush.scheduler.interval.ms": ("log.flush.interval.ms", 1),
}
BY_BROKER_NAME = {s.broker: s for s in SETTINGS if s.broker}
BY_TOPIC_NAME = {s.topic: s for s in SETTINGS if s.topic}
_DEFAULTS = {s.attr: s.default for s in SETTINGS if s.attr}
KNOWN_NAMES = sorted({*BY_BROKER_NAME, *BY_TOPIC_NAME, *ALIASES})


def did_you_mean(name: str, known: list[str] | None = None) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` (every name), or ``""``."""
    close = difflib.get_close_matches(name, known if known is not None else KNOWN_NAMES, 1, 0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def setting(name: str) -> tuple[Setting, int]:
    """The row of ``name`` (broker-level, topic-level or an alias) and the factor of an
    alias's unit; an unknown name is a :class:`ConfigError` with a "did you mean"."""
    name, scale = ALIASES.get(name, (name, 1))
    found = BY_TOPIC_NAME.get(name) or BY_BROKER_NAME.get(name)
    if found is None:
        raise ConfigError(f"unknown setting {name!r}{did_you_mean(name)}")
    return found, scale


def parse_value(name: str, raw: Any) -> Any:
    """``raw`` as setting ``name``'s type and unit, checked against the table."""
    s, scale = setting(name)
    value = s.parse(raw, name)
    return value * scale if scale != 1 else value


def _precedence(name: str) -> int:
    """Within one layer of overrides: an alias, then the broker-level name, then the
    topic-level name wins (Kafka: ``log.roll.ms`` over ``log.roll.hours``)."""
    return 0 if name in ALIASES else 2 if name in BY_TOPIC_NAME else 1


def _default(attr: str) -> Any:
    return _DEFAULTS[attr]


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Resolved settings (a job's, or one topic's); attribute names are the Kafka names in
    snake case. ``per_topic``: the topics whose own configs differ (:meth:`for_topic`);
    ``topic_given``: settings given to the job by their topic-level names, which win over a
    topic's stored configs (:func:`seglake.lake.topic_config.with_topics`)."""

    segment_bytes: int = _default("segment_bytes")
    index_interval_bytes: int = _default("index_interval_bytes")
    index_size_max_bytes: int = _default("index_size_max_bytes")
    roll_ms: int = _default("roll_ms")
    roll_jitter_ms: int = _default("roll_jitter_ms")
    retention_ms: int = _default("retention_ms")
    retention_bytes: int = _default("retention_bytes")
    cleanup_policy: str = _default("cleanup_policy")
    min_cleanable_dirty_ratio: float = _default("min_cleanable_dirty_ratio")
    min_compaction_lag_ms: int = _default("min_compaction_lag_ms")
    max_compaction_lag_ms: int = _default("max_compaction_lag_ms")
    delete_retention_ms: int = _default("delete_retention_ms")
    max_message_bytes: int = _default("max_message_bytes")
    batch_size: int = _default("batch_size")
    batch_max_records: int = _default("batch_max_records")
    compression_type: str = _default("compression_type")
    gzip_level: int = _default("gzip_level")
    zstd_level: int = _default("zstd_level")
    lz4_level: int = _default("lz4_level")
    timestamp_type: str = _default("timestamp_type")
    num_partitions: int = _default("num_partitions")
    index_cache_bytes: int = _default("index_cache_bytes")
    read_corrupt: str = _default("read_corrupt")
    task_max_records: int = _default("task_max_records")
    ingest_order: str = _default("ingest_order")
    ingest_shuffle: str = _default("ingest_shuffle")
    local_min_records: int = _default("local_min_records")
    ingest_buffer_bytes: int = _default("ingest_buffer_bytes")
    key_index_enable: bool = _default("key_index_enable")
    staging_grace_ms: int = _default("staging_grace_ms")
    file_delete_delay_ms: int = _default("file_delete_delay_ms")
    per_topic: tuple[tuple[str, LogConfig], ...] = ()
    topic_given: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for s in SETTINGS:
            if s.attr is not None:
                s.parse(getattr(self, s.attr))  # the table's type, bounds and choices
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:  # Kafka's validateValues
            raise ConfigError(
                f"min.compaction.lag.ms={self.min_compaction_lag_ms} is above "
                f"max.compaction.lag.ms={self.max_compaction_lag_ms}"
            )

    @property
    def codec(self) -> int:
        """Codec id of ``compression.type`` (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd;
        ``producer`` and ``uncompressed``: none, the input has no producer codec)."""
        return CODECS.get(self.compression_type, 0)

    @property
    def compression_level(self) -> int | None:
        return self.level_of(self.codec)

    def level_of(self, codec: int) -> int | None:
        """The configured level of ``codec`` (gzip, lz4, zstd; ``None``: a codec without)."""
        return {1: self.gzip_level, 3: self.lz4_level, 4: self.zstd_level}.get(codec)

    @property
    def max_index_entries(self) -> int:
        """Entries an offset index holds before it is full (time index: // 12)."""
        return self.index_size_max_bytes // OFFSET_INDEX_ENTRY_SIZE

    @property
    def max_time_index_entries(self) -> int:
        return self.index_size_max_bytes // TIME_INDEX_ENTRY_SIZE

    @property
    def max_segment_ms(self) -> int:
        """Kafka's ``LogConfig.maxSegmentMs``: ``segment.ms``, or ``max.compaction.lag.ms``
        when lower on a compacted topic (its segments must roll to be cleaned in time)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.roll_ms)
        return self.roll_ms

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` has ``compact``."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """``cleanup.policy`` has ``delete``."""
        return "delete" in self.cleanup_policy.split(",")

    def every_topic(self) -> tuple[LogConfig, ...]:
        """These settings and every topic's own."""
        return (self, *(c for _, c in self.per_topic))

    def for_topic(self, topic: str) -> LogConfig:
        """The settings of ``topic``: its own if it has stored configs, else these."""
        return next((c for t, c in self.per_topic if t == topic), self)

    def append_time(self, topic: str | None = None) -> tuple[bool, frozenset[str]]:
        """``message.timestamp.type``: whether records get the run's time (LogAppendTime)
        and the topics whose own setting is the other way (``topic`` given: its own)."""
        if topic is not None:
            return self.for_topic(topic).timestamp_type == "LogAppendTime", frozenset()
        default = self.timestamp_type == "LogAppendTime"
        return default, frozenset(
            t for t, c in self.per_topic if (c.timestamp_type == "LogAppendTime") != default
        )

    def to_properties(self) -> dict[str, str]:
        """Kafka-named ``{name: value}`` strings (what a ``.properties`` file holds)."""
        return {s.name: str(getattr(self, s.attr)) for s in SETTINGS if s.attr}

    def topic_values(self, stored: Mapping[str, str] | None = None) -> dict[str, str]:
        """``{topic-level name: value}`` of every topic config; one without a lake meaning
        (no attribute) shows its ``stored`` value, else its default."""
        out = {}
        for s in SETTINGS:
            if s.topic:
                value = getattr(self, s.attr) if s.attr else (stored or {}).get(s.topic, s.default)
                out[s.topic] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> LogConfig:
        """A copy with Kafka-named overrides applied (``{"log.segment.bytes": "1048576"}``,
        ``{"segment.bytes": ...}``); a topic-level name beats the broker-level one. Names
        given at topic level are remembered in ``topic_given``."""
        if not overrides:
            return self
        changes: dict[str, Any] = {}
        given = dict(self.topic_given)
        for key in sorted(overrides, key=_precedence):
            s, _ = setting(key)
            value = parse_value(key, overrides[key])
            if s.attr is not None:
                changes[s.attr] = value
            if key in BY_TOPIC_NAME:
                given[key] = str(overrides[key]).strip()
        return dataclasses.replace(self, **changes, topic_given=tuple(sorted(given.items())))

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        *,
        producer: Mapping[str, Any] | None = None,
    ) -> LogConfig:
        """Kafka defaults, then ``producer`` (a Kafka producer's compression settings),
        then the ``.properties`` file at ``path``: both broker level (as a broker's
        ``server.properties``: a topic's stored configs win over them, whatever the
        names), then ``overrides``."""
        config = cls()
        for broker_level in (producer, None if path is None else read_properties(path)):
            if broker_level:
                config = dataclasses.replace(config.with_overrides(broker_level), topic_given=())
        return config.with_overrides(overrides)


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from ``--conf`` flags into a dict; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"--conf {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out
