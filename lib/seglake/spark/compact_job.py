"""``compact``: merge small segments and clean compacted topics, as a Spark job.

The driver plans from the catalog (:mod:`seglake.lake.compaction`); each cleaned segment
group is one Spark task, merge groups are packed by bytes into a multiple of the cores'
tasks (as a read's splits); a task writes its new segments into the run's staging
directory; the driver commits every new row in one catalog commit and publishes.

Merges (no record decoded: the kernel copies the bytes) of a lake on the local
filesystem run on the driver instead of as tasks: always with a ``local[...]`` master
(the executors would share the driver's disk), else up to 1 GiB (a Spark stage costs
about what copying that many bytes does); the Spark conf ``DRIVER_MERGE_CONF`` (bytes)
overrides both, ``0``: always tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import SparkSession

from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.format import LONG_MAX
from seglake.lake.compaction import CompactResult, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.location import Root
from seglake.spark.session import seglake_errors, task_mapper

__all__ = ["DRIVER_MERGE_CONF", "compact"]

DRIVER_MERGE_CONF = "spark.seglake.compact.driver.merge.bytes"
DEFAULT_DRIVER_MERGE_BYTES = 1 << 30


@seglake_errors()  # a task's own error, not Spark's wrapper
def compact(
    spark: SparkSession,
    root: Root | LakeHandle,
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
    return run_compaction(
        LakeHandle.open(root),
        map_tasks=task_mapper(spark),
        topics=[topics] if isinstance(topics, str) else topics,
        partitions=partitions,
        merge_only=merge_only,
        dry_run=dry_run,
        conf=conf,
        base=base,
        run_id=run_id,
        now_ms=now_ms,
        driver_merge_bytes=driver_merge_bytes(spark),
        parallelism=spark.sparkContext.defaultParallelism,
    )


def driver_merge_bytes(spark: SparkSession) -> int:
    """Bytes of merges the driver runs itself (see the module docstring)."""
    raw = spark.conf.get(DRIVER_MERGE_CONF, None)
    if raw is None:
        local = str(spark.sparkContext.master).startswith("local")
        return LONG_MAX if local else DEFAULT_DRIVER_MERGE_BYTES
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{DRIVER_MERGE_CONF}={raw!r}: expected a number of bytes") from None
