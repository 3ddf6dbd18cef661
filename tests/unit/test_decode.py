"""Record decoding: round trips with kafka-python's writer, truncation, bit flips, and
CRC-valid batches whose records are corrupt."""

from __future__ import annotations

import functools
import struct
from unittest.mock import patch

import cramjam
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from seglake.errors import CorruptRecordError
from seglake.record import decode, walk
from seglake.record.batch import CONTROL_BIT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, scan_batches
from seglake.record.control import (
    ControlRecord,
    ControlType,
    encode_control_record,
    parse_control_record,
)
from seglake.record.crc import crc32c
from seglake.record.reader import decode_batch, decode_batches, read_log
from seglake.record.schema import RECORD_SCHEMA
from seglake.record.varint import (
    encode_varint,
    fast_varints,
    read_varints,
    varint_sizes,
    write_varints,
)

PATH = "orders-0/00000000000000000000.log"
# 1: every chain walked with numpy steps; huge: every chain walked in Python
WALKS = pytest.mark.parametrize("walk_below", [1, 10**9], ids=["numpy-walk", "python-walk"])


def walking(walk_below: int):
    return patch.object(walk, "PYTHON_WALK_BELOW", walk_below)


# ---------------------------------------------------------------- building logs

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kp_batch(
    records: list[Record],
    *,
    codec: int = 0,
    base_offset: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
) -> bytes:
    """A batch written by kafka-python's DefaultRecordBatchBuilder (offset deltas 0..n-1)."""
    builder = DefaultRecordBatchBuilder(
        2,
        codec,
        transactional,
        producer_id,
        0 if producer_id >= 0 else -1,
        0 if producer_id >= 0 else -1,
        1 << 30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        if builder.append(i, ts, key, value, headers) is None:
            raise RuntimeError("kafka-python refused a record")
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base_offset)
    return bytes(buf)


def reseal(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC-32C recomputed (forging a CRC-valid batch)."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def raw_record(
    ts_delta: int = 0,
    offset_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: tuple = (),
    *,
    length: int | None = None,
    header_count: int | None = None,
    extra: bytes = b"",
) -> bytes:
    """A record by hand; ``length``/``header_count``/``extra`` forge broken ones."""

    def field(b: bytes | None) -> bytes:
        return encode_varint(-1) if b is None else encode_varint(len(b)) + b

    body = b"\x00" + encode_varint(ts_delta) + encode_varint(offset_delta)
    body += field(key) + field(value)
    body += encode_varint(len(headers) if header_count is None else header_count)
    for hk, hv in headers:
        body += field(hk) + field(hv)
    body += extra
    return encode_varint(len(body) if length is None else length) + body


def raw_batch(
    block: bytes,
    count: int,
    *,
    base_offset: int = 0,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    base_ts: int = 1000,
    max_ts: int | None = None,
    producer_id: int = -1,
) -> bytes:
    """A CRC-valid batch around ``block`` (the records, already compressed if need be)."""
    if last_offset_delta is None:
        last_offset_delta = max(count - 1, 0)
    body = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_ts,
            base_ts if max_ts is None else max_ts,
            producer_id,
            -1 if producer_id < 0 else 0,
            -1,
            count,
        )
        + block
    )
    return struct.pack(">qiibI", base_offset, len(body) + 9, 0, 2, crc32c(body)) + body


def control_batch(
    kind: ControlType, *, base_offset: int, producer_id: int = 7, epoch: int = 5, ts: int = 5000
) -> bytes:
    key, value = encode_control_record(kind, epoch)
    return raw_batch(
        raw_record(0, 0, key, value),
        1,
        base_offset=base_offset,
        attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
        base_ts=ts,
        producer_id=producer_id,
    )


def expected_rows(
    batches: list[tuple[int, list[Record]]], *, producer_id: int = -1, transactional: bool = False
) -> list[dict]:
    return [
        {
            "offset": base + i,
            "timestamp": ts,
            "timestamp_type": 0,
            "key": key,
            "value": value,
            "headers": [{"key": hk, "value": hv} for hk, hv in headers],
            "producer_id": producer_id,
            "transactional": transactional,
        }
        for base, records in batches
        for i, (ts, key, value, headers) in enumerate(records)
    ]


def kafka_python_rows(buf: bytes) -> list[dict]:
    """The records of ``buf`` as kafka-python's reader sees them (the oracle)."""
    rows, scan = [], scan_batches(buf)
    for i in range(len(scan)):
        batch = DefaultRecordBatch(buf[scan.position[i] : scan.position[i] + scan.size[i]])
        if batch.is_control_batch:
            continue
        for r in batch:
            rows.append(
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "timestamp_type": r.timestamp_type,
                    "key": r.key,
                    "value": r.value,
                    "headers": [{"key": k, "value": v} for k, v in r.headers],
                    "producer_id": batch.producer_id,
                    "transactional": batch.is_transactional,
                }
            )
    return rows


# ---------------------------------------------------------------- strategies

big_value = st.builds(
    lambda unit, n: unit * n, st.binary(min_size=1, max_size=3), st.integers(3000, 12000)
)
keys = st.none() | st.binary(max_size=20)
values = st.none() | st.binary(max_size=150) | big_value
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
timestamps = st.integers(-(2**40), 2**41) | st.integers(-(2**61), 2**61)
records = st.lists(st.tuples(timestamps, keys, values, headers), min_size=1, max_size=12)
batches = st.lists(st.tuples(st.integers(0, 4), records, st.integers(0, 3)), min_size=1, max_size=6)


def build_log(spec: list[tuple[int, list[Record], int]]) -> tuple[bytes, list]:
    parts, placed, offset = [], [], 0
    for codec, recs, gap in spec:
        offset += gap
        parts.append(kp_batch(recs, codec=codec, base_offset=offset))
        placed.append((offset, recs))
        offset += len(recs)
    return b"".join(parts), placed


# ---------------------------------------------------------------- round trips


@WALKS
@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(spec=batches)
def test_round_trip_kafka_python(walk_below: int, spec) -> None:
    buf, placed = build_log(spec)
    with walking(walk_below):
        table, scan = read_log(buf, path=PATH)
    assert scan.valid_bytes == len(buf) and scan.error is None
    assert table.schema == RECORD_SCHEMA
    rows = table.to_pylist()
    assert rows == expected_rows(placed)
    assert rows == kafka_python_rows(buf)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_every_codec_really_compressed(codec: int) -> None:
    recs = [(1_000 + i, b"key-%d" % i, b"value " * (i + 20), [("h", b"x" * i)]) for i in range(50)]
    batch = kp_batch(recs, codec=codec, base_offset=10)
    scan = scan_batches(batch)
    assert int(scan.codec[0]) == codec  # kafka-python kept it compressed
    assert decode_batches(batch, scan).to_pylist() == expected_rows([(10, recs)])


@WALKS
def test_many_batches_with_headers(walk_below: int) -> None:
    rng = np.random.default_rng(7)
    spec = []
    for b in range(120):
        recs = [
            (
                int(rng.integers(0, 10**6)),
                None if rng.random() < 0.2 else rng.bytes(int(rng.integers(0, 30))),
                None if rng.random() < 0.1 else rng.bytes(int(rng.integers(0, 300))),
                [
                    (f"h{j}", None if j % 3 == 2 else rng.bytes(j))
                    for j in range(int(rng.integers(0, 4)) if b % 2 else 0)
                ],
            )
            for _ in range(int(rng.integers(1, 60)))
        ]
        spec.append((b % 5, recs, int(rng.integers(0, 2))))
    buf, placed = build_log(spec)
    with walking(walk_below):
        table, _ = read_log(buf)
    assert table.to_pylist() == expected_rows(placed)


def test_values_of_every_small_length_and_nulls() -> None:
    # binary_view inlines values of <= 12 bytes: cover 0..40, null, and the buffer's tail
    recs = [
        (5, None if n % 7 == 3 else bytes(range(n)), bytes(range(n, 0, -1)), []) for n in range(41)
    ]
    recs.append((5, b"end", b"xyz", []))  # the last value ends 1 byte before the buffer end
    batch = kp_batch(recs, base_offset=3)
    assert decode_batches(batch, scan_batches(batch)).to_pylist() == expected_rows([(3, recs)])


def test_chunked_columns_and_windows_beyond_int32(monkeypatch) -> None:
    """Beyond 2 GiB, columns are chunked and views use windows; shrink the limits to test
    (the numpy path: the kernel hands a column past int32 offsets to it)."""
    monkeypatch.setenv("SEGLAKE_NATIVE", "0")
    recs = [
        (i, b"k" * (i % 20), bytes([i % 251]) * (i * 7 % 300), [("a", b"b" * (i % 15))])
        for i in range(300)
    ]
    buf, placed = build_log([(0, recs[:150], 0), (0, recs[150:], 0)])
    monkeypatch.setattr(decode, "_MAX_BINARY", 4000)
    monkeypatch.setattr(decode, "_WINDOW", 1024)
    table, _ = read_log(buf)
    assert table.column("value").num_chunks > 1
    assert table.to_pylist() == expected_rows(placed)


def test_producer_fields_and_transactional() -> None:
    recs = [(100, b"a", b"b", [])] * 3
    batch = kp_batch(recs, base_offset=40, transactional=True, producer_id=99)
    rows = decode_batches(batch, scan_batches(batch)).to_pylist()
    assert rows == expected_rows([(40, recs)], producer_id=99, transactional=True)


def test_log_append_time_uses_max_timestamp() -> None:
    recs = [(1_000 + d, b"k", b"v", []) for d in (0, -500, 300)]
    batch = bytearray(kp_batch(recs, base_offset=7))
    struct.pack_into(">h", batch, 21, TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", batch, 35, 123_456)
    plain = kp_batch(recs, base_offset=10)
    buf = reseal(batch) + plain
    table, _ = read_log(buf)
    assert table.column("timestamp").to_pylist() == [123_456] * 3 + [1_000, 500, 1_300]
    assert table.column("timestamp_type").to_pylist() == [1, 1, 1, 0, 0, 0]
    assert table.to_pylist() == kafka_python_rows(buf)


def test_control_batches_skipped_or_kept() -> None:
    data = kp_batch([(10, b"k", b"v", [])] * 2, transactional=True, producer_id=7)
    buf = data + control_batch(ControlType.COMMIT, base_offset=2)
    buf += kp_batch([(20, None, b"w", [])], base_offset=3, transactional=True, producer_id=7)
    buf += control_batch(ControlType.ABORT, base_offset=4, epoch=9)
    table, scan = read_log(buf)
    assert table.column("offset").to_pylist() == [0, 1, 3]
    everything, _ = read_log(buf, skip_control=False)
    assert everything.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    markers = decode_batches(buf, scan.take(scan.is_control), skip_control=False).to_pylist()
    parsed = [parse_control_record(r["key"], r["value"]) for r in markers]
    assert parsed == [
        ControlRecord(0, ControlType.COMMIT, 1, 5, struct.pack(">hi", 0, 5)),
        ControlRecord(0, ControlType.ABORT, 0, 9, struct.pack(">hi", 0, 9)),
    ]
    assert parsed[0].is_commit and parsed[1].is_abort and parsed[0].is_transaction_marker
    assert all(r["transactional"] and r["producer_id"] == 7 for r in markers)
    only_markers = decode_batches(buf, scan.take(scan.is_control))
    assert only_markers.num_rows == 0 and only_markers.schema == RECORD_SCHEMA


def test_control_record_parsing_errors() -> None:
    unknown = parse_control_record(struct.pack(">hh", 0, 42), b"?")
    assert unknown.type is ControlType.UNKNOWN and unknown.type_id == 42
    newer = parse_control_record(
        struct.pack(">hh", 1, 1) + b"extra", struct.pack(">hi", 1, 3) + b"more"
    )
    assert newer.version == 1 and newer.coordinator_epoch == 3
    for key, value in [
        (None, b""),
        (b"\x00\x00\x00", b""),
        (struct.pack(">hh", -1, 0), b""),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00"),
        (struct.pack(">hh", 0, 0), None),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 0)),
    ]:
        with pytest.raises(CorruptRecordError, match=f"{PATH}: position 9"):
            parse_control_record(key, value, path=PATH, position=9)
    with pytest.raises(ValueError):
        encode_control_record(ControlType.LEADER_CHANGE)


def test_empty_inputs() -> None:
    table, scan = read_log(b"")
    assert table.num_rows == 0 and table.schema == RECORD_SCHEMA and scan.valid_bytes == 0
    empty = raw_batch(b"", 0, base_offset=5)  # kept by compaction: no records
    table, scan = read_log(empty + kp_batch([(1, b"a", b"b", [])], base_offset=9))
    assert len(scan) == 2 and table.column("offset").to_pylist() == [9]


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, "numpy"])
def test_buffer_types(kind) -> None:
    recs = [(3, b"k%d" % i, b"v" * 20, []) for i in range(5)]
    raw = kp_batch(recs, base_offset=1)
    buf = np.frombuffer(raw, np.uint8) if kind == "numpy" else kind(raw)
    assert decode_batch(buf, 0).to_pylist() == expected_rows([(1, recs)])


def test_decode_batch_needs_a_batch() -> None:
    with pytest.raises(CorruptRecordError, match=f"{PATH}: position 0: no valid batch"):
        decode_batch(b"\x00" * 70, 0, path=PATH)


# ---------------------------------------------------------------- truncation and bit flips


def small_log() -> tuple[bytes, list]:
    return build_log(
        [
            (0, [(100, b"a", b"one", []), (90, None, b"", [("h", None)])], 0),
            (1, [(200, b"b", b"two" * 30, [("x", b"y")])] * 3, 1),
            (0, [(300, b"c", None, [])], 0),
            (4, [(400 + i, b"d", b"four" * 20, []) for i in range(4)], 2),
        ]
    )


def test_every_truncation_point() -> None:
    buf, placed = small_log()
    ends = np.cumsum(scan_batches(buf).size)
    for cut in range(len(buf) + 1):
        table, scan = read_log(buf[:cut], path=PATH)
        whole = int(np.searchsorted(ends, cut, side="right"))
        assert scan.valid_bytes == (int(ends[whole - 1]) if whole else 0)
        assert (scan.error is None) == (cut == scan.valid_bytes)
        assert table.to_pylist() == expected_rows(placed[:whole])


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_bit_flips_never_give_wrong_records(mask: int) -> None:
    buf, placed = small_log()
    original = scan_batches(buf)
    want = expected_rows(placed)
    batch_of_row = np.repeat(np.arange(len(placed)), [len(r) for _, r in placed])
    for i in range(len(buf)):
        flipped = bytearray(buf)
        flipped[i] ^= mask
        b = int(np.searchsorted(original.position, i, side="right")) - 1
        at = i - int(original.position[b])
        try:
            table, scan = read_log(bytes(flipped), path=PATH)
        except CorruptRecordError:
            continue
        kept = len(scan)
        assert scan.position.tolist() == original.position[:kept].tolist()
        rows = [dict(r) for r, batch in zip(want, batch_of_row, strict=True) if batch < kept]
        start = int(original.position[b])
        if at < 8 and b < kept:  # baseOffset is outside the CRC: records move, nothing else
            (new_base,) = struct.unpack_from(">q", flipped, start)
            shift = new_base - int(original.base_offset[b])
            for r, batch in zip(rows, batch_of_row, strict=False):
                r["offset"] += shift if batch == b else 0
        elif at >= 16:  # magic, CRC or bytes it covers: the scan must stop at this batch
            assert kept == b
        assert table.to_pylist() == rows


@WALKS
def test_forged_crc_flips_raise_or_decode(walk_below: int) -> None:
    """Flip bytes inside CRC-valid batches and fix the CRC: only CorruptRecordError."""
    buf, _ = small_log()
    scan = scan_batches(buf)
    with walking(walk_below):
        for b in range(len(scan)):
            start, end = int(scan.position[b]), int(scan.position[b] + scan.size[b])
            for i in range(start + 21, end):
                for mask in (0x01, 0x40, 0xFF):
                    batch = bytearray(buf[start:end])
                    batch[i - start] ^= mask
                    forged = buf[:start] + reseal(batch) + buf[end:]
                    try:
                        table, got = read_log(forged, path=PATH)
                    except CorruptRecordError as exc:
                        assert PATH in str(exc)
                        continue
                    data = ~got.is_control
                    assert table.num_rows == int(got.records_count[data].sum())


# ---------------------------------------------------------------- corrupt records, CRC valid


def rec(body: bytes) -> bytes:
    """A record from its raw body (length prefix added)."""
    return encode_varint(len(body)) + body


HUGE = b"\xfe\xff\xff\xff\x0f"  # varint of 2**31 - 1
NULL_KV = b"\x00\x00\x00\x01\x01"  # attributes, deltas 0, null key, null value


@functools.cache
def zstd(block: bytes) -> bytes:
    return bytes(cramjam.zstd.compress(block))


def corrupt_cases() -> dict[str, tuple[bytes, str]]:
    """CRC-valid batches whose records are broken, and what the error must say."""
    good = raw_record(0, 0, b"key", b"value")
    return {
        "length past batch end": (raw_batch(raw_record(length=1000), 1), "length 1000"),
        "length below minimum": (raw_batch(encode_varint(3) + b"\x00" * 9, 1), "length 3"),
        "length varint too long": (
            raw_batch(b"\x80" * 6 + b"\x01" + b"\x00" * 7, 1),
            "record length: varint longer than 5 bytes",
        ),
        "fewer records than count": (raw_batch(good * 2, 3), "holds only 2 records"),
        "more records than count": (raw_batch(good * 2, 1), "bytes follow the last of 1"),
        "count cannot fit": (raw_batch(good, 2**31 - 1), "records count 2147483647"),
        "count zero, bytes present": (raw_batch(good, 0), "records count is 0"),
        "key length -2": (
            raw_batch(rec(b"\x00\x00\x00\x03\x01\x00"), 1),
            "key length -2 is negative",
        ),
        "huge key length": (
            raw_batch(rec(b"\x00\x00\x00" + HUGE + b"\x00" * 4), 1),
            "key length 2147483647 leaves no room",
        ),
        "value length -5": (
            raw_batch(rec(b"\x00\x00\x00\x01\x09\x00"), 1),
            "value length -5 is negative",
        ),
        "huge value length": (
            raw_batch(rec(b"\x00\x00\x00\x01" + HUGE + b"\x00" * 4), 1),
            "value length 2147483647 leaves no room",
        ),
        "record ends before header count": (
            raw_batch(rec(b"\x00\x00\x00\x02k\x01"), 1),
            "ends before its header count",
        ),
        "record ends before offset delta": (
            raw_batch(rec(b"\x00\x80\x80\x80\x80\x01"), 1),
            "ends before its offset delta",
        ),
        "negative header count": (raw_batch(raw_record(header_count=-1), 1), "header count -1"),
        "huge header count": (raw_batch(raw_record(header_count=10**6), 1), "header count 1000000"),
        "header key length -1": (
            raw_batch(rec(NULL_KV + b"\x02\x01\x02x"), 1),
            "header 0: key length -1",
        ),
        "header key past record end": (
            raw_batch(rec(NULL_KV + b"\x02\x14h\x00"), 1),
            "header 0: key length 10",
        ),
        "header value length -3": (
            raw_batch(rec(NULL_KV + b"\x02\x02h\x05"), 1),
            "header 0: value length -3",
        ),
        "header value past record end": (
            raw_batch(rec(NULL_KV + b"\x02\x02h\x0aabc"), 1),
            "header 0: value length 5",
        ),
        "second header missing": (
            raw_batch(rec(NULL_KV + b"\x04\x02h\x00\x00"), 1),
            "header 1: key length 0",
        ),
        "header key not utf-8": (
            raw_batch(raw_record(headers=((b"\xff\xfe", b"v"),)), 1),
            "not valid UTF-8",
        ),
        "bytes after headers": (
            raw_batch(raw_record(extra=b"\0\0"), 1),
            "2 bytes follow the headers",
        ),
        "bytes after last header": (
            raw_batch(rec(NULL_KV + b"\x02\x02h\x00\x00"), 1),
            "1 bytes follow the last header",
        ),
        "offset delta beyond last": (raw_batch(raw_record(offset_delta=5), 1), "offset delta 5"),
        "offset deltas repeat": (raw_batch(good * 2, 2), "does not follow"),
        "unknown codec": (raw_batch(good, 1, attributes=5), "unknown compression codec id 5"),
        "garbage gzip block": (raw_batch(b"\x1f\x8b" + b"garbage" * 3, 1, attributes=1), "gzip"),
        "zstd block, count cannot fit": (
            raw_batch(zstd(good), 2**31 - 1, attributes=4),
            "records count 2147483647 cannot fit in a records block of 15 bytes",
        ),
        "zstd block, length past block end": (
            raw_batch(zstd(raw_record(length=1000)), 1, attributes=4),
            "length 1000",
        ),
        "zstd bomb": (
            raw_batch(zstd(bytes(17 << 20)), 1, attributes=4),
            "inflates past the limit of 16777216 bytes (what is left of the 16777216-byte "
            "budget of this read)",
        ),
        "varint runs past buffer end": (
            raw_batch(b"\x0c\x00\x00\x00\x01\x01\x80", 1),
            "header count: varint runs past the end",
        ),
    }


@WALKS
@pytest.mark.parametrize("case", list(corrupt_cases()))
def test_corrupt_records_in_crc_valid_batch(walk_below: int, case: str) -> None:
    bad, message = corrupt_cases()[case]
    # many good batches first, so the numpy walk meets the bad one among others; the bad
    # one last, so a varint can run past the end of the buffer
    prefix = b"".join(
        kp_batch([(5, b"k", b"v", [("h", b"")] * (i % 2))] * (1 + i % 3), base_offset=10 * i)
        for i in range(61)
    )
    bad = bytearray(bad)
    struct.pack_into(">q", bad, 0, 1000)  # base offset: outside the CRC
    buf = prefix + bytes(bad)
    scan = scan_batches(buf)
    assert scan.error is None and len(scan) == 62
    with walking(walk_below), pytest.raises(CorruptRecordError) as err:
        decode_batches(buf, scan, path=PATH)
    text = str(err.value)
    assert text.startswith(f"{PATH}: position {len(prefix)}: batch with base offset 1000")
    assert message in text
    assert err.value.position == len(prefix) and err.value.path == PATH


def test_decompression_budget_spans_batches() -> None:
    """Three zstd batches of 7 MiB each, a few hundred bytes compressed: the default
    budget of a read (16 MiB here) stops the third; a larger one decodes them all."""
    value = bytes(7 << 20)
    buf = b"".join(kp_batch([(5, b"k", value, [])], codec=4, base_offset=i) for i in range(3))
    scan = scan_batches(buf)
    third = int(scan.position[2])
    left = (16 << 20) - 2 * (len(value) + 14)  # 14: the record's framing
    with pytest.raises(CorruptRecordError, match=f"{PATH}: position {third}: ") as err:
        decode_batches(buf, scan, path=PATH)
    assert f"past the limit of {left} bytes (what is left of the 16777216-byte budget" in str(
        err.value
    )
    with pytest.raises(CorruptRecordError, match="limit of 1048576 bytes \\(max_batch_bytes"):
        decode_batches(buf, scan, max_batch_bytes=1 << 20)
    table = decode_batches(buf, scan, max_decompressed_bytes=22 << 20)
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("value").to_pylist() == [value] * 3


def test_scan_from_another_buffer_is_refused() -> None:
    buf, _ = small_log()
    with pytest.raises(CorruptRecordError, match="the buffer has"):
        decode_batches(buf[:100], scan_batches(buf))


# ---------------------------------------------------------------- fast varints


@settings(deadline=None, max_examples=80)
@given(
    values=st.lists(
        st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 300), min_size=1, max_size=60
    )
)
def test_fast_varints_equal_read_varints(values: list[int]) -> None:
    v = np.array(values, dtype=np.int64)
    sizes = varint_sizes(v)
    pos = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    buf = np.zeros(int(sizes.sum()), dtype=np.uint8)
    write_varints(buf, pos, v, sizes)
    got, got_sizes = fast_varints(buf, pos, 10)
    assert got.tolist() == values and got_sizes.tolist() == sizes.tolist()
    with pytest.raises(CorruptRecordError) as slow:
        read_varints(buf[:-1], pos, 10)
    with pytest.raises(CorruptRecordError) as fast:
        fast_varints(buf[:-1], pos, 10)
    assert str(fast.value) == str(slow.value)


def test_fast_varints_too_long() -> None:
    buf = np.frombuffer(b"\x80\x80\x80\x80\x80\x01" + b"\x00" * 8, np.uint8)
    with pytest.raises(CorruptRecordError, match="varint longer than 5 bytes"):
        fast_varints(buf, np.array([0, 6]), 5)
    assert fast_varints(buf, np.array([0, 6]), 10)[1].tolist() == [6, 1]


def test_table_columns_are_arrow_types() -> None:
    buf, _ = small_log()
    table, _ = read_log(buf)
    for field, column in zip(RECORD_SCHEMA, table.columns, strict=True):
        assert column.type == field.type
        assert column.null_count == 0 or field.nullable
    assert isinstance(table.column("headers").chunk(0), pa.ListArray)
