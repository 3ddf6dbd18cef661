"""LogSegment / PartitionLog lookups against a brute-force scan of every decoded record,
with good indexes and with indexes deleted, truncated, garbage, or pointing wrong."""

from __future__ import annotations

import shutil
import struct
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.config import LogConfig
from seglake.record.batch import scan_batches
from seglake.record.reader import read_log
from seglake.record.schema import HEADERS_TYPE
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from tests.record_rows import record_tuples as rows

N = 300
INTERVAL = 300
CFG = LogConfig(
    segment_bytes=2_000, batch_size=400, index_interval_bytes=INTERVAL, compression_type="lz4"
)


def _records() -> pa.Table:
    rng = np.random.default_rng(11)
    # non-monotonic, with many repeated timestamps (ties across batches and segments)
    ts = 1_700_000_000_000 + (np.arange(N) * 7) // 3 + rng.integers(-40, 41, N) // 4 * 4
    keys = [None if i % 13 == 0 else f"k{i}".encode() for i in range(N)]
    values = [None if i % 17 == 0 else (b"v" * (i % 50)) for i in range(N)]
    headers = [[{"key": "h", "value": None if i % 5 else b"x"}] * (i % 3) for i in range(N)]
    return pa.table(
        {
            "offset": pa.array(np.arange(100, 100 + N), pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


RECORDS = _records()
OFFSETS = RECORDS.column("offset").to_numpy()
TIMESTAMPS = RECORDS.column("timestamp").to_numpy()
LOG_START = int(OFFSETS[0])
LEO = int(OFFSETS[-1]) + 1


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A partition directory written once (several segments), copied per damage case."""
    d = tmp_path_factory.mktemp("pristine") / "t-0"
    d.mkdir()
    log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
    # first segment's base offset is the log's start: write from offset 100 on
    writer_log = PartitionLog(log.fs, log.directory, [], log_start_offset=LOG_START)
    infos = writer_log.append(RECORDS, config=CFG)
    assert len(infos) >= 4
    return d


def copy_of(pristine: Path, tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    shutil.copytree(pristine, d)
    return d


ALL_ROWS = rows(RECORDS)


def brute_read(offset: int, k: int) -> list[tuple]:
    return [r for r in ALL_ROWS if r[0] >= offset][:k]


def brute_range(lo: int, hi: int) -> list[tuple]:
    return [r for r in ALL_ROWS if lo <= r[0] < hi]


@cache
def brute_time(t: int) -> tuple[int, int] | None:
    if t == -2:
        return (-1, LOG_START)
    if t == -1:
        return (-1, LEO)
    if t == -3:
        i = int(np.argmax(TIMESTAMPS))
        return (int(TIMESTAMPS[i]), int(OFFSETS[i]))
    hits = np.flatnonzero(t <= TIMESTAMPS)
    return (int(TIMESTAMPS[hits[0]]), int(OFFSETS[hits[0]])) if len(hits) else None


def answer(log: PartitionLog, t: int) -> tuple[int, int] | None:
    found = log.offsets_for_times(t)
    return None if found is None else (found.timestamp, found.offset)


def timestamp_targets() -> list[int]:
    distinct = np.unique(TIMESTAMPS)
    return sorted(
        {-3, -2, -1, 0, int(distinct[0]) - 1000, int(distinct[-1]) + 1, int(distinct[-1]) + 10**6}
        | {int(t) + d for t in distinct for d in (-1, 0, 1)}
    )


def check_everything(log: PartitionLog, *, offsets_step: int = 1, ts_step: int = 1) -> None:
    assert log.log_start_offset == LOG_START and log.log_end_offset == LEO
    for o in range(LOG_START - 3, LEO + 3, offsets_step):
        assert (
            rows(log.read(o, 7)) == brute_read(max(o, LOG_START), 7)
            if o < LEO
            else rows(log.read(o, 7)) == []
        ), o
    for t in timestamp_targets()[::ts_step]:
        assert answer(log, t) == brute_time(t), t
    for t in (-3, -2, -1):
        assert answer(log, t) == brute_time(t)


# ------------------------------------------------------------------------ clean indexes
def test_layout(pristine: Path) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    assert len(log.segments) >= 4
    assert log.segments[0].base_offset == LOG_START
    # every record decodes back from the files
    got = []
    for seg in log.segments:
        t, scan = read_log(Path(seg.log_path).read_bytes())
        assert scan.error is None
        got += rows(t)
    assert got == ALL_ROWS


def test_lookups_equal_brute_force(pristine: Path) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    check_everything(log)
    assert all(s.index_source == "file" for s in log.segments)


def test_read_whole_log_and_ranges(pristine: Path) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    assert rows(log.read(0, 10 * N)) == ALL_ROWS
    assert rows(log.read_range(0, 10**9)) == ALL_ROWS
    bases = [s.base_offset for s in log.segments]
    edges = sorted(
        {LOG_START - 1, LOG_START, LEO - 1, LEO, LEO + 1}
        | {b + d for b in bases for d in (-1, 0, 1)}
    )
    for lo in edges:
        for hi in edges:
            assert rows(log.read_range(lo, hi)) == brute_range(lo, hi), (lo, hi)


@settings(max_examples=40, deadline=None)
@given(lo=st.integers(LOG_START - 20, LEO + 20), span=st.integers(0, 400), k=st.integers(1, 300))
def test_read_range_hypothesis(pristine: Path, lo: int, span: int, k: int) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    assert rows(log.read_range(lo, lo + span)) == brute_range(lo, lo + span)
    expect = brute_read(max(lo, LOG_START), k) if lo < LEO else []
    assert rows(log.read(lo, k)) == expect


@settings(max_examples=40, deadline=None)
@given(t=st.integers(int(TIMESTAMPS.min()) - 50, int(TIMESTAMPS.max()) + 50))
def test_offsets_for_times_hypothesis(pristine: Path, t: int) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    assert answer(log, t) == brute_time(t)


def test_log_start_offset_inside_a_segment(pristine: Path) -> None:
    base = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    start = LOG_START + 37
    log = PartitionLog(base.fs, base.directory, base.segments, log_start_offset=start)
    assert log.offsets_for_times(-2).offset == start
    assert rows(log.read(0, 5)) == brute_read(start, 5)
    assert rows(log.read_range(0, start + 3)) == brute_range(start, start + 3)
    for t in timestamp_targets()[::7]:
        if t < 0:
            continue
        hits = np.flatnonzero((t <= TIMESTAMPS) & (start <= OFFSETS))
        want = (int(TIMESTAMPS[hits[0]]), int(OFFSETS[hits[0]])) if len(hits) else None
        assert answer(log, t) == want, t


def test_segment_read_and_find(pristine: Path) -> None:
    log = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    for seg in log.segments:
        scan = scan_batches(Path(seg.log_path).read_bytes())
        # Kafka's read: from the batch holding the offset, whole batches, maxSize bytes
        for i in range(len(scan)):
            o = (int(scan.base_offset[i]) + int(scan.last_offset[i])) // 2
            w = seg.read(o, 1)  # min one message: the batch even if bigger than max_size
            assert w.start == int(scan.position[i]) and len(w.scan) == 1
            w = seg.read(o, 1, min_one_message=False)
            assert len(w.scan) == 0
            w = seg.read(o, 10**9)
            assert w.start == int(scan.position[i]) and len(w.scan) == len(scan) - i
        assert seg.next_offset == int(scan.last_offset[-1]) + 1
        assert seg.max_timestamp == int(scan.max_timestamp.max())


# --------------------------------------------------------------------- damaged indexes
def _damage(d: Path, how: str) -> list[str]:
    """Damage the indexes of every segment; returns the .log paths that were damaged."""
    damaged = []
    rng = np.random.default_rng(5)
    for f in sorted(d.glob("*.index")):
        ti = f.with_suffix(".timeindex")
        data = f.read_bytes()
        if how == "deleted":
            f.unlink()
            ti.unlink()
        elif how == "offset-deleted":
            f.unlink()
        elif how == "truncated":
            if len(data) < 8:
                continue
            f.write_bytes(data[:-3])
            ti.write_bytes(ti.read_bytes()[:-5])
        elif how == "garbage":
            f.write_bytes(rng.integers(0, 256, max(len(data), 64), dtype=np.uint8).tobytes())
            ti.write_bytes(rng.integers(0, 256, 120, dtype=np.uint8).tobytes())
        elif how == "wrong-positions":
            n = len(data) // 8
            if n < 2:
                continue
            entries = [struct.unpack_from(">ii", data, 8 * i) for i in range(n)]
            # shift every position by a few bytes: still strictly increasing and in the
            # file, but no batch starts there
            out = b"".join(
                struct.pack(">ii", r, p + 3 + (i % 2)) for i, (r, p) in enumerate(entries)
            )
            f.write_bytes(out)
        elif how == "wrong-offsets":
            n = len(data) // 8
            if n < 2:
                continue
            entries = [struct.unpack_from(">ii", data, 8 * i) for i in range(n)]
            out = b"".join(struct.pack(">ii", r + 1, p) for r, p in entries)
            f.write_bytes(out)
        else:
            raise AssertionError(how)
        damaged.append(str(f.with_suffix(".log")))
    assert damaged, how
    return damaged


@pytest.mark.parametrize("how", ["deleted", "offset-deleted", "truncated", "garbage"])
def test_broken_indexes_are_rebuilt(pristine: Path, tmp_path: Path, how: str) -> None:
    d = copy_of(pristine, tmp_path)
    damaged = _damage(d, how)
    log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
    check_everything(log, offsets_step=7, ts_step=9)
    for seg in log.segments:
        if seg.log_path in damaged:
            assert seg.index_source.startswith("rebuilt"), (seg, seg.index_source)
            oi, ti = seg.offset_index, seg.time_index
            # rebuilt equal to what the writer wrote
            assert (
                oi.to_bytes()
                == (pristine / Path(seg.log_path).with_suffix(".index").name).read_bytes()
            )
            assert (
                ti.to_bytes()
                == (pristine / Path(seg.log_path).with_suffix(".timeindex").name).read_bytes()
            )


@pytest.mark.parametrize("how", ["wrong-positions", "wrong-offsets"])
def test_indexes_pointing_wrong_still_answer_right(
    pristine: Path, tmp_path: Path, how: str
) -> None:
    d = copy_of(pristine, tmp_path)
    damaged = _damage(d, how)
    log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
    check_everything(log, offsets_step=7, ts_step=9)
    assert any(s.index_source.startswith("rebuilt") for s in log.segments if s.log_path in damaged)
    # fresh logs per lookup kind: each path on its own must notice the bad index
    for t in timestamp_targets()[::37]:
        log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
        assert answer(log, t) == brute_time(t), t
    for o in range(LOG_START, LEO, 29):
        log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
        assert rows(log.read(o, 3)) == brute_read(o, 3), o


def test_index_entry_truncated_at_entry_boundary(pristine: Path, tmp_path: Path) -> None:
    """Dropping whole trailing entries leaves a valid (sparser) index: still exact."""
    d = copy_of(pristine, tmp_path)
    for f in d.glob("*.index"):
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 16 * 8])
    for f in d.glob("*.timeindex"):
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 24 * 12])
    check_everything(
        PartitionLog.open(str(d), index_interval_bytes=INTERVAL), offsets_step=7, ts_step=7
    )


def test_not_a_segment_name(tmp_path: Path) -> None:
    from pyarrow import fs as pafs

    from seglake.errors import SegmentNotFoundError

    with pytest.raises(SegmentNotFoundError, match="not a segment"):
        LogSegment(pafs.LocalFileSystem(), str(tmp_path / "foo.log"))


def catalog_log(d: Path, pristine: Path) -> PartitionLog:
    """Segments as the catalog knows them (size, next offset, largest timestamp given):
    nothing is derived from the tail, so lookups meet the damaged index first."""
    ref = PartitionLog.open(str(pristine), index_interval_bytes=INTERVAL)
    segs = [
        LogSegment(
            ref.fs,
            str(d / Path(s.log_path).name),
            size=s.size,
            next_offset=s.next_offset,
            max_timestamp=s.max_timestamp,
            index_interval_bytes=INTERVAL,
        )
        for s in ref.segments
    ]
    return PartitionLog(ref.fs, str(d), segs)


@pytest.mark.parametrize("how", ["wrong-positions", "wrong-offsets", "garbage", "deleted"])
def test_damaged_indexes_with_catalog_metadata(pristine: Path, tmp_path: Path, how: str) -> None:
    d = copy_of(pristine, tmp_path)
    damaged = _damage(d, how)
    targets = timestamp_targets()
    for t in [*targets[:: max(1, len(targets) // 30)], -3]:
        assert answer(catalog_log(d, pristine), t) == brute_time(t), t
    for o in range(LOG_START - 1, LEO + 1, 23):
        assert rows(catalog_log(d, pristine).read(o, 4)) == (
            brute_read(max(o, LOG_START), 4) if o < LEO else []
        ), o
    log = catalog_log(d, pristine)
    check_everything(log, offsets_step=9, ts_step=11)
    if how != "wrong-offsets":  # an entry one offset off can be harmless
        assert all(
            s.index_source.startswith("rebuilt") for s in log.segments if s.log_path in damaged
        )


def test_read_across_offset_gaps(tmp_path: Path) -> None:
    """Compacted logs have offset gaps: read() still returns max_records records."""
    offsets = np.cumsum(np.random.default_rng(3).integers(1, 40, 200)).astype(np.int64)
    recs = _records().slice(0, 200).set_column(0, "offset", pa.array(offsets))
    d = tmp_path / "c-0"
    d.mkdir()
    log = PartitionLog.open(str(d))
    log.append(
        recs, config=LogConfig(segment_bytes=2_000, batch_size=300, index_interval_bytes=200)
    )
    log = PartitionLog.open(str(d), index_interval_bytes=200)
    want = rows(recs)
    for o in range(0, int(offsets[-1]) + 3, 61):
        for k in (1, 50):
            assert rows(log.read(o, k)) == [r for r in want if r[0] >= o][:k], (o, k)
