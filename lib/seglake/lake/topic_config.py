"""Topic-level settings (Kafka's topic configs: ``kafka-configs --entity-type topics``).

Names, types, defaults and bounds are the rows of :data:`seglake.config.SETTINGS` that
have a topic-level name (``segment.bytes``, whose broker-level name is
``log.segment.bytes``); a topic's values are a :class:`~seglake.config.LogConfig`.

A topic's value is, lowest precedence first (Kafka's: a topic config overrides the
broker's default):

1. the default;
2. broker level: the job's ``--conf-file`` (whatever the names), then its ``--conf`` (or
   options, ``conf=``) by a broker-level name (``log.segment.bytes``);
3. the lake-wide topic configs (``seglake config LAKE --set``), then the topic's own
   (``seglake config LAKE --topic T --set``), kept in the catalog;
4. the job's ``--conf`` by the topic-level name (``segment.bytes``): that run's own
   override of every topic it writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from seglake.config import BY_TOPIC_NAME, LogConfig, parse_value, setting
from seglake.errors import ConfigError

__all__ = ["BY_TOPIC_NAME", "checked", "parse_value", "resolve", "with_topics"]

Stored = Mapping[str | None, Mapping[str, str]]


def _stored_layer(base: LogConfig, layer: Mapping[str, str]) -> LogConfig:
    """``base`` with stored topic configs applied, below what the job gave by topic name."""
    given = dict(base.topic_given)
    out = base.with_overrides({k: v for k, v in layer.items() if k not in given})
    return dataclasses.replace(out, topic_given=base.topic_given)


def resolve(stored: Mapping[str, str] | None = None, base: LogConfig | None = None) -> LogConfig:
    """A topic's settings: ``base`` (defaults, broker level) under ``stored`` (the
    topic's stored configs, lake-wide ones under its own) under ``base.topic_given``."""
    return _stored_layer(base or LogConfig(), stored or {})


def with_topics(base: LogConfig, stored: Stored) -> LogConfig:
    """``base`` resolved for every topic of the lake's stored configs (``stored``: ``{topic:
    overrides}``, ``None`` for the lake-wide ones): the lake-wide layer applied to the
    result, each topic with its own overrides in ``per_topic`` (``for_topic(t)``)."""
    lake_wide = dict(stored.get(None, {}))
    default = resolve(lake_wide, base)
    topics = tuple(
        (t, resolve({**lake_wide, **own}, base))
        for t, own in sorted((t, o) for t, o in stored.items() if t is not None and o)
    )
    return dataclasses.replace(default, per_topic=topics)


def checked(name: str, raw: Any) -> str:
    """``raw`` checked as topic setting ``name``, as it is stored; a name that is not a
    topic-level one is a :class:`ConfigError` saying which name to use."""
    if name not in BY_TOPIC_NAME:
        s, _ = setting(name)  # unknown: "did you mean"
        use = f"use {s.topic}" if s.topic else "a job setting: give it to the job with --conf"
        raise ConfigError(f"{name!r} is not a topic setting ({use})")
    parse_value(name, raw)
    return str(raw).strip()
