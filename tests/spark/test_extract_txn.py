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
