"""Topic configuration overrides, kept in the catalog (Kafka keeps them in ZooKeeper /
KRaft metadata; ``kafka-configs --entity-type topics --alter --add-config``).

They are properties of the catalog's Delta table, so every change is one Delta commit
(a ``SET TBLPROPERTIES`` version, with a run id like any seglake change) and a reader
of catalog version V sees the configuration of version V::

    seglake.topic.<topic>      {"cleanup.policy": "compact", ...}   one topic's overrides
    seglake.topic_defaults     {...}                                 every topic's (Kafka's
                                                                     --entity-default)

Why table properties and not a second table: a second Delta table cannot commit
atomically with the catalog; properties are in the same log, versioned with the rows
and read with the snapshot (no extra file). Only topic-level names of
:data:`seglake.config.SETTINGS` are accepted, each value checked. Configs of a topic the
lake does not have are refused unless asked for (``create=True``; Kafka's
``kafka-configs`` refuses an unknown topic too), so a mistyped name commits nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from seglake.config import LogConfig, did_you_mean
from seglake.errors import CatalogError, ConfigError, SegmentNotFoundError
from seglake.lake.catalog import Catalog, CommitResult
from seglake.lake.topic_config import BY_TOPIC_NAME, checked, parse_value, resolve, with_topics
from seglake.storage.naming import validate_topic
from seglake.storage.retention import RetentionRules

__all__ = [
    "DEFAULTS_KEY",
    "TOPIC_PREFIX",
    "adopt_configs",
    "alter_config",
    "check_topic",
    "lake_topics",
    "overrides_for",
    "stored_configs",
    "topic_configs",
    "topic_rules",
]

TOPIC_PREFIX = "seglake.topic."
DEFAULTS_KEY = "seglake.topic_defaults"
MAX_STORED_CHARS = 1 << 20  # one topic's configs: about 40 short settings, a few kB


def _key(topic: str | None) -> str:
    return DEFAULTS_KEY if topic is None else TOPIC_PREFIX + validate_topic(topic)


def _decode(table: Any, where: str) -> dict[str | None, dict[str, str]]:
    """The topic configs among ``table``'s properties, each checked (:func:`_stored`)."""
    out: dict[str | None, dict[str, str]] = {}
    for key, raw in table.metadata().configuration.items():
        if key == DEFAULTS_KEY or key.startswith(TOPIC_PREFIX):
            topic = None if key == DEFAULTS_KEY else key[len(TOPIC_PREFIX) :]
            out[topic] = _stored(key, raw, f"{where} (version {table.version()})")
    return out


def _stored(key: str, raw: str, where: str) -> dict[str, str]:
    """Table property ``key``'s overrides, checked as a new value is (a damaged or
    altered catalog: :class:`CatalogError` naming ``where`` and the property, one line)."""

    def damaged(why: str) -> CatalogError:
        return CatalogError(f"{where}: table property {key!r} {why} (not seglake config's)")

    if len(raw) > MAX_STORED_CHARS:
        raise damaged(f"holds {len(raw)} characters (a topic's configs: < {MAX_STORED_CHARS})")
    try:
        if key != DEFAULTS_KEY:
            validate_topic(key[len(TOPIC_PREFIX) :])
        value = json.loads(raw)
    except RecursionError:
        raise damaged("is JSON nested too deep") from None
    except ValueError as exc:  # JSONDecodeError, InvalidTopicError
        raise damaged(f"is not a topic's configs: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise damaged(f"is not a JSON object of setting names to strings: {raw[:80]!r}")
    try:
        return {name: checked(name, v) for name, v in value.items()}
    except ConfigError as exc:
        raise damaged(f"holds {exc}") from None


def stored_configs(
    catalog: Catalog, *, version: int | None = None
) -> dict[str | None, dict[str, Any]]:
    """``{topic: overrides}`` (``None``: the lake-wide defaults) at ``version``; a stored
    property that is not what :func:`alter_config` writes is a :class:`CatalogError`."""
    if not catalog.exists():
        return {}
    return _decode(catalog._open(version), catalog.uri)


def lake_topics(catalog: Catalog, *, version: int | None = None) -> list[str]:
    """Topics the lake has: those with segments and those with stored configs."""
    stored = stored_configs(catalog, version=version)
    rows = catalog.segments(version=version).column("topic").to_pylist()
    return sorted({*rows, *(t for t in stored if t is not None)})


def topic_configs(catalog: Catalog, base: LogConfig, *, version: int | None = None) -> LogConfig:
    """``base`` (a job's settings) with the lake's topic configs: ``for_topic(t)`` is the
    :class:`LogConfig` topic ``t`` is written, compacted and kept with (precedence:
    :mod:`seglake.lake.topic_config`). No catalog: ``base``."""
    if not catalog.exists():
        return base
    return with_topics(base, stored_configs(catalog, version=version))


def check_topic(catalog: Catalog, topic: str) -> None:
    """A topic the lake does not have is refused, naming a close one."""
    known = lake_topics(catalog)
    if topic not in known:
        raise SegmentNotFoundError(
            f"topic {topic!r} is not in the lake{did_you_mean(topic, known)}; "
            "give --create to configure it before its first ingest"
        )


def overrides_for(stored: Mapping[str | None, Mapping[str, str]], topic: str) -> dict[str, str]:
    """A topic's stored settings: the lake-wide defaults under its own overrides."""
    return {**stored.get(None, {}), **stored.get(topic, {})}


def alter_config(
    catalog: Catalog,
    topic: str | None,
    *,
    set_: Mapping[str, Any] | None = None,
    delete: Iterable[str] = (),
    run_id: str | None = None,
    create: bool = False,
) -> CommitResult:
    """Set and delete overrides of ``topic`` (``None``: the lake-wide defaults) in one
    catalog commit. Names are topic-level (``segment.bytes``); values are checked. A
    topic the lake does not have is refused unless ``create``."""
    key = _key(topic)
    sets = {name: checked(name, value) for name, value in (set_ or {}).items()}
    drops = list(delete)
    unknown = [n for n in drops if n not in BY_TOPIC_NAME]
    if unknown:
        raise ConfigError(
            f"cannot delete unknown topic setting(s) {unknown}"
            f"{did_you_mean(unknown[0], sorted(BY_TOPIC_NAME))}"
        )
    if topic is not None and (sets or drops) and not create:
        check_topic(catalog, topic)
    both = sorted(set(sets) & set(drops))
    if both:
        raise ConfigError(f"settings both set and deleted: {both}")

    def plan(_current: Any) -> tuple[Any, int, int]:
        def write(table: Any, props: Any) -> None:
            current = _decode(table, catalog.uri).get(topic, {})
            new = {k: v for k, v in {**current, **sets}.items() if k not in drops}
            table.alter.set_table_properties(
                {key: json.dumps(new, sort_keys=True)},
                raise_if_not_exists=False,
                commit_properties=props,
            )

        return write, 0, 0

    return catalog._transact(
        "config",
        run_id or f"config-{uuid.uuid4().hex[:12]}",
        topics=[],
        expected_version=None,
        plan=plan,
    )


def adopt_configs(
    catalog: Catalog, configs: Mapping[str, Mapping[str, str]], *, run_id: str
) -> tuple[CommitResult, dict[str, dict[str, str]]]:
    """Topics and their overrides taken from elsewhere (a broker's metadata: ``register``),
    in one commit: every topic becomes one the lake has (an empty one too), each
    topic-level setting seglake knows set over what the lake stored. Returns the commit
    and what was not kept, ``{topic: {name: why}}`` (a name that is not a seglake topic
    setting, a value it refuses)."""
    kept: dict[str, dict[str, str]] = {}
    dropped: dict[str, dict[str, str]] = {}
    for topic, own in configs.items():
        validate_topic(topic)
        kept[topic] = {}
        for name, value in own.items():
            try:
                kept[topic][name] = checked(name, value)
            except ConfigError as exc:
                dropped.setdefault(topic, {})[name] = f"{value} ({exc})"

    def plan(_current: Any) -> tuple[Any, int, int]:
        def write(table: Any, props: Any) -> None:
            stored = _decode(table, catalog.uri)
            new = {
                _key(t): json.dumps({**stored.get(t, {}), **own}, sort_keys=True)
                for t, own in sorted(kept.items())
            }
            table.alter.set_table_properties(
                new, raise_if_not_exists=False, commit_properties=props
            )

        return write, 0, 0

    result = catalog._transact("config", run_id, topics=[], expected_version=None, plan=plan)
    return result, dropped


def topic_rules(
    catalog: Catalog, rows: Any, rules: RetentionRules, *, version: int | None = None
) -> tuple[dict[str, RetentionRules], bool]:
    """Each topic's retention rules: the run's ``rules``, where they leave time or size
    off the topic's stored ``retention.ms``/``retention.bytes`` (rules asked for on that
    topic), and no time or size rule on a topic whose ``cleanup.policy`` lacks ``delete``
    (Kafka deletes by time and size only then); log start offsets always apply. Also
    whether any rule was asked for (by the run or in a topic's config)."""
    stored = stored_configs(catalog, version=version)
    out = {}
    asked = not rules.empty
    for topic in sorted(set(rows.column("topic").to_pylist())):
        own = overrides_for(stored, topic)
        asked |= "retention.ms" in own or "retention.bytes" in own
        ms, size = rules.retention_ms, rules.retention_bytes
        if ms < 0 and "retention.ms" in own:
            ms = parse_value("retention.ms", own["retention.ms"])
        if size < 0 and "retention.bytes" in own:
            size = parse_value("retention.bytes", own["retention.bytes"])
        if not resolve(own).delete:
            ms = size = -1
        out[topic] = RetentionRules(ms, size, rules.log_start_offsets)
    return out, asked
