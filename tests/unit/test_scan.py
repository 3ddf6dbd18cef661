"""A Scan of a small lake (seglake.lake.scan) with the Kafka source's minPartitions and
maxRecordsPerPartition: every offset read once, no Spark task over the limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake.lake.handle import LakeHandle
from seglake.lake.packing import pack
from seglake.lake.scan import Scan
from seglake.lake.scan_read import read_splits
from seglake.lake.snapshot import Snapshot
from seglake.storage.index_cache import IndexCache
from tests.unit.test_compact_rules import keyed_lake


@pytest.mark.parametrize(("least", "most"), [(None, 70), (9, None), (4, 250), (None, None)])
def test_scan_cut_by_offsets_reads_every_offset_once(tmp_path: Path, least, most) -> None:
    root = tmp_path / "lake"
    keyed_lake(root)
    snap = Snapshot.read(LakeHandle.open(str(root)), "c")
    scan = Scan(snap, (120, 10**9), min_partitions=least, max_records_per_partition=most)
    tasks = scan.plan()
    assert all(t.version == snap.version for t in tasks)
    groups = pack(tasks, 2, min_partitions=least, max_records_per_partition=most)
    cache, seen = IndexCache(), []
    for g in groups:
        offsets = read_splits(cache, str(root), g).column("offset").to_pylist()
        assert most is None or len(offsets) <= most
        seen += offsets
    assert sorted(seen) == list(range(120, 600))
    if least is not None:
        assert len(groups) >= least
    if least is None and most is None:  # by bytes: the scan's tasks as they are
        assert sorted(t for g in groups for t in g) == sorted(tasks)


def test_tasks_are_the_plan_a_segment_at_a_time(tmp_path: Path) -> None:
    """``Scan.tasks()`` yields ``plan()``'s tasks, and a reader that stops after the
    first opens no later segment's offset index (the CLI's early stops)."""
    root = tmp_path / "lake"
    keyed_lake(root)
    snap = Snapshot.read(LakeHandle.open(str(root)), "c")
    scan = Scan(snap, (120, 10**9), split_bytes=300)
    assert list(scan.tasks()) == scan.plan()
    fresh = Snapshot.read(LakeHandle.open(str(root)), "c", cache=IndexCache())
    first = next(Scan(fresh, (120, 10**9), split_bytes=300).tasks())
    log = fresh.log((first.topic, first.partition))
    later = [s for s in log.segments if s.base_offset > first.base_offset]
    assert later and all(s._offset_index is None for s in later)
