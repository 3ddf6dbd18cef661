"""``compact``: merge small segments and clean compacted topics, as a Spark job.

The driver plans from the catalog (:mod:`seglake.lake.compaction`); each segment group
is one Spark task that writes its new segment into the run's staging directory; the
driver commits every new row in one catalog commit and publishes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession

from seglake.config import LogConfig
from seglake.lake.compaction import CompactResult, run_compaction

__all__ = ["compact"]


def compact(
    spark: SparkSession,
    root: str,
    *,
    topics: str | Iterable[str] | None = None,
    partitions: str | Iterable[int] | None = None,
    merge_only: bool = False,
    dry_run: bool = False,
    conf: Mapping[str, Any] | None = None,
    base: LogConfig | None = None,
    run_id: str | None = None,
    now_ms: int | None = None,
) -> CompactResult:
    """Compact (``cleanup.policy=compact``) or merge (``delete``, or ``merge_only``) the
    segments of ``root``'s partitions; returns the per-partition summary.

    Args:
        topics, partitions: only these (default: all).
        merge_only: concatenate adjacent segments up to ``segment.bytes``, never clean.
        dry_run: plan and report, write nothing.
        conf: Kafka-named settings that win over the topic configs stored in the lake
            (``{"segment.bytes": "1048576", "delete.retention.ms": "0"}``).
        base: broker-level settings (``--conf-file``).
        run_id: idempotency key (rerunning a committed run only finishes publishing).
        now_ms: the cleaner's clock (default: now).
    """
    sc = spark.sparkContext

    def map_tasks(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return sc.parallelize(items, len(items)).map(fn).collect() if items else []

    return run_compaction(
        root,
        map_tasks=map_tasks,
        topics=[topics] if isinstance(topics, str) else topics,
        partitions=partitions,
        merge_only=merge_only,
        dry_run=dry_run,
        conf=conf,
        base=base,
        run_id=run_id,
        now_ms=now_ms,
    )
