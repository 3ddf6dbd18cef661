"""Structured Streaming into a lake: ``df.writeStream.format("seglake")`` and
:func:`ingest_batch` for an existing ``foreachBatch``.

    driver, planning a micro-batch (``streamWriter``, once per batch): the options; the
        catalog's log end offsets for the tasks, read once when the writer is pickled
        for them (the writer Spark makes again for the commit reads no catalog)
    executors, per task of a micro-batch (``write``):
        Arrow batches in the ingest input schema (only ``value`` required)
          -> the ingest's internal columns (as spark/normalize.py, on Arrow)
          -> the ingest's task writer (``local_writer``): staged segments under
             _staging/stream-<uuid>/, assigned offsets from each partition's log end
             offset (final for the partition's first task), given offsets kept; with
             seglake.stream.append on, no index files (the commit appends a piece to
             the newest segment and continues that one's indexes; a piece that becomes
             a segment of its own is rewritten with its indexes built, as one staged
             with another index interval): 48 files a batch less for 24 partitions
          -> a commit message: the piece's segment rows
    driver (``commit(messages, batchId)``, in a Python worker of the driver):
        lake/stream_commit.commit_pieces: rebase the pieces that follow another task's,
        append to the newest segments (in place on a local lake), ONE catalog commit
        of run ``stream-<query id>-<batch id>``

The query id is the one Spark keeps in ``<checkpointLocation>/metadata``: a restart from
the same checkpoint replays an uncommitted batch with the same id, which is then either
written (nothing of it was committed) or found committed (nothing is written twice).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from seglake import fs as lakefs
from seglake.config import KNOWN_NAMES, LogConfig
from seglake.errors import ConfigError, SeglakeError
from seglake.lake.handle import LakeHandle
from seglake.lake.stream_commit import (
    APPEND_MODES,
    PIECE_COLUMNS,
    BatchCommit,
    Piece,
    commit_pieces,
    stream_run_id,
)
from seglake.lake.topic_store import topic_configs
from seglake.location import Root
from seglake.record.schema import timestamp_millis
from seglake.spark import ingest_tasks as tasks
from seglake.spark.arrow_input import AppendTime
from seglake.spark.ingest import ingest, partition_count
from seglake.spark.ingest_result import IngestResult
from seglake.spark.kafka_options import (
    STREAM_SINK,
    check_options,
    producer_settings,
    warn_ignored,
)
from seglake.spark.normalize import check_types
from seglake.spark.worker_errors import one_line_errors
from seglake.storage.naming import validate_name, validate_topic

SINK_OPTIONS = ("path", "checkpointlocation", "topic", "queryid", "seglake.stream.append")
FLUSH_EVERY_BATCH = 1  # the sink's default seglake.ingest.buffer.bytes


def query_id(checkpoint: str) -> str:
    """The streaming query's id, from ``<checkpoint>/metadata`` (``{"id": "<uuid>"}``),
    which Spark writes when a query first starts and keeps across restarts; it names
    the batches' run ids, so it follows the names-to-paths rule (``validate_name``)."""
    fs, base = lakefs.resolve(checkpoint)
    path = lakefs.join(base, "metadata")
    try:
        found = json.loads(lakefs.read_all(fs, path))["id"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: no streaming query id there ({exc})") from None
    return validate_name(found, f"{path}: streaming query id")


def ingest_batch(
    df: DataFrame,
    batch_id: int,
    *,
    root: Root | LakeHandle,
    query_id: str,
    conf: LogConfig | Mapping[str, Any] | None = None,
    topic: str | None = None,
    num_partitions: int | None = None,
) -> IngestResult:
    """``foreachBatch(lambda df, i: ingest_batch(df, i, root=..., query_id=q))``: the
    micro-batch ingested as one run, ``stream-<query_id>-<batch_id>``, so a replayed batch
    is not written twice. ``query_id``: any name stable across restarts of the query
    (``query.id``, which Spark keeps in the checkpoint)."""
    return ingest(
        df.sparkSession,
        df,
        root,
        run_id=stream_run_id(query_id, batch_id),
        conf=conf,
        topic=topic,
        num_partitions=num_partitions,
    )


@dataclasses.dataclass
class StagedPiece(WriterCommitMessage):
    """A task's commit message: its staging directory and segment rows."""

    stage: str
    order: int
    rows: pa.Table


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    root: LakeHandle  # from sink_options: parsed once, pickled to the tasks
    query_id: str
    config: LogConfig
    topic: str | None
    has_partition: bool  # the input has a partition column
    has_offset: bool
    append: str  # seglake.stream.append
    # the catalog's when the batch was planned (None: not read yet, see planned())
    log_end: Mapping[tuple[str, int], int] | None = None
    num_partitions: int | None = None  # of the topic; None with a partition column

    def planned(self) -> SinkOptions:
        """These options with the catalog's log end offsets (read now unless read) and
        the topic's partition count from them: what the tasks write with."""
        if self.log_end is not None:
            return self
        catalog = self.root.catalog
        leo = catalog.log_end_offsets() if catalog.exists() else {}
        n = None if self.has_partition else partition_count(self.topic, None, leo, self.config)
        config = topic_configs(catalog, self.config)  # each topic's: for_topic(t)
        return dataclasses.replace(self, log_end=dict(leo), num_partitions=n, config=config)


def parse_sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """The sink's options: ``path`` (the lake), ``checkpointLocation``, ``topic``, the ingest
    settings by their Kafka names; checks the input schema as the batch ingest does."""
    opts = {k.lower(): v for k, v in options.items()}
    if "queryid" in opts:
        qid = validate_name(opts["queryid"], "seglake sink: option queryId")
    elif "checkpointlocation" in opts:
        qid = query_id(opts["checkpointlocation"])
    else:
        raise ConfigError("seglake sink: needs option('checkpointLocation', ...)")
    types = check_types(cast(DataFrame, _Schema(schema)))  # reads only .schema
    topic = opts.get("topic")
    if topic is None and "topic" not in types:
        raise ConfigError("seglake sink: no topic: option('topic', NAME) or a 'topic' column")
    if "offset" in types and "partition" not in types:
        raise ConfigError("seglake sink: input with an 'offset' column needs a 'partition' column")
    return sink_options(opts, qid, "partition" in types, "offset" in types)


def sink_options(
    opts: Mapping[str, str],
    qid: str,
    has_partition: bool,
    has_offset: bool,
    place: str = STREAM_SINK,
) -> SinkOptions:
    """The options a sink's tasks and commit work with, from its lower-cased options:
    ``path``, ``topic``, ``seglake.stream.append``, the ingest settings by their Kafka
    names and Spark's Kafka sink's options (:mod:`seglake.spark.kafka_options`: those
    without a lake meaning named in one warning); any other is an error. ``qid`` names
    the run(s); ``place``: the batch or the stream sink."""
    ignored = check_options(opts, place, [*SINK_OPTIONS, *KNOWN_NAMES])
    warn_ignored(ignored, place)  # once: the driver makes the options once per job/query
    root = opts.get("path")
    if not root:
        raise ConfigError("seglake sink: give the lake as start(path) or option('path', ...)")
    topic = opts.get("topic")
    if topic is not None:
        validate_topic(topic)
    overrides = {k: v for k, v in opts.items() if k in KNOWN_NAMES}
    # a task encodes each input batch as it arrives, while the JVM converts the next one
    # (a micro-batch is often one task: the pipelining is its second core)
    overrides.setdefault("seglake.ingest.buffer.bytes", str(FLUSH_EVERY_BATCH))
    config = LogConfig.load(overrides=overrides, producer=producer_settings(opts))
    append = opts.get("seglake.stream.append", "true").lower()
    if append not in APPEND_MODES:
        raise ConfigError(
            f"seglake.stream.append must be one of {', '.join(APPEND_MODES)}, got {append!r}"
        )
    return SinkOptions(LakeHandle.open(root), qid, config, topic, has_partition, has_offset, append)


@dataclasses.dataclass(frozen=True)
class _Schema:
    """What normalize's schema check reads of a DataFrame."""

    schema: StructType


@one_line_errors
class SeglakeStreamWriter(DataSourceStreamArrowWriter):
    """The sink; ``write`` runs in the tasks, ``commit``/``abort`` on the driver."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the tasks as the micro-batch is planned: with the log end offsets
        (read at the first pickling; pyspark pickles the writer twice)."""
        self.opts = self.opts.planned()
        return dict(self.__dict__)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPiece:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        order = ctx.partitionId() if ctx is not None else 0
        o = self.opts.planned()  # (already, unless write runs where it was made: tests)
        append_ms = int(time.time() * 1000)
        batches = (
            internal_columns(b, o.topic, append_ms, o.config.append_time(o.topic)) for b in iterator
        )
        return stage_piece(o, f"stream-{uuid.uuid4().hex}", order, batches)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_messages(self.opts, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        lake = self.opts.root
        for m in messages:
            if isinstance(m, StagedPiece):  # failed tasks' pieces: cleanup removes them
                lakefs.delete_dir(lake.fs, lake.staging(m.stage), root=lake.base)


def stage_piece(
    o: SinkOptions, stage: str, order: int, batches: Iterator[pa.RecordBatch]
) -> StagedPiece:
    """A task's half: its batches (the ingest's internal columns) staged under
    ``_staging/<stage>/`` by the ingest's task writers, its piece's rows as the message."""
    indexes = o.append == "false"  # else the commit grows or rewrites the pieces
    if o.has_offset:
        out = _write_given(o.root, stage, o.config, batches, indexes)
    else:
        starts = _FromLogEnd(o.log_end or {})
        write = tasks.local_writer(
            o.root, stage, o.config, o.num_partitions, starts, None, indexes=indexes
        )
        out = write(batches)
    rows = pa.Table.from_batches(list(out), schema=tasks.SEGMENT_ROWS)
    return StagedPiece(stage, order, rows.select(list(PIECE_COLUMNS)))


def commit_messages(
    opts: SinkOptions, messages: list[WriterCommitMessage | None], batch_id: int
) -> BatchCommit:
    """The driver's half of a micro-batch (see the module docstring)."""
    return commit_run(opts, stream_run_id(opts.query_id, batch_id), messages)


def commit_run(
    opts: SinkOptions, run_id: str, messages: list[WriterCommitMessage | None]
) -> BatchCommit:
    """The tasks' pieces committed as run ``run_id`` (lake/stream_commit.commit_pieces);
    every task must have sent its piece."""
    missing = sum(m is None for m in messages)
    if missing:
        raise SeglakeError(f"run {run_id}: {missing} task(s) sent no commit message")
    pieces = [Piece(m.stage, m.order, m.rows) for m in messages if isinstance(m, StagedPiece)]
    return commit_pieces(
        opts.root,
        run_id,
        pieces,
        config=opts.config,
        assigned=not opts.has_offset,
        append=opts.append,
    )


@dataclasses.dataclass(frozen=True)
class _FromLogEnd(Mapping[tuple[int, str, int], int]):
    """Task starts for the ingest's local writer: every (task, topic, partition) from the
    partition's log end offset (the commit rebases a task's records that follow another
    task's of the same partition)."""

    log_end: Mapping[tuple[str, int], int]

    def __getitem__(self, key: Any) -> int:
        return int(self.log_end.get((key[1], key[2]), 0))

    def get(self, key: Any, default: Any = None) -> int:
        return self[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0


def internal_columns(
    b: pa.RecordBatch,
    topic: str | None,
    append_ms: int,
    append_time: tuple[bool, frozenset[str]] = (False, frozenset()),
) -> pa.RecordBatch:
    """An input batch (Spark Kafka source columns, only ``value`` required) as the ingest's
    internal columns: topic, [partition int32], [offset int64], key/value binary,
    timestamp int64 ms, timestamp_type int32, headers list<struct<key, value binary>>
    (what spark/normalize.py makes of a DataFrame)."""
    n = b.num_rows
    names = b.schema.names

    def col(name: str) -> pa.Array | None:
        return b.column(name) if name in names else None

    cols: dict[str, pa.Array] = {
        "topic": pa.array([topic] * n, pa.string())
        if topic
        else b.column("topic").cast(pa.string())
    }
    if "partition" in names:
        cols["partition"] = b.column("partition").cast(pa.int32())
    if "offset" in names:
        cols["offset"] = b.column("offset").cast(pa.int64())
    key = col("key")
    cols["key"] = pa.nulls(n, pa.binary()) if key is None else key.cast(pa.binary())
    cols["value"] = b.column("value").cast(pa.binary())
    ts = col("timestamp")
    default, flip = append_time
    if (default and not flip) or ts is None:
        cols["timestamp"] = pa.array(np.full(n, append_ms, dtype=np.int64))
        cols["timestamp_type"] = pa.array(np.ones(n, dtype=np.int32))
    else:
        if pa.types.is_timestamp(ts.type):  # the one ms rule (floor), in integers
            ts = timestamp_millis(ts)
        cols["timestamp"] = ts.cast(pa.int64())
        tt = col("timestampType")
        cols["timestamp_type"] = (
            pa.array(np.zeros(n, dtype=np.int32)) if tt is None else tt.cast(pa.int32())
        )
        if flip:  # topics whose message.timestamp.type differs: per row
            cols["timestamp"], cols["timestamp_type"] = AppendTime(append_ms, default, flip)(
                cols["topic"], cols["timestamp"], cols["timestamp_type"]
            )
    cols["headers"] = _headers(col("headers"), n)
    return pa.RecordBatch.from_pydict(cols)


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _headers(h: pa.Array | None, n: int) -> pa.Array:
    if h is None:
        return pa.array([[]] * n, HEADERS)
    h = h.cast(HEADERS)
    if h.null_count:
        h = pc.if_else(pc.is_null(h), pa.scalar([], HEADERS), h)
    return h


def _write_given(
    root: LakeHandle,
    stage: str,
    config: LogConfig,
    batches: Iterator[pa.RecordBatch],
    indexes: bool,
) -> Iterator[pa.RecordBatch]:
    """Given offsets: this task's records of each partition sorted by offset and written
    as they are (the Kafka source gives each task one partition's range, in order)."""
    groups: dict[tuple[str, int], list[pa.RecordBatch]] = {}
    for b in batches:
        if b.column("offset").null_count or b.column("partition").null_count:
            raise SeglakeError("input rows with an offset need a partition and no null offset")
        for key, idx in tasks.group_rows(b.column("topic"), b.column("partition").to_numpy()):
            groups.setdefault(key, []).append(b.take(pa.array(idx)))
    out = tasks.StagedWriters(root, stage, config, tasks.task_id()[1], None, indexes=indexes)
    for key, parts in sorted(groups.items()):
        t = pa.Table.from_batches(parts).sort_by("offset")
        offsets = t.column("offset").to_numpy()
        writer = out.open(key, int(offsets[0]))
        out.append(
            key, writer, tasks.record_table(t.combine_chunks().to_batches()[0], None, offsets)
        )
        out.close(key, writer)
    yield from out.rows()
