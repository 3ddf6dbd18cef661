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
prune segments by the catalog's min/max timestamps (:mod:`seglake.spark.read_plan`);
``key = ...`` / ``key IN (...)`` (string literals as UTF-8, or binary) drop the segments
whose ``.keyindex`` filter rules every key out, on the planner (its log says how many:
:mod:`seglake.lake.key_plan`), and a task reads the others' records by key
(:func:`~seglake.storage.key_lookup.find_keys`, key bytes compared; a segment without a
usable index scanned, its task's log saying so).
A :class:`~seglake.lake.scan.Scan` (a time filter) then plans the segment tasks, packed
as extract's (:func:`~seglake.lake.packing.pack`: about the session's default
parallelism, at least 4 MiB and at most 4 ``splitBytes``; with ``minPartitions`` or
``maxRecordsPerPartition`` one per offset range, as Kafka's source); every
task is one Spark input partition, read by :func:`iter_splits` (about 8 MiB of log decoded
at a time) and handed to Spark as Arrow batches.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    Filter,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.lake.packing import pack
from seglake.lake.scan import SegmentTask
from seglake.lake.scan_read import GROUP_BYTES, SplitReads, iter_splits
from seglake.spark.kafka_options import warn_ignored
from seglake.spark.read_options import (
    OPTIONS,
    ReadOptions,
    parse_options,
)
from seglake.spark.read_plan import Pushed, plan_read
from seglake.spark.worker_errors import one_line_errors
from seglake.storage.index_cache import get_cache

__all__ = [  # with the planning names tests take from here
    "OPTIONS",
    "Pushed",
    "ReadOptions",
    "SeglakeDataSource",
    "SeglakeReader",
    "parse_options",
    "plan_read",
    "register",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ Spark
@one_line_errors
class SeglakeReader(DataSourceReader):
    """Plans splits (with pushed filters) on the planner, packs them into tasks, reads
    each task's splits together."""

    def __init__(
        self, opts: ReadOptions, bytes_accumulator: Any = None, parallelism: int = 0
    ) -> None:
        self.opts = opts
        warn_ignored(opts.ignored, "source")  # once per read or stream query (its planner)
        self.parallelism = parallelism or os.cpu_count() or 1
        self.pushed = Pushed()
        self.bytes_accumulator = bytes_accumulator
        self.cache_bytes = LogConfig().index_cache_bytes
        self.group_bytes = GROUP_BYTES  # log bytes a task decodes at once (iter_splits)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take topic/partition/offset/timestamp comparisons; return the rest to Spark."""
        return iter([f for f in filters if not self.pushed.push(f)])

    def partitions(self) -> list[InputPartition]:
        """The segment tasks packed into Spark tasks (:func:`~seglake.lake.packing.pack`,
        as extract's): one input partition per task."""
        with lakefs.IO_STATS.counting(self.bytes_accumulator):
            splits = plan_read(self.opts, self.pushed)
        return self.packed(splits)

    def packed(self, splits: list[SegmentTask]) -> list[InputPartition]:
        """``splits`` packed into input partitions as the options ask (by bytes, or one
        per offset range with ``minPartitions`` / ``maxRecordsPerPartition``)."""
        opts = self.opts
        tasks = pack(
            splits,
            self.parallelism,
            split_bytes=opts.split_bytes,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
        return [InputPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of a task (a list of splits) or of one split (the stream source's
        input partitions) as Arrow batches (nothing for Spark's placeholder), decoded a
        group of about ``group_bytes`` of log at a time (:func:`iter_splits`): a task's
        memory is bounded by the group, as extract's."""
        if partition.value is None:  # no splits: Spark reads one InputPartition(None)
            return
        value = partition.value
        splits = value if isinstance(value, list) else [value]
        opts, names = self.opts, self.opts.arrow_schema.names
        skipped: list[str] = []
        # versionAsOf, else the version the splits were planned on (the current one then)
        planned = opts.version if opts.version is not None else splits[0].version
        by_user = opts.version is not None
        how = SplitReads(
            opts.isolation_level, opts.on_corrupt, skipped, planned, by_user, opts.include_headers
        )
        if self.pushed.keys is not None:  # key = / key IN: each segment read by key
            how.keys, how.scanned = tuple(sorted(self.pushed.keys)), []
        cache = get_cache(self.cache_bytes)
        with lakefs.IO_STATS.counting(self.bytes_accumulator):  # versionAsOf: pinned
            for t in iter_splits(
                cache, opts.root.location, splits, how, group_bytes=self.group_bytes
            ):
                yield from t.select(names).to_batches()
        for line in skipped:  # ignoreCorruptBatches: the task's log names each one
            log.warning("seglake: skipped a damaged batch: %s", line)
        for line in how.scanned or ():
            log.warning("seglake: key filter without a key index: %s", line)


@one_line_errors
class SeglakeDataSource(DataSource):
    """``spark.read.format("seglake").load(root)``; see the module docstring."""

    bytes_accumulator: Any = None
    parallelism: int = 0  # the session's default parallelism (register); 0: the CPUs
    reader_class: type[SeglakeReader] = SeglakeReader

    @classmethod
    def name(cls) -> str:
        return "seglake"

    def schema(self) -> StructType:
        try:
            opts = parse_options(self.options)
        except ConfigError:
            try:  # a readStream's options (startingOffsets=latest, maxOffsetsPerTrigger...)
                opts = parse_options(self.options, stream=True)
            except ConfigError:
                pass
            else:
                return from_arrow_schema(opts.arrow_schema)
            raise
        return from_arrow_schema(opts.arrow_schema)

    def reader(self, schema: StructType) -> SeglakeReader:
        opts = parse_options(self.options).time_travelled()
        expected = from_arrow_schema(opts.arrow_schema)
        if schema.simpleString() != expected.simpleString():
            raise ConfigError(
                "seglake: the schema is the Kafka source's, "
                f"{expected.simpleString()}; got {schema.simpleString()}"
            )
        return self.reader_class(opts, self.bytes_accumulator, self.parallelism)

    def streamReader(self, schema: StructType) -> Any:
        """``spark.readStream.format("seglake")``: see :mod:`seglake.spark.stream_source`."""
        from seglake.spark.stream_source import SeglakeStreamReader

        return SeglakeStreamReader(self.options, self.bytes_accumulator, self.parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """``df.write.format("seglake")``: see :mod:`seglake.spark.batch_sink`."""
        from seglake.spark.batch_sink import batch_writer

        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        """``df.writeStream.format("seglake")``: see :mod:`seglake.spark.stream_sink`."""
        from seglake.spark.stream_sink import SeglakeStreamWriter, parse_sink_options

        return SeglakeStreamWriter(parse_sink_options(self.options, schema))


class UnpushedReader(SeglakeReader):
    """A reader that pushes no filter (Spark applies them all after the read): what a
    session may use whose ``spark.sql.python.filterPushdown.enabled`` is off (Spark
    refuses a reader that implements ``pushFilters`` then)."""

    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]


class DiscoveredDataSource(SeglakeDataSource):
    """``format("seglake")`` as Spark 4 discovers it in a session nobody registered it on
    (``pyspark_seglake.DefaultSource``): the same source, without filter pushdown (the
    session's setting is unknown here) and packing for the CPUs; ``register(spark)``
    replaces it by the full one."""

    reader_class = UnpushedReader


def register(spark: Any, *, bytes_accumulator: Any = None) -> None:
    """Register the ``seglake`` format on ``spark`` and enable Python filter pushdown.

    Args:
        spark: the session.
        bytes_accumulator: a Spark accumulator the planner and the tasks add the lake
            bytes they read to (tests and benchmarks).
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    attrs: dict[str, Any] = {}
    if bytes_accumulator is not None:
        attrs["bytes_accumulator"] = bytes_accumulator
    # splits are packed into about this many tasks (Spark Connect: the planner's CPUs)
    with contextlib.suppress(AttributeError, NotImplementedError):
        attrs["parallelism"] = int(spark.sparkContext.defaultParallelism)
    source = type("SessionSeglakeDataSource", (SeglakeDataSource,), attrs)
    spark.dataSource.register(source)
