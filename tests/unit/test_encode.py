"""Vectorised RecordBatch v2 encoding, checked against kafka-python 3's builder and reader.

- uncompressed: byte-identical to ``DefaultRecordBatchBuilder`` (offset deltas, base offset
  patched into bytes 0..8, which the CRC does not cover);
- compressed: same header fields but batchLength/CRC, same decompressed records block, and
  each side reads the other's batches;
- batching: the default plan equals kafka-python's append-until-full rule, record sizes
  measured in the batch they land in; ``plan_batches`` equals a per-record reference.
"""

from __future__ import annotations

import itertools
import struct
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglake.config import LogConfig
from seglake.errors import ConfigError, InputSchemaError, OffsetOrderError
from seglake.record import encode as encode_mod
from seglake.record import plan, prefixes, varint_columns
from seglake.record.batch import (
    HEADER,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    scan_batches,
)
from seglake.record.codecs import decompress
from seglake.record.encode import EncodedBatches, encode_batches, plan_batches
from seglake.record.schema import HEADERS_TYPE
from seglake.record.varint import varint_sizes, write_varints

Header = tuple[str, bytes | None]
# offset, timestamp, key, value, headers (None: a null list)
Rec = tuple[int, int, bytes | None, bytes | None, list[Header] | None]
CODECS = [0, 1, 2, 3, 4]
HYPO = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- helpers


def table(recs: list[Rec], *, headers: bool = True) -> pa.Table:
    cols = {
        "offset": pa.array([r[0] for r in recs], pa.int64()),
        "timestamp": pa.array([r[1] for r in recs], pa.int64()),
        "key": pa.array([r[2] for r in recs], pa.binary()),
        "value": pa.array([r[3] for r in recs], pa.binary()),
    }
    if headers:
        cols["headers"] = pa.array(
            [None if r[4] is None else [{"key": k, "value": v} for k, v in r[4]] for r in recs],
            HEADERS_TYPE,
        )
    return pa.table(cols)


def kp_build(
    recs: list[Rec],
    codec: int = 0,
    *,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """One batch by kafka-python (offset deltas, builder base offset 0), base offset
    patched in afterwards as a broker does."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, 1 << 31)
    base = recs[0][0]
    for off, ts, key, value, headers in recs:
        if builder.append(off - base, ts, key, value, list(headers or [])) is None:
            raise AssertionError("kafka-python refused a record")
    buf = builder.build()
    buf[0:8] = struct.pack(">q", base)
    return bytes(buf)


def kp_read(buf: bytes) -> list[tuple]:
    """Every record of a log buffer as kafka-python's reader sees it."""
    out = []
    records = MemoryRecords(buf)
    while (batch := records.next_batch()) is not None:
        for r in batch:
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers))
    return out


def expected(recs: list[Rec], timestamp_type: int = 0, ts_of=None) -> list[tuple]:
    return [
        (o, ts if ts_of is None else ts_of(i), timestamp_type, k, v, list(h or []))
        for i, (o, ts, k, v, h) in enumerate(recs)
    ]


def batches_of(recs: list[Rec], eb: EncodedBatches) -> list[list[Rec]]:
    bounds = [*eb.record_start.tolist(), len(recs)]
    return [recs[a:b] for a, b in itertools.pairwise(bounds)]


def records_block(buf: bytes) -> bytes:
    """The (decompressed) records block of one batch."""
    codec = HEADER.unpack_from(buf)[5] & 7
    return decompress(codec, buf[HEADER_SIZE:])


def kp_plan(recs: list[Rec], batch_size: int) -> list[int]:
    """Batch starts as kafka-python's producer fills batches: append until it refuses."""
    starts: list[int] = []
    builder = None
    base = 0
    for i, (off, ts, key, value, headers) in enumerate(recs):
        hs = list(headers or [])
        if builder is not None and builder.append(off - base, ts, key, value, hs) is not None:
            continue
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size)
        base = off
        starts.append(i)
        builder.append(0, ts, key, value, hs)
    return starts


def plan_reference(sizes: list[int], batch_size: int, max_records: int) -> list[int]:
    """plan_batches, one record at a time."""
    starts: list[int] = []
    used = count = 0
    for i, size in enumerate(sizes):
        fits = HEADER_SIZE + used + size <= batch_size and (not max_records or count < max_records)
        if not starts or not fits:
            starts.append(i)
            used = count = 0
        used += size
        count += 1
    return starts


# ---------------------------------------------------------------- strategies

small_bytes = st.one_of(st.none(), st.binary(max_size=40), st.just(b""))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12)))


@st.composite
def record_lists(draw, max_records: int = 30, wide_timestamps: bool = False) -> list[Rec]:
    n = draw(st.integers(1, max_records))
    gaps = draw(
        st.lists(st.one_of(st.integers(1, 3), st.integers(1, 1 << 20)), min_size=n, max_size=n)
    )
    first = draw(st.integers(0, 1 << 40))
    offsets = np.cumsum([first, *gaps[1:]]).tolist()
    base_ts = draw(st.integers(0, 1 << 42))
    spread = (1 << 60) if wide_timestamps else 100_000
    timestamps = [
        base_ts + d for d in draw(st.lists(st.integers(-spread, spread), min_size=n, max_size=n))
    ]
    keys = draw(st.lists(small_bytes, min_size=n, max_size=n))
    values = draw(
        st.lists(
            st.one_of(small_bytes, st.binary(min_size=100, max_size=400)), min_size=n, max_size=n
        )
    )
    headers = draw(
        st.lists(st.one_of(st.none(), st.lists(header, max_size=3)), min_size=n, max_size=n)
    )
    return list(zip(offsets, timestamps, keys, values, headers, strict=True))


# ---------------------------------------------------------------- varints


@HYPO
@given(
    values=st.lists(
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-300, 300)), min_size=1, max_size=50
    )
)
def test_varint_columns_match_varint_module(values):
    v = np.array(values, dtype=np.int64)
    z, sizes = encode_mod.zigzag(v), varint_columns.vsize(v)
    assert sizes.tolist() == varint_sizes(v).tolist()
    expect = np.zeros(int(sizes.sum()), dtype=np.uint8)
    positions = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)[:-1])).astype(np.int64)
    write_varints(expect, positions, v)
    packed, lengths = varint_columns.pack_varints([(z, sizes)], len(v))
    assert packed.tobytes() == expect.tobytes()
    assert lengths.tolist() == sizes.tolist()
    arr = varint_columns.varint_array(z, sizes, pa.binary())
    assert b"".join(arr.to_pylist()) == expect.tobytes()


# ---------------------------------------------------------------- byte identity

FIXED: list[Rec] = [
    (10, 1_700_000_000_000, b"k", b"v" * 300, [("a", b"1")]),
    (11, 1_699_999_999_000, None, b"", None),  # negative timestamp delta, null key
    (15, 1_700_000_005_000, b"", None, []),  # offset gap, empty key, null value
    (200, 1_700_000_000_001, b"kk" * 100, b"x", [("é", None), ("", b"")]),
]


def test_uncompressed_single_batch_is_byte_identical():
    eb = encode_batches(table(FIXED))
    assert len(eb) == 1
    assert eb.tobytes() == kp_build(FIXED)
    assert kp_read(eb.tobytes()) == expected(FIXED)


@HYPO
@given(recs=record_lists(), batch_size=st.sampled_from([1, 200, 1000, 16384]))
def test_uncompressed_batches_are_byte_identical(recs, batch_size):
    eb = encode_batches(table(recs), config=LogConfig(batch_size=batch_size))
    assert eb.tobytes() == b"".join(kp_build(b) for b in batches_of(recs, eb))
    assert kp_plan(recs, batch_size) == eb.record_start.tolist()


@settings(max_examples=25, deadline=None)
@given(recs=record_lists(max_records=8, wide_timestamps=True))
def test_wide_timestamp_deltas_are_byte_identical(recs):
    # 7-10 byte timestampDelta varlongs take the general (non inline) prefix path
    eb = encode_batches(table(recs), batch_starts=np.array([0]))
    assert eb.tobytes() == kp_build(recs)


def test_general_prefix_path_matches_fast_path(monkeypatch):
    monkeypatch.setenv("SEGLAKE_NATIVE", "0")  # the numpy assembly's two prefix paths
    recs = [(i, 1_000 + i * 7919, b"k%d" % i, b"v" * (i * 37 % 300), None) for i in range(500)]
    fast = encode_batches(table(recs), config=LogConfig(batch_size=2000))
    with patch.object(prefixes, "prefix_array", _general_prefix):
        general = encode_batches(table(recs), config=LogConfig(batch_size=2000))
    assert fast.tobytes() == general.tobytes()


def _general_prefix(pieces, z_key, s_key, starts, headers, btype):
    rel = plan.RelVarints.concat(pieces)
    data, lengths = varint_columns.pack_varints(
        [
            (rel.z_len, rel.s_len),
            None,
            (rel.z_ts, rel.s_ts),
            (rel.z_off, rel.s_off),
            (z_key, s_key),
        ],
        len(z_key),
    )
    offsets = np.zeros(len(z_key) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return varint_columns.from_numpy(btype, offsets, data), False


def test_large_binary_path_is_identical(monkeypatch):
    monkeypatch.setenv("SEGLAKE_NATIVE", "0")  # the numpy assembly's Arrow join
    recs = [
        (i, 5 + i, b"key", b"value-%d" % i, [("h", b"x")] if i % 3 else None) for i in range(300)
    ]
    plain = encode_batches(table(recs), config=LogConfig(batch_size=1000))
    with patch.object(encode_mod, "_BINARY_LIMIT", 0):
        large = encode_batches(table(recs), config=LogConfig(batch_size=1000))
    assert large.tobytes() == plain.tobytes()


# ---------------------------------------------------------------- compressed


def _check_against_kp(recs: list[Rec], codec: int, eb: EncodedBatches) -> None:
    ours = eb.tobytes()
    assert kp_read(ours) == expected(recs)
    for i, part in enumerate(batches_of(recs, eb)):
        mine = bytes(eb.batch_bytes(i))
        theirs = kp_build(part, codec)
        h_mine, h_theirs = HEADER.unpack_from(mine), HEADER.unpack_from(theirs)
        # all header fields but batchLength (1) and CRC (4); attributes (5): kafka-python
        # falls back to uncompressed when compression does not shrink the records
        same = [0, 2, 3, 6, 7, 8, 9, 10, 11, 12]
        assert [h_mine[j] for j in same] == [h_theirs[j] for j in same]
        assert h_mine[5] == codec
        assert h_theirs[5] in (codec, 0)
        assert records_block(mine) == records_block(theirs)
        assert DefaultRecordBatch(mine).validate_crc()
        assert kp_read(theirs) == expected(part)


@HYPO
@given(recs=record_lists(max_records=20), codec=st.sampled_from(CODECS))
def test_compressed_round_trips_with_kafka_python(recs, codec):
    eb = encode_batches(table(recs), codec=codec, config=LogConfig(batch_size=1500))
    _check_against_kp(recs, codec, eb)


@pytest.mark.parametrize("codec", CODECS)
def test_large_values(codec):
    rng = np.random.default_rng(codec)
    big = rng.integers(0, 8, size=1 << 20, dtype=np.uint8).tobytes()  # ~1 MiB, compressible
    recs: list[Rec] = [
        (0, 1000, b"a", b"small", None),
        (1, 1001, b"b", big, [("h", big[:1000])]),
        (2, 999, None, big[::-1], None),
        (5, 1002, b"c", None, []),
    ]
    eb = encode_batches(table(recs), codec=codec)
    assert eb.record_start.tolist() == [0, 1, 2, 3]  # a big record fills a batch on its own
    assert eb.record_start.tolist() == kp_plan(recs, 16384)
    _check_against_kp(recs, codec, eb)
    if codec == 0:
        assert eb.tobytes() == b"".join(kp_build(b) for b in batches_of(recs, eb))


@pytest.mark.parametrize("codec", CODECS)
def test_seglake_decoder_reads_kafka_python_and_seglake(codec):
    decode = pytest.importorskip("seglake.record.reader")
    recs = [
        (
            100 + 2 * i,
            50 + (i * 37) % 11,
            b"k%d" % (i % 3) if i % 4 else None,
            b"value-%d" % i * (i % 5),
            [("x", b"1"), ("y", None)] if i % 2 else [],
        )
        for i in range(200)
    ]
    eb = encode_batches(table(recs), codec=codec, config=LogConfig(batch_size=800))
    kp = b"".join(kp_build(b, codec) for b in batches_of(recs, eb))
    for buf in (eb.tobytes(), kp):
        out = decode.decode_batches(buf, scan_batches(buf))
        assert out.column("offset").to_pylist() == [r[0] for r in recs]
        assert out.column("timestamp").to_pylist() == [r[1] for r in recs]
        assert out.column("key").to_pylist() == [r[2] for r in recs]
        assert out.column("value").to_pylist() == [r[3] for r in recs]
        assert [
            [(h["key"], h["value"]) for h in hs] for hs in out.column("headers").to_pylist()
        ] == [r[4] for r in recs]
    # and the decoder's table encodes back to the same bytes
    again = decode.decode_batches(eb.tobytes(), scan_batches(eb.tobytes()))
    assert encode_batches(again, codec=codec, batch_starts=eb.record_start).tobytes() == (
        eb.tobytes()
    )


# ---------------------------------------------------------------- batch headers


def test_header_fields_and_batch_columns():
    recs = [(1000 + i, 500 - i * 3 if i % 2 else 500 + i, b"k", b"v" * 50, None) for i in range(40)]
    eb = encode_batches(
        table(recs),
        config=LogConfig(batch_size=500),
        leader_epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=2**31 - 5,
        transactional=True,
    )
    scan = scan_batches(eb.tobytes())
    assert scan.error is None and scan.crc_valid.all()
    mine = eb.to_scan()
    for name in (
        "position",
        "size",
        "base_offset",
        "last_offset",
        "records_count",
        "base_timestamp",
        "max_timestamp",
        "attributes",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "leader_epoch",
    ):
        assert getattr(mine, name).tolist() == getattr(scan, name).tolist(), name
    assert len(eb) > 3
    ts = np.array([r[1] for r in recs])
    bounds = [*eb.record_start.tolist(), len(recs)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        assert eb.first_timestamp[i] == ts[a]
        assert eb.max_timestamp[i] == ts[a:b].max()
        assert eb.min_timestamp[i] == ts[a:b].min()
        assert eb.base_sequence[i] == (2**31 - 5 + a) % 2**31  # wraps like Kafka's sequences
        assert (
            bytes(eb.batch_bytes(i)) == eb.tobytes()[eb.position[i] : eb.position[i] + eb.size[i]]
        )
    assert (eb.attributes == TRANSACTIONAL_BIT).all()
    assert eb.codec == 0 and eb.nbytes == len(eb.tobytes())
    # kafka-python writes the same transactional batch
    part = recs[: bounds[1]]
    assert bytes(eb.batch_bytes(0))[12:16] == struct.pack(">i", 7)
    theirs = bytearray(kp_build(part, producer=(42, 3, 2**31 - 5), transactional=True))
    theirs[12:16] = struct.pack(">i", 7)  # leader epoch is outside the CRC
    assert bytes(eb.batch_bytes(0)) == bytes(theirs)


@pytest.mark.parametrize("append_time", [None, 1_800_000_000_000])
def test_log_append_time(append_time):
    recs = [(i, 1000 + (i * 7) % 5, b"k", b"v", None) for i in range(10)]
    eb = encode_batches(table(recs), timestamp_type=1, log_append_time=append_time)
    max_ts = append_time if append_time is not None else 1004
    assert eb.attributes.tolist() == [TIMESTAMP_TYPE_BIT]
    assert eb.max_timestamp.tolist() == eb.min_timestamp.tolist() == [max_ts]
    assert eb.first_timestamp.tolist() == [1000]
    assert kp_read(eb.tobytes()) == expected(recs, 1, ts_of=lambda i: max_ts)
    # the records block is what CreateTime would write: deltas as given
    assert records_block(eb.tobytes()) == records_block(kp_build(recs))


# ---------------------------------------------------------------- batching


@HYPO
@given(
    sizes=st.lists(st.one_of(st.integers(1, 200), st.integers(1, 20000)), max_size=300),
    batch_size=st.integers(1, 5000),
    max_records=st.sampled_from([0, 0, 1, 3, 17]),
)
def test_plan_batches_matches_reference(sizes, batch_size, max_records):
    got = plan_batches(
        np.array(sizes, dtype=np.int64), batch_size=batch_size, max_records=max_records
    )
    assert got.dtype == np.int64
    assert got.tolist() == plan_reference(sizes, batch_size, max_records)


def test_plan_batches_exact_fit():
    # 61 + 3 * 100 == 361: the third record just fits, the fourth does not
    assert plan_batches(np.full(7, 100), batch_size=361).tolist() == [0, 3, 6]
    assert plan_batches(np.full(7, 100), batch_size=360).tolist() == [0, 2, 4, 6]
    assert plan_batches(np.array([], dtype=np.int64), batch_size=10).tolist() == []


@settings(max_examples=20, deadline=None)
@given(
    recs=record_lists(max_records=120),
    batch_size=st.integers(100, 3000),
    max_records=st.sampled_from([0, 5]),
)
def test_default_plan_is_kafka_pythons(recs, batch_size, max_records):
    config = LogConfig(batch_size=batch_size, batch_max_records=max_records)
    eb = encode_batches(table(recs), config=config)
    if not max_records:
        assert eb.record_start.tolist() == kp_plan(recs, batch_size)
    else:  # kafka-python has no record limit: check each batch is a maximal prefix
        bounds = [*eb.record_start.tolist(), len(recs)]
        for a, b in itertools.pairwise(bounds):
            assert b - a <= max_records
            assert (
                b - a == max_records
                or b == len(recs)
                or kp_plan(recs[a : b + 1], batch_size) == [0, b - a]
            )
    for i, size in enumerate(eb.size.tolist()):
        assert size <= batch_size or eb.records_count[i] == 1


def test_default_plan_large_input_matches_kafka_python():
    rng = np.random.default_rng(5)
    n = 20_000
    value_sizes = rng.integers(0, 300, n)
    recs = [
        (int(o), int(t), b"key-%d" % i, bytes(int(v)), None)
        for i, (o, t, v) in enumerate(
            zip(
                np.cumsum(rng.integers(1, 3, n)),
                10**12 + np.arange(n) * 3 + rng.integers(-5000, 5000, n),
                value_sizes,
                strict=True,
            )
        )
    ]
    eb = encode_batches(table(recs, headers=False))
    assert eb.record_start.tolist() == kp_plan(recs, 16384)
    assert eb.tobytes() == b"".join(kp_build(b) for b in batches_of(recs, eb))


def test_batches_split_where_offset_delta_overflows_int32():
    recs = [
        (0, 1, b"a", b"x", None),
        (1, 1, b"b", b"x", None),
        (2**31 + 5, 1, b"c", b"x", None),
        (2**31 + 6, 1, b"d", b"x", None),
    ]
    eb = encode_batches(table(recs))
    assert eb.record_start.tolist() == [0, 2]
    assert kp_read(eb.tobytes()) == expected(recs)
    with pytest.raises(OffsetOrderError, match=r"row 2: offset 2147483653 .* base offset 0"):
        encode_batches(table(recs), batch_starts=np.array([0]))


# ---------------------------------------------------------------- inputs


def test_input_variants_encode_the_same():
    recs = [(i, 100 + i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(50)]
    t = table(recs)
    want = encode_batches(t, batch_starts=np.array([0, 20])).tobytes()
    chunked = pa.concat_tables([t.slice(0, 13), t.slice(13, 30), t.slice(43)])
    assert chunked.column("key").num_chunks == 3
    strings = t.set_column(2, "key", t.column("key").cast(pa.string())).set_column(
        3, "value", t.column("value").cast(pa.large_string())
    )
    as_map = t.set_column(
        4,
        "headers",
        pa.array([[(k, v) for k, v in r[4]] for r in recs], pa.map_(pa.string(), pa.binary())),
    )
    binary_keys = t.set_column(
        4,
        "headers",
        t.column("headers").cast(
            pa.list_(pa.struct([("key", pa.binary()), ("value", pa.large_binary())]))
        ),
    )
    for variant in (
        t.to_batches()[0],
        chunked,
        strings,
        as_map,
        binary_keys,
        t.select(["value", "headers", "key", "timestamp", "offset"]),
        t.append_column("extra", pa.array(range(50))),
    ):
        assert encode_batches(variant, batch_starts=np.array([0, 20])).tobytes() == want
    # a sliced table (Arrow arrays with a non-zero offset)
    sliced = encode_batches(table(recs[7:]), batch_starts=np.array([0, 13])).tobytes()
    assert encode_batches(t.slice(7), batch_starts=np.array([0, 13])).tobytes() == sliced


def test_missing_optional_columns():
    t = pa.table({"offset": [5, 6], "timestamp": [1, 2]})
    assert kp_read(encode_batches(t).tobytes()) == [
        (5, 1, 0, None, None, []),
        (6, 2, 0, None, None, []),
    ]
    ts = pa.array([1_000, 2_000], pa.timestamp("ms", tz="UTC"))
    t2 = pa.table({"offset": pa.array([5, 6], pa.int32()), "timestamp": ts})
    assert (
        encode_batches(t2).tobytes()
        == encode_batches(pa.table({"offset": [5, 6], "timestamp": [1_000, 2_000]})).tobytes()
    )


def test_empty_input():
    empty = pa.table({"offset": pa.array([], pa.int64()), "timestamp": pa.array([], pa.int64())})
    eb = encode_batches(empty)
    assert len(eb) == 0 and eb.nbytes == 0 and eb.codec == 0
    assert eb.to_scan().valid_bytes == 0


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("columns", "error", "message"),
    [
        ({"offset": [3, 5, 5]}, OffsetOrderError, r"row 2: offset 5 is not greater than offset 5"),
        ({"offset": [3, 9, 4]}, OffsetOrderError, r"row 2: offset 4 .* offset 9 of row 1"),
        ({"offset": [-1, 0, 1]}, OffsetOrderError, r"row 0: offset -1 is negative"),
        ({"offset": [0, None, 2]}, InputSchemaError, r"row 1: offset is null"),
        ({"timestamp": [0, 1, None]}, InputSchemaError, r"row 2: timestamp is null"),
        ({"offset": ["a", "b", "c"]}, InputSchemaError, r"'offset' has type string"),
        ({"value": [1, 2, 3]}, InputSchemaError, r"'value' has type int64"),
        ({"timestamp": [-(2**62), 0, 2**62]}, InputSchemaError, r"too far apart"),
        (
            {
                "headers": pa.array(
                    [[], [{"key": None, "value": b"v"}], []],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                )
            },
            InputSchemaError,
            r"row 1, header 0: header key is null",
        ),
        (
            {
                "headers": pa.array(
                    [[], [], [{"key": b"ok", "value": None}, {"key": b"\xff", "value": None}]],
                    pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())])),
                )
            },
            InputSchemaError,
            r"row 2, header 1: header key is not valid UTF-8",
        ),
        ({"headers": pa.array([[1], [], []])}, InputSchemaError, r"'headers' has type"),
        (
            {
                "headers": pa.array(
                    [[], [], [{"key": "a", "value": b""}, None]],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                )
            },
            InputSchemaError,
            r"row 2, header 1: header is null",
        ),
    ],
)
def test_invalid_input_names_the_row(columns, error, message):
    data = {"offset": [0, 1, 2], "timestamp": [10, 11, 12], "value": [b"a", b"b", b"c"]}
    data.update(columns)
    with pytest.raises(error, match=message):
        encode_batches(pa.table(data))


def test_missing_offset_column():
    with pytest.raises(InputSchemaError, match="no 'offset' column"):
        encode_batches(pa.table({"timestamp": [1]}))


@pytest.mark.parametrize(
    ("starts", "message"),
    [
        ([1], "must begin with 0"),
        ([0, 2, 2], r"batch_starts\[2\] = 2 is not greater"),
        ([0, 3], "past the last row"),
        ([], "must begin with 0"),
        ([0.0], "integer"),
    ],
)
def test_invalid_batch_starts(starts, message):
    t = pa.table({"offset": [0, 1, 2], "timestamp": [1, 2, 3]})
    with pytest.raises(InputSchemaError, match=message):
        encode_batches(t, batch_starts=np.array(starts))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"codec": 9},
        {"timestamp_type": 2},
        {"transactional": True},
        {"log_append_time": 5},
        {"config": LogConfig(batch_size=1), "batch_starts": None},
    ],
)
def test_invalid_options(kwargs):
    t = pa.table({"offset": [0, 1], "timestamp": [1, 2]})
    if "config" in kwargs:  # batch.size=1 is legal: every record gets its own batch
        assert len(encode_batches(t, **kwargs)) == 2
        return
    with pytest.raises(ConfigError):
        encode_batches(t, **kwargs)


def test_plan_batches_rejects_bad_sizes():
    with pytest.raises(InputSchemaError, match="record 1: size 0"):
        plan_batches(np.array([5, 0]), batch_size=100)
    with pytest.raises(ConfigError):
        plan_batches(np.array([5]), batch_size=0)


@HYPO
@given(recs=record_lists(max_records=10))
def test_never_asserts_on_shuffled_offsets(recs):
    assume(len(recs) > 1)
    shuffled = [recs[-1], *recs[:-1]]
    with pytest.raises(OffsetOrderError, match="row 1"):
        encode_batches(table(shuffled))
