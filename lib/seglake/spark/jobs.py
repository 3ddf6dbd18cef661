"""The spark-submit jobs: parse arguments, build the session, call the library, print.

Errors of seglake's own (bad input, bad config, lost races) print one line and exit 2.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from seglake.cli import jobargs
from seglake.config import LogConfig, parse_overrides
from seglake.errors import SeglakeError
from seglake.spark.session import get_session


def read_input(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    """A DataFrame of ``path`` in ``fmt`` (delta without delta-spark: via deltalake)."""
    from seglake.fs import resolve
    from seglake.errors import SegmentNotFoundError
    import pyarrow.fs as pafs

    fs, p = resolve(path)
    if fs.get_file_info(p).type == pafs.FileType.NotFound:
        raise SegmentNotFoundError(f"{path}: input path does not exist")
    if fmt == "delta":
        if "delta" in (spark.conf.get("spark.sql.extensions", "") or "").lower():
            return spark.read.format("delta").load(path)
        from deltalake import DeltaTable

        return spark.createDataFrame(DeltaTable(path).to_pyarrow_dataset().to_table())
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(path)


def _config(args) -> LogConfig:
    return LogConfig.load(args.conf_file, parse_overrides(args.conf))


def run_ingest(spark: SparkSession, args) -> int:
    from seglake.spark.ingest import ingest

    fmt = jobargs.format_from_path(args.input, args.input_format, jobargs.FORMATS)
    df = read_input(spark, args.input, fmt)
    result = ingest(spark, df, args.root, run_id=args.run_id, conf=_config(args),
                    topic=args.topic, num_partitions=args.num_partitions)
    print(result.summary())
    return 0


RUNNERS: dict[str, tuple[Callable, Callable[[SparkSession, object], int]]] = {
    "ingest": (jobargs.ingest_parser, run_ingest),
}


def main(job: str, argv: list[str]) -> int:
    parser_fn, runner = RUNNERS[job]
    args = parser_fn().parse_args(argv)
    started = time.time()
    try:
        _config(args)  # bad settings fail before Spark starts
        spark = get_session(f"seglake-{job}")
        code = runner(spark, args)
    except SeglakeError as exc:
        print(f"seglake {job}: error: {exc}", file=sys.stderr)
        return 2
    print(f"seglake {job}: done in {time.time() - started:.1f} s", file=sys.stderr)
    return code
