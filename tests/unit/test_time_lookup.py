"""offsetsForTimes within a segment (``LogSegment.find_offset_by_timestamp``) against a
brute-force scan of every decoded record, and :func:`record_times` (the offsets and
timestamps it reads, no keys, values or headers decoded) against :func:`decode_batches`.

Logs: every codec, non-monotonic CreateTime with ties, LogAppendTime, offset gaps,
headers, control batches (whose timestamps may be the largest), index files or indexes
rebuilt from the log. Corrupt CRC-valid batches must raise the error decoding them raises.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.errors import CorruptRecordError
from seglake.record.batch import scan_batches
from seglake.record.control import ControlType
from seglake.record.encode import encode_batches
from seglake.record.reader import decode_batches, read_log, record_times
from seglake.record.schema import HEADERS_TYPE
from seglake.storage import segment as segment_module
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.log import PartitionLog
from seglake.storage.naming import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name
from seglake.storage.segment import LogSegment
from tests.unit.test_decode import (
    PATH,
    WALKS,
    batches,
    build_log,
    control_batch,
    corrupt_cases,
    kp_batch,
    walking,
)

T0 = 1_700_000_000_000
FS = pafs.LocalFileSystem()
SETTINGS = settings(
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# ---------------------------------------------------------------- building segments

# a data batch: codec, records as (offset gap before it, timestamp), LogAppendTime (the
# append time) or None, headers on its records; a control batch: ("control", timestamp)
data_batches = st.tuples(
    st.integers(0, 4),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60)), min_size=1, max_size=10),
    st.none() | st.integers(0, 70),
    st.booleans(),
)
control_batches = st.tuples(st.just("control"), st.integers(0, 80))
segment_specs = st.lists(data_batches | control_batches, min_size=1, max_size=12)


def encode_spec(spec: list, base_offset: int) -> list[bytes]:
    """The batches of ``spec`` from ``base_offset`` on (first record's gap included)."""
    out, offset = [], base_offset
    for item in spec:
        if item[0] == "control":
            kind = ControlType.COMMIT if item[1] % 2 else ControlType.ABORT
            out.append(control_batch(kind, base_offset=offset, ts=T0 + item[1]))
            offset += 1
            continue
        codec, recs, append_time, with_headers = item
        offsets = offset + np.cumsum([gap for gap, _ in recs]) + np.arange(len(recs))
        headers = [
            [{"key": f"h{i}", "value": b"x"}] * (i % 3) if with_headers else []
            for i in range(len(recs))
        ]
        table = pa.table(
            {
                "offset": pa.array(offsets, pa.int64()),
                "timestamp": pa.array([T0 + ts for _, ts in recs], pa.int64()),
                "key": pa.array([b"k%d" % i for i in range(len(recs))], pa.binary()),
                "value": pa.array([b"v" * (i * 7) for i in range(len(recs))], pa.binary()),
                "headers": pa.array(headers, HEADERS_TYPE),
            }
        )
        enc = encode_batches(
            table,
            batch_starts=np.array([0]),
            codec=codec,
            timestamp_type=0 if append_time is None else 1,
            log_append_time=None if append_time is None else T0 + append_time,
        )
        out.append(enc.tobytes())
        offset = int(offsets[-1]) + 1
    return out


def write_segment(
    directory: Path, batches: list[bytes], base_offset: int, *, interval: int, index_files: bool
) -> Path:
    """``directory/<base>.log`` of ``batches``; with ``index_files``, its ``.index`` and
    ``.timeindex`` as a broker writes them (else the reader rebuilds them)."""
    directory.mkdir(parents=True, exist_ok=True)
    buf = b"".join(batches)
    log = directory / segment_file_name(base_offset, ".log")
    log.write_bytes(buf)
    if index_files:
        oi, ti = rebuild_indexes(scan_batches(buf), base_offset, interval)
        log.with_suffix(INDEX_SUFFIX).write_bytes(oi.to_bytes())
        log.with_suffix(TIME_INDEX_SUFFIX).write_bytes(ti.to_bytes())
    return log


def records_of(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and timestamps of every record, transaction markers included: Kafka's
    ``FileRecords.searchForTimestamp`` walks control batches too, so ListOffsets can
    answer a marker (a real broker does: tests/spark/kafka/test_broker_to_lake.py)."""
    tables = [read_log(p.read_bytes(), skip_control=False)[0] for p in paths]
    t = pa.concat_tables(tables)
    return t.column("offset").to_numpy(), t.column("timestamp").to_numpy()


def brute_force(
    offsets: np.ndarray, timestamps: np.ndarray, t: int, lo: int
) -> tuple[int, int] | None:
    """The first record (offset order) with offset >= ``lo`` and timestamp >= ``t``."""
    hits = np.flatnonzero((timestamps >= t) & (offsets >= lo))
    return (int(timestamps[hits[0]]), int(offsets[hits[0]])) if len(hits) else None


def targets(timestamps: np.ndarray) -> list[int]:
    ts = {int(t) for t in timestamps} | {T0 + c for c in range(0, 81, 10)}
    return sorted({t + d for t in ts for d in (-1, 0, 1)} | {0, T0 + 10**6})


def found(f) -> tuple[int, int] | None:
    return None if f is None else (f.timestamp, f.offset)


# ---------------------------------------------------------------- lookups vs brute force


@SETTINGS
@given(
    spec=segment_specs,
    base=st.integers(0, 10**6),
    interval=st.sampled_from([1, 150, 4096]),
    index_files=st.booleans(),
    data=st.data(),
)
def test_segment_lookup_equals_brute_force(
    tmp_path: Path, spec, base: int, interval: int, index_files: bool, data
) -> None:
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    log = write_segment(
        d, encode_spec(spec, base), base, interval=interval, index_files=index_files
    )
    offsets, timestamps = records_of([log])
    seg = LogSegment(FS, str(log), index_interval_bytes=interval)
    last = int(offsets.max()) if len(offsets) else base
    starts = [
        None,
        base - 1,
        last + 1,
        *data.draw(st.lists(st.integers(base, last + 1), max_size=3)),
    ]
    for t in targets(timestamps):
        for lo in starts:
            want = brute_force(offsets, timestamps, t, base if lo is None else lo)
            assert found(seg.find_offset_by_timestamp(t, lo)) == want, (t, lo)
    if index_files:
        assert seg.index_source == "file"


@SETTINGS
@given(specs=st.lists(segment_specs, min_size=1, max_size=3))
def test_partition_offsets_for_times_equals_brute_force(tmp_path: Path, specs) -> None:
    d = Path(tempfile.mkdtemp(dir=tmp_path)) / "t-0"
    logs, base = [], 0
    for spec in specs:
        batches = encode_spec(spec, base)
        logs.append(write_segment(d, batches, base, interval=120, index_files=True))
        base = int(scan_batches(b"".join(batches)).last_offset[-1]) + 1
    offsets, timestamps = records_of(logs)
    plog = PartitionLog.open(str(d), index_interval_bytes=120)
    for t in targets(timestamps):
        assert found(plog.offsets_for_times(t)) == brute_force(offsets, timestamps, t, 0), t


# ---------------------------------------------------------------- record_times vs decode


@WALKS
@SETTINGS
@given(spec=batches, controls=st.lists(st.integers(0, 7), max_size=3))
def test_record_times_equal_decode(walk_below: int, spec, controls: list[int]) -> None:
    buf, placed = build_log(spec)
    end = placed[-1][0] + len(placed[-1][1])
    buf += b"".join(control_batch(ControlType.COMMIT, base_offset=end + i) for i in controls)
    scan = scan_batches(buf)
    for skip_control in (True, False):
        with walking(walk_below):
            table = decode_batches(buf, scan, skip_control=skip_control)
            offsets, timestamps = record_times(buf, scan, skip_control=skip_control)
        assert offsets.tolist() == table.column("offset").to_pylist()
        assert timestamps.tolist() == table.column("timestamp").to_pylist()


def test_record_times_of_nothing() -> None:
    buf = control_batch(ControlType.ABORT, base_offset=3)
    offsets, timestamps = record_times(buf, scan_batches(buf))
    assert offsets.dtype == timestamps.dtype == np.int64
    assert len(offsets) == len(timestamps) == 0
    offsets, _ = record_times(b"", scan_batches(b""))
    assert len(offsets) == 0


def errors_of(fn) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as err:
        fn()
    return err.value


def same_error(a: CorruptRecordError, b: CorruptRecordError) -> bool:
    return (str(a), a.path, a.position) == (str(b), b.path, b.position)


def bad_log(case: str, prefix: int = 5) -> tuple[bytes, int]:
    """``prefix`` good batches (timestamps 5) then the corrupt batch of ``case`` (base
    offset 1000, timestamps 1000); and where the corrupt batch starts."""
    good = b"".join(
        kp_batch([(5, b"k", b"v", [("h", b"")] * (i % 2))] * (1 + i % 3), base_offset=10 * i)
        for i in range(prefix)
    )
    bad = bytearray(corrupt_cases()[case][0])
    struct.pack_into(">q", bad, 0, 1000)  # base offset: outside the CRC
    return good + bytes(bad), len(good)


@WALKS
@pytest.mark.parametrize("case", list(corrupt_cases()))
def test_record_times_raise_as_decode(walk_below: int, case: str) -> None:
    buf, at = bad_log(case, prefix=61)
    scan = scan_batches(buf)
    with walking(walk_below):
        want = errors_of(lambda: decode_batches(buf, scan, path=PATH))
        got = errors_of(lambda: record_times(buf, scan, path=PATH))
    assert got.position == at and corrupt_cases()[case][1] in str(got)
    assert same_error(got, want)


# batch offsets that fit a segment's int32 relative offsets
SEGMENT_CASES = [c for c in corrupt_cases() if "count cannot fit" not in c]


@pytest.mark.parametrize("index_files", [True, False], ids=["index-files", "rebuilt"])
@pytest.mark.parametrize("case", SEGMENT_CASES)
def test_find_offset_raises_as_decode(
    tmp_path: Path, monkeypatch, case: str, index_files: bool
) -> None:
    """A lookup that reaches the corrupt batch raises what decoding the same window's
    batch raises (naming the file); one that stops before it does not read it."""
    buf, _ = bad_log(case)
    log = write_segment(tmp_path, [buf], 0, interval=1, index_files=index_files)
    seg = LogSegment(FS, str(log), index_interval_bytes=1)
    decoded: list[CorruptRecordError | None] = []
    read_times = segment_module.record_times

    def checked(buf, scan, *, path=None, skip_control=True):
        try:
            decode_batches(buf, scan, path=path, skip_control=skip_control)
            decoded.append(None)
        except CorruptRecordError as exc:
            decoded.append(exc)
        return read_times(buf, scan, path=path, skip_control=skip_control)

    monkeypatch.setattr(segment_module, "record_times", checked)
    assert found(seg.find_offset_by_timestamp(5)) == (5, 0)
    got = errors_of(lambda: seg.find_offset_by_timestamp(6))
    assert decoded[-1] is not None and same_error(got, decoded[-1])
    assert got.path == str(log) and corrupt_cases()[case][1] in str(got)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(0, 5)), max_size=12),
    st.lists(st.integers(-1, 700), min_size=1, max_size=20),
)
def test_time_index_bounds_equal_brute_force(steps, targets) -> None:
    """``bounds_many``: after the last entry with timestamp < target (base if none), and
    at the first entry with timestamp >= target (NO_ENTRY if none), by a scan of the
    entries."""
    from seglake.storage.time_index import NO_ENTRY, TimeIndex

    base, ts, offs, t, o = 100, [], [], -1, 100
    for dt, do in steps:
        t, o = t + dt, o + do
        ts.append(t)
        offs.append(o)
    ti = TimeIndex.from_entries(base, ts, offs)
    first, last = ti.bounds_many(np.array(targets))
    for k, target in enumerate(targets):
        below = [off for tt, off in zip(ts, offs, strict=True) if tt < target]
        above = [off for tt, off in zip(ts, offs, strict=True) if tt >= target]
        assert first[k] == (below[-1] + 1 if below else base)
        assert last[k] == (above[0] if above else NO_ENTRY)
        assert first[k] == (ti.lookup_strict(target).offset + 1 if below else base)


def test_the_search_reads_up_to_the_next_time_entry_at_once(tmp_path: Path) -> None:
    """Batches' largest timestamps 10, 20, 15, 18, 30, 40 (an index entry each, interval 1):
    the time index holds 10, 20, 30, 40, so a search for 25 may end at the batch of 30. Its
    bytes are one read (were one an interval: four), the answer the brute force's; the
    batch after it is not read."""
    spec = [(0, [(0, t - 1), (0, t)], None, False) for t in (10, 20, 15, 18, 30, 40)]
    log = write_segment(tmp_path, encode_spec(spec, 0), 0, interval=1, index_files=True)
    seg = LogSegment(FS, str(log), index_interval_bytes=1)
    offsets, timestamps = records_of([log])
    reads: list[tuple[int, int]] = []
    read_range = seg.files.read_range

    def counted(start: int, length: int) -> bytes:
        reads.append((start, length))
        return read_range(start, length)

    seg.files.read_range = counted  # type: ignore[method-assign]
    assert (
        found(seg.find_offset_by_timestamp(T0 + 25))
        == brute_force(offsets, timestamps, T0 + 25, 0)
        == (T0 + 29, 8)
    )
    sizes = [len(b) for b in encode_spec(spec, 0)]
    # (the last 8 bytes: the zero-tail check of a log's end.) From the offset index's floor
    # of offset 4 (the entry of batch 1, whose last offset is 3) through batch 4
    assert [r for r in reads if r != (sum(sizes) - 8, 8)] == [(sizes[0], sum(sizes[1:5]))]
