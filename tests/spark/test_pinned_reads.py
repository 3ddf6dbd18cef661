"""Readers pinned to a catalog version through Spark (``versionAsOf``, an extract plan,
a lookup's version) whose segments a later version removed, their files deleted after
``file.delete.delay.ms``: the task fails with the notebook's one-line
VersionSupersededError (``lake.pinned.PinnedVersion``, the segments' pin), not a plain
SegmentNotFoundError (RELIABILITY.md's open item)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake.errors import VersionSupersededError
from seglake.lake.catalog import Catalog
from seglake.lake.retention import apply_retention
from seglake.lake.staging import cleanup
from seglake.spark import register
from seglake.spark.extract import extract
from seglake.spark.extract_plan import plan_extract
from seglake.spark.lookup import lookup
from seglake.spark.session import task_error
from seglake.storage.retention import RetentionRules
from tests.unit.test_recovery import logs, make_lake, pristine  # noqa: F401


def _superseded(action, pinned: int) -> VersionSupersededError:
    with pytest.raises(Exception) as raised:
        action()
    err = task_error(raised.value)
    assert isinstance(err, VersionSupersededError), raised.value
    assert f"catalog version {pinned} was superseded" in str(err) and "t-0" in str(err)
    assert "lake.refresh()" in str(err) and "\n" not in str(err)
    return err


def test_pinned_spark_reads_past_the_delay(spark, tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    segs = logs(root / "t-0")
    pinned = Catalog(str(root)).version()
    plan = plan_extract(str(root), "t", version=pinned)
    register(spark)
    apply_retention(str(root), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)}))
    cleanup(str(root), older_than_s=0)  # past the delay: the removed files are deleted
    _superseded(lambda: extract(spark, str(root), "t", plan=plan).collect(), pinned)
    df = spark.read.format("seglake").option("versionAsOf", str(pinned)).load(str(root))
    _superseded(lambda: df.collect(), pinned)
    queries = spark.createDataFrame([("t", 0, 1)], "topic string, partition int, offset long")
    err = _superseded(lambda: lookup(spark, str(root), queries, version=pinned).collect(), pinned)
    assert err.version == pinned and err.superseded_by == pinned + 1
    assert "retention" in (err.operation or "")
    # the current version reads
    assert spark.read.format("seglake").load(str(root)).count() > 0
