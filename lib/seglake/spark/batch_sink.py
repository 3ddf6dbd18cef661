"""``df.write.format("seglake").option("topic", T).mode("append").save(root)``: a batch
DataFrame appended to a lake as the Spark Kafka sink appends it to a topic, in one catalog
commit. The stream sink's machinery, with a run id per job instead of per micro-batch:

    driver (``writer``): the options, the columns (:mod:`seglake.spark.sink_columns`: the
        Kafka sink's rules), a run id ``write-<time>-<hex>``, the catalog's log end offsets
    executors (``write``, one task attempt each): the rows as the ingest's internal
        columns, staged under ``_staging/<run id>.task-<partition>-<attempt>/`` by the
        stream sink's :func:`stage_piece`; the piece's segment rows as the message
    driver (``commit``): the successful attempts' pieces rebased and joined into the
        partitions' segments, ONE catalog commit of the run id (lake/stream_commit.py);
        then every staged directory of the run id is removed: those of attempts that died
        (a retried task's first attempt), whose pieces no message names
    driver (``abort``, a task failed for good; its message is None): the same removal,
        nothing committed

Modes: ``append`` only. Spark itself refuses ``errorifexists`` (the default) and ``ignore``
for every Python data source before the writer is made; ``overwrite`` is refused here (a
lake's offsets only grow, as a topic's).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from seglake import fs as lakefs
from seglake.errors import ConfigError
from seglake.lake.handle import LakeHandle
from seglake.lake.runs import new_run_id
from seglake.lake_paths import STAGING_DIR
from seglake.spark.kafka_options import BATCH_SINK
from seglake.spark.sink_columns import check_sink_schema, sink_batch
from seglake.spark.stream_sink import (
    SinkOptions,
    StagedPiece,
    commit_run,
    internal_columns,
    sink_options,
    stage_piece,
)

__all__ = ["SeglakeBatchWriter", "batch_writer"]

OVERWRITE_REFUSED = (
    "seglake: mode('overwrite') is refused: a lake's offsets only grow, as a Kafka "
    "topic's; use mode('append') (records are removed by retention or compaction)"
)


def batch_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> SeglakeBatchWriter:
    """The writer of one ``df.write`` job (on the driver): options and columns checked, the
    run id chosen, the log end offsets read."""
    if overwrite:
        raise ConfigError(OVERWRITE_REFUSED)
    opts = {k.lower(): v for k, v in options.items()}
    columns = check_sink_schema(schema, opts.get("topic"))
    run_id = new_run_id("write-")
    # the partitioner runs for rows without a partition (has_partition: every row has one)
    planned = sink_options(opts, run_id, False, False, BATCH_SINK).planned()
    return SeglakeBatchWriter(planned, columns)


class SeglakeBatchWriter(DataSourceArrowWriter):
    """The sink of one batch job; ``write`` runs in the tasks, ``commit``/``abort`` on the
    driver. ``opts.query_id`` is the job's run id."""

    def __init__(self, opts: SinkOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns

    @property
    def run_id(self) -> str:
        return self.opts.query_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPiece:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        order, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
        o = self.opts
        now = int(time.time() * 1000)
        batches = (
            internal_columns(
                sink_batch(b, self.columns, now), o.topic, now, o.config.append_time(o.topic)
            )
            for b in iterator
        )
        return stage_piece(o, f"{self.run_id}.task-{order}-{attempt}", order, batches)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        try:
            commit_run(self.opts, self.run_id, messages)
        finally:
            discard_pieces(self.opts.root, self.run_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        discard_pieces(self.opts.root, self.run_id)


def discard_pieces(lake: LakeHandle, run_id: str) -> int:
    """Remove every task attempt's staged piece of run ``run_id`` (``<run id>.task-*``,
    also those no commit message names); the number removed."""
    fs, base = lake.fs, lake.base
    prefix = f"{run_id}.task-"
    found = fs.get_file_info(
        pafs.FileSelector(lakefs.join(base, STAGING_DIR), allow_not_found=True)
    )
    gone = [
        i.path
        for i in found
        if i.type == pafs.FileType.Directory and i.base_name.startswith(prefix)
    ]
    for path in gone:
        lakefs.delete_dir(fs, path, root=base)
    return len(gone)
