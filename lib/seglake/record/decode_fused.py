"""Records of many batches decoded by the compiled kernel in one pass a batch
(``sl_decode``): each records block decompressed into a small scratch buffer, walked and
checked, and its records appended to the Arrow buffers of a chunk while its bytes are
still in the CPU's cache. The three-pass path (:mod:`seglake.record.decode_native`:
every block inflated into one buffer, then walked, then gathered) reads all the bytes
three times from memory; this reads them once. The result is a list of record tables
(chunks of at most :data:`CHUNK_ROWS` rows), each in :data:`RECORD_SCHEMA`::

    batch b   addr[b], len[b] (its records block), codec, count, bases, producer ...
       |  lz4 frame -> scratch (at most min(max block, budget left))
       v  walk + check every record (as sl_walk), then append to the chunk:
    chunk     offset, timestamp, timestamp_type, key/value (offsets, bits, data),
              headers (list offsets; key offsets, data; value offsets, bits, data),
              producer_id, transactional

``None`` where the kernel does not take a batch (another codec, bytes it refuses, a
header key that is not UTF-8): the caller (:func:`seglake.record.reader.decode_parts`)
decodes the usual way, which names the problem.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from seglake.format import INT32_MAX
from seglake.record import native
from seglake.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, BatchScan
from seglake.record.decode_native import binary_column, headers_column
from seglake.record.schema import RECORD_SCHEMA, without_headers

__all__ = ["CHUNK_ROWS", "Batches", "batches_of", "decode_fused"]

Bytes = bytes | bytearray | memoryview

CHUNK_ROWS = 1 << 16  # rows of one chunk (a batch with more gets a chunk of its own)
_FIRST_BYTES = (2 << 20, 16 << 20, 1 << 20, 1 << 20)  # key, value, header key, value bytes
_SCRATCH = 256 << 10  # first scratch buffer (grown when a frame may need more)
_SLACK = 64 << 10  # bytes a chunk's buffers get beyond the bytes a row took so far
_MAX_BYTES = 64 << 20  # bytes of each kind a chunk is sized for (more: a batch's own)
MAX_RECORDS = 1 << 18  # records of one batch this path takes (Kafka's 1 MiB batches: < 150k)
_RECORD_INTS = 12  # int64 fields of the kernel's record_t


class Batches(NamedTuple):
    """The batches to decode, from one or many buffers: where each records block is
    (``addr``, ``length``), and the kernel's per-batch inputs; ``keep`` owns the bytes."""

    addr: np.ndarray
    length: np.ndarray
    inputs: list[np.ndarray]  # codec, count, 3 bases, log append, last delta, pid, tx
    keep: list[Any]


def batches_of(parts: Sequence[tuple[Bytes, BatchScan]]) -> Batches | None:
    """:class:`Batches` of ``(buffer, scan)`` parts (each scan's batches inside its
    buffer), in order; None if a scan places a batch outside its buffer."""
    addr, length, scans, keep = [], [], [], []
    for buf, scan in parts:
        view = memoryview(buf).cast("B")
        n = len(view)
        if len(scan) and (
            int(scan.position.min()) < 0 or int((scan.position + scan.size).max()) > n
        ):
            return None
        base = pa.py_buffer(view).address if n else 0
        addr.append(base + scan.position + HEADER_SIZE)
        length.append(scan.size - HEADER_SIZE)
        scans.append(scan)
        keep.append(view)

    def col(f: Callable[[BatchScan], np.ndarray]) -> np.ndarray:
        return np.concatenate([f(s) for s in scans]) if scans else np.zeros(0, np.int64)

    inputs = [
        native.int64s(np.where(col(lambda s: s.size) > HEADER_SIZE, col(lambda s: s.codec), 0)),
        native.int64s(col(lambda s: s.records_count)),
        native.int64s(col(lambda s: s.base_offset)),
        native.int64s(col(lambda s: s.base_timestamp)),
        native.int64s(col(lambda s: s.max_timestamp)),
        np.ascontiguousarray((col(lambda s: s.attributes) & TIMESTAMP_TYPE_BIT) != 0, np.uint8),
        native.int64s(col(lambda s: s.last_offset - s.base_offset)),
        native.int64s(col(lambda s: s.producer_id)),
        np.ascontiguousarray(col(lambda s: s.is_transactional), np.uint8),
    ]
    return Batches(
        native.int64s(np.concatenate(addr) if addr else np.zeros(0)),
        native.int64s(np.concatenate(length) if length else np.zeros(0)),
        inputs,
        keep,
    )


class _Chunk(NamedTuple):
    """The Arrow buffers of one chunk (``sl_decode``'s out, in its order) and their sizes."""

    buffers: list[np.ndarray]
    cap: np.ndarray  # rows, key bytes, value bytes, headers, header key bytes, value bytes

    @classmethod
    def new(cls, cap: np.ndarray) -> _Chunk:
        rows, kb, vb, nh, hkb, hvb = (int(c) for c in cap)
        e = native.pool_array

        def bits(k: int) -> np.ndarray:
            return np.zeros((k + 7) // 8, np.uint8)

        buffers = [
            e(rows, np.int64),  # offset
            e(rows, np.int64),  # timestamp
            e(rows, np.int32),  # timestamp type
            e(rows + 1, np.int32),  # key offsets
            bits(rows),
            e(kb),
            e(rows + 1, np.int32),  # value offsets
            bits(rows),
            e(vb),
            e(rows + 1, np.int32),  # header list offsets
            e(nh + 1, np.int32),  # header key offsets
            e(hkb),
            e(nh + 1, np.int32),  # header value offsets
            bits(nh),
            e(hvb),
            e(rows, np.int64),  # producer id
            e(rows, np.uint8),  # transactional
        ]
        return cls(buffers, cap)

    def table(self, state: np.ndarray, headers: bool) -> pa.Table | None:
        """The chunk's records (``state``: what the kernel filled); None if a header key
        is not UTF-8."""
        n, kb, vb, nh, hkb, hvb, kn, vn, hvn = (int(x) for x in state[:9])
        b = self.buffers
        columns = [
            pa.array(b[0][:n]),
            pa.array(b[1][:n]),
            pa.array(b[2][:n]),
            binary_column(n, b[3], b[4], kn, b[5][:kb]),
            binary_column(n, b[6], b[7], vn, b[8][:vb]),
        ]
        if headers:
            keys, values = (b[10], b[11][:hkb]), (b[12], b[13], hvn, b[14][:hvb])
            column = headers_column(b[9][: n + 1], keys, values, nh)
            if column is None:
                return None
            columns.append(column)
        columns += [pa.array(b[15][:n]), pa.array(b[16][:n].view(np.bool_))]
        schema = RECORD_SCHEMA if headers else without_headers(RECORD_SCHEMA)
        return pa.Table.from_arrays(columns, schema=schema)


def decode_fused(
    lib: ctypes.CDLL,
    batches: Batches,
    limits: tuple[int, int],
    *,
    headers: bool = True,
) -> list[pa.Table] | None:
    """The records of ``batches`` (control batches are the caller's to leave out) as
    record tables of at most :data:`CHUNK_ROWS` rows each (more for a batch that has
    more), in order; ``limits``: bytes one block, and all of them together, may
    decompress to. None where the kernel does not take a batch (module docstring)."""
    nb = len(batches.addr)
    max_block, budget = limits
    counts = batches.inputs[1]
    if not nb:
        return []
    if int(counts.min()) < 0:
        return None
    rec_cap = int(min(counts.max(), MAX_RECORDS))  # a batch with more: the usual way
    recs = np.empty(rec_cap * _RECORD_INTS, np.int64)
    # a frame's scratch (none needed by raw batches; grown when a frame may need more)
    scratch = native.pool_array(_SCRATCH if (batches.inputs[0] != 0).any() else 64)
    ins = [batches.addr, batches.length, *batches.inputs]
    in_addr = np.array([native.address(a) for a in ins], np.int64)
    state = np.zeros(18, np.int64)
    state[9] = budget
    cap = _first_cap(batches)
    if not headers:
        cap[3:] = 0
    chunk, tables, b, rows_done, bytes_done = None, [], 0, 0, np.zeros(6, np.int64)
    while b < nb:
        if chunk is None:
            chunk = _Chunk.new(cap)
            out_addr = np.array([native.address(a) for a in chunk.buffers], np.int64)
        b = lib.sl_decode(
            nb, native.address(in_addr), b, native.address(out_addr), native.address(chunk.cap),
            native.address(state), native.address(scratch), len(scratch),
            native.address(recs), rec_cap, max_block, int(headers),
        )  # fmt: skip
        why = int(state[10])
        if why == 2:  # a frame may need more scratch: the same chunk goes on
            scratch = native.pool_array(int(state[17]))
            continue
        if why == 3:
            return None
        if state[0]:
            table = chunk.table(state, headers)
            if table is None:
                return None
            tables.append(table)
            rows_done += int(state[0])
            bytes_done += state[:6]
        if why == 1:
            rows = min(CHUNK_ROWS, int(counts[b:].sum()))
            cap = _next_cap(state[11:17].copy(), rows, rows_done, bytes_done, headers)
            if int(cap[1:].max()) > INT32_MAX:
                return None
        state[:9] = 0
        chunk = None
    return tables


def _first_cap(batches: Batches) -> np.ndarray:
    """The first chunk's capacity: :data:`CHUNK_ROWS` rows and :data:`_FIRST_BYTES`, or
    less for fewer batches (a point read's few: no 20 MiB of buffers for 10 records):
    their records, and the bytes of their blocks (raw) or 4x them (compressed; a chunk
    that fills is followed by a larger one)."""
    codec, counts = batches.inputs[0], batches.inputs[1]
    raw = int(batches.length[codec == 0].sum())
    bound = max(raw + 4 * int(batches.length[codec != 0].sum()), 1)
    rows = min(CHUNK_ROWS, max(int(counts.sum()), 1))
    return np.array([rows, *(min(b, bound) for b in _FIRST_BYTES[:2]), rows,
                     *(min(b, bound) for b in _FIRST_BYTES[2:])], np.int64)  # fmt: skip


def _next_cap(
    need: np.ndarray, rows: int, rows_done: int, bytes_done: np.ndarray, headers: bool
) -> np.ndarray:
    """The next chunk's capacity: the bytes a row took so far for the ``rows`` left, at
    most ``_MAX_BYTES`` of each kind, at least what the kernel says it ``need``s."""
    guess = bytes_done / max(rows_done, 1) * rows * 1.25 + _SLACK
    cap: np.ndarray = np.maximum(need, np.minimum(guess, _MAX_BYTES).astype(np.int64))
    cap[0] = max(need[0], CHUNK_ROWS)
    if not headers:
        cap[3:] = 0
    return cap
