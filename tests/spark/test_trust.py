"""Issue 25 through the Spark readers: a segment file cut short (shorter than its catalog
row) is data loss, one line naming the file and the lost offsets, in the extract and
lookup jobs, the data source and the stream source (never fewer records without a word);
a time before 1970 is never Kafka's "latest"/"max" (lookup's TIMESTAMP queries, extract's
``--start``). Oracles: the catalog rows and a scan of the cut file."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.lake.catalog import Catalog
from seglake.record.batch import scan_batches
from seglake.spark.jobs import main as job_main


@pytest.fixture(scope="module")
def cut(query_lake, tmp_path_factory):
    """A copy of the query lake whose t1-0 second segment lost its last batches (cut at a
    batch boundary: every batch left scans). Returns ``(root, file, first, last lost)``."""
    src, _ = query_lake
    root = str(tmp_path_factory.mktemp("cut") / "lake")
    shutil.copytree(src, root)
    row = Catalog(root).segments("t1", [0]).to_pylist()[1]
    path = os.path.join(root, row["path"])
    data = Path(path).read_bytes()
    scan = scan_batches(data)
    k = len(scan) - 3
    Path(path).write_bytes(data[: int(scan.position[k])])
    return root, path, int(scan.base_offset[k]), int(row["next_offset"]) - 1


def _one_line(err: str, path: str, lo: int, hi: int) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert path in lines[0] and f"offsets {lo}..{hi} are gone" in lines[0], lines[0]


def test_extract_and_lookup_jobs_report_a_cut(spark, cut, tmp_path, capsys):
    root, path, lo, hi = cut
    argv = ["--root", root, "--topic", "t1", "--output", str(tmp_path / "x")]
    assert job_main("extract", argv) == 2
    _one_line(capsys.readouterr().err, path, lo, hi)
    queries = str(tmp_path / "q.parquet")
    pq.write_table(
        pa.table({"topic": ["t1"], "partition": [0], "offset": pa.array([lo], pa.int64())}),
        queries,
    )
    argv = ["--root", root, "--queries", queries, "--output", str(tmp_path / "a")]
    assert job_main("lookup", argv) == 2
    _one_line(capsys.readouterr().err, path, lo, hi)


def test_data_source_and_stream_source_report_a_cut(spark, cut, tmp_path):
    root, path, lo, hi = cut
    import seglake.spark

    seglake.spark.register(spark)
    with pytest.raises(Exception, match="TruncatedSegmentError") as exc:
        spark.read.format("seglake").option("subscribe", "t1").load(root).count()
    assert path in str(exc.value) and f"offsets {lo}..{hi} are gone" in str(exc.value)
    query = (
        spark.readStream.format("seglake")
        .option("subscribe", "t1")
        .option("startingOffsets", "earliest")
        .load(root)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    with pytest.raises(Exception, match=f"offsets {lo}..{hi} are gone"):
        query.awaitTermination()


def test_times_before_1970_are_no_sentinels(spark, query_lake, tmp_path, capsys):
    root, recs = query_lake
    queries = str(tmp_path / "q.parquet")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    times = [epoch - dt.timedelta(microseconds=u) for u in (500, 1000, 2500)]
    first = int(recs[(recs.topic == "t1") & (recs.partition == 0)].timestamp.min())
    times.append(epoch + dt.timedelta(milliseconds=first, microseconds=999))
    pq.write_table(
        pa.table(
            {
                "topic": ["t1"] * 4,
                "partition": [0] * 4,
                "timestamp": pa.array(times, pa.timestamp("us", tz="UTC")),
            }
        ),
        queries,
    )
    out = str(tmp_path / "a")
    assert job_main("lookup", ["--root", root, "--queries", queries, "--output", out]) == 0
    got = pq.read_table(out).to_pandas()
    # floor: -500 us is -1 ms (latest), -1000 us -1, -2500 us -3 (max) if converted blindly
    assert sorted(got.status.tolist()) == ["invalid_query"] * 3 + ["ok"], got
    ok = got[got.status == "ok"]
    assert ok.query_timestamp.tolist() == [first]  # the floor of first ms + 999 us
    assert got[got.status != "ok"].query_timestamp.isna().all()
    capsys.readouterr()
    for start in ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.998"):
        argv = ["--root", root, "--topic", "t1", "--start", start, "--end", "1767225600000"]
        assert job_main("extract", [*argv, "--output", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err
        assert "before 1970" in err and err.count("\n") == 1, err
