"""The direct ingest path: input that is already Arrow on disk (a plain parquet scan)
never crosses the JVM.

    spark.read.parquet(...)[.select(columns)]       nothing else in the physical plan
      -> Spark plans the scan: FilePartitions [(file, start, length), ...], one per task
      -> count pass and write pass each run as ``spark.range(n, numSlices=n)
         .mapInArrow(...)``: task i (Spark still schedules, retries and counts it) reads
         FilePartition i with pyarrow (spark/arrow_input.py: parquet-mr's row-group rule,
         only the needed columns) and runs the same ``count_groups`` / ``local_writer``
         as the DataFrame path

Task ids, row order and so offsets, partitions and files are the same as through the
DataFrame path (tested byte for byte). Anything else (filters, projections with
expressions, partitioned directories, bucketing, non-local files, nanosecond or
zone-less timestamps, given offsets) keeps the DataFrame path: ``splits`` returns None.
Off with ``spark.seglake.ingest.direct=false`` in the Spark conf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from seglake.spark import ingest_tasks as tasks
from seglake.spark.arrow_input import AppendTime, Normalizer, Split, read_split
from seglake.spark.session import spark_schema

if TYPE_CHECKING:
    from seglake.config import LogConfig

_PLAN_NODES = {"WholeStageCodegenExec", "ColumnarToRowExec", "InputAdapter", "FileSourceScanExec"}
CONF = "spark.seglake.ingest.direct"


def splits(df: DataFrame) -> list[Split] | None:
    """Spark's own file splits of ``df`` if it is a plain local parquet scan, else None."""
    spark = df.sparkSession
    if str(spark.conf.get(CONF, "true")).lower() == "false":
        return None
    try:
        nodes = _nodes(df._jdf.queryExecution().executedPlan())
    except Exception:  # any plan we cannot inspect keeps the DataFrame path
        return None
    if not nodes or {n.getClass().getSimpleName() for n in nodes} - _PLAN_NODES:
        return None
    scans = [n for n in nodes if n.getClass().getSimpleName() == "FileSourceScanExec"]
    if len(scans) != 1:
        return None
    scan = scans[0]
    fmt = scan.relation().fileFormat().getClass().getSimpleName()
    if (
        fmt != "ParquetFileFormat"
        or scan.relation().partitionSchema().length() > 0
        or scan.dataFilters().nonEmpty()
        or scan.partitionFilters().nonEmpty()
        or scan.bucketedScan()
        or [a.name() for a in _seq(scan.output())] != df.columns
    ):
        return None
    out: list[Split] = []
    for part in scan.inputRDD().partitions():
        files = []
        for f in part.files():
            uri = f.filePath().toPath().toUri()
            if (uri.getScheme() or "file") != "file":
                return None
            files.append((uri.getPath(), int(f.start()), int(f.length())))
        out.append(files)
    return out if _arrow_types_ok(out, df) else None


def _nodes(plan: Any) -> list[Any]:
    """Every node of a physical plan (py4j objects)."""
    out, todo = [], [plan]
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(_seq(node.children()))
    return out


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def _arrow_types_ok(split_list: list[Split], df: DataFrame) -> bool:
    """Every file holds every column with the first file's type (else Spark's own schema
    rules, e.g. nulls for a missing column, apply: DataFrame path), and the types convert
    exactly as Spark's reader does: timestamps in s/ms/us with a zone (Spark's
    TimestampType; no zone-less or INT96 ones), 32-bit or narrower integers."""
    files = sorted({f[0] for s in split_list for f in s})
    if not files:
        return False
    want = None
    for path in files:  # footers only
        schema = pq.read_schema(path)
        if not all(c in schema.names for c in df.columns):
            return False
        types = [schema.field(c).type for c in df.columns]
        if want is None:
            want = types
        elif types != want:
            return False
    if want is None:  # no file
        return False
    by_name = dict(zip(df.columns, want, strict=True))
    ts = by_name.get("timestamp")
    if ts is not None and pa.types.is_timestamp(ts) and (ts.unit == "ns" or ts.tz is None):
        return False
    return all(  # no narrowing casts (Spark's ANSI cast would fail on overflow)
        pa.types.is_integer(by_name[c]) and by_name[c].bit_width <= 32
        for c in ("partition", "timestampType")
        if c in by_name
    )


def _tasks(spark: SparkSession, n: int) -> DataFrame:
    """``n`` one-row partitions: partition i runs as task i (its id picks split i)."""
    return spark.range(0, n, 1, n)


def count(
    spark: SparkSession, split_list: list[Split], norm: Normalizer, num_partitions: int | None
) -> list[dict[str, Any]]:
    """The count pass over the needed columns only (none for keyless input with a topic:
    row counts from the footers)."""
    columns = norm.count_columns(num_partitions)
    counter = tasks.count_groups(num_partitions)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        task = tasks.task_id()[0]
        yield from counter(read_split(split_list[task], columns, norm))

    out = _tasks(spark, len(split_list)).mapInArrow(run, spark_schema(tasks.COUNT_ROWS))
    counts: list[dict[str, Any]] = out.toArrow().to_pylist()
    return counts


def write(
    spark: SparkSession,
    split_list: list[Split],
    norm: Normalizer,
    writer: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
) -> DataFrame:
    """The no-shuffle write pass: ``writer`` (``ingest_tasks.local_writer``) over each
    task's split, every column read; its segment rows."""
    columns = list(norm.columns)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        task = tasks.task_id()[0]
        yield from writer(read_split(split_list[task], columns, norm))

    return _tasks(spark, len(split_list)).mapInArrow(run, spark_schema(tasks.SEGMENT_ROWS))


def normalizer(df: DataFrame, topic: str | None, append_ms: int, config: LogConfig) -> Normalizer:
    """The :class:`Normalizer` of ``df`` (validated by ``normalize`` already)."""
    default, flip = config.append_time(topic)
    if "timestamp" not in df.columns or (default and not flip):
        return Normalizer(topic, tuple(df.columns), append_ms)
    return Normalizer(topic, tuple(df.columns), None, AppendTime(append_ms, default, flip))
