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
from seglake.lake.handle import LakeHandle
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
    apply_retention(
        LakeHandle.open(str(root)), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)})
    )
    cleanup(
        LakeHandle.open(str(root)), older_than_s=0
    )  # past the delay: the removed files are deleted
    _superseded(lambda: extract(spark, str(root), "t", plan=plan).collect(), pinned)
    df = (
        spark.read.format("seglake")
        .option("subscribePattern", ".*")
        .option("versionAsOf", str(pinned))
        .load(str(root))
    )
    _superseded(lambda: df.collect(), pinned)
    queries = spark.createDataFrame([("t", 0, 1)], "topic string, partition int, offset long")
    err = _superseded(lambda: lookup(spark, str(root), queries, version=pinned).collect(), pinned)
    assert err.version == pinned and err.superseded_by == pinned + 1
    assert "retention" in (err.operation or "")
    # the current version reads
    assert spark.read.format("seglake").option("subscribePattern", ".*").load(str(root)).count() > 0


def test_unpinned_reads_say_the_lake_changed(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    """A read of the current version (no versionAsOf: the batch source, a stream's
    micro-batch) planned before retention removed a segment and cleanup deleted its file:
    one line saying the lake changed under the read (planned version, current version,
    the run that removed it) and what to do, not a plain SegmentNotFoundError."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from seglake.spark.datasource import SeglakeReader, parse_options
    from seglake.spark.stream_source import SeglakeStreamReader

    root = tmp_path / "lake"
    make_lake(root, pristine)
    segs = logs(root / "t-0")
    planned = Catalog(str(root)).version()
    batch = SeglakeReader(
        parse_options({"path": str(root), "subscribePattern": ".*"}), parallelism=1
    )
    opts = {"path": str(root), "subscribe": "t", "startingOffsets": "earliest"}
    stream = SeglakeStreamReader(opts, None, 1)
    start = stream.initialOffset()
    reads = [
        (batch, batch.partitions()),
        (stream, stream.partitions(start, stream.latestOffset(start, ReadAllAvailable()))),
    ]
    apply_retention(
        LakeHandle.open(str(root)), RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)})
    )
    cleanup(LakeHandle.open(str(root)), older_than_s=0)
    for reader, parts in reads:
        with pytest.raises(VersionSupersededError) as raised:
            for p in parts:
                list(reader.read(p))
        text = str(raised.value)
        assert f"the lake changed under this read: catalog version {planned} was superseded" in (
            text
        )
        assert f"the catalog is now at version {planned + 1}" in text and "t-0" in text
        assert "rerun the read" in text and "versionAsOf" in text and "\n" not in text
        err = task_error(Exception(f"seglake.errors.VersionSupersededError: {text}"))
        assert err.version == planned and err.superseded_by == planned + 1  # type: ignore[union-attr]
