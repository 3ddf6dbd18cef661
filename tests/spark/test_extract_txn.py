"""Extraction of transactional logs against brute force: a broker-like directory of
``.log`` files only (interleaved transactions, COMMIT/ABORT markers, several segments,
non-monotonic timestamps), registered into a lake, which rebuilds every index and the
``.txnindex``; read_committed must drop exactly the aborted transactions' records."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pandas as pd
import pytest

from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.spark.extract import extract
from seglake.storage.txn_index import TransactionIndex
from tests.txn_log import offset_for_time, write_transactional_log

pytestmark = pytest.mark.spark
PARTITIONS = (0, 1)
COLUMNS = ["partition", "offset", "timestamp", "key", "value"]


@pytest.fixture(scope="module", params=[0, 4], ids=["none", "zstd"])
def txn_lake(tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp(f"txn{request.param}")
    truth, aborted = {}, {}
    for p in PARTITIONS:
        truth[p], aborted[p] = write_transactional_log(
            tmp / "broker" / f"txn-{p}", seed=10 * request.param + p, codec=request.param
        )
    root = str(tmp / "lake")
    register(LakeHandle.open(root), str(tmp / "broker"))
    return root, truth, aborted


def test_registered_txnindex_holds_exactly_the_aborted_transactions(txn_lake):
    root, _, aborted = txn_lake
    for p in PARTITIONS:
        files = sorted(glob.glob(os.path.join(root, f"txn-{p}", "*.txnindex")))
        got = [
            (t.producer_id, t.first_offset, t.last_offset)
            for f in files
            for t in TransactionIndex.from_bytes(Path(f).read_bytes())
        ]
        assert aborted[p], "the generator must abort some transactions"
        assert got == aborted[p]


def _expected(truth: dict, *, start, end, mode: str, committed: bool) -> pd.DataFrame:
    out = []
    for p, t in truth.items():
        log_end = int(t["offset"].max()) + 2  # the last batch is a marker at least
        if mode == "filter":
            sel = t[
                (t["timestamp"] >= (start if start is not None else -(2**63)))
                & (t["timestamp"] < (end if end is not None else 2**63 - 1))
            ]
        else:
            lo = 0 if start is None else offset_for_time(t, start, log_end)
            hi = log_end if end is None else offset_for_time(t, end, log_end)
            sel = t[(t["offset"] >= lo) & (t["offset"] < hi)]
        if committed:
            sel = sel[~sel["aborted"]]
        out.append(sel.assign(partition=p))
    return pd.concat(out)[COLUMNS].sort_values(["partition", "offset"]).reset_index(drop=True)


@pytest.mark.parametrize("mode", ["offsets", "filter"])
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize(
    "window", [(None, None), (1_700_000_002_000, 1_700_000_004_000)], ids=["all", "narrow"]
)
def test_extract_equals_brute_force(spark, txn_lake, mode, isolation, window):
    root, truth, _ = txn_lake
    start, end = window
    got = extract(
        spark, root, "txn", start=start, end=end, mode=mode, isolation_level=isolation
    ).toPandas()
    got["timestamp"] = (got["timestamp"] - pd.Timestamp(0)) // pd.Timedelta(milliseconds=1)
    got = got[COLUMNS].sort_values(["partition", "offset"]).reset_index(drop=True)
    want = _expected(
        truth, start=start, end=end, mode=mode, committed=isolation == "read_committed"
    )
    assert len(want) > 0
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_key_queries_equal_brute_force(spark, txn_lake, request):
    """The lookup job's key queries (every record, the latest per key) and the data
    source's pushed ``key = ...`` / ``key IN (...)`` at both isolation levels equal the
    generator's records of those keys (aborted ones dropped under read_committed)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    import seglake.spark
    from seglake.spark.lookup import lookup

    if request.node.callspec.id != "none":
        pytest.skip("one codec is enough: the reads are the same")
    root, truth, _ = txn_lake
    t0 = truth[0][truth[0]["key"].notna()]
    last = t0.groupby("key").tail(1)
    key = last[last["aborted"]]["key"].iloc[0]  # its last record aborted
    other = t0[t0["aborted"] & (t0["key"] != key)]["key"].iloc[0]
    queries = [(None, key), (0, other), (1, other), (0, b"absent")]
    q = pa.table(
        {
            "topic": ["txn"] * len(queries),
            "partition": pa.array([p for p, _ in queries], pa.int32()),
            "key": pa.array([k for _, k in queries], pa.binary()),
        }
    )
    seglake.spark.register(spark)
    for level in ("read_uncommitted", "read_committed"):

        def recs(p, keys, level=level):
            t = truth[p][truth[p]["key"].isin(keys)]
            return t[~t["aborted"]] if level == "read_committed" else t

        for latest in (False, True):
            want = []
            for part, k in queries:
                rows = [
                    ("ok", p, int(o))
                    for p in ([part] if part is not None else PARTITIONS)
                    for o in recs(p, [k])["offset"].tolist()[-1 if latest else 0 :]
                ]
                want += rows or [("no_record_for_key", part, None)]
            got = lookup(spark, root, q, latest_per_key=latest, isolation_level=level).toArrow()
            cols = [got.column(c).to_pylist() for c in ("status", "partition", "offset")]
            assert list(zip(*cols, strict=True)) == want, (level, latest)
        df = spark.read.format("seglake").option("subscribe", "txn")
        df = df.option("isolationLevel", level).load(root)
        for cond, keys in [
            (F.col("key") == key.decode(), [key]),
            (F.col("key").isin(key.decode(), other.decode(), "absent"), [key, other]),
        ]:
            got = df.where(cond).select("partition", "offset").toPandas()
            want = [(p, int(o)) for p in PARTITIONS for o in recs(p, keys)["offset"]]
            assert sorted(zip(got["partition"], got["offset"], strict=True)) == want
