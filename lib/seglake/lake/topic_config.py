"""Topic-level settings (Kafka's topic configs: ``kafka-configs --entity-type topics``).

Each has Kafka's topic-level name and the broker-level name that sets its default::

    cleanup.policy             log.cleanup.policy                  delete
    min.cleanable.dirty.ratio  log.cleaner.min.cleanable.ratio     0.5
    min.compaction.lag.ms      log.cleaner.min.compaction.lag.ms   0
    max.compaction.lag.ms      log.cleaner.max.compaction.lag.ms   2^63-1
    delete.retention.ms        log.cleaner.delete.retention.ms     86400000 (1 day)
    segment.bytes              log.segment.bytes                   1 GiB
    segment.index.bytes        log.index.size.max.bytes            10 MiB
    index.interval.bytes       log.index.interval.bytes            4096
    retention.ms               log.retention.ms                    7 days (-1: never)
    retention.bytes            log.retention.bytes                 -1

A topic's value is, lowest precedence first: the default, the broker-level name (a
``LogConfig``: ``--conf-file``), the topic's override stored in the lake (``seglake
config``), a job's ``--conf`` (either name).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.record.schema import LONG_MAX
from seglake.storage.index_builder import DEFAULT_INTERVAL

POLICIES = ("delete", "compact", "compact,delete")


@dataclasses.dataclass(frozen=True)
class TopicSetting:
    name: str
    broker: str
    attr: str
    kind: type
    default: Any
    minimum: float | None = None


TOPIC_SETTINGS: tuple[TopicSetting, ...] = (
    TopicSetting("cleanup.policy", "log.cleanup.policy", "cleanup_policy", str, "delete"),
    TopicSetting(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        "min_cleanable_dirty_ratio",
        float,
        0.5,
        0.0,
    ),
    TopicSetting(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        "min_compaction_lag_ms",
        int,
        0,
        0,
    ),
    TopicSetting(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "max_compaction_lag_ms",
        int,
        LONG_MAX,
        1,
    ),
    TopicSetting(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        "delete_retention_ms",
        int,
        86_400_000,
        0,
    ),
    TopicSetting("segment.bytes", "log.segment.bytes", "segment_bytes", int, 1 << 30, 14),
    TopicSetting(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        "segment_index_bytes",
        int,
        10 * 1024 * 1024,
        4,
    ),
    TopicSetting(
        "index.interval.bytes",
        "log.index.interval.bytes",
        "index_interval_bytes",
        int,
        DEFAULT_INTERVAL,
        0,
    ),
    TopicSetting("retention.ms", "log.retention.ms", "retention_ms", int, 7 * 86_400_000, -1),
    TopicSetting("retention.bytes", "log.retention.bytes", "retention_bytes", int, -1, -1),
)
BY_TOPIC_NAME = {s.name: s for s in TOPIC_SETTINGS}
BY_BROKER_NAME = {s.broker: s for s in TOPIC_SETTINGS}


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """One topic's resolved settings (attribute names: the topic-level names)."""

    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = DEFAULT_INTERVAL
    retention_ms: int = 7 * 86_400_000
    retention_bytes: int = -1

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    def to_dict(self) -> dict[str, str]:
        return {s.name: str(getattr(self, s.attr)) for s in TOPIC_SETTINGS}


def parse_value(name: str, raw: Any) -> Any:
    """``raw`` as the type of topic setting ``name`` (topic- or broker-level name);
    :class:`ConfigError` names the key and the value."""
    s = BY_TOPIC_NAME.get(name) or BY_BROKER_NAME.get(name)
    if s is None:
        raise ConfigError(
            f"unknown topic setting {name!r}; known: {', '.join(sorted(BY_TOPIC_NAME))}"
        )
    text = str(raw).strip()
    if s.kind is str:
        value: Any = ",".join(p.strip() for p in text.split(",") if p.strip())
        value = ",".join(sorted(value.split(","))) if value else value
        if value not in POLICIES:
            raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(POLICIES)}")
        return value
    try:
        value = s.kind(text.replace("_", ""))
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not {'a number' if s.kind is float else 'an integer'}"
        ) from None
    if s.minimum is not None and value < s.minimum:
        raise ConfigError(f"{name}={value} is below its minimum {s.minimum}")
    if s.attr == "min_cleanable_dirty_ratio" and value > 1:
        raise ConfigError(f"{name}={value} is above its maximum 1")
    return value


def is_topic_setting(name: str) -> bool:
    return name in BY_TOPIC_NAME or name in BY_BROKER_NAME


def split_conf(conf: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(topic settings, the rest)`` of a job's ``--conf`` pairs; a name that both a
    topic setting and :class:`LogConfig` know (``log.segment.bytes``) goes to both."""
    topic, rest = {}, {}
    known = set(LogConfig().to_properties())
    for k, v in (conf or {}).items():
        if is_topic_setting(k):
            topic[k] = v
            if k in known:
                rest[k] = v
        else:
            rest[k] = v
    return topic, rest


def resolve(
    stored: Mapping[str, str] | None = None,
    conf: Mapping[str, Any] | None = None,
    base: LogConfig | None = None,
) -> TopicConfig:
    """The topic's settings: defaults < ``base`` (broker level) < ``stored`` < ``conf``."""
    base = base or LogConfig()
    values: dict[str, Any] = {
        "segment_bytes": base.segment_bytes,
        "segment_index_bytes": base.index_size_max_bytes,
        "index_interval_bytes": base.index_interval_bytes,
        "retention_ms": base.retention_ms,
        "retention_bytes": base.retention_bytes,
    }
    for layer in (stored or {}, conf or {}):
        broker_first = sorted(layer.items(), key=lambda kv: kv[0] in BY_TOPIC_NAME)
        for k, v in broker_first:  # a topic-level name beats the broker-level one
            s = BY_TOPIC_NAME.get(k) or BY_BROKER_NAME.get(k)
            if s is None:
                raise ConfigError(f"unknown topic setting {k!r}")
            values[s.attr] = parse_value(k, v)
    return TopicConfig(**values)
