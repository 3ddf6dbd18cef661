"""Retention rules: which whole segments to delete from the oldest, by Kafka's rules
(``UnifiedLog.deleteOldSegments``), on catalog rows (no I/O here; applying them to a lake
is :mod:`seglake.lake.retention`).

Per partition, segments sorted by base offset, the newest never deleted by these rules;
each rule deletes a prefix of what the previous ones left, so the result is a prefix:

    time     log.retention.ms >= 0: while now - largestTimestamp > retention.ms
             (a segment without timestamps uses its commit time, as Kafka uses mtime)
    size     log.retention.bytes >= 0: while total - segment size >= retention.bytes
    start    a log start offset L (deleteRecords): while the next segment's base <= L

Only the rules a job asks for apply (:func:`retention_rules`): Kafka's broker defaults
(``log.retention.ms`` = 7 days) only when asked for, never behind a job's back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.record.schema import micros_to_millis
from seglake.storage.naming import validate_partition, validate_topic

__all__ = [
    "RetentionRules",
    "parse_log_start_offsets",
    "plan_retention",
    "retention_rules",
]

Key = tuple[str, int]


def parse_log_start_offsets(specs: Iterable[str]) -> dict[Key, int]:
    """``["orders:3:1000"]`` -> ``{("orders", 3): 1000}`` (topic names have no ``:``)."""
    out: dict[Key, int] = {}
    for spec in specs:
        parts = spec.rsplit(":", 2)
        try:
            topic, part, off = parts
            key = (validate_topic(topic), validate_partition(int(part)))
            out[key] = int(off)
        except ValueError as exc:
            raise ConfigError(
                f"log start offset {spec!r}: expected TOPIC:PARTITION:OFFSET ({exc})"
            ) from None
        if out[key] < 0:
            raise ConfigError(f"log start offset {spec!r} is negative")
    return out


def _largest_timestamps(rows: pa.Table) -> np.ndarray:
    ts = rows.column("max_timestamp").to_numpy().astype(np.int64)
    if (ts < 0).any():
        committed = micros_to_millis(pc.cast(rows.column("committed_at"), pa.int64()).to_numpy())
        ts = np.where(ts < 0, committed, ts)
    return cast(np.ndarray, ts)


def plan_retention(
    rows: pa.Table,
    *,
    now_ms: int,
    retention_ms: int = -1,
    retention_bytes: int = -1,
    log_start_offsets: Mapping[Key, int] | None = None,
) -> pa.Table:
    """Catalog rows of the segments retention deletes (with a ``reason`` column).

    Args:
        rows: catalog rows (any partitions; e.g. :meth:`Catalog.segments`).
        now_ms: the current time, epoch ms.
        retention_ms: ``log.retention.ms`` (-1: no time limit).
        retention_bytes: ``log.retention.bytes`` per partition (-1: no size limit).
        log_start_offsets: ``{(topic, partition): offset}`` to delete below.
    """
    starts = dict(log_start_offsets or {})
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]
    )
    topic = rows.column("topic").to_pylist()
    part = rows.column("partition").to_pylist()
    base = rows.column("base_offset").to_numpy()
    size = rows.column("size_bytes").to_numpy()
    largest = _largest_timestamps(rows) if rows.num_rows else np.zeros(0, np.int64)
    deleted: list[tuple[int, str]] = []  # (row, reason)
    i, n = 0, rows.num_rows
    while i < n:
        j = i
        while j < n and topic[j] == topic[i] and part[j] == part[i]:
            j += 1
        k = i  # segments i..k-1 are deleted so far; j-1 (the newest) never by these rules
        if retention_ms >= 0:
            k = _time_breached(k, j, largest, now_ms, retention_ms, deleted)
        if retention_bytes >= 0:
            k = _size_breached(k, j, size, retention_bytes, deleted)
        start = starts.get((topic[i], part[i]))
        if start is not None:
            k = _start_breached(k, j, base, start, deleted)
        i = j
    out = rows.take(pa.array([row for row, _ in deleted], pa.int64()))
    return out.append_column("reason", pa.array([why for _, why in deleted], pa.string()))


def _time_breached(
    k: int,
    j: int,
    largest: np.ndarray,
    now_ms: int,
    retention_ms: int,
    deleted: list[tuple[int, str]],
) -> int:
    """Kafka's ``deleteRetentionMsBreachedSegments`` over rows ``k..j-1`` of a partition
    (the last never): each deleted row to ``deleted``; returns the first row kept."""
    while k < j - 1 and now_ms - int(largest[k]) > retention_ms:
        why = f"time: largest timestamp {int(largest[k])} older than {now_ms} - {retention_ms}"
        deleted.append((k, why))
        k += 1
    return k


def _size_breached(
    k: int, j: int, size: np.ndarray, retention_bytes: int, deleted: list[tuple[int, str]]
) -> int:
    """Kafka's ``deleteRetentionSizeBreachedSegments`` (as :func:`_time_breached`)."""
    left = int(size[k:j].sum())
    while k < j - 1 and left - int(size[k]) >= retention_bytes:
        left -= int(size[k])
        deleted.append(
            (k, f"size: partition stays at {left} >= {retention_bytes} bytes without it")
        )
        k += 1
    return k


def _start_breached(
    k: int, j: int, base: np.ndarray, start: int, deleted: list[tuple[int, str]]
) -> int:
    """Kafka's ``deleteLogStartOffsetBreachedSegments`` (as :func:`_time_breached`): a
    segment goes when the next one starts at or below the log start offset."""
    while k < j - 1 and int(base[k + 1]) <= start:
        deleted.append((k, f"log start offset {start}: next segment starts at {int(base[k + 1])}"))
        k += 1
    return k


@dataclasses.dataclass(frozen=True)
class RetentionRules:
    """The rules one retention run applies (-1 / empty: that rule is off)."""

    retention_ms: int = -1
    retention_bytes: int = -1
    log_start_offsets: Mapping[Key, int] = dataclasses.field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.retention_ms < 0 and self.retention_bytes < 0 and not self.log_start_offsets

    def __str__(self) -> str:
        on = []
        if self.retention_ms >= 0:
            on.append(f"log.retention.ms={self.retention_ms}")
        if self.retention_bytes >= 0:
            on.append(f"log.retention.bytes={self.retention_bytes}")
        if self.log_start_offsets:
            on.append(
                "log start offset "
                + ", ".join(f"{t}-{p}:{o}" for (t, p), o in sorted(self.log_start_offsets.items()))
            )
        return "; ".join(on) if on else "no rule"

    def plan(self, rows: pa.Table, now_ms: int) -> pa.Table:
        """:func:`plan_retention` with these rules."""
        return plan_retention(
            rows,
            now_ms=now_ms,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            log_start_offsets=self.log_start_offsets,
        )


_RULE_KEYS = ("log.retention.ms", "log.retention.hours", "log.retention.minutes")


def retention_rules(
    *,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    log_start_offsets: Mapping[Key, int] | None = None,
    overrides: Mapping[str, Any] | None = None,
    defaults: LogConfig | None = None,
) -> RetentionRules:
    """Exactly the rules asked for: the arguments, else Kafka-named ``overrides`` (a job's
    ``--conf log.retention.ms=...``, ``.hours``, ``.minutes``, ``log.retention.bytes``),
    else ``defaults`` (a :class:`LogConfig`: the broker defaults, only when the caller
    asks for them, e.g. ``--broker-defaults``). Anything not asked for is off."""
    given = dict(overrides or {})
    asked = LogConfig().with_overrides(given)  # parses and checks the values
    if retention_ms is None and any(k in given for k in _RULE_KEYS):
        retention_ms = asked.retention_ms
    if retention_bytes is None and "log.retention.bytes" in given:
        retention_bytes = asked.retention_bytes
    if defaults is not None:
        retention_ms = defaults.retention_ms if retention_ms is None else retention_ms
        retention_bytes = defaults.retention_bytes if retention_bytes is None else retention_bytes
    for name, value in (
        ("log.retention.ms", retention_ms),
        ("log.retention.bytes", retention_bytes),
    ):
        if value is not None and value < -1:
            raise ConfigError(f"{name}={value} is below its minimum -1")
    return RetentionRules(
        -1 if retention_ms is None else int(retention_ms),
        -1 if retention_bytes is None else int(retention_bytes),
        dict(log_start_offsets or {}),
    )
