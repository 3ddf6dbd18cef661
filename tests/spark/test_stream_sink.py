"""The streaming sink: ``df.writeStream.format("seglake")`` and ``ingest_batch``.

The restart test runs the query in driver processes of its own (tests/stream_runner.py)
that a crash point SIGKILLs with their JVM and workers: once between the tasks' writes
and the batch's catalog commit, once right after the commit (before Spark's commit
log). Restarted from the same checkpoint, the query must leave every input record in the
lake exactly once, offsets gapless, one catalog commit per micro-batch.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from seglake.cli.main import main as seglake_cli
from seglake.lake.catalog import Catalog
from seglake.lake.stream_commit import stream_run_id
from seglake.lake_paths import STAGING_DIR
from seglake.spark import ingest_batch
from seglake.spark.ingest import ingest
from seglake.spark.stream_sink import query_id
from seglake.testing_hooks import CRASH_AT
from tests.key_index_check import check_partition_dir
from tests.lake_check import lake_records, same_records_as_input
from tests.process_group import run_group

pytestmark = pytest.mark.spark
RUNNER = Path(__file__).resolve().parents[1] / "stream_runner.py"
SCHEMA = "key string, value string, timestamp bigint"
OPTIONS = {
    "topic": "orders",
    "num.partitions": "3",
    "log.segment.bytes": "6000",
    "batch.size": "1024",
    "log.index.interval.bytes": "512",
}


def _write_file(folder: Path, i: int, n: int = 150) -> pa.Table:
    """Input file ``i`` (JSON lines) and its messages as the lake should hold them."""
    rows = [
        {
            "key": f"k{(i * 7 + j) % 11}",
            "value": f"f{i}-{j}-" + "x" * (j % 40),
            "timestamp": 1_767_225_600_000 + 1000 * i + j,
        }
        for j in range(n)
    ]
    tmp = folder / f".f{i}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(folder / f"f{i}.json")  # the file source must never see half a file
    return pa.table(
        {
            "topic": ["orders"] * n,
            "key": [r["key"].encode() for r in rows],
            "value": [r["value"].encode() for r in rows],
            "timestamp": [r["timestamp"] for r in rows],
        }
    )


def _run(spec: dict, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_group(RUNNER, json.dumps(spec), env)


def _staged(root: str) -> list[str]:
    top = Path(root, STAGING_DIR)
    return sorted(str(p.relative_to(root)) for p in top.rglob("*") if p.is_file())


def test_driver_killed_before_and_after_the_commit_restarts_exactly_once(spark, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    root, checkpoint = str(tmp_path / "lake"), str(tmp_path / "cp")
    spec = {
        "input": str(folder),
        "schema": SCHEMA,
        "root": root,
        "checkpoint": checkpoint,
        "options": OPTIONS,
        "spark_conf": {"spark.local.dir": str(tmp_path / "spark-local")},
    }
    msgs = [_write_file(folder, i) for i in range(2)]
    # batch 1: its tasks have written, the driver dies before the catalog commit
    done = _run(spec, {CRASH_AT: "catalog.commit:2"})
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert Catalog(root).version() == 1  # created with batch 0's commit
    assert same_records_as_input(lake_records(root), msgs[0])
    assert _staged(root), "batch 1's pieces were staged when the driver died"
    rows = Catalog(root).segments().to_pandas()  # and appended in place, uncommitted
    sizes = zip(rows.path, rows.size_bytes, strict=True)
    assert any(Path(root, p).stat().st_size > s for p, s in sizes)
    msgs += [_write_file(folder, i) for i in (2, 3)]
    # batch 1 replayed and committed; batch 2 committed, the driver dies before Spark's
    # commit log records it
    done = _run(spec, {CRASH_AT: "catalog.commit.done:2"})
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert same_records_as_input(lake_records(root), pa.concat_tables(msgs[:3]))
    # batch 2 replayed (already committed: nothing written), batch 3
    done = _run(spec, {})
    assert done.returncode == 0, done.stderr[-3000:]
    records = lake_records(root)
    assert same_records_as_input(records, pa.concat_tables(msgs))
    qid = query_id(checkpoint)
    commits = [h for h in Catalog(root).history() if h.seglake_operation == "commit"]
    assert sorted(h.run_id for h in commits) == [stream_run_id(qid, i) for i in range(4)]
    # the partitioning is the batch ingest's (Kafka's murmur2 over the key)
    batch_root = str(tmp_path / "batch")
    ingest(
        spark,
        spark.createDataFrame(pa.concat_tables(msgs).to_pandas()),
        batch_root,
        num_partitions=3,
    )
    cols = ["partition", "key", "value", "timestamp"]
    assert sorted(map(tuple, records[cols].itertuples(index=False))) == sorted(
        map(tuple, lake_records(batch_root)[cols].itertuples(index=False))
    )
    # few segments: each batch grew the newest segment of its partition (6000 bytes)
    segs = Catalog(root).segments().to_pandas()
    assert (
        segs.groupby("partition").size() <= 1 + segs.groupby("partition").size_bytes.sum() // 6000
    ).all()
    # the crashed attempt's pieces are garbage for cleanup; nothing else is left
    assert seglake_cli(["cleanup", "--older-than", "0", root]) == 0
    assert _staged(root) == []


def test_ingest_batch_for_foreach_batch_is_idempotent_per_batch(spark, tmp_path):
    root = str(tmp_path / "lake")
    msgs = _write_file(tmp_path, 0, 60)
    df = spark.createDataFrame(msgs.to_pandas())
    first = ingest_batch(df, 7, root=root, query_id="q1", num_partitions=2)
    again = ingest_batch(df, 7, root=root, query_id="q1", num_partitions=2)
    assert first.committed and first.run_id == stream_run_id("q1", 7)
    assert again.already_committed
    assert same_records_as_input(lake_records(root), msgs)
    for d in Path(root).glob("*-[0-9]*"):  # each segment with its .keyindex
        check_partition_dir(d)


def test_the_log_end_offsets_are_read_when_the_writer_goes_to_the_tasks(
    spark, tmp_path, monkeypatch
):
    import pickle

    from pyspark.sql.types import StructType

    from seglake.spark.stream_sink import SeglakeStreamWriter, parse_sink_options

    root = str(tmp_path / "lake")
    msgs = _write_file(tmp_path, 0, 30)
    ingest(spark, spark.createDataFrame(msgs.to_pandas()), root, num_partitions=2)
    reads = []
    ends = Catalog.log_end_offsets
    monkeypatch.setattr(
        Catalog, "log_end_offsets", lambda self, *a, **k: reads.append(1) or ends(self, *a, **k)
    )
    schema = StructType.fromDDL(SCHEMA)
    # the writer Spark makes for a batch's commit reads no catalog
    writer = SeglakeStreamWriter(
        parse_sink_options({**OPTIONS, "path": root, "queryId": "q"}, schema)
    )
    assert reads == []
    # the one pickled for the tasks carries the log ends read then (once, pickled twice)
    sent = [pickle.loads(pickle.dumps(writer)) for _ in range(2)]
    assert len(reads) == 1
    assert all(w.opts.log_end == ends(Catalog(root)) for w in sent)
    assert sent[0].opts.num_partitions == 2  # the topic's in the catalog (num.partitions: 3)
