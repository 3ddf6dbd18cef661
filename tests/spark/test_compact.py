"""``compact`` as a Spark job: merge-only on a no-shuffle ingest (its many small segments
become as few as a shuffled ingest writes, batches byte for byte), read back by every
reader: extract, lookup, the data source, kafka-python over the files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from seglake.cli.jobargs import compact_parser
from seglake.lake.catalog import Catalog
from seglake.sample import generate
from seglake.spark import compact, register
from seglake.spark.extract import extract
from seglake.spark.ingest import ingest
from seglake.spark.lookup import lookup
from tests.lake_check import lake_records
from tests.spark.test_ingest import kafka_python_records

pytestmark = pytest.mark.spark
CONF = {"log.segment.bytes": "200000", "compression.type": "lz4"}


def _lake(spark, root: str, messages: pa.Table, shuffle: str):
    return ingest(
        spark,
        spark.createDataFrame(messages).repartition(3),
        root,
        num_partitions=2,
        conf={**CONF, "seglake.ingest.shuffle": shuffle},
    )


def _batches(root: str) -> dict[tuple[str, int], bytes]:
    out: dict[tuple[str, int], bytes] = {}
    for r in Catalog(root).segments().to_pylist():
        with open(os.path.join(root, r["path"]), "rb") as f:
            out[(r["topic"], r["partition"])] = (
                out.get((r["topic"], r["partition"]), b"") + f.read()
            )
    return out


def test_merge_only_reaches_the_shuffled_segment_count(spark, tmp_path) -> None:
    messages = generate(3000, seed=12)
    shuffled, root = str(tmp_path / "shuffled"), str(tmp_path / "lake")
    _lake(spark, shuffled, messages, "always")
    _lake(spark, root, messages, "never")
    cat = Catalog(root)
    before_rows, v0 = cat.segments(), cat.version()
    before, batches = lake_records(root), _batches(root)
    assert before_rows.num_rows > Catalog(shuffled).segments().num_rows

    result = compact(spark, root, merge_only=True, conf={"segment.bytes": "200000"})
    assert result.committed
    assert "->" in result.summary()
    assert cat.segments().num_rows <= Catalog(shuffled).segments().num_rows
    assert _batches(root) == batches  # byte-identical batches
    assert lake_records(root).equals(before)
    assert lake_records(root, version=v0).equals(before)  # a pinned reader

    # every reader sees the records at their offsets
    for r in cat.segments().to_pylist():
        got = kafka_python_records(os.path.join(root, r["path"]))
        assert [g[0] for g in got] == list(range(r["base_offset"], r["next_offset"]))
    for topic in sorted(set(before["topic"])):
        ex = extract(spark, root, topic).toPandas()
        mine = before[before["topic"] == topic]
        assert sorted(zip(ex["partition"], ex["offset"], ex["value"], strict=True)) == sorted(
            zip(mine["partition"], mine["offset"], mine["value"], strict=True)
        )
    register(spark)
    ds = spark.read.format("seglake").option("path", root).option("subscribe", "orders").load()
    assert ds.count() == int((before["topic"] == "orders").sum())
    q = before.sample(50, random_state=1)[["topic", "partition", "offset"]]
    answers = lookup(spark, root, spark.createDataFrame(q)).toPandas()
    merged = answers.merge(before, on=["topic", "partition", "offset"])
    assert len(merged) == 50 and (merged["value_x"] == merged["value_y"]).all()
    # a second run changes nothing
    version = cat.version()
    again = compact(spark, root, merge_only=True, conf={"segment.bytes": "200000"})
    assert not again.committed and cat.version() == version


def test_merges_as_spark_tasks_equal_merges_on_the_driver(spark, tmp_path) -> None:
    """A local master merges on the driver; ``driver.merge.bytes=0`` makes Spark tasks of
    the same groups: the same rows and files byte for byte."""
    from seglake.errors import ConfigError
    from seglake.spark.compact_job import DRIVER_MERGE_CONF

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _lake(spark, a, generate(1500, seed=3), "never")
    shutil.copytree(a, b)
    sc = spark.sparkContext
    jobs = {}
    for root, limit in ((a, None), (b, "0")):
        if limit is not None:
            spark.conf.set(DRIVER_MERGE_CONF, limit)
        sc.setJobGroup(root, "merge")
        try:
            assert compact(spark, root, merge_only=True, conf={"segment.bytes": "200000"}).committed
        finally:
            spark.conf.unset(DRIVER_MERGE_CONF)
            sc.setJobGroup("", "")
        jobs[root] = sc.statusTracker().getJobIdsForGroup(root)
    assert not jobs[a] and jobs[b]  # the driver, then Spark tasks
    ra, rb = (Catalog(r).segments().drop_columns(["run_id", "committed_at"]) for r in (a, b))
    assert ra.equals(rb)
    for r in ra.column("path").to_pylist():
        stem = r[: -len(".log")]
        for suffix in (".log", ".index", ".timeindex"):
            assert Path(a, stem + suffix).read_bytes() == Path(b, stem + suffix).read_bytes()
    spark.conf.set(DRIVER_MERGE_CONF, "lots")
    try:
        with pytest.raises(ConfigError, match="expected a number of bytes"):
            compact(spark, b, merge_only=True)
    finally:
        spark.conf.unset(DRIVER_MERGE_CONF)


def test_package_compact_stays_callable() -> None:
    """``seglake.spark.compact(...)`` a second time in a session (the README's call): the
    implementation's module, once imported, must not replace the package's function."""
    import seglake.spark
    import seglake.spark.compact_job  # what the first call imports

    assert callable(seglake.spark.compact) and seglake.spark.compact.__module__ == "seglake.spark"


def test_job_arguments() -> None:
    args = compact_parser().parse_args(
        ["--root", "L", "--topic", "a", "--topic", "b", "--partitions", "0,3", "--merge-only"]
    )
    assert args.topics == ["a", "b"] and args.partitions == "0,3" and args.merge_only
    assert isinstance(pd.DataFrame(), pd.DataFrame)


def _changelog(n: int, seed: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "topic": ["cl"] * n,
            "key": pa.array([f"k{int(k)}".encode() for k in rng.integers(0, 40, n)], pa.binary()),
            "value": pa.array(
                [None if rng.random() < 0.15 else f"v{i}".encode() for i in range(n)], pa.binary()
            ),
            "timestamp": pa.array(
                1_767_225_600_000 + np.arange(n) * 10 + rng.integers(-200, 200, n), pa.int64()
            ),
        }
    )


def test_compact_job_and_every_reader(spark, tmp_path, capsys) -> None:
    from seglake.cli.main import main as seglake_cli
    from seglake.lake.topic_store import alter_config
    from tests.unit.test_compact_rules import model

    root = str(tmp_path / "lake")
    ingest(
        spark,
        spark.createDataFrame(_changelog(4000, 5)),
        root,
        num_partitions=2,
        conf={
            "log.segment.bytes": "12000",
            "compression.type": "zstd",
            "seglake.ingest.shuffle": "always",
        },
    )
    cat = Catalog(root)
    alter_config(cat, "cl", set_={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})
    before = lake_records(root)
    rows0 = cat.segments()
    result = compact(spark, root, now_ms=1_767_300_000_000)
    assert result.committed, result.summary()
    after = lake_records(root)
    for p in (0, 1):
        mine = before[before["partition"] == p].copy()
        mine["aborted"] = False
        prow = rows0.filter(pa.compute.equal(rows0["partition"], p))
        upper = int(prow["base_offset"][-1].as_py())
        want = model(mine, upper)
        got = after[after["partition"] == p]
        assert got["offset"].tolist() == want["offset"].tolist()
        assert got["value"].tolist() == want["value"].tolist()
        # kafka-python, as an independent decoder, sees the same records
        kp = [
            r
            for row in cat.segments("cl", p).to_pylist()
            for r in kafka_python_records(os.path.join(root, row["path"]))
        ]
        assert [r[0] for r in kp] == want["offset"].tolist()
        assert [r[3] for r in kp] == want["value"].tolist()
        # a removed offset reads as the next kept one (a fetch from it)
        gone = sorted(set(mine["offset"]) - set(want["offset"]))
        ex = extract(spark, root, "cl", partitions=[p], start_offset=gone[0]).toPandas()
        assert int(ex["offset"].iloc[0]) == int(want[want["offset"] > gone[0]]["offset"].iloc[0])
        # lookups of every offset of the log: the record there, or where the cleaner
        # removed it the next kept one (a fetch from it), as a brute force over the kept
        # records finds them; by time, Kafka's offsetsForTimes over the kept records
        leo = int(prow["next_offset"][-1].as_py())
        every = np.arange(int(mine["offset"].min()), leo)
        kept = want["offset"].to_numpy()
        at = np.searchsorted(kept, every, side="left")
        ts = int(mine["timestamp"].iloc[len(mine) // 3])
        q = pd.DataFrame(
            {
                "topic": "cl",
                "partition": p,
                "offset": pd.array([*every.tolist(), None], dtype="Int64"),
                "timestamp": pd.array([None] * len(every) + [ts], dtype="Int64"),
            }
        )
        ans = lookup(spark, root, q).toPandas()  # pandas queries: on the driver
        by_offset = ans[ans["query_offset"].notna()].sort_values("query_offset")
        assert by_offset["query_offset"].tolist() == every.tolist()
        found = at < len(kept)
        assert by_offset["status"].tolist() == ["ok" if f else "no_record_at_offset" for f in found]
        assert by_offset["offset"][found].tolist() == kept[at[found]].tolist()
        assert by_offset["value"][found].tolist() == want["value"].to_numpy()[at[found]].tolist()
        assert any(o not in set(kept) for o in every)  # removed offsets were asked
        hit = want[want["timestamp"] >= ts]["offset"].iloc[0]
        assert ans[ans["query_timestamp"].notna()]["offset"].tolist() == [int(hit)]
    register(spark)
    ds = spark.read.format("seglake").option("path", root).option("subscribe", "cl").load()
    assert ds.count() == len(after)
    assert (
        seglake_cli(
            ["dump", "--deep-iteration", os.path.join(root, cat.segments().to_pylist()[0]["path"])]
        )
        == 0
    )
    assert "offset:" in capsys.readouterr().out
    # twice: nothing changes
    version = cat.version()
    again = compact(spark, root, now_ms=1_767_300_000_000)
    assert not again.committed and cat.version() == version
