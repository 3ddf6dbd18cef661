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
from seglake.lake.compaction import CompactOptions, CompactResult, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.location import Root
from seglake.spark.session import seglake_errors, task_mapper

__all__ = ["DRIVER_MERGE_CONF", "compact", "compact_with"]

DRIVER_MERGE_CONF = "spark.seglake.compact.driver.merge.bytes"
DEFAULT_DRIVER_MERGE_BYTES = 1 << 30


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
    segments of ``root``'s partitions; returns the per-partition summary. The keywords:
    :class:`~seglake.lake.compaction.CompactOptions` (this is where a caller's become
    one, as the job's flags do in ``spark/jobs.py``)."""
    options = CompactOptions(topics, partitions, merge_only, dry_run, conf, base, run_id, now_ms)
    return compact_with(spark, root, options)


@seglake_errors()  # a task's own error, not Spark's wrapper
def compact_with(
    spark: SparkSession, root: Root | LakeHandle, options: CompactOptions
) -> CompactResult:
    """:func:`compact` of one options object (the job's)."""
    return run_compaction(
        LakeHandle.open(root),
        options,
        map_tasks=task_mapper(spark),
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
