"""One catalog row -> SegmentRef -> LogSegment (``SegmentRef.open``), the driver's and the
executors' alike: a segment whose index is missing is rebuilt with the interval its row
records, so the rebuilt ``.index`` equals the one written (byte for byte), wherever the
segment is opened."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_answer import open_segment as _open
from seglake.lake.lookup_plan import partition_arrays
from seglake.lake.rows import segment_ref, segment_refs
from seglake.lake.scan_read import read_split
from seglake.lake.snapshot import Snapshot
from seglake.spark.extract_plan import ExtractOptions, plan_extract
from seglake.storage.index_builder import DEFAULT_INTERVAL
from seglake.storage.index_cache import IndexCache
from seglake.storage.log import PartitionLog
from tests.unit.test_compact_rules import lake_of

INTERVAL = 512  # what the rows record (not the default 4096)


@pytest.fixture
def lake_without_indexes(tmp_path: Path) -> tuple[str, list[dict], dict[str, np.ndarray]]:
    """A lake whose rows record ``index_interval_bytes=512``, its ``.index`` files
    deleted (returned: root, rows, the deleted files' offsets per path)."""
    root = tmp_path / "lake"
    n = 400
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array([b"k%d" % (i % 7) for i in range(n)], pa.binary()),
            "value": pa.array([b"v" * 40] * n, pa.binary()),
        }
    )
    cfg = LogConfig(segment_bytes=6000, batch_size=200, index_interval_bytes=INTERVAL)
    lake_of(root, "c", recs, cfg, interval=INTERVAL)
    rows = Catalog(str(root)).segments("c", 0).to_pylist()
    assert {r["index_interval_bytes"] for r in rows} == {INTERVAL}
    written = {}
    for r in rows:
        index = root / r["path"].replace(".log", ".index")
        written[r["path"]] = np.frombuffer(index.read_bytes(), ">i4").reshape(-1, 2)
        index.unlink()
    assert any(len(w) for w in written.values())
    return str(root), rows, written


def _entries(seg) -> np.ndarray:
    oi = seg.offset_index
    assert seg.index_source.startswith("rebuilt")
    return np.stack([oi.offsets - seg.base_offset, oi.positions], axis=1)


def test_executor_segments_rebuild_with_the_rows_interval(lake_without_indexes) -> None:
    root, rows, written = lake_without_indexes
    # IndexCache.segment (extract's and lookup's executors)
    for r in rows:
        seg = IndexCache().segment(root, segment_ref(r))
        assert seg.index_interval_bytes == INTERVAL
        np.testing.assert_array_equal(_entries(seg), written[r["path"]])
    # lookup: the broadcast arrays carry the interval to _open
    a = partition_arrays(Snapshot.read(LakeHandle.open(root), "c", [0]))[("c", 0)]
    for s, r in enumerate(rows):
        seg = _open(IndexCache(), root, a, s)
        assert seg.index_interval_bytes == INTERVAL
        np.testing.assert_array_equal(_entries(seg), written[r["path"]])
    # extract: a split carries it to read_split's segment
    cache = IndexCache()
    splits = plan_extract(root, "c", ExtractOptions(split_bytes=1 << 20)).tasks
    assert {s.index_interval_bytes for s in splits} == {INTERVAL}
    for s in splits:
        read_split(cache, root, s)
    assert cache._entries
    for seg, _ in cache._entries.values():
        assert seg.index_interval_bytes == INTERVAL
    # the driver's (PartitionLog.from_refs): the same function
    fs, base = lakefs.resolve(root)
    log = PartitionLog.from_refs(fs, base, segment_refs(Catalog(root).segments("c", 0)))
    for seg in log.segments:
        np.testing.assert_array_equal(_entries(seg), written[seg.log_path[len(base) + 1 :]])


def test_a_row_without_an_interval_uses_the_default(lake_without_indexes) -> None:
    root, rows, _ = lake_without_indexes
    seg = IndexCache().segment(root, segment_ref({**rows[0], "index_interval_bytes": None}))
    assert seg.index_interval_bytes == DEFAULT_INTERVAL
