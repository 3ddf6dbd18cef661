"""Re-encoding filtered batches as Kafka's cleaner does (``MemoryRecords.filterTo``).

A batch some of whose records the cleaner removes is written anew by
``buildRetainedRecordsInto``: the same base offset, last offset delta (the original
``lastOffset``: the producer's last sequence stays known), partition leader epoch,
producer id/epoch, base sequence, timestamp type, transactional and control flags and
codec; the retained records keep their offsets, timestamps, keys, values and headers::

    baseTimestamp   the delete horizon if one is set (attribute bit 6), else the first
                    retained record's timestamp; deltas are relative to it
    maxTimestamp    largest retained timestamp (LogAppendTime: the original maxTimestamp,
                    which every record then carries)
    crc             recomputed (CRC-32C of bytes 21..end), records block recompressed

An emptied batch that must stay (``RETAIN_EMPTY``) is Kafka's ``writeEmptyHeader``: a
61-byte header, no records, codec none, base and max timestamp the original maxTimestamp.

How, without a Python loop per record: the retained records of all batches go through
:func:`~seglake.record.encode.encode_batches` (uncompressed) with each batch's base
offset and base timestamp given (``batch_bases``); each header is then rewritten and the
records block recompressed with the batch's codec.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from seglake.format import LOG_OVERHEAD
from seglake.record.batch import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    DELETE_HORIZON_BIT,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    BatchScan,
)
from seglake.record.codecs import compress
from seglake.record.crc import crc32c
from seglake.record.encode import encode_batches
from seglake.record.schema import HEADERS_TYPE

__all__ = ["empty_batches", "rewrite_batches"]


def _headers(scan: BatchScan, sel: np.ndarray) -> np.ndarray:
    hdr = np.zeros(len(sel), dtype=HEADER_DTYPE)
    hdr["base_offset"] = scan.base_offset[sel]
    hdr["leader_epoch"] = scan.leader_epoch[sel]
    hdr["magic"] = MAGIC
    hdr["last_offset_delta"] = scan.last_offset[sel] - scan.base_offset[sel]
    hdr["producer_id"] = scan.producer_id[sel]
    hdr["producer_epoch"] = scan.producer_epoch[sel]
    hdr["base_sequence"] = scan.base_sequence[sel]
    return hdr


def _finish(
    hdr: np.ndarray, blocks: Sequence[bytes | memoryview], codecs: np.ndarray
) -> list[bytes]:
    """Each batch's bytes: its header (length, CRC filled in) and its (compressed) block."""
    out = []
    for i, block in enumerate(blocks):
        codec = int(codecs[i])
        body = compress(codec, block) if codec and len(block) else bytes(block)
        hdr["batch_length"][i] = HEADER_SIZE - LOG_OVERHEAD + len(body)
        raw = hdr[i : i + 1].view(np.uint8)
        hdr["crc"][i] = crc32c(body, crc32c(raw[ATTRIBUTES_OFFSET:].tobytes()))
        out.append(hdr[i : i + 1].tobytes() + body)
    return out


def empty_batches(scan: BatchScan, sel: np.ndarray) -> list[bytes]:
    """Kafka's ``writeEmptyHeader`` for batches ``sel`` of ``scan``."""
    sel = np.asarray(sel, dtype=np.int64)
    hdr = _headers(scan, sel)
    hdr["attributes"] = scan.attributes[sel] & ~(CODEC_MASK | DELETE_HORIZON_BIT)
    hdr["base_timestamp"] = scan.max_timestamp[sel]
    hdr["max_timestamp"] = scan.max_timestamp[sel]
    return _finish(hdr, [b""] * len(sel), np.zeros(len(sel), np.int64))


def rewrite_batches(
    scan: BatchScan,
    sel: np.ndarray,
    records: pa.Table,
    counts: np.ndarray,
    horizon: np.ndarray,
) -> list[bytes]:
    """Batches ``sel`` of ``scan`` with only ``records`` (their retained records, in
    order; ``counts[i]`` of them for batch ``sel[i]``, each >= 1; columns ``offset``,
    ``timestamp``, ``key``, ``value``, ``headers``). ``horizon[i]``: the delete horizon
    to write (-1: none)."""
    sel = np.asarray(sel, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    horizon = np.asarray(horizon, dtype=np.int64)
    nb = len(sel)
    if nb == 0:
        return []
    ts = records.column("timestamp").to_numpy().astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    log_append = (scan.attributes[sel] & TIMESTAMP_TYPE_BIT) != 0
    rec_batch = np.repeat(np.arange(nb), counts)
    ts = np.where(log_append[rec_batch], scan.max_timestamp[sel][rec_batch], ts)
    base_ts = np.where(horizon >= 0, horizon, ts[starts])
    max_ts = np.where(log_append, scan.max_timestamp[sel], np.maximum.reduceat(ts, starts))
    table = pa.table(
        {
            "offset": records.column("offset"),
            "timestamp": pa.array(ts),
            "key": _binary(records.column("key")),
            "value": _binary(records.column("value")),
            "headers": _headers_array(records.column("headers")),
        }
    )
    enc = encode_batches(
        table, batch_starts=starts, codec=0, batch_bases=(scan.base_offset[sel], base_ts)
    )
    data = memoryview(enc.data if not isinstance(enc.data, np.ndarray) else enc.data.data)
    hdr = _headers(scan, sel)
    hdr["attributes"] = (scan.attributes[sel] & ~DELETE_HORIZON_BIT) | np.where(
        horizon >= 0, DELETE_HORIZON_BIT, 0
    )
    hdr["base_timestamp"] = base_ts
    hdr["max_timestamp"] = max_ts
    hdr["records_count"] = counts
    blocks = [
        data[int(enc.position[i]) + HEADER_SIZE : int(enc.position[i] + enc.size[i])]
        for i in range(nb)
    ]
    return _finish(hdr, blocks, scan.attributes[sel] & CODEC_MASK)


def _binary(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(pa.binary())


def _headers_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr.cast(HEADERS_TYPE)
