"""One-pass ingest's driver side without Spark: when the footers allow it, and the staged
batches moved to other offsets (their CRCs still valid)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from seglake.config import LogConfig
from seglake.lake.handle import LakeHandle
from seglake.record.batch import scan_batches
from seglake.sample import generate
from seglake.spark.arrow_input import Normalizer
from seglake.spark.ingest_rebase import _patch, one_pass
from seglake.storage.writer import SegmentWriter


@pytest.fixture
def split(tmp_path):
    t = generate(30_000, seed=1).drop_columns(["headers"])  # three topics
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=10_000)
    return [(str(path), 0, path.stat().st_size)], tuple(t.column_names), t


@pytest.mark.parametrize(
    "overrides, num_partitions, ok",
    [
        ({}, 8, False),  # 30,000 rows could be 24 pieces of < 10,000
        ({"seglake.ingest.local.min.records": "1000"}, 8, True),  # >= 1,250 a piece
        ({"seglake.ingest.shuffle": "never"}, 8, True),
        ({"seglake.ingest.shuffle": "never"}, None, False),  # a partition column
        ({"seglake.ingest.shuffle": "always"}, 8, False),
        ({"seglake.ingest.shuffle": "never", "seglake.ingest.order": "timestamp"}, 8, False),
        ({"seglake.ingest.shuffle": "never", "log.roll.jitter.ms": "10"}, 8, False),
    ],
)
def test_one_pass_where_the_footers_prove_no_shuffle(
    split, tmp_path, overrides, num_partitions, ok
):
    splits, cols, _ = split
    config = LogConfig.load(overrides=overrides)
    norm = Normalizer(None, cols, None)
    assert one_pass([splits], norm, num_partitions, config, LakeHandle.open(str(tmp_path))) == ok


def test_one_pass_refuses_topics_the_plan_would_refuse(split, tmp_path):
    splits, cols, t = split
    never = LogConfig.load(overrides={"seglake.ingest.shuffle": "never"})
    assert one_pass(
        [splits], Normalizer("fixed", cols, None), 8, never, LakeHandle.open(str(tmp_path))
    )
    assert not one_pass(
        [splits], Normalizer("bad/topic", cols, None), 8, never, LakeHandle.open(str(tmp_path))
    )
    topics = t["topic"].to_pylist()
    topics[5] = None
    path = tmp_path / "nulls.parquet"
    pq.write_table(t.set_column(0, "topic", pa.array(topics, pa.string())), path)
    nulls = [(str(path), 0, path.stat().st_size)]
    assert not one_pass(
        [nulls], Normalizer(None, cols, None), 8, never, LakeHandle.open(str(tmp_path))
    )


def test_patch_moves_every_batch_and_keeps_the_crcs(tmp_path):
    n = 5_000
    records = pa.table(
        {
            "offset": pa.array(np.arange(n, dtype=np.int64)),
            "timestamp": pa.array(np.full(n, 1_700_000_000_000, np.int64)),
            "value": pa.array([b"v" * 50] * n),
        }
    )
    config = LogConfig.load(overrides={"compression.type": "lz4", "batch.size": "4096"})
    w = SegmentWriter(pafs.LocalFileSystem(), str(tmp_path), config=config)
    (info,) = [*w.append(records), *w.close()]
    before = scan_batches(Path(info.log_path).read_bytes())
    assert len(before) > 10
    _patch(info.log_path, 1_000_000, n)
    after = scan_batches(Path(info.log_path).read_bytes())
    assert after.error is None and after.crc_valid.all()
    assert (after.base_offset == before.base_offset + 1_000_000).all()
    assert (after.position == before.position).all()


def test_counts_tell_task_dirs_from_partition_dirs():
    """A task's staging dir is never a partition dir: topic ``_task``'s partition 1 is
    task 0's, task 1's pieces are under :func:`task_dir`."""
    from seglake.spark.ingest_rebase import counts
    from seglake.spark.ingest_tasks import SEGMENT_ROWS, task_dir

    rows = {c: [] for c in ("path", "topic", "partition", "record_count")}
    for path, topic, p, n in [
        ("_task-1/00000000000000000000.log", "_task", 1, 5),
        (f"{task_dir(1)}/_task-1/00000000000000000000.log", "_task", 1, 7),
    ]:
        for c, v in zip(rows, (path, topic, p, n), strict=True):
            rows[c].append(v)
    table = pa.table({c: rows[c] for c in rows}).cast(
        pa.schema([SEGMENT_ROWS.field(c) for c in rows])
    )
    got = {(r["task"], r["topic"], r["partition"]): r["count"] for r in counts(table)}
    assert got == {(0, "_task", 1): 5, (1, "_task", 1): 7}
