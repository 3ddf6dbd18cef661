"""Vectorised encoding of records into RecordBatch v2 (magic 2) batches.

Bytes written, per batch (header layout in :mod:`seglake.record.batch`)::

    batch   = header(61) records            records: one compressed block when codec != 0
    record  = length:varint  attributes:int8 (0)  timestampDelta:varlong  offsetDelta:varint
              keyLength:varint (-1 = null)  key  valueLength:varint (-1 = null)  value
              headerCount:varint  [headerKeyLength:varint  headerKey (UTF-8)
                                   headerValueLength:varint (-1 = null)  headerValue]*

``length`` counts the bytes after itself. ``offsetDelta = offset - baseOffset``,
``timestampDelta = timestamp - baseTimestamp`` (first record's timestamp; may be negative).

How (no Python loop per record):

1. Input columns are checked and converted (:mod:`seglake.record.encode_input`).
2. Plan: batch boundaries follow kafka-python's producer rule, where a record's size
   depends on the batch it lands in (:mod:`seglake.record.plan`).
3. Every varint of every record is computed with numpy, as whole-column words
   (:mod:`seglake.record.varint_columns`).
4. Each record's bytes are the concatenation of a few parts, assembled row by row in C++
   by ``pyarrow.compute.binary_join_element_wise`` into one contiguous buffer::

       prefix  [61-byte batch header: first record of a batch]  (seglake.record.prefixes)
               [length][attributes=0][timestampDelta][offsetDelta][keyLength]
               (binary_view: inline for <= 12 bytes, header + prefix in a side buffer;
               if a prefix is longer, the headers get a part of their own)
       key     the input column (null: skipped; keyLength is -1)
       mid     [valueLength]
       value   the input column (null: skipped)
       count   [headerCount]
       headers [keyLength key valueLength value]*: one join over all headers of all
               records, then sliced per record without copying

   The batch headers (all but the CRC) are known before the join, so the joined buffer
   *is* the uncompressed log.
5. A loop per batch fills in the CRC-32C, or compresses the batch's records block and
   writes its new header.

Compression: a batch is always compressed when a codec is set, like Kafka's Java producer.
kafka-python's builder instead writes the batch uncompressed when compression does not
shrink it; both are valid logs.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pyarrow as pa

from seglake.config import LogConfig
from seglake.errors import ConfigError, InputSchemaError, OffsetOrderError
from seglake.format import INT32_MAX, LOG_OVERHEAD, LONG_MAX
from seglake.record import native
from seglake.record.batch import (
    CRC_OFFSET,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    batch_crcs,
)
from seglake.record.codecs import NAMES
from seglake.record.encode_input import (
    EncodedHeaders,
    binary_lengths,
    bytes_column,
    cast_binary,
    check_offsets,
    headers_column,
    int64_column,
    prepare_headers,
)
from seglake.record.encoded import EncodedBatches, compress_batches, empty_batches
from seglake.record.plan import (
    RelVarints,
    check_deltas,
    check_plan_args,
    check_starts,
    plan_batches,
    plan_exact,
    rel_varints_for,
)
from seglake.record.prefixes import join_records
from seglake.record.varint import zigzag
from seglake.record.varint_columns import vsize_z

__all__ = ["EncodedBatches", "encode_batches", "plan_batches"]

_CRC_COLUMNS = np.arange(CRC_OFFSET, CRC_OFFSET + 4)
# below this many output bytes Arrow's 32-bit offsets (binary) are enough
_BINARY_LIMIT = INT32_MAX - 1024


def encode_batches(
    records: pa.Table | pa.RecordBatch,
    *,
    batch_starts: np.ndarray | None = None,
    config: LogConfig | None = None,
    codec: int | None = None,
    level: int | None = None,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    leader_epoch: int = 0,
    log_append_time: int | None = None,
    batch_bases: tuple[np.ndarray, np.ndarray] | None = None,
) -> EncodedBatches:
    """Encode records into RecordBatch v2 batches, back to back in one buffer.

    Args:
        records: columns ``offset`` (int64, strictly increasing), ``timestamp`` (int64 epoch
            ms, or an Arrow timestamp), ``key`` and ``value`` (binary, nullable; a missing
            column is all null) and optionally ``headers``
            (``list<struct<key: string, value: binary>>``, a null list = no headers).
            Other columns are ignored.
        batch_starts: index of the first record of each batch (``[0, ...]``, increasing).
            Default: planned like kafka-python's producer fills batches (see
            :func:`plan_batches`), with each record's size measured in the batch it lands
            in, ``config.batch_size`` / ``config.batch_max_records``, and a new batch where
            an offset delta would not fit int32.
        config: batching and compression settings (default :class:`LogConfig()`).
        codec, level: override ``config``'s compression (0 none, 1 gzip, 2 snappy, 3 lz4,
            4 zstd). Every batch is compressed when a codec is set.
        timestamp_type: 0 CreateTime, 1 LogAppendTime (attribute bit 3; record deltas are
            written as given and maxTimestamp is the append time).
        producer_id, producer_epoch: written to every batch (-1: none).
        base_sequence: sequence of the first record (-1: none); batch ``i`` gets
            ``(base_sequence + record_start[i]) mod 2**31``, as an idempotent producer numbers
            records.
        transactional: set attribute bit 4 (needs ``producer_id >= 0``).
        leader_epoch: partitionLeaderEpoch of every batch.
        log_append_time: LogAppendTime only: the append time written as maxTimestamp
            (default: each batch's largest record timestamp).
        batch_bases: with ``batch_starts``: each batch's ``(baseOffset, baseTimestamp)``
            (the deltas are relative to them; a cleaner's rewritten batch keeps its base
            offset when its first records are gone, and a delete horizon is its base
            timestamp); base offsets must be <= the batch's first offset.

    Raises:
        InputSchemaError: a missing or mistyped column, a null offset/timestamp/header
            key, bad ``batch_starts``; the message names the row.
        OffsetOrderError: offsets not strictly increasing or negative, or an offset delta
            beyond int32 inside one of the given ``batch_starts``.
        ConfigError: an invalid codec, timestamp type or batch size.
    """
    config = config or LogConfig()
    codec, level = _compression(config, codec, level)
    _check_batch_fields(timestamp_type, log_append_time, transactional, producer_id)
    cols = _Input.of(records)
    if cols is None:
        return empty_batches(producer_id, producer_epoch, leader_epoch)
    lib = native.kernel()  # None: the numpy code (both give the same bytes)
    sizes = _RecordSizes.of(lib, cols)
    plan = _Plan.of(lib, cols, sizes, config, batch_starts, batch_bases)
    hdr = _batch_headers(
        cols,
        plan,
        (timestamp_type, log_append_time, codec, transactional),
        (producer_id, producer_epoch, base_sequence, leader_epoch),
    )
    data = _assemble(lib, cols, sizes, plan, hdr, codec)
    data, position, size = _close(lib, data, plan, hdr, codec, level)
    starts, ends = plan.starts, plan.ends
    min_ts = (
        hdr["max_timestamp"].astype(np.int64)
        if timestamp_type == 1
        else np.minimum.reduceat(cols.ts, starts)
    )
    return EncodedBatches(
        data=data,
        position=position,
        size=size,
        base_offset=hdr["base_offset"].astype(np.int64),
        last_offset=cols.off[ends - 1].copy(),
        records_count=ends - starts,
        first_timestamp=cols.ts[starts].copy(),
        max_timestamp=hdr["max_timestamp"].astype(np.int64),
        min_timestamp=min_ts,
        record_start=starts,
        attributes=hdr["attributes"].astype(np.int64),
        base_sequence=hdr["base_sequence"].astype(np.int64),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        leader_epoch=leader_epoch,
    )


def _close(
    lib: ctypes.CDLL | None,
    data: np.ndarray,
    plan: _Plan,
    hdr: np.ndarray,
    codec: int,
    level: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kafka's ``MemoryRecordsBuilder.close``: the assembled batches ``data`` compressed
    (``codec``) or their CRCs written (unless the kernel wrote them): ``(data, position,
    size)`` of the finished batches."""
    position = np.zeros(len(plan.starts), dtype=np.int64)
    np.cumsum(plan.size[:-1], out=position[1:])
    size = plan.size
    if codec:
        return compress_batches(data, position, size, hdr, codec, level)
    if lib is None or not native.has_crc(lib):  # (else the kernel wrote the CRCs)
        crcs = batch_crcs(data, position, size)
        data[position[:, None] + _CRC_COLUMNS] = (
            crcs.astype(">u4").view(np.uint8).reshape(len(size), 4)
        )
    return data, position, size


def _compression(config: LogConfig, codec: int | None, level: int | None) -> tuple[int, int | None]:
    """The codec and level to write: the arguments, else ``config``'s."""
    if codec is None:
        codec = config.codec
    if level is None:
        level = config.level_of(codec)
    if codec not in NAMES:
        raise ConfigError(f"codec {codec}: expected one of {sorted(NAMES)} ({NAMES})")
    return codec, level


def _check_batch_fields(
    timestamp_type: int, log_append_time: int | None, transactional: bool, producer_id: int
) -> None:
    if timestamp_type not in (0, 1):
        raise ConfigError(
            f"timestamp_type {timestamp_type}: expected 0 (CreateTime) or 1 (LogAppendTime)"
        )
    if log_append_time is not None and timestamp_type != 1:
        raise ConfigError("log_append_time is only meaningful with timestamp_type=1")
    if transactional and producer_id < 0:
        raise ConfigError(f"transactional batches need a producer id, got {producer_id}")


@dataclasses.dataclass
class _Input:
    """The input columns, checked: offsets, timestamps, keys, values and their lengths,
    headers (encoded), and the Arrow binary type the output needs."""

    n: int
    off: np.ndarray
    ts: np.ndarray
    key: pa.ChunkedArray
    value: pa.ChunkedArray
    klen: np.ndarray
    vlen: np.ndarray
    headers: EncodedHeaders | None
    btype: pa.DataType

    @classmethod
    def of(cls, records: pa.Table | pa.RecordBatch) -> _Input | None:
        """The checked columns (``None``: no rows)."""
        if not isinstance(records, (pa.Table, pa.RecordBatch)):
            raise InputSchemaError(f"expected a pyarrow Table or RecordBatch, got {type(records)}")
        n = records.num_rows
        off = int64_column(records, "offset")
        ts = int64_column(records, "timestamp")
        if n == 0:
            return None
        check_offsets(off)
        key = bytes_column(records, "key", n)
        value = bytes_column(records, "value", n)
        klen, vlen = binary_lengths(key), binary_lengths(value)
        for name, lens in (("key", klen), ("value", vlen)):
            if int(lens.max()) > INT32_MAX:
                i = int(np.argmax(lens))
                raise InputSchemaError(f"row {i}: {name} of {int(lens[i])} bytes exceeds int32")
        hcol = headers_column(records)
        # output size, over-estimated (Arrow nbytes: data + offsets of the referenced rows)
        estimate = (
            key.nbytes + value.nbytes + (hcol[0].nbytes if hcol else 0) + (HEADER_SIZE + 40) * n
        )
        btype = pa.large_binary() if estimate > _BINARY_LIMIT else pa.binary()
        headers = prepare_headers(hcol[0], hcol[1], btype) if hcol else None
        lo, hi = int(ts.min()), int(ts.max())
        if hi - lo > LONG_MAX:
            raise InputSchemaError(
                f"timestamps {lo} and {hi} are too far apart: their "
                "difference, a possible timestampDelta, overflows int64"
            )
        return cls(n, off, ts, key, value, klen, vlen, headers, btype)


@dataclasses.dataclass
class _RecordSizes:
    """Each record's size but its length and delta varints (attributes .. headers);
    the numpy path also keeps the key and value length varints: ``(zigzag, size)``."""

    fixed: np.ndarray
    key_varints: tuple[np.ndarray, np.ndarray] | None = None
    value_varints: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def of(cls, lib: ctypes.CDLL | None, cols: _Input) -> _RecordSizes:
        h = cols.headers
        hbytes = None if h is None else vsize_z(zigzag(h.count)) + h.entry_bytes
        if lib is not None:
            return cls(native.record_extra(lib, cols.klen, cols.vlen, hbytes))
        zk, zv = zigzag(cols.klen), zigzag(cols.vlen)
        vk, vv = vsize_z(zk), vsize_z(zv)
        fixed = np.maximum(cols.klen, 0) + np.maximum(cols.vlen, 0) + vk + vv + 1
        fixed += 1 if hbytes is None else hbytes  # headerCount 0, or count and headers
        return cls(fixed, (zk, vk), (zv, vv))


@dataclasses.dataclass
class _Plan:
    """Where batches start (record indexes), their bases and sizes; the numpy path's
    varints in cache-sized pieces."""

    starts: np.ndarray
    ends: np.ndarray
    size: np.ndarray
    bases: tuple[np.ndarray, np.ndarray]  # (baseOffset, baseTimestamp) of each batch
    pieces: list[RelVarints]

    @classmethod
    def of(
        cls,
        lib: ctypes.CDLL | None,
        cols: _Input,
        sizes: _RecordSizes,
        config: LogConfig,
        batch_starts: np.ndarray | None,
        batch_bases: tuple[np.ndarray, np.ndarray] | None,
    ) -> _Plan:
        off, ts, fixed = cols.off, cols.ts, sizes.fixed
        pieces: list[RelVarints] = []
        size: np.ndarray | None = None
        if batch_starts is None:
            check_plan_args(config.batch_size, config.batch_max_records)
            if lib is not None:
                starts, size = native.plan(
                    lib, fixed, off, ts, config.batch_size, config.batch_max_records
                )
            else:
                starts, pieces = plan_exact(
                    fixed,
                    off,
                    ts,
                    batch_size=config.batch_size,
                    max_records=config.batch_max_records,
                )
        else:
            starts = check_starts(batch_starts, cols.n)
            if batch_bases is not None:
                batch_bases = _checked_bases(batch_bases, off, starts)
            check_deltas(off, starts)  # (from a lower base offset: checked again below)
            if lib is not None:
                bases = (off[starts], ts[starts]) if batch_bases is None else batch_bases
                size = native.batch_sizes(lib, fixed, off, ts, starts, bases)
            else:
                pieces = rel_varints_for(fixed, off, ts, starts, batch_bases)
        ends = np.append(starts[1:], cols.n)
        if size is None:
            record_sizes = np.concatenate([p.size for p in pieces])
            size = np.add.reduceat(record_sizes, starts) + HEADER_SIZE
        if int(size.max()) - LOG_OVERHEAD > INT32_MAX:
            i = int(np.argmax(size))
            raise InputSchemaError(
                f"batch {i} (rows {int(starts[i])}..{int(ends[i]) - 1}) would be "
                f"{int(size[i])} bytes; batchLength must fit int32"
            )
        bases = (off[starts], ts[starts]) if batch_bases is None else batch_bases
        if int((off[ends - 1] - bases[0]).max()) > INT32_MAX:
            raise OffsetOrderError("batch_bases: an offset delta does not fit int32")
        return cls(starts, ends, size, bases, pieces)


def _checked_bases(
    batch_bases: tuple[np.ndarray, np.ndarray], off: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Given batch bases: one per batch, at or below its first offset, not negative."""
    b_off, b_ts = (np.asarray(b, dtype=np.int64) for b in batch_bases)
    if len(b_off) != len(starts) or len(b_ts) != len(starts):
        raise InputSchemaError(
            f"batch_bases: {len(b_off)}/{len(b_ts)} values for {len(starts)} batches"
        )
    if (b_off > off[starts]).any() or (b_off < 0).any():
        i = int(np.argmax((b_off > off[starts]) | (b_off < 0)))
        raise OffsetOrderError(
            f"batch {i}: base offset {int(b_off[i])} is negative or above its first "
            f"offset {int(off[starts[i]])}"
        )
    return b_off, b_ts


def _batch_headers(
    cols: _Input,
    plan: _Plan,
    kind: tuple[int, int | None, int, bool],
    producer: tuple[int, int, int, int],
) -> np.ndarray:
    """The 61-byte headers (:data:`HEADER_DTYPE`), CRC still 0. ``kind``: timestamp type,
    log append time, codec, transactional; ``producer``: id, epoch, base sequence and
    the partition leader epoch."""
    timestamp_type, log_append_time, codec, transactional = kind
    producer_id, producer_epoch, base_sequence, leader_epoch = producer
    starts, ends = plan.starts, plan.ends
    nb = len(starts)
    max_ts = np.maximum.reduceat(cols.ts, starts)
    if log_append_time is not None:
        max_ts = np.full(nb, log_append_time, dtype=np.int64)
    attributes = (
        codec
        | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
        | (TRANSACTIONAL_BIT if transactional else 0)
    )
    hdr = np.zeros(nb, dtype=HEADER_DTYPE)
    first_off, first_ts = plan.bases
    hdr["base_offset"] = first_off
    hdr["batch_length"] = plan.size - LOG_OVERHEAD
    hdr["leader_epoch"] = leader_epoch
    hdr["magic"] = MAGIC
    hdr["attributes"] = attributes
    hdr["last_offset_delta"] = cols.off[ends - 1] - first_off
    hdr["base_timestamp"] = first_ts
    hdr["max_timestamp"] = max_ts
    hdr["producer_id"] = producer_id
    hdr["producer_epoch"] = producer_epoch
    hdr["base_sequence"] = (base_sequence + starts) % (INT32_MAX + 1) if base_sequence >= 0 else -1
    hdr["records_count"] = ends - starts
    return hdr


def _assemble(
    lib: ctypes.CDLL | None,
    cols: _Input,
    sizes: _RecordSizes,
    plan: _Plan,
    hdr: np.ndarray,
    codec: int,
) -> np.ndarray:
    """The uncompressed log: each batch's header then its records, back to back (the
    kernel also writes the CRCs of uncompressed batches when it has CRC-32C)."""
    total = int(plan.size.sum())
    raw = hdr.view(np.uint8).reshape(len(hdr), HEADER_SIZE)
    headers = cols.headers
    if lib is not None:
        hc = None if headers is None else _column(headers.joined, headers.count)
        return native.assemble(
            lib,
            total,
            plan.starts,
            plan.bases,
            raw,
            (cols.off, cols.ts, sizes.fixed),
            _column(cast_binary(cols.key, cols.key.type), cols.klen),
            _column(cast_binary(cols.value, cols.value.type), cols.vlen),
            hc,
            codec == 0 and native.has_crc(lib),
        )
    assert sizes.key_varints is not None and sizes.value_varints is not None
    return join_records(
        plan.pieces,
        sizes.key_varints,
        sizes.value_varints,
        cols.key,
        cols.value,
        headers,
        plan.starts,
        raw,
        cols.btype,
        total,
    )


def _column(arr: pa.Array, lens: np.ndarray) -> native.Column:
    """A (large) binary array's buffers for :func:`seglake.record.native.assemble`."""
    wide = pa.types.is_large_binary(arr.type)
    offsets, data = arr.buffers()[1:3]
    at = offsets.address + arr.offset * (8 if wide else 4) if offsets is not None else 0
    return native.Column(lens, at, wide, data.address if data is not None else 0, arr)
