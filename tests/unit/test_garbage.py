"""Retired files (issue 16.4): readers pinned to a catalog version keep reading the
segments a later commit removed until ``file.delete.delay.ms``, then get one clear error;
and the catalog's own garbage (16.10): parquet files no Delta log entry names."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

import seglake
from seglake.cli.main import main
from seglake.errors import SegmentNotFoundError, VersionSupersededError
from seglake.lake.catalog import Catalog
from seglake.lake.garbage import collect, retire
from seglake.lake.handle import LakeHandle
from seglake.lake.retention import apply_retention
from seglake.lake.staging import cleanup
from seglake.lake_paths import RETIRED_DIR
from seglake.storage.retention import RetentionRules
from tests.unit.test_recovery import N, logs, make_lake, pristine  # noqa: F401

HOURS_AGO = time.time() - 3 * 3600


@pytest.fixture
def opened(tmp_path: Path, pristine: Path) -> tuple[Path, list[Path], seglake.Lake]:  # noqa: F811
    """A lake of one partition, its segment files, and the lake opened (version pinned)."""
    root = tmp_path / "lake"
    make_lake(root, pristine)
    return root, logs(root / "t-0"), seglake.open(str(root))


def test_pinned_reader_within_the_delay_then_one_clear_error(opened) -> None:
    root, segs, lake = opened
    pinned = lake.version
    p = lake.partition("t", 0)
    tail = p.read(int(segs[3].stem), 5, as_="arrow")  # opens the partition, reads no old file
    rep = apply_retention(
        LakeHandle.open(str(root)), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)})
    )
    assert rep.deleted.num_rows == 2 and rep.files_deleted == []
    # within the delay the pinned reader still reads the removed segments
    first = p.read(0, 5, as_="arrow")
    assert first.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert logs(root / "t-0") == segs
    # cleanup past the delay deletes them; the pinned reader gets one clear error
    cleaned = cleanup(LakeHandle.open(str(root)), older_than_s=0)
    assert "deleted 8 retired file(s)" in str(cleaned)  # .keyindex too
    assert logs(root / "t-0") == segs[2:]
    with pytest.raises(VersionSupersededError) as err:
        p.read(int(segs[1].stem) + 1, 5)
    msg = str(err.value)
    assert f"catalog version {pinned} was superseded" in msg and "lake.refresh()" in msg
    assert err.value.superseded_by == pinned + 1 and "retention" in err.value.operation
    assert isinstance(err.value, SegmentNotFoundError)
    # refreshed: the current version reads
    lake.refresh()
    now = lake.partition("t", 0).read(0, 5, as_="arrow")
    assert now.column("offset").to_pylist()[0] == int(segs[2].stem)
    assert lake.partition("t", 0).read(int(segs[3].stem), 5, as_="arrow").equals(tail)


def test_a_missing_file_of_the_current_version_stays_a_plain_error(opened) -> None:
    _, segs, lake = opened
    p = lake.partition("t", 0)
    segs[0].unlink()
    with pytest.raises(SegmentNotFoundError) as err:
        p.read(0, 5)
    assert not isinstance(err.value, VersionSupersededError)


def test_collect_keeps_young_and_reused_files(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    (root / "t-0").mkdir(parents=True)
    for name in ("00000000000000000000.log", "00000000000000000007.log", "x.log.deleted"):
        (root / "t-0" / name).write_bytes(b"x")
    old = int(time.time() * 1000) - 10_000
    retire(LakeHandle.open(str(root)), ["t-0/00000000000000000000.log"], version=3, now_ms=old)
    retire(LakeHandle.open(str(root)), ["t-0/00000000000000000007.log"], version=4)
    # the first segment's name is in use again (a later segment took it): never deleted
    got = collect(
        LakeHandle.open(str(root)), older_than_ms=5_000, in_use={"t-0/00000000000000000000.log"}
    )
    assert got.deleted == [] and got.kept_in_use == ["t-0/00000000000000000000.log"]
    assert got.kept_young == 1  # only files that exist are retired
    retire(LakeHandle.open(str(root)), ["t-0/00000000000000000000.log"], version=5, now_ms=old)
    os.utime(root / "t-0" / "00000000000000000000.log", (time.time(), time.time()))
    got = collect(
        LakeHandle.open(str(root)), older_than_ms=5_000, in_use=set()
    )  # rewritten after retiring
    assert got.deleted == [] and (root / "t-0" / "00000000000000000000.log").exists()
    got = collect(LakeHandle.open(str(root)), older_than_ms=0, in_use=set())
    assert got.deleted == ["t-0/00000000000000000007.log"]
    assert not list((root / RETIRED_DIR).iterdir())


def _catalog_data_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "_catalog").rglob("*.parquet") if "_delta_log" not in p.parts)


def test_cleanup_removes_catalog_files_no_log_entry_names(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
) -> None:
    """A commit that failed after writing its data file (disk full) left a parquet file
    in ``_catalog/``: cleanup removes it once older than an hour; a young one stays (a
    commit may be in flight); the table reads the same."""
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    rows = cat.segments()
    real = _catalog_data_files(root)
    stray = real[0].with_name("part-00000-failed-commit-c000.zstd.parquet")
    young = real[0].with_name("part-00001-in-flight-c000.zstd.parquet")
    shutil.copy(real[0], stray)
    shutil.copy(real[0], young)
    os.utime(stray, (HOURS_AGO, HOURS_AGO))
    for p in real:  # old committed files stay: the log names them
        os.utime(p, (HOURS_AGO, HOURS_AGO))
    assert main(["cleanup", str(root), "--older-than", "0", "--dry-run"]) == 0
    assert stray.exists()
    report = cleanup(LakeHandle.open(str(root)), older_than_s=0)
    assert report.catalog_orphans == [str(stray.relative_to(root / "_catalog"))]
    assert not stray.exists() and young.exists()
    assert _catalog_data_files(root) == sorted([*real, young])
    assert Catalog(str(root)).segments().equals(rows)
    assert seglake.open(str(root)).partition("t", 0).read(0, N, as_="arrow").num_rows == N


def test_a_task_of_a_pinned_read_maps_the_missing_file(opened) -> None:
    """What a Spark task of a pinned read (extract plans, versionAsOf) does on a missing
    file: ``read_splits(version=)`` opens its segments with the version's pin, which reads
    the catalog on that error path only and raises the notebook's one
    VersionSupersededError; not pinned, or a file missing at the current version: the
    plain error."""
    from seglake.lake.scan_read import SplitReads, read_splits
    from seglake.spark.extract_plan import plan_extract
    from seglake.storage.index_cache import IndexCache

    root, segs, lake = opened
    pinned = lake.version
    plan = plan_extract(str(root), "t", version=pinned)
    apply_retention(
        LakeHandle.open(str(root)), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)})
    )
    cleanup(LakeHandle.open(str(root)), older_than_s=0)
    with pytest.raises(SegmentNotFoundError) as raised:  # not pinned
        read_splits(IndexCache(), str(root), plan.tasks)
    assert not isinstance(raised.value, VersionSupersededError)
    cache = IndexCache()  # the segment cached unpinned first: the pin is the reader's
    with pytest.raises(SegmentNotFoundError):
        read_splits(cache, str(root), plan.tasks)
    for c in (cache, IndexCache()):
        with pytest.raises(VersionSupersededError) as err:
            read_splits(c, str(root), plan.tasks, SplitReads(version=pinned))
        assert err.value.version == pinned and err.value.superseded_by == pinned + 1
        assert f"catalog version {pinned} was superseded" in str(err.value)
        assert "t-0" in str(err.value) and "\n" not in str(err.value)
    segs[3].unlink()  # a file of the current version: not superseded
    now = lake.refresh().version
    plan = plan_extract(str(root), "t", version=now)
    with pytest.raises(SegmentNotFoundError) as raised:
        read_splits(IndexCache(), str(root), plan.tasks, SplitReads(version=now))
    assert not isinstance(raised.value, VersionSupersededError)
