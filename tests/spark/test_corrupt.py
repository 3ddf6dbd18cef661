"""Damaged batches through the Spark readers (extract and lookup jobs, the data source):
by default one clear CorruptRecordError line and exit 2, never fewer records without a
word; with seglake.read.corrupt=skip / ignoreCorruptBatches=true every other record,
and each skipped batch named. Brute force: every .log scanned batch by batch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.lake.catalog import Catalog
from seglake.record.batch import scan_batches
from seglake.record.reader import decode_batches
from seglake.spark.jobs import main as job_main


@pytest.fixture(scope="module")
def damaged(query_lake, tmp_path_factory):
    """A copy of the query lake with one byte flipped inside the records of a batch in
    the middle of t1-0's second segment (its CRC fails, its length is intact). Returns
    ``(root, file, position, first offset, last offset, expected records of t1)``."""
    src, _ = query_lake
    root = str(tmp_path_factory.mktemp("damaged") / "lake")
    shutil.copytree(src, root)
    rows = Catalog(root).segments("t1", [0]).to_pylist()
    path = os.path.join(root, rows[1]["path"])
    data = bytearray(Path(path).read_bytes())
    scan = scan_batches(bytes(data))
    k = len(scan) // 2
    pos = int(scan.position[k])
    data[pos + 70] ^= 0x10
    Path(path).write_bytes(bytes(data))
    frames = []
    for r in Catalog(root).segments("t1").to_pylist():
        buf = Path(root, r["path"]).read_bytes()
        t = decode_batches(buf, scan_batches(buf, skip_corrupt=True))
        df = t.select(["offset", "value"]).to_pandas()
        df["partition"] = r["partition"]
        frames.append(df)
    want = pd.concat(frames).sort_values(["partition", "offset"]).reset_index(drop=True)
    lo, hi = int(scan.base_offset[k]), int(scan.last_offset[k])
    assert not ((want.partition == 0) & want.offset.between(lo, hi)).any()
    return root, path, pos, lo, hi, want


def _one_line(err: str, path: str, pos: int) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "CorruptRecordError" in lines[0] and path in lines[0] and f"position {pos}" in lines[0]


def test_extract_job(spark, damaged, tmp_path, capsys):
    root, path, pos, lo, hi, want = damaged
    out = str(tmp_path / "out")
    argv = ["--root", root, "--topic", "t1", "--output", out]
    assert job_main("extract", argv) == 2
    _one_line(capsys.readouterr().err, path, pos)
    out = str(tmp_path / "skip")
    argv = ["--root", root, "--topic", "t1", "--output", out]
    assert job_main("extract", [*argv, "--conf", "seglake.read.corrupt=skip"]) == 0
    printed = capsys.readouterr().out
    assert "skipped 1 damaged batch(es)" in printed
    assert f"{path}: position {pos}: batch with offsets {lo}..{hi}" in printed
    got = pq.read_table(out).select(["partition", "offset", "value"]).to_pandas()
    got = got.sort_values(["partition", "offset"]).reset_index(drop=True)
    assert got.offset.tolist() == want.offset.tolist()
    assert got.partition.tolist() == want.partition.tolist()
    assert got.value.tolist() == want.value.tolist()


def test_lookup_job(spark, damaged, tmp_path, capsys):
    root, path, pos, lo, hi, _ = damaged
    queries = str(tmp_path / "q.parquet")
    offs = [lo - 1, lo, hi, hi + 1]
    pq.write_table(
        pa.table({"topic": ["t1"] * 4, "partition": [0] * 4, "offset": pa.array(offs, pa.int64())}),
        queries,
    )
    argv = ["--root", root, "--queries", queries, "--output", str(tmp_path / "a")]
    assert job_main("lookup", argv) == 2
    _one_line(capsys.readouterr().err, path, pos)
    out = str(tmp_path / "b")
    argv = ["--root", root, "--queries", queries, "--output", out]
    assert job_main("lookup", [*argv, "--conf", "seglake.read.corrupt=skip"]) == 0
    assert f"position {pos}" in capsys.readouterr().out
    got = pq.read_table(out).to_pandas().sort_values("query_offset")
    assert got.status.tolist() == ["ok", "corrupt_batch", "corrupt_batch", "ok"]
    assert got.offset.tolist()[::3] == [lo - 1, hi + 1]


def test_data_source(spark, damaged):
    root, path, pos, _, _, want = damaged
    import seglake.spark

    seglake.spark.register(spark)
    reader = spark.read.format("seglake").option("subscribe", "t1")
    with pytest.raises(Exception, match="CorruptRecordError") as exc:
        reader.load(root).count()
    assert path in str(exc.value) and f"position {pos}" in str(exc.value)
    got = reader.option("ignoreCorruptBatches", "true").load(root).select("partition", "offset")
    got = got.toPandas().sort_values(["partition", "offset"]).reset_index(drop=True)
    assert got.offset.tolist() == want.offset.tolist()
