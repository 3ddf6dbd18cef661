"""SegmentWriter through PartitionLog.append: round trips (seglake's decoder and
kafka-python's), roll rules, index bytes vs a rebuild from the .log, offset order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from kafka.record.memory_records import MemoryRecords

from seglake.config import LogConfig
from seglake.errors import InputSchemaError, OffsetOrderError
from seglake.format import INT32_MAX
from seglake.record.batch import scan_batches
from seglake.record.reader import read_log
from seglake.record.schema import HEADERS_TYPE
from seglake.sample import generate
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.log import PartitionLog
from seglake.storage.naming import parse_segment_file_name
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.time_index import TimeIndex
from seglake.storage.writer import SegmentWriter

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


# ----------------------------------------------------------------------------- helpers
def make_records(
    n: int,
    *,
    seed: int = 1,
    offsets: np.ndarray | None = None,
    timestamps: np.ndarray | None = None,
    value_bytes: int = 60,
) -> pa.Table:
    """``n`` records: non-monotonic timestamps, some null keys/values/header values."""
    rng = np.random.default_rng(seed)
    t = generate(n, seed=seed, topics=("t",), value_bytes=value_bytes, jitter_ms=3000)
    keys = t.column("key").to_pylist()
    values = t.column("value").to_pylist()
    headers = t.column("headers").to_pylist()
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            keys[i] = None
        elif r < 0.2:
            values[i] = None
        elif r < 0.25:
            values[i] = b""
        elif r < 0.3:
            headers[i] = []
        elif r < 0.35:
            headers[i] = [{"key": "nul", "value": None}, {"key": "ü-utf8", "value": b"\x00\xff"}]
    if offsets is None:
        offsets = np.arange(n, dtype=np.int64)
    ts = t.column("timestamp").to_numpy() if timestamps is None else np.asarray(timestamps)
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


def new_log(tmp_path: Path, name: str = "t-0") -> PartitionLog:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    return PartitionLog.open(str(d))


def log_files(d: Path) -> list[Path]:
    files = sorted(p for p in d.iterdir() if parse_segment_file_name(p.name) and p.suffix == ".log")
    return files


def decoded(d: Path) -> pa.Table:
    parts = []
    for f in log_files(d):
        t, scan = read_log(f.read_bytes(), path=str(f))
        assert scan.error is None, scan.error
        parts.append(t)
    return pa.concat_tables(parts)


def as_rows(t: pa.Table) -> list[tuple]:
    cols = ["offset", "timestamp", "key", "value", "headers"]
    d = t.select(cols).to_pydict()
    return [
        tuple(
            (tuple((h["key"], h["value"]) for h in v) if c == "headers" else v)
            for c, v in zip(cols, row, strict=True)
        )
        for row in zip(*(d[c] for c in cols), strict=True)
    ]


def kafka_python_rows(d: Path) -> list[tuple]:
    rows = []
    for f in log_files(d):
        mr = MemoryRecords(f.read_bytes())
        while (batch := mr.next_batch()) is not None:
            assert batch.validate_crc()
            for r in batch:
                rows.append(
                    (r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers))
                )
    return rows


def check_indexes_match_rebuild(d: Path, interval: int) -> None:
    for f in log_files(d):
        base = parse_segment_file_name(f.name)[0]
        oi, ti = rebuild_indexes(scan_batches(f.read_bytes()), base, interval)
        assert f.with_suffix(".index").read_bytes() == oi.to_bytes(), f
        assert f.with_suffix(".timeindex").read_bytes() == ti.to_bytes(), f


def segment_scans(d: Path):
    for f in log_files(d):
        buf = f.read_bytes()
        yield f, buf, scan_batches(buf)


# ------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec_several_segments(tmp_path: Path, codec: str) -> None:
    recs = make_records(1500, seed=CODECS.index(codec))
    cfg = LogConfig(
        segment_bytes=12_000, batch_size=1500, index_interval_bytes=1000, compression_type=codec
    )
    log = new_log(tmp_path)
    infos = log.append(recs, config=cfg)
    d = tmp_path / "t-0"
    assert len(log_files(d)) >= 3 and len(infos) == len(log_files(d))
    assert not list(d.glob("*.tmp"))
    expected = as_rows(recs)
    assert as_rows(decoded(d)) == expected
    # an independent decoder: kafka-python (header values null stay None, key/values too)
    assert kafka_python_rows(d) == expected
    for f, buf, scan in segment_scans(d):
        assert scan.error is None and len(buf) == scan.valid_bytes
        assert (scan.attributes & 7 == CODECS.index(codec)).all()
        # size roll: no segment over log.segment.bytes unless it is a single batch
        assert len(buf) <= cfg.segment_bytes or len(scan) == 1, f
    check_indexes_match_rebuild(d, cfg.index_interval_bytes)
    # segment metadata agrees with the files
    for info in infos:
        seg = decoded_segment(info.log_path)
        assert info.record_count == seg.num_rows
        assert info.next_offset == seg.column("offset")[-1].as_py() + 1
        assert info.min_timestamp == min(seg.column("timestamp").to_pylist())
        assert info.max_timestamp == max(seg.column("timestamp").to_pylist())
        assert info.size_bytes == os.path.getsize(info.log_path)
    assert [i.roll_reason for i in infos[:-1]] == ["size"] * (len(infos) - 1)
    assert infos[-1].roll_reason is None
    # reopening sees the same log
    again = PartitionLog.open(str(d))
    assert again.log_start_offset == 0 and again.log_end_offset == 1500
    assert as_rows(again.read_range(0, 1500)) == expected


def decoded_segment(path: str) -> pa.Table:
    return read_log(Path(path).read_bytes())[0]


def test_single_batch_larger_than_segment_bytes(tmp_path: Path) -> None:
    recs = make_records(40, value_bytes=2000)
    cfg = LogConfig(segment_bytes=1000, batch_size=100_000)
    log = new_log(tmp_path)
    log.append(recs, config=cfg)
    d = tmp_path / "t-0"
    for _f, buf, scan in segment_scans(d):
        assert len(buf) <= cfg.segment_bytes or len(scan) == 1
    assert as_rows(decoded(d)) == as_rows(recs)


def test_multiple_appends_start_new_segments_and_continue_offsets(tmp_path: Path) -> None:
    recs = make_records(600)
    log = new_log(tmp_path)
    cfg = LogConfig(batch_size=800, index_interval_bytes=500)
    log.append(recs.slice(0, 200), config=cfg)
    log.append(recs.slice(200, 250), config=cfg)
    log.append(recs.slice(450), config=cfg)
    d = tmp_path / "t-0"
    assert [parse_segment_file_name(f.name)[0] for f in log_files(d)] == [0, 200, 450]
    assert as_rows(decoded(d)) == as_rows(recs)
    assert log.log_end_offset == 600
    check_indexes_match_rebuild(d, 500)


def test_roll_when_index_full(tmp_path: Path) -> None:
    recs = make_records(800)
    # 24 bytes: 3 offset entries, 2 time entries (the last one reserved for close)
    cfg = LogConfig(batch_size=300, index_interval_bytes=0, index_size_max_bytes=24)
    log = new_log(tmp_path)
    infos = log.append(recs, config=cfg)
    d = tmp_path / "t-0"
    assert len(infos) > 3
    assert "index" in {i.roll_reason for i in infos}
    for f in log_files(d):
        oi = OffsetIndex.from_bytes(
            f.with_suffix(".index").read_bytes(), parse_segment_file_name(f.name)[0]
        )
        ti = TimeIndex.from_bytes(
            f.with_suffix(".timeindex").read_bytes(), parse_segment_file_name(f.name)[0]
        )
        assert len(oi) <= 3 and len(ti) <= 2
        assert os.path.getsize(f.with_suffix(".index")) <= 24
        assert os.path.getsize(f.with_suffix(".timeindex")) <= 24
    assert as_rows(decoded(d)) == as_rows(recs)
    check_indexes_match_rebuild(d, 0)


def test_roll_by_log_roll_ms(tmp_path: Path) -> None:
    n = 400
    ts = 1_700_000_000_000 + (np.arange(n) // 50) * 60_000 + (np.arange(n) % 7) * 3
    recs = make_records(n, timestamps=ts)
    cfg = LogConfig(batch_size=400, roll_ms=30_000)
    log = new_log(tmp_path)
    infos = log.append(recs, config=cfg)
    d = tmp_path / "t-0"
    assert "time" in {i.roll_reason for i in infos}
    assert len(infos) >= n // 50
    for _f, _buf, scan in segment_scans(d):
        mts = scan.max_timestamp
        assert int(mts.max() - mts[0]) <= cfg.roll_ms
    assert as_rows(decoded(d)) == as_rows(recs)


def test_roll_on_relative_offset_overflow(tmp_path: Path) -> None:
    gap = 2**31 + 100
    offsets = np.concatenate([np.arange(10), gap + np.arange(10)]).astype(np.int64)
    recs = make_records(20, offsets=offsets)
    log = new_log(tmp_path)
    infos = log.append(recs, config=LogConfig())
    d = tmp_path / "t-0"
    bases = [parse_segment_file_name(f.name)[0] for f in log_files(d)]
    assert bases == [0, gap]
    assert infos[0].roll_reason == "offset"
    for f, _buf, scan in segment_scans(d):
        base = parse_segment_file_name(f.name)[0]
        assert int(scan.last_offset.max()) - base <= INT32_MAX
    assert as_rows(decoded(d)) == as_rows(recs)
    assert kafka_python_rows(d) == as_rows(recs)
    assert log.log_end_offset == gap + 10
    assert as_rows(log.read(5, 10)) == as_rows(recs.slice(5, 10))


def test_offsets_going_backwards_rejected(tmp_path: Path) -> None:
    recs = make_records(100)
    log = new_log(tmp_path)
    log.append(recs, config=LogConfig())
    with pytest.raises(OffsetOrderError, match=r"offset 50\b.*100"):
        log.append(make_records(10, offsets=np.arange(50, 60)), config=LogConfig())
    with pytest.raises(OffsetOrderError, match=r"99"):
        log.append(make_records(10, offsets=np.arange(99, 109)), config=LogConfig())
    # within one input: not strictly increasing
    with pytest.raises(OffsetOrderError, match=r"\b(205|204)\b"):
        log.append(make_records(5, offsets=np.array([200, 201, 205, 204, 206])), config=LogConfig())
    assert log.log_end_offset == 100
    assert as_rows(decoded(tmp_path / "t-0")) == as_rows(recs)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_log_append_time_records(tmp_path: Path, codec: str) -> None:
    n = 300
    ts = 1_700_000_000_000 + (np.arange(n) // 40) * 1000  # one append time per produce
    recs = make_records(n, timestamps=ts)
    recs = recs.append_column("timestamp_type", pa.array(np.ones(n, np.int32)))
    log = new_log(tmp_path)
    log.append(recs, config=LogConfig(batch_size=100_000, compression_type=codec))
    d = tmp_path / "t-0"
    out = decoded(d)
    assert out.column("timestamp_type").to_pylist() == [1] * n
    assert as_rows(out) == as_rows(recs)
    for _f, buf, scan in segment_scans(d):
        assert ((scan.attributes & 8) != 0).all()
        mr = MemoryRecords(buf)
        while (batch := mr.next_batch()) is not None:
            assert batch.timestamp_type == 1
            for r in batch:
                assert r.timestamp == batch.max_timestamp == ts[r.offset]
    assert log.offsets_for_times(int(ts[45])).offset == 40
    check_indexes_match_rebuild(d, 4096)


def test_mixed_timestamp_types(tmp_path: Path) -> None:
    n = 120
    recs = make_records(n)
    tt = np.where((np.arange(n) // 30) % 2 == 1, 1, 0).astype(np.int32)
    ts = recs.column("timestamp").to_numpy().copy()
    ts[tt == 1] = ts[tt == 1].max()  # one append time for all LogAppendTime records
    recs = recs.set_column(1, "timestamp", pa.array(ts)).append_column(
        "timestamp_type", pa.array(tt)
    )
    log = new_log(tmp_path)
    log.append(recs, config=LogConfig())
    out = decoded(tmp_path / "t-0")
    assert out.column("timestamp_type").to_pylist() == tt.tolist()
    assert as_rows(out) == as_rows(recs)


def test_held_back_records_do_not_keep_the_callers_batch_alive(tmp_path: Path) -> None:
    """The last, unfilled batch is held back for the next append as a copy: a slice
    would keep the caller's whole input (an ingest task's held batches) in memory."""
    before = pa.total_allocated_bytes()
    recs = make_records(2000, value_bytes=2000)  # ~4 MB of values, in Arrow's pool
    assert pa.total_allocated_bytes() - before > 3_000_000
    w = SegmentWriter(pafs.LocalFileSystem(), str(tmp_path / "t-0"), config=LogConfig())
    w.append(recs)
    del recs
    assert pa.total_allocated_bytes() - before < 64_000  # the held back batch: < batch.size
    w.close()
    assert as_rows(decoded(tmp_path / "t-0")) == as_rows(make_records(2000, value_bytes=2000))


def test_max_message_bytes_refuses_a_larger_batch(tmp_path: Path) -> None:
    """Kafka's max.message.bytes (RecordTooLargeException): a batch over it is refused with
    one line naming the partition, the offsets and both sizes; nothing is appended. A
    batch of exactly that size goes in (kafka-python reads it back)."""
    recs = make_records(50, value_bytes=400)
    log = new_log(tmp_path)
    probe = new_log(tmp_path, "probe-0").append(recs, config=LogConfig(batch_size=1 << 20))
    size = probe[0].size_bytes  # one batch: its whole size
    with pytest.raises(InputSchemaError) as err:
        log.append(recs, config=LogConfig(batch_size=1 << 20, max_message_bytes=size - 1))
    msg = str(err.value)
    assert "t-0" in msg and "offsets 0..49" in msg and f"is {size} bytes" in msg
    assert f"max.message.bytes={size - 1}" in msg and "\n" not in msg
    assert log.log_end_offset == 0
    log.append(recs, config=LogConfig(batch_size=1 << 20, max_message_bytes=size))
    data = b"".join(f.read_bytes() for f in log_files(tmp_path / "t-0"))
    got = MemoryRecords(data)
    batch = got.next_batch()
    assert batch is not None and len(list(batch)) == 50


def test_compacted_topic_rolls_at_max_compaction_lag(tmp_path: Path) -> None:
    """Kafka's LogConfig.maxSegmentMs: on a compact topic a max.compaction.lag.ms below
    segment.ms is the time rule (a delete topic ignores it); checked against the rule
    by brute force over the batches' timestamps."""
    ts = np.arange(0, 10_000, 10, dtype=np.int64)  # 10 s of records, 10 ms apart
    recs = make_records(len(ts), timestamps=ts)
    lag = {"max.compaction.lag.ms": "1000", "batch.max.records": "10"}
    compact = LogConfig().with_overrides({**lag, "cleanup.policy": "compact"})
    assert compact.max_segment_ms == 1000
    assert LogConfig().with_overrides(lag).max_segment_ms == LogConfig().roll_ms
    infos = new_log(tmp_path, "c-0").append(recs, config=compact)
    assert {i.roll_reason for i in infos[:-1]} == {"time"}
    for f in log_files(tmp_path / "c-0"):
        scan = scan_batches(f.read_bytes())
        assert scan.max_timestamp[-1] - scan.max_timestamp[0] <= 1000
    assert len(new_log(tmp_path, "d-0").append(recs, config=LogConfig().with_overrides(lag))) == 1
