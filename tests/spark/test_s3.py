"""The lake on object storage: ingest, lookup and extraction against an ``s3://`` root on a
SeaweedFS server on loopback (tests/s3_server.py), all I/O through pyarrow.fs.

The same input is ingested into an S3 lake and a local lake with the same run id; the
S3 lake must hold the same bytes, answer lookups and extractions the same, and its
executors must read ``.log`` objects with ranged GETs, never whole.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import seglake
from seglake import fs as lakefs
from seglake import lake_paths
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.staging import cleanup
from seglake.lake_paths import STAGING_DIR
from seglake.sample import generate
from seglake.spark.extract import extract
from seglake.spark.ingest import ingest
from seglake.spark.lookup import lookup
from tests.lake_check import lake_records, same_records_as_input
from tests.s3_server import S3Server, gets

pytestmark = pytest.mark.spark
CONF = {
    "log.segment.bytes": "25000",
    "log.index.interval.bytes": "2048",
    "batch.size": "2048",
    "compression.type": "zstd",
}
RUN = "s3-run-1"
SUFFIXES = (".log", ".index", ".timeindex")


@pytest.fixture(scope="module")
def messages() -> pa.Table:
    return generate(5000, seed=21, topics=("t1", "t2"), jitter_ms=1500)


@pytest.fixture(scope="module")
def lakes(spark, spark_s3: S3Server, messages, tmp_path_factory) -> tuple[str, str]:
    """(s3 root, local root), both holding ``messages`` from run ``RUN``."""
    spark_s3.create_bucket("ingest")
    s3_root = spark_s3.root("ingest", "lake")
    local_root = str(tmp_path_factory.mktemp("s3-twin") / "lake")
    for root in (s3_root, local_root):
        ingest(
            spark, spark.createDataFrame(messages), root, run_id=RUN, num_partitions=2, conf=CONF
        )
    return s3_root, local_root


def _rows(root: str) -> list[dict]:
    return Catalog(root).segments().drop_columns(["committed_at"]).to_pylist()


def test_s3_lake_holds_the_same_segments_as_a_local_one(lakes, messages):
    s3_root, local_root = lakes
    rows = _rows(s3_root)
    assert rows == _rows(local_root) and len(rows) > 8
    s3fs, s3_base = lakefs.resolve(s3_root)
    assert s3fs.type_name == "s3"
    localfs, local_base = lakefs.resolve(local_root)
    for r in rows:
        stem = r["path"][: -len(".log")]
        for suffix in SUFFIXES:
            assert lakefs.read_all(s3fs, lake_paths.safe_join(s3_base, stem + suffix)) == (
                lakefs.read_all(localfs, lake_paths.safe_join(local_base, stem + suffix))
            ), stem
    assert same_records_as_input(lake_records(s3_root), messages)
    # published: nothing left under _staging/
    staged = s3fs.get_file_info(
        pafs.FileSelector(lakefs.join(s3_base, STAGING_DIR), allow_not_found=True, recursive=True)
    )
    assert [i.path for i in staged if i.type == pafs.FileType.File] == []


def test_rerun_of_the_run_id_on_s3_is_a_noop(spark, lakes, messages):
    s3_root, _ = lakes
    version = Catalog(s3_root).version()
    again = ingest(
        spark, spark.createDataFrame(messages), s3_root, run_id=RUN, num_partitions=2, conf=CONF
    )
    assert again.already_committed and Catalog(s3_root).version() == version


def _queries(records: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    out = []
    for (topic, p), g in records.groupby(["topic", "partition"]):
        for o in rng.choice(g["offset"].to_numpy(), n, replace=False).tolist():
            out.append((topic, int(p), int(o), None))
        ts = g["timestamp"].to_numpy()
        for t in [*rng.integers(int(ts.min()), int(ts.max()), n).tolist(), -1, -2, -3]:
            out.append((topic, int(p), None, int(t)))
    return pd.DataFrame(out, columns=["topic", "partition", "offset", "timestamp"]).astype(
        {"offset": "Int64", "timestamp": "Int64"}
    )


def _sorted(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return df.sort_values(by).reset_index(drop=True)


def test_lookup_on_s3_equals_local(spark, lakes):
    s3_root, local_root = lakes
    records = lake_records(local_root)
    queries = spark.createDataFrame(_queries(records, 25, seed=4))
    key = ["topic", "partition", "query_offset", "query_timestamp"]
    got = _sorted(lookup(spark, s3_root, queries).toPandas(), key)
    want = _sorted(lookup(spark, local_root, queries).toPandas(), key)
    pd.testing.assert_frame_equal(got, want)
    ok = got[got["status"] == "ok"]
    assert len(ok) > 150
    by_offset = records.set_index(["topic", "partition", "offset"])["value"]
    assert ok["value"].tolist() == [
        by_offset[(t, p, o)]
        for t, p, o in ok[["topic", "partition", "offset"]].itertuples(index=False)
    ]


def test_point_lookups_on_s3_read_log_ranges_not_objects(spark, spark_s3, lakes):
    """One offset per partition: each costs about an index interval and a batch of GETs."""
    s3_root, _ = lakes
    rows = Catalog(s3_root).segments()
    sizes = dict(zip(rows["path"].to_pylist(), rows["size_bytes"].to_pylist(), strict=True))
    mids = [
        (r["topic"], r["partition"], (r["base_offset"] + r["next_offset"]) // 2, None)
        for r in rows.to_pylist()
        if r["base_offset"] == 0
    ]
    queries = pd.DataFrame(mids, columns=["topic", "partition", "offset", "timestamp"])
    mark = spark_s3.mark()
    out = lookup(
        spark,
        s3_root,
        spark.createDataFrame(queries.astype({"offset": "Int64", "timestamp": "Int64"})),
    ).toPandas()
    log_gets = list(gets(spark_s3.requests_since(mark), ".log"))
    assert (out["status"] == "ok").all() and len(out) == 4
    assert log_gets, "the executors read the S3 lake"
    for r in log_gets:
        rel = r.path.split("/lake/", 1)[1]
        assert r.range is not None and r.length is not None and r.length < sizes[rel], r
    # per query: the index interval holding it (2048 bytes apart) and the batch after it
    assert sum(r.length or 0 for r in log_gets) <= len(out) * 3 * 2600


@pytest.mark.parametrize("mode", ["offsets", "filter"])
def test_extract_on_s3_equals_local(spark, spark_s3, lakes, mode):
    s3_root, local_root = lakes
    ts = lake_records(local_root)["timestamp"]
    lo, hi = int(ts.quantile(0.4)), int(ts.quantile(0.47))
    key = ["partition", "offset"]
    mark = spark_s3.mark()
    got = _sorted(
        extract(spark, s3_root, "t1", start=lo, end=hi, mode=mode, split_bytes=8192).toPandas(), key
    )
    requests = spark_s3.requests_since(mark)
    want = _sorted(
        extract(spark, local_root, "t1", start=lo, end=hi, mode=mode, split_bytes=8192).toPandas(),
        key,
    )
    pd.testing.assert_frame_equal(got, want)
    assert len(got) > 50
    # splits of at most 8 KiB, each one ranged GET (plus the batch after a range's end)
    log_gets = list(gets(requests, ".log"))
    assert log_gets and all(r.range is not None and (r.length or 0) < 12_000 for r in log_gets)
    if mode == "offsets":  # a narrow range: segments outside it are not read
        t1_bytes = sum(r["size_bytes"] for r in Catalog(s3_root).segments("t1").to_pylist())
        assert sum(r.length or 0 for r in log_gets) < t1_bytes / 2


def test_notebook_api_reads_s3(lakes):
    s3_root, local_root = lakes
    s3_lake, local_lake = seglake.open(s3_root), seglake.open(local_root)
    assert s3_lake.topics() == local_lake.topics() == ["t1", "t2"]
    p_s3, p_local = s3_lake.partition("t2", 1), local_lake.partition("t2", 1)
    pd.testing.assert_frame_equal(p_s3.read(100, max_records=7), p_local.read(100, max_records=7))
    start = int(lake_records(local_root)["timestamp"].median())
    pd.testing.assert_frame_equal(p_s3.range(start, start + 500), p_local.range(start, start + 500))


def test_failed_run_on_s3_leaves_nothing_after_cleanup(spark, spark_s3, messages):
    spark_s3.create_bucket("failed")
    root = spark_s3.root("failed", "lake")
    with pytest.raises(Exception, match="fail_after_records"):
        ingest(
            spark,
            spark.createDataFrame(messages),
            root,
            run_id="doomed",
            num_partitions=2,
            fail_after_records=200,
        )
    assert lake_records(root).empty
    cleanup(LakeHandle.open(root))
    s3fs, base = lakefs.resolve(root)
    infos = s3fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
    assert [
        i.path for i in infos if i.type == pafs.FileType.File and "/_catalog/" not in i.path
    ] == []
