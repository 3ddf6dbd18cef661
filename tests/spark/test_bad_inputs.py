"""Issue 16 items 6-8 through the spark-submit jobs (their ``main``, in-process): bad
input is one line on stderr and exit 2, never a traceback, and publishes nothing; a
lookup takes ISO-8601 times as extract does; an extraction that names what is not in the
lake is an error, not an empty result."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.lake.catalog import Catalog
from seglake.sample import START_MS, generate
from seglake.spark.jobs import main

pytestmark = pytest.mark.spark
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("bad")
    pq.write_table(generate(300, seed=3, topics=("t",)), d / "in.parquet")
    root = str(d / "lake")
    assert (
        main("ingest", ["--input", str(d / "in.parquet"), "--root", root, "--num-partitions", "2"])
        == 0
    )
    return root


def _error_line(capsys, job: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith(f"seglake {job}: ")]
    assert len(lines) == 1 and lines[0].startswith(f"seglake {job}: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"value": pa.array([b"a", b"b"]), "timestamp": pa.array([5, None], pa.int64())},
            "row 1: timestamp is null",
        ),
        (
            {
                "value": pa.array([b"a"]),
                "headers": pa.array([[{"key": None, "value": b"v"}]], HEADERS),
            },
            "row 0, header 0: header key is null",
        ),
        (
            {"value": pa.array([b"a", b"b"]), "timestamp": pa.array([5, -7], pa.int64())},
            "row 1: timestamp -7 is out of range",
        ),
    ],
    ids=["null-timestamp", "null-header-key", "negative-timestamp"],
)
def test_bad_rows_are_one_line_and_publish_nothing(capsys, lake, tmp_path, table, message):
    before = Catalog(lake).version()
    pq.write_table(pa.table(table), tmp_path / "bad.parquet")
    argv = ["--input", str(tmp_path / "bad.parquet"), "--root", lake, "--topic", "bad"]
    assert main("ingest", argv) == 2
    assert message in _error_line(capsys, "ingest")
    assert Catalog(lake).version() == before
    assert not os.listdir(os.path.join(lake, "_staging"))
    assert not os.path.exists(os.path.join(lake, "bad-0"))


def test_partition_directory_too_long_is_refused_before_writing(capsys, lake, tmp_path):
    t = pa.table({"value": pa.array([b"a"]), "partition": pa.array([123456], pa.int32())})
    pq.write_table(t, tmp_path / "in.parquet")
    argv = ["--input", str(tmp_path / "in.parquet"), "--root", lake, "--topic", "x" * 249]
    assert main("ingest", argv) == 2
    assert "more than the 255" in _error_line(capsys, "ingest")
    assert not [n for n in os.listdir(lake) if n.startswith("x")]
    assert not os.listdir(os.path.join(lake, "_staging"))


def test_empty_queries_file(capsys, lake, tmp_path):
    (tmp_path / "q.json").write_text("")
    argv = ["--root", lake, "--queries", str(tmp_path / "q.json"), "--output", str(tmp_path / "o")]
    assert main("lookup", argv) == 2
    assert "no 'topic' or 'partition' column" in _error_line(capsys, "lookup")


def test_lookup_takes_iso_timestamps_like_extract(spark, lake, tmp_path):
    times = [START_MS + 100, START_MS + 100, START_MS + 250]
    texts = ["2026-01-01T00:00:00.1Z", str(START_MS + 100), "2026-01-01T01:00:00.250+01:00"]
    rows = [{"topic": "t", "partition": 0, "timestamp": s} for s in texts]
    rows += [{"topic": "t", "partition": 1, "timestamp": "not a time"}]
    (tmp_path / "q.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--root", lake, "--queries", str(tmp_path / "q.json"), "--output", str(tmp_path / "o")]
    assert main("lookup", argv) == 0
    got = pq.read_table(tmp_path / "o").sort_by("query_timestamp").to_pylist()
    by_ms = {r["query_timestamp"]: r for r in got}
    assert sorted(t for t in by_ms if t is not None) == sorted(set(times))
    ref = spark.createDataFrame(
        [("t", 0, t) for t in times], "topic string, partition int, timestamp long"
    )
    from seglake.spark.lookup import lookup

    for r in lookup(spark, lake, ref).collect():
        assert by_ms[r["query_timestamp"]]["offset"] == r["offset"]
        assert r["status"] == "ok"
    assert [r["status"] for r in got if r["query_timestamp"] is None] == ["invalid_query"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "t", "--start", "2026-01-02", "--end", "2026-01-01"], "is after end time"),
        (["--topic", "t", "--start-offset", "9", "--end-offset", "3"], "start offset 9 is after"),
        (["--topic", "nope"], "topic 'nope' is not in the lake"),
        (["--topic", "t", "--partitions", "1,7"], "topic 't' has no partition [7]"),
        (["--topic", "t", "--partitions", "0,x"], "expected numbers like 0,3"),
    ],
    ids=["start-after-end", "offsets-reversed", "no-topic", "no-partition", "bad-partitions"],
)
def test_extract_refuses_what_would_be_an_empty_answer(capsys, lake, tmp_path, args, message):
    assert main("extract", ["--root", lake, *args, "--output", str(tmp_path / "o")]) == 2
    assert message in _error_line(capsys, "extract")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("raised", "name", "message"),
    [
        (
            "seglake.errors.NoSpaceError: /l/_staging/r/t-0/0.log: no space left on the device",
            "NoSpaceError",
            "/l/_staging/r/t-0/0.log: no space left on the device",
        ),
        (  # a task's OSError the file system raised (issue 25 item 6; old code: None)
            "OSError: [Errno 30] Cannot create directory '/l/_staging/r/t-0'. Detail: "
            "[errno 30] Read-only file system",
            "FileSystemError",
            "/l/_staging/r/t-0: the file system is read-only (EROFS): remount it read-write "
            "or give a writable lake root",
        ),
    ],
)
def test_task_error_rebuilds_the_seglake_error(raised, name, message) -> None:
    from seglake.spark.session import task_error

    text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        f'  File "x.py", line 1\n{raised}\n SQLSTATE: 38000'
    )
    err = task_error(RuntimeError(text))
    assert type(err).__name__ == name
    assert str(err) == message
    assert task_error(RuntimeError("java.lang.OutOfMemoryError")) is None


def _spark_refusals(d) -> dict[str, tuple[str, list[str], str]]:
    """Inputs Spark itself refuses, and a schema error of ours (was three lines)."""
    n = 3
    ns = pa.array([1_700_000_000_000_000_000 + i for i in range(n)], pa.timestamp("ns", "UTC"))
    pq.write_table(pa.table({"value": [b"v"] * n, "timestamp": ns}), d / "nanos.parquet")
    (d / "damaged.parquet").write_bytes(b"PAR1" + bytes(range(256)) + b"PAR1")
    (d / "ints.json").write_text("\n".join(json.dumps({"value": i}) for i in range(n)))
    (d / "q.json").write_text(json.dumps({"topic": "t", "partition": "zero", "offset": 1}))
    return {
        "nanosecond timestamps": ("ingest", ["--input", str(d / "nanos.parquet")], "NANOS"),
        "damaged parquet": ("ingest", ["--input", str(d / "damaged.parquet")], "damaged.parquet"),
        "value of ints": ("ingest", ["--input", str(d / "ints.json")], "wrong type for value"),
        "output exists": ("extract", ["--topic", "t", "--output", str(d / "ints.json")], "exists"),
        "partition 'zero'": ("lookup", ["--queries", str(d / "q.json"), "--output", "x"], "'zero'"),
    }


def test_what_spark_refuses_is_one_line(capsys, lake, tmp_path):
    """Old code: a Py4J/AnalysisException traceback, exit 1 (a schema error: 3 lines)."""
    version = Catalog(lake).version()
    for name, (job, args, named) in _spark_refusals(tmp_path).items():
        capsys.readouterr()
        assert main(job, ["--root", lake, *args]) == 2, name
        lines = capsys.readouterr().err.splitlines()
        err = [x for x in lines if x.strip() and not x.startswith('{"ts"')]  # pyspark's log
        assert len(err) == 1 and err[0].startswith(f"seglake {job}: error: "), (name, err)
        assert named in err[0], (name, err)
    assert Catalog(lake).version() == version  # nothing was published
