"""A reader pinned to a catalog version whose first segment of a compacted group was
replaced under its own name: once ``cleanup`` has deleted the retired copy, reading the
new file with the old row's size and offsets is one VersionSupersededError, never a
subset of the compacted records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import seglake
from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import SegmentReplacedError, TruncatedSegmentError, VersionSupersededError
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import segment_refs
from seglake.lake.scan_read import SplitReads, read_splits
from seglake.lake.staging import cleanup
from seglake.spark.extract_plan import plan_extract
from seglake.storage.index_cache import IndexCache
from seglake.storage.log import PartitionLog
from tests.unit.test_compact_rules import COMPACT, NOW, keyed_lake


@pytest.mark.parametrize("segment_bytes", [None, "2000"], ids=["one-group", "in-place"])
def test_pinned_reader_past_the_delay_gets_one_error(tmp_path: Path, segment_bytes) -> None:
    root = tmp_path / "lake"
    keyed_lake(root)
    lake = seglake.open(str(root))
    pinned = lake.version
    old = Catalog(str(root)).segments("c", 0)
    first = old.to_pylist()[0]
    p = lake.partition("c", 0)
    conf = {**COMPACT, **({"segment.bytes": segment_bytes} if segment_bytes else {})}
    assert run_compaction(
        LakeHandle.open(str(root)), CompactOptions(conf=conf, now_ms=NOW)
    ).committed
    new = Catalog(str(root)).segments("c", 0).to_pylist()[0]
    assert new["path"] == first["path"] and new["size_bytes"] != first["size_bytes"]
    # within the delay: the retired copy, every record
    assert p.read(0, 10_000, as_="arrow").num_rows == 600
    cleanup(LakeHandle.open(str(root)), delete_delay_s=0)
    lake2 = seglake.open(str(root), version=pinned)
    with pytest.raises(VersionSupersededError):
        lake2.partition("c", 0).read(0, 10_000)  # the segments merged away: no such file
    for offset, n in ((first["next_offset"] // 2, 2), (5, 3)):  # the old first segment only
        with pytest.raises(VersionSupersededError) as err:
            seglake.open(str(root), version=pinned).partition("c", 0).read(offset, n)
        assert f"catalog version {pinned}" in str(err.value)
        assert first["path"] in str(err.value) and err.value.version == pinned
    # the storage layer: a row a later version replaced must be its exact size
    fs, base = lakefs.resolve(str(root))
    log = PartitionLog.from_refs(
        fs, base, segment_refs(old.slice(0, 1)), replaced={first["base_offset"]}
    )
    with pytest.raises(SegmentReplacedError, match="not the file of its catalog row"):
        log.read(0, 10_000)
    if segment_bytes is None:  # without being told: offsets past the row's next offset
        log = PartitionLog.from_refs(fs, base, segment_refs(old.slice(0, 1)))
        with pytest.raises(SegmentReplacedError, match=f"offsets up to {new['next_offset'] - 1}"):
            log.read(0, 10_000)
    # the current version reads
    assert seglake.open(str(root)).partition("c", 0).read(0, 10_000).shape[0] > 0


def test_a_longer_file_with_a_batch_across_the_size_is_another_segment(tmp_path: Path) -> None:
    """Offsets below the row's next offset, but a batch runs past ``size_bytes`` in a file
    that is longer: not a corrupt length, the file of another segment."""
    root = tmp_path / "lake"
    keyed_lake(root)
    row = Catalog(str(root)).segments("c", 0).slice(0, 1)
    r = row.to_pylist()[0]
    other = tmp_path / "other"
    other.mkdir()
    recs = pa.table(
        {
            "offset": pa.array(np.arange(r["next_offset"]), pa.int64()),
            "timestamp": pa.array(np.full(r["next_offset"], NOW), pa.int64()),
            "key": pa.array([b"k"] * r["next_offset"], pa.binary()),
            "value": pa.array([b"x" * 97] * r["next_offset"], pa.binary()),
        }
    )
    PartitionLog.open(str(other)).append(recs, config=LogConfig(batch_size=700))
    data = (other / "00000000000000000000.log").read_bytes()
    assert len(data) > r["size_bytes"]
    (root / r["path"]).write_bytes(data)
    fs, base = lakefs.resolve(str(root))
    with pytest.raises(SegmentReplacedError, match="runs past the size"):
        PartitionLog.from_refs(fs, base, segment_refs(row)).read(0, 10_000)


def test_a_partition_opened_before_an_in_place_compaction(tmp_path: Path) -> None:
    """Opened (not read) before a compaction cleaned its segments in place under their
    names (shorter files, whole batches, offsets below the old next offsets): once
    ``cleanup`` deleted the retired copies, a read is one VersionSupersededError, not the
    compacted subset read as a torn tail (RELIABILITY.md's open item)."""
    root = tmp_path / "lake"
    keyed_lake(root)
    lake = seglake.open(str(root))
    pinned = lake.version
    first = Catalog(str(root)).segments("c", 0).to_pylist()[0]
    p = lake.partition("c", 0)  # opened while current: no exact size check planned
    plan = plan_extract(str(root), "c", version=pinned)  # a Spark read's splits, as planned
    assert run_compaction(
        LakeHandle.open(str(root)),
        CompactOptions(conf={**COMPACT, "segment.bytes": "2000"}, now_ms=NOW),
    ).committed
    new = Catalog(str(root)).segments("c", 0).to_pylist()[0]
    assert new["path"] == first["path"] and new["size_bytes"] < first["size_bytes"]
    cleanup(LakeHandle.open(str(root)), delete_delay_s=0)
    with pytest.raises(VersionSupersededError) as err:
        p.read(0, 3)
    assert f"catalog version {pinned}" in str(err.value) and first["path"] in str(err.value)
    # the tasks of a Spark read of the pinned version (extract, versionAsOf) alike
    splits = plan.tasks
    with pytest.raises(VersionSupersededError, match=f"catalog version {pinned}"):
        read_splits(IndexCache(), str(root), splits, SplitReads(version=pinned))
    # a file of the current version cut short is data loss (issue 25: it was read up
    # to the cut), named with the offsets gone
    cur = seglake.open(str(root)).partition("c", 0)
    last = Catalog(str(root)).segments("c", 0).to_pylist()[-1]
    path = root / last["path"]
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(TruncatedSegmentError, match=f"{last['next_offset'] - 1} are gone"):
        cur.read(0, 10_000, as_="arrow")
