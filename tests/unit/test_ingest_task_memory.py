"""A direct ingest write task in one process (no Spark): its output does not depend on how
the input is cut into batches or when the held batches are flushed (batch boundaries
follow ``batch.size``), and it runs in its own Arrow pool, put back after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.config import LogConfig
from seglake.lake.handle import LakeHandle
from seglake.sample import generate
from seglake.spark.arrow_input import Normalizer, read_split
from seglake.spark.ingest_tasks import count_groups, local_writer
from seglake.spark.task_memory import task_pool


def _input(tmp_path: Path, n: int = 6000) -> tuple[list[tuple[str, int, int]], Normalizer]:
    t = generate(n, seed=3)
    keys = t["key"].to_numpy(zero_copy_only=False).copy()
    keys[::5] = None  # null keys: round robin across batches
    t = t.set_column(t.schema.get_field_index("key"), "key", pa.array(keys, pa.binary()))
    path = str(tmp_path / "in.parquet")
    pq.write_table(t, path, row_group_size=2500)
    return [(path, 0, Path(path).stat().st_size)], Normalizer(None, tuple(t.column_names), None)


def _write(root: Path, split, norm: Normalizer, conf: dict, batch_rows: int) -> dict[str, bytes]:
    config = LogConfig.load(overrides=conf)
    counts = pa.Table.from_batches(
        list(count_groups(3)(read_split(split, norm.count_columns(3), norm)))
    ).to_pylist()
    starts = {(r["task"], r["topic"], r["partition"]): 0 for r in counts}
    task = local_writer(LakeHandle.open(str(root)), "run", config, 3, starts, None)
    rows = pa.Table.from_batches(
        list(task(read_split(split, list(norm.columns), norm, batch_rows)))
    )
    assert sum(rows["record_count"].to_pylist()) == 6000
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_output_does_not_depend_on_input_batches_or_flushes(tmp_path):
    split, norm = _input(tmp_path)
    conf = {"compression.type": "lz4", "log.segment.bytes": "40000", "batch.size": "3000"}
    want = _write(tmp_path / "one", split, norm, {**conf}, batch_rows=1 << 20)
    assert len(want) > 3 * 9  # several segments in each of 9 (topic, partition)s
    for i, (rows, buffer) in enumerate([(2500, 1 << 30), (997, 30_000), (173, 8_000)]):
        got = _write(
            tmp_path / f"cut-{i}",
            split,
            norm,
            {**conf, "seglake.ingest.buffer.bytes": str(buffer)},
            batch_rows=rows,
        )
        assert got.keys() == want.keys()
        assert [k for k in want if got[k] != want[k]] == [], (rows, buffer)


def test_task_pool_is_put_back_even_on_failure(tmp_path):
    before = pa.default_memory_pool()
    with task_pool() as pool:
        held = pool.bytes_allocated()
        a = pa.array(np.arange(100_000)).cast(pa.int32())  # allocated from the task pool
        assert pool.bytes_allocated() >= held + a.nbytes
    assert pa.default_memory_pool().backend_name == before.backend_name
    split, norm = _input(tmp_path)
    task = local_writer(LakeHandle.open(str(tmp_path / "lake")), "run", LogConfig(), 3, {}, None)
    with pytest.raises(Exception, match="count pass did not see"):
        list(task(read_split(split, list(norm.columns), norm)))
    assert pa.default_memory_pool().backend_name == before.backend_name
