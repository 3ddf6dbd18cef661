"""Lookups and the dump command on the broker-written fixture partitions, against a
brute-force scan (kafka-python's decoder) and expected.json. The fixture directories
are read-only: nothing here writes there."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
from kafka.record.memory_records import MemoryRecords

from seglake.cli.main import main
from seglake.storage.log import PartitionLog
from tests.conftest import FIXTURE_PARTITIONS, FIXTURES, load_expected
from tests.record_rows import record_tuples as row_tuples

BATCH_FIELDS = (
    "position",
    "size",
    "base_offset",
    "last_offset",
    "count",
    "max_timestamp",
    "first_timestamp",
    "compression",
    "crc_valid",
    "transactional",
    "control",
    "producer_id",
)


@cache
def brute(partition: str) -> tuple[np.ndarray, np.ndarray, list[tuple], int, int]:
    """Every non-control record of the partition, decoded by kafka-python:
    (offsets, timestamps, rows, log start, log end offset)."""
    offsets, timestamps, rows = [], [], []
    start, leo = None, 0
    for name, seg in sorted(load_expected(partition).items(), key=lambda kv: kv[1]["base_offset"]):
        start = seg["base_offset"] if start is None else start
        mr = MemoryRecords((FIXTURES / partition / f"{name}.log").read_bytes())
        while (batch := mr.next_batch()) is not None:
            leo = max(leo, batch.last_offset + 1)
            if batch.is_control_batch:
                continue
            for r in batch:
                offsets.append(r.offset)
                timestamps.append(r.timestamp)
                rows.append(
                    (r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers))
                )
    return np.array(offsets), np.array(timestamps), rows, start or 0, leo


def first_at_or_after(partition: str, t: int) -> tuple[int, int] | None:
    offs, ts, _rows, start, leo = brute(partition)
    if t == -2:
        return (-1, start)
    if t == -1:
        return (-1, leo)
    if t == -3:
        i = int(np.argmax(ts))
        return (int(ts[i]), int(offs[i]))
    hits = np.flatnonzero(ts >= t)
    return (int(ts[hits[0]]), int(offs[hits[0]])) if len(hits) else None


def segment_names(partition: str) -> list[str]:
    return sorted(load_expected(partition))


ALL_SEGMENTS = (
    [(p, n) for p in FIXTURE_PARTITIONS for n in segment_names(p)] if FIXTURES.exists() else []
)


# ------------------------------------------------------------------------------- lookups
@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_offsets_for_times_equal_scan(fixtures_dir, partition: str) -> None:
    log = PartitionLog.open(str(fixtures_dir / partition))
    _offs, ts, _rows, start, leo = brute(partition)
    assert (log.log_start_offset, log.log_end_offset) == (start, leo)
    targets = {-3, -2, -1, 0, int(ts.min()) - 1, int(ts.max()) + 1, 2**62}
    distinct = np.unique(ts)
    if len(distinct) > 300:  # __cluster_metadata-0: a stride, plus every time index entry
        index_ts = [t for seg in load_expected(partition).values() for t, _rel in seg["time_index"]]
        distinct = np.unique(np.concatenate([distinct[:: len(distinct) // 120], index_ts]))
    targets |= {int(t) + d for t in distinct for d in (-1, 0, 1)}
    for t in sorted(targets):
        found = log.offsets_for_times(t)
        got = None if found is None else (found.timestamp, found.offset)
        assert got == first_at_or_after(partition, t), t
    assert all(s.index_source == "file" for s in log.segments)


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_read_every_offset_equals_scan(fixtures_dir, partition: str) -> None:
    log = PartitionLog.open(str(fixtures_dir / partition))
    offs, _ts, rows, start, leo = brute(partition)
    assert row_tuples(log.read_range(0, leo + 5)) == rows
    assert row_tuples(log.read(0, len(rows) + 5)) == rows
    # every offset: the record at it (or the next one after a gap/control record)
    step = max(1, leo // 250)  # __cluster_metadata-0 has 3,847 offsets: sample evenly
    for o in [*range(start - 1, leo + 2, step), leo - 1, leo]:
        i = int(np.searchsorted(offs, max(o, start)))
        want = rows[i : i + 3] if o < leo else []
        assert row_tuples(log.read(o, 3)) == want, o
        assert row_tuples(log.read_range(o, o + 5)) == [
            r for r in rows if max(o, start) <= r[0] < o + 5
        ], o
    assert all(s.index_source == "file" for s in log.segments)


def test_cluster_metadata_every_offset(fixtures_dir) -> None:
    """Every offset of the big partition, in consecutive offset ranges."""
    partition = "__cluster_metadata-0"
    log = PartitionLog.open(str(fixtures_dir / partition))
    _offs, _ts, rows, _start, leo = brute(partition)
    got = []
    for o in range(0, leo, 97):
        got += row_tuples(log.segments[0].read_records(o, o + 97))
    assert got == rows


# --------------------------------------------------------------------------------- dump
@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_dump_json_batches_equal_expected(fixtures_dir, capsys, partition: str, name: str) -> None:
    seg = load_expected(partition)[name]
    path = str(fixtures_dir / partition / f"{name}.log")
    assert main(["dump", "--json", "--deep-iteration", path]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == len(seg["batches"])
    offs, _ts, rows, _s, _leo = brute(partition)
    by_offset = dict(zip(offs.tolist(), rows, strict=True))
    for got, want in zip(lines, seg["batches"], strict=True):
        assert {k: got[k] for k in BATCH_FIELDS} == {k: want[k] for k in BATCH_FIELDS}
        assert len(got["records"]) == want["count"]
        if not want["control"]:
            import base64

            def b(x):
                return None if x is None else base64.b64decode(x)

            for r in got["records"]:
                _o, t, k, v, h = by_offset[r["offset"]]
                assert (r["timestamp"], b(r["key"]), b(r["value"])) == (t, k, v)
                assert tuple((x["key"], b(x["value"])) for x in r["headers"]) == h


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_index_checks_pass(fixtures_dir, capsys, partition: str, name: str) -> None:
    files = [str(fixtures_dir / partition / f"{name}{s}") for s in (".index", ".timeindex")]
    assert main(["dump", "--index-sanity-check", *files]) == 0
    out = capsys.readouterr().out  # an .index with no entry "is empty.", as Kafka says
    assert out.count("passed sanity check") + out.count(".index is empty.") == 2
    assert main(["dump", "--verify-index-only", *files]) == 0
    got = capsys.readouterr()  # as kafka-dump-log: only the file names, no mismatch
    listed = [x for x in got.out.splitlines() if not x.endswith(".index is empty.")]
    assert listed == [f"Dumping {f}" for f in files] and got.err == "", got


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_dump_index_json_equals_expected(fixtures_dir, capsys, partition: str, name: str) -> None:
    seg = load_expected(partition)[name]
    base = seg["base_offset"]
    d = fixtures_dir / partition
    assert main(["dump", "--json", str(d / f"{name}.index")]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert got == [{"offset": base + r, "position": p} for r, p in seg["offset_index"]]
    assert main(["dump", "--json", str(d / f"{name}.timeindex")]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert got == [{"timestamp": t, "offset": base + r} for t, r in seg["time_index"]]


def test_fixtures_untouched(fixtures_dir) -> None:
    """Nothing above wrote into the fixture directories."""
    for p in FIXTURE_PARTITIONS:
        names = {f.name for f in (fixtures_dir / p).iterdir()}
        assert not [n for n in names if n.endswith((".tmp", ".deleted", ".swap"))], names
