"""Compaction against a brute-force model of Kafka's cleaner: keyed updates, tombstones,
null keys, aborted and committed transactions, several codecs, non-monotonic timestamps
(tests.txn_log). After a round every record a reader sees is one the rules keep, at its
original offset; batches the cleaner keeps whole are byte-identical; a second round with
nothing new changes nothing; tombstones go only in a round past their delete horizon."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import rows_table, segment_row
from seglake.record.batch import DELETE_HORIZON_BIT, scan_batches
from seglake.storage.log import PartitionLog
from seglake.storage.recovery import recover_segment
from tests.key_index_check import check_partition_dir
from tests.lake_check import lake_records
from tests.txn_log import write_transactional_log

NOW = 1_800_000_000_000
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}


def txn_lake(root: Path, *, seed: int, codec: int) -> pd.DataFrame:
    d = root / "c-0"
    truth, _ = write_transactional_log(d, seed=seed, steps=250, codec=codec, segment_bytes=3000)
    fs, _ = lakefs.resolve(str(root))
    rows = []
    state: dict[int, int] = {}  # open transactions carried segment to segment, as Kafka's
    for p in sorted(d.glob("*.log")):  # LogLoader does: a .txnindex entry's first offset
        rec = recover_segment(fs, str(p), interval=512, producer_state=state)
        rows.append(segment_row("c", 0, rec, f"c-0/{p.name}"))
    Catalog(str(root)).commit(rows_table(rows), "setup")
    return truth


def lake_of(root: Path, topic: str, recs: pa.Table, cfg: LogConfig, *, interval: int) -> None:
    """Partition ``topic``-0 of ``recs`` written with ``cfg``, its rows (recording
    ``index.interval.bytes`` ``interval``) committed to a lake at ``root``."""
    d = root / f"{topic}-0"
    d.mkdir(parents=True)
    PartitionLog.open(str(d)).append(recs, config=cfg)
    fs, _ = lakefs.resolve(str(root))
    rows = [
        segment_row(topic, 0, recover_segment(fs, str(p), interval=interval), f"{d.name}/{p.name}")
        for p in sorted(d.glob("*.log"))
    ]
    Catalog(str(root)).commit(rows_table(rows), "setup")


def keyed_lake(root: Path, *, n: int = 600, seed: int = 0, codec: str = "lz4") -> pd.DataFrame:
    """Updates of 20 keys, a fifth of them tombstones, some null keys, jittered times."""
    rng = np.random.default_rng(seed)
    keys = [None if rng.random() < 0.05 else f"k{rng.integers(0, 20)}".encode() for _ in range(n)]
    values = [None if rng.random() < 0.2 else f"v{i}".encode() for i in range(n)]
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(NOW - 10_000_000 + np.arange(n) * 10 + rng.integers(-50, 50, n)),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    cfg = LogConfig(segment_bytes=2000, batch_size=300, compression_type=codec)
    lake_of(root, "c", recs, cfg, interval=512)
    df = recs.to_pandas()
    df["aborted"] = False
    return df


def model(truth: pd.DataFrame, upper: int) -> pd.DataFrame:
    """Kafka's rules, record by record, for a first round over [0, upper)."""
    latest: dict[bytes, int] = {}
    for r in truth.itertuples():
        if r.offset < upper and not r.aborted and r.key is not None:
            latest[r.key] = max(latest.get(r.key, -1), r.offset)
    keep = [
        r.offset >= upper
        or (not r.aborted and r.key is not None and r.offset >= latest.get(r.key, -1))
        for r in truth.itertuples()
    ]
    return truth[keep]


def visible(root: Path) -> pd.DataFrame:
    return lake_records(str(root))[["offset", "timestamp", "key", "value"]]


@pytest.mark.parametrize(("seed", "codec"), [(1, 0), (2, 3), (3, 4), (4, 1)])
def test_first_round_matches_the_model(tmp_path: Path, seed: int, codec: int) -> None:
    root = tmp_path / "lake"
    truth = txn_lake(root, seed=seed, codec=codec)
    cat = Catalog(str(root))
    before_rows = cat.segments()
    v0, before = cat.version(), visible(root)
    upper = int(before_rows["base_offset"][-1].as_py())  # the active segment's base
    result = run_compaction(LakeHandle.open(str(root)), CompactOptions(conf=COMPACT, now_ms=NOW))
    assert result.committed, result.summary()
    p = result.partitions[0]
    assert p.action == "compact" and p.checkpoint == upper
    want = model(truth, upper)[["offset", "timestamp", "key", "value"]].reset_index(drop=True)
    got = visible(root).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert lake_records(str(root), version=v0)[["offset", "value"]].equals(
        before[["offset", "value"]]
    )  # a pinned reader still sees the old log
    rows = cat.segments()
    assert rows["cleaner_checkpoint"].to_pylist()[0] == upper
    # the active segment is untouched, byte for byte
    assert rows["run_id"].to_pylist()[-1] == "setup"
    # every kept batch is valid (CRC) and batches with a horizon are tombstone/marker ones
    for r in rows.to_pylist():
        scan = scan_batches((root / r["path"]).read_bytes())
        assert scan.error is None and scan.crc_valid.all()
    assert check_partition_dir(root / "c-0") == rows.num_rows  # each with its .keyindex
    # a second round with nothing dirty changes nothing
    again = run_compaction(LakeHandle.open(str(root)), CompactOptions(conf=COMPACT, now_ms=NOW))
    assert not again.committed and again.partitions[0].action == "skip"


def test_tombstones_go_after_the_delete_horizon(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    truth = keyed_lake(root, seed=7)
    conf = {**COMPACT, "delete.retention.ms": "1000"}
    run_compaction(LakeHandle.open(str(root)), CompactOptions(conf=conf, now_ms=NOW))
    first = visible(root)
    rows = Catalog(str(root)).segments()
    tomb = first[first["value"].isna()]
    assert len(tomb), "the model lake has tombstones that survive round 1"
    horizons = []
    for r in rows.to_pylist()[:-1]:
        scan = scan_batches((root / r["path"]).read_bytes())
        marked = (scan.attributes & DELETE_HORIZON_BIT) != 0
        horizons += scan.base_timestamp[marked].tolist()
    assert horizons and set(horizons) == {NOW + 1000}  # KIP-534: horizon = now + retention
    # round 2 forced over the same section (checkpoint reset): before the horizon, kept
    cat = Catalog(str(root))
    reset = cat.segments().drop_columns(["cleaner_checkpoint"])
    cat.replace_rows(reset.drop_columns(["run_id", "committed_at"]), "reset-1")
    run_compaction(LakeHandle.open(str(root)), CompactOptions(conf=conf, now_ms=NOW + 999))
    assert visible(root)["value"].isna().sum() == len(tomb)
    cat.replace_rows(
        cat.segments().drop_columns(["cleaner_checkpoint", "run_id", "committed_at"]), "reset-2"
    )
    run_compaction(LakeHandle.open(str(root)), CompactOptions(conf=conf, now_ms=NOW + 1000))
    after = visible(root)
    upper = int(rows["base_offset"][-1].as_py())
    assert after[after["offset"] < upper]["value"].isna().sum() == 0
    want = first[~(first["value"].isna() & (first["offset"] < upper))]
    assert after["offset"].tolist() == want["offset"].tolist()
    upper1 = int(rows["base_offset"][-1].as_py())
    assert first.reset_index(drop=True)[["offset", "value"]].equals(
        model(truth, upper1)[["offset", "value"]].reset_index(drop=True)
    )
