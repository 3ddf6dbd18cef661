"""Compaction judged by Kafka's cleaner: the same records, transactions and markers went
to ``compacted`` (cleaned by the broker, ``min.cleanable.dirty.ratio=0``, cleaned up to
the last record, which an hour-later time rolled into a segment of its own) and to
``compacted-raw`` (never cleaned) at the same offsets. The raw partition is registered
into a lake as ``compacted-0`` and ``seglake compact``ed with the topic's settings; then
Kafka's own DumpLogSegments must print the same records (offset, time, key, value, header
keys, sequence) and the same transaction markers for both logs, and Kafka's consumer's
records equal seglake's.

"The same" under Kafka's clock: the broker stamps a batch it cleans with a delete horizon
(now + ``delete.retention.ms``) and removes tombstones and markers on a later round
after it; with ``delete.retention.ms`` one day both sides keep every surviving tombstone
and marker, which is what is compared. Batch boundaries may differ (Kafka keeps a
producer's last batch even when emptied; how retained records are grouped into batches
is the cleaner's business), so the comparison is record by record, as DumpLogSegments
prints them with ``--deep-iteration``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import seglake
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.lake.topic_store import alter_config
from tests.kafka_client import ISOLATION, dump_log_segments, recs_from_arrow
from tests.spark.kafka.conftest import COMPACT_CONFIG, Produced

pytestmark = pytest.mark.spark

RECORD_LINE = re.compile(r"^\| offset: (\d+) ")


def dumped_records(files: list[Path]) -> list[str]:
    """DumpLogSegments' record lines (``| offset: ...``), in offset order; a marker's
    time left out (the broker writes each partition's marker with its own clock reading,
    so the two topics' markers may differ by a millisecond)."""
    out = [
        re.sub(r"CreateTime: \d+ (?=.*endTxnMarker)", "", line)
        for line in dump_log_segments(files).splitlines()
        if RECORD_LINE.match(line)
    ]
    return sorted(out, key=lambda line: int(line.split()[2]))


@pytest.fixture(scope="module")
def compacted_lake(spark, produced: Produced, tmp_path_factory: pytest.TempPathFactory) -> str:
    broker_dir = tmp_path_factory.mktemp("raw-broker")
    shutil.copytree(produced.snapshot / "compacted-raw-0", broker_dir / "compacted-0")
    root = str(tmp_path_factory.mktemp("compacted") / "lake")
    register(LakeHandle.open(root), str(broker_dir))
    alter_config(
        Catalog(root),
        "compacted",
        set_={"cleanup.policy": "compact", **{k: COMPACT_CONFIG[k] for k in _CLEANER_KEYS}},
    )
    seglake.spark.compact(spark, root, topics="compacted")
    return root


_CLEANER_KEYS = ("min.cleanable.dirty.ratio", "min.compaction.lag.ms", "delete.retention.ms")


def test_same_offsets_and_raw_before_cleaning(produced: Produced) -> None:
    """The premise: both topics hold the same records at the same offsets."""
    raw = produced.consumed[("compacted-raw", "read_uncommitted")]
    assert len(raw) > 2000 and raw[-1].offset == produced.compact_end
    cleaned = produced.consumed[("compacted", "read_uncommitted")]
    assert set(cleaned) <= set(raw)


def test_kafka_dumps_the_same_records_and_markers(produced: Produced, compacted_lake: str):
    broker_files = sorted((produced.snapshot / "compacted-0").glob("*.log"))
    lake_files = sorted((Path(compacted_lake) / "compacted-0").glob("*.log"))
    rows = Catalog(compacted_lake).segments("compacted").to_pylist()
    assert {Path(r["path"]).name for r in rows} == {f.name for f in lake_files}
    kafka, ours = dumped_records(broker_files), dumped_records(lake_files)
    assert any("endTxnMarker: COMMIT" in line for line in kafka)
    assert any("endTxnMarker: ABORT" in line for line in kafka)
    assert any("valueSize: -1" in line for line in kafka)  # tombstones kept
    assert ours == kafka


@pytest.mark.parametrize("isolation", ISOLATION)
def test_seglake_reads_what_kafkas_consumer_got(
    produced: Produced, compacted_lake: str, isolation: str
) -> None:
    part = seglake.open(compacted_lake).partition("compacted", 0)
    t = part.read(0, max_records=100_000, as_="arrow")
    got = recs_from_arrow(t)
    want = produced.consumed[("compacted", isolation)]
    # aborted records are gone from both logs: the isolation levels agree
    assert got == want
