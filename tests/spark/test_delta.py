"""delta-spark (``make jars``) in the session: the catalog read as a Delta table with time
travel and ``DESCRIBE HISTORY``; seglake's readers take ``timestampAsOf`` and pick the
version delta-spark picks (the oracle); the jobs' ``--input-format delta`` and
``--output-format delta`` go through Spark's Delta reader and writer (a table with a
deletion vector, which the deltalake-parquet path cannot read as is; the output's commit
says which engine wrote it)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import seglake
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.time_travel import commit_times, version_as_of
from seglake.sample import generate
from seglake.spark import register
from seglake.spark.ingest import ingest
from seglake.spark.jobs import RUNNERS
from seglake.spark.session import extra_jars
from tests.lake_check import lake_records

pytestmark = pytest.mark.spark
KEY = ["topic", "partition", "base_offset", "next_offset", "size_bytes", "run_id"]


@pytest.fixture(scope="module")
def delta_spark(spark):
    if not any(Path(j).name.startswith("delta-spark") for j in extra_jars()):
        pytest.skip("no delta-spark jar in .jars/spark (make jars needs mvn and java)")
    return spark


@pytest.fixture(scope="module")
def lake(delta_spark, tmp_path_factory) -> str:
    """A lake of three ingests (catalog versions 0 to 3)."""
    root = str(tmp_path_factory.mktemp("delta") / "lake")
    for i in range(3):
        df = delta_spark.createDataFrame(generate(300, seed=60 + i, topics=("d",)))
        ingest(delta_spark, df, root, num_partitions=2, conf={"log.segment.bytes": "8000"})
    return root


def _utc(ms: int) -> str:
    """A Spark timestamp string (the session's zone is UTC)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select(*KEY).collect())


def _catalog_rows(root: str, version: int) -> list[tuple]:
    t = Catalog(root).segments(version=version).select(KEY)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def test_catalog_reads_as_delta_with_time_travel_and_history(delta_spark, lake):
    cat = f"{lake}/_catalog"
    assert _rows(delta_spark.read.format("delta").load(cat)) == _catalog_rows(lake, 3)
    for v in range(4):
        df = delta_spark.read.format("delta").option("versionAsOf", v).load(cat)
        assert _rows(df) == _catalog_rows(lake, v), v
    hist = delta_spark.sql(f"DESCRIBE HISTORY delta.`{cat}`").selectExpr(
        "version", "unix_millis(timestamp) AS ms"
    )
    # Delta's commit times are seglake's (the rule timestampAsOf resolves with)
    assert sorted((r.version, r.ms) for r in hist.collect()) == commit_times(LakeHandle.open(lake))


def test_timestamp_as_of_picks_the_version_delta_picks(delta_spark, lake):
    register(delta_spark)
    cat = f"{lake}/_catalog"
    times = commit_times(LakeHandle.open(lake))
    # each later commit's time and the ms before it, the first commit's, the newest's
    probes = sorted({t - d for _, t in times[1:] for d in (0, 1)} | {times[0][1]})
    for i, ms in enumerate(probes):
        at = _utc(ms)
        want = _rows(delta_spark.read.format("delta").option("timestampAsOf", at).load(cat))
        version = version_as_of(LakeHandle.open(lake), ms)
        assert _catalog_rows(lake, version) == want, (at, version)
        assert seglake.open(lake, timestamp_as_of=at).version == version
        if i % 3 == 1:  # the data source reads what versionAsOf of that version reads
            by_time = (
                delta_spark.read.format("seglake")
                .option("subscribePattern", ".*")
                .option("timestampAsOf", at)
                .load(lake)
            )
            pinned = (
                delta_spark.read.format("seglake")
                .option("subscribePattern", ".*")
                .option("versionAsOf", version)
            )
            assert sorted(by_time.collect()) == sorted(pinned.load(lake).collect()), at
    # before the first commit, after the last: both refuse
    for ms, words in ((times[0][1] - 1, "before the earliest"), (times[-1][1] + 1, "after the")):
        with pytest.raises(Exception):  # noqa: B017 (delta-spark's own error classes)
            delta_spark.read.format("delta").option("timestampAsOf", _utc(ms)).load(cat).count()
        with pytest.raises(ConfigError, match=words):
            seglake.open(lake, timestamp_as_of=ms)
        with pytest.raises(Exception, match=words):
            delta_spark.read.format("seglake").option("subscribePattern", ".*").option(
                "timestampAsOf", ms
            ).load(lake).count()
    with pytest.raises(Exception, match="cannot specify both version and timestamp"):
        delta_spark.read.format("seglake").option("subscribePattern", ".*").option(
            "timestampAsOf", times[1][1]
        ).option("versionAsOf", 1).load(lake).count()
    with pytest.raises(ConfigError, match="cannot specify both"):
        seglake.open(lake, version=1, timestamp_as_of=times[1][1])


def test_jobs_read_and_write_delta_with_delta_spark(delta_spark, tmp_path):
    """``--input-format delta``: a Delta table with a deletion vector (rows deleted
    without rewriting the file) is read by Spark's Delta reader, the deleted rows left
    out; ``--output-format delta``: the table is written by delta-spark."""
    messages = generate(800, seed=71, topics=("dv",))
    table = str(tmp_path / "in-delta")
    delta_spark.createDataFrame(messages).coalesce(1).write.format("delta").option(
        "delta.enableDeletionVectors", "true"
    ).save(table)
    delta_spark.sql(f"DELETE FROM delta.`{table}` WHERE value LIKE '%\"id\":1%'")
    assert "deletionVectors" in (DeltaTable(table).protocol().reader_features or [])
    kept = delta_spark.read.format("delta").load(table).count()
    assert 0 < kept < messages.num_rows
    root = str(tmp_path / "lake")
    parser, run = RUNNERS["ingest"]
    args = ["--input", table, "--input-format", "delta", "--root", root, "--num-partitions", "2"]
    assert run(delta_spark, parser().parse_args(args)) == 0
    got = lake_records(root)
    values = set(got["value"])
    assert len(got) == kept and not any(b'"id":1' in v for v in values)

    out = str(tmp_path / "out-delta")
    parser, run = RUNNERS["extract"]
    args = ["--root", root, "--topic", "dv", "--start", "0", "--end", str(2**62)]
    args += ["--output", out, "--output-format", "delta"]
    assert run(delta_spark, parser().parse_args(args)) == 0
    written = DeltaTable(out).to_pyarrow_table()  # read back without Spark
    assert sorted(written.column("value").to_pylist()) == sorted(got["value"])
    log = Path(out, "_delta_log", "00000000000000000000.json").read_text().splitlines()
    info = next(json.loads(x)["commitInfo"] for x in log if "commitInfo" in x)
    assert "Delta-Lake" in info.get("engineInfo", ""), info  # delta-spark, not delta-rs
    assert isinstance(written, pa.Table)
