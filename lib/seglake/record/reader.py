"""The one record reader: every read of records goes through here, and here alone the
path is chosen (the compiled kernel where there is one and it takes the bytes, else
numpy, which also names what is wrong)::

    read_log, decode_batch     a whole .log buffer; one batch at a position
    decode_batches             the record table of a scan's batches in one buffer
    record_times               their offsets and timestamps only (every record checked)
    decode_parts               the record table of batches of many buffers (Part):
                               fused (sl_decode, raw and lz4) -> kernel -> numpy
    walk_parts                 where each record of many buffers' batches is, its
                               offset and timestamp (RecordWalk): kernel -> numpy
    pick_records               the records queries pick in them: kernel (sl_pick, just
                               the picks) -> numpy (walk_parts, picks over the walk)

The paths: :mod:`~seglake.record.decode_fused` (one pass a batch),
:mod:`~seglake.record.decode_native` (kernel walk and copy),
:mod:`~seglake.record.batch_walk` + :mod:`~seglake.record.decode` (numpy walk and
columns), :mod:`~seglake.record.pick_native`. They give the same rows and errors.

Bytes that do not decode raise :class:`CorruptRecordError` naming the file, the batch
position, the record and the numbers; nothing is allocated from an unchecked length.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError, TruncatedBatchError
from seglake.format import LOG_OVERHEAD
from seglake.record import native
from seglake.record.batch import (
    CODEC_MASK,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    SCAN_COLUMNS,
    BatchScan,
    scan_batches,
)
from seglake.record.batch_walk import walk_batches
from seglake.record.codecs import MAX_BLOCK_OUTPUT, inflate_budget, inflate_groups
from seglake.record.decode import numpy_table, numpy_times
from seglake.record.decode_fused import batches_of, decode_fused
from seglake.record.decode_native import NativeWalk, decode_native, times_native, walk_native
from seglake.record.pick_native import pick_native
from seglake.record.schema import empty_records

__all__ = [
    "MAX_BATCH_OUTPUT",
    "Part",
    "RecordWalk",
    "decode_batch",
    "decode_batches",
    "decode_parts",
    "gathered",
    "pick_records",
    "read_log",
    "record_times",
    "walk_parts",
]

Bytes = bytes | bytearray | memoryview
MAX_BATCH_OUTPUT = MAX_BLOCK_OUTPUT  # refuse a records block that inflates beyond this


class Part(NamedTuple):
    """Batches ``sel`` of ``scan``, whose positions are in ``buf``; errors name ``path``."""

    buf: Bytes
    scan: BatchScan
    sel: np.ndarray
    path: str | None = None


def read_log(
    buf: Bytes,
    *,
    path: str | None = None,
    skip_control: bool = True,
    verify_crc: bool = True,
) -> tuple[pa.Table, BatchScan]:
    """Scan and decode a whole ``.log`` buffer: ``(records, scan)``.

    A truncated or corrupt tail is not an error: the scan stops there (``scan.valid_bytes``,
    ``scan.error``) and only the batches before it are decoded.
    """
    scan = scan_batches(buf, verify_crc=verify_crc)
    return decode_batches(buf, scan, skip_control=skip_control, path=path), scan


def decode_batch(
    buf: Bytes,
    position: int = 0,
    *,
    path: str | None = None,
    skip_control: bool = False,
    verify_crc: bool = True,
) -> pa.Table:
    """Records of the single batch at byte ``position`` of ``buf``.

    Raises :class:`CorruptRecordError` if no whole, valid batch starts there
    (:class:`TruncatedBatchError` if it runs past the end of ``buf``).
    """
    scan = scan_batches(buf, start=position, max_batches=1, verify_crc=verify_crc)
    if not len(scan):
        error = TruncatedBatchError if scan.truncated else CorruptRecordError
        raise error(f"no valid batch: {scan.why}", path=path, position=position)
    return decode_batches(buf, scan, skip_control=skip_control, path=path)


def decode_batches(
    buf: Bytes,
    scan: BatchScan,
    *,
    skip_control: bool = True,
    path: str | None = None,
    max_batch_bytes: int = MAX_BATCH_OUTPUT,
    max_decompressed_bytes: int | None = None,
    headers: bool = True,
) -> pa.Table:
    """One row per record of the batches of ``scan`` (found in ``buf``), in file order.

    Columns are exactly :data:`~seglake.record.schema.RECORD_SCHEMA`; with
    ``headers=False``, without the ``headers`` column: the headers are walked and
    checked, but their bytes are not copied, nor their keys checked to be UTF-8. Control
    batches (transaction markers) are left out when ``skip_control``. Batches are decoded
    whether or not ``scan.crc_valid`` says their CRC matched.

    Decompression is bounded: one records block inflates to at most ``max_batch_bytes``,
    all of them together to at most ``max_decompressed_bytes`` (the caller's limit).
    Without it the batches are decoded in groups (:func:`_groups`), each inflated to at
    most :func:`~seglake.record.codecs.inflate_budget` of its compressed size (256x, at
    least 16 MiB) and :data:`~seglake.record.codecs.READ_INFLATE_BUDGET` (bar a batch
    alone), decoded before the next is inflated: the memory is what the read returns
    plus that budget. A batch past a limit raises :class:`CorruptRecordError`.
    """
    limits = (max_batch_bytes, max_decompressed_bytes)
    sel = _selected(scan, skip_control)
    if not len(sel):
        return empty_records(headers=headers)
    groups = _groups(scan, sel) if max_decompressed_bytes is None else None
    if groups is not None:
        return pa.concat_tables([_decode(buf, scan, sel[g], path, limits, headers) for g in groups])
    return _decode(buf, scan, sel, path, limits, headers)


def _groups(scan: BatchScan, sel: np.ndarray) -> list[slice] | None:
    """Groups of ``sel`` inflated one at a time (``None``: one group), by their
    compressed records blocks (:func:`~seglake.record.codecs.inflate_groups`)."""
    size = scan.size[sel] - HEADER_SIZE
    packed = (scan.codec[sel] != 0) & (size > 0)
    return inflate_groups(np.where(packed, size, 0))


def _decode(
    buf: Bytes,
    scan: BatchScan,
    sel: np.ndarray,
    path: str | None,
    limits: tuple[int, int | None],
    headers: bool,
) -> pa.Table:
    """:func:`decode_batches` of the batches ``sel`` at once: kernel, else numpy."""
    walked = _kernel_walk(buf, scan, sel, path, limits)
    table = decode_native(walked, scan, sel, headers=headers) if walked is not None else None
    if table is not None:
        return table
    r = walk_batches(buf, scan, sel, path, limits)  # numpy: also names what is wrong
    return numpy_table(r, scan, headers=headers)


def record_times(
    buf: Bytes,
    scan: BatchScan,
    *,
    skip_control: bool = True,
    path: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(offset, timestamp)`` of the records :func:`decode_batches` returns (same order).

    Every record is walked and checked as :func:`decode_batches` checks it (lengths,
    deltas, headers, header keys' UTF-8), so bytes it refuses raise the same
    :class:`CorruptRecordError` here; but no key, value or header column is built. (The
    one check left out: a key or value of over 1 GiB in a buffer of over 2 GiB, which
    :func:`decode_batches` cannot put in a column.) Decompression is bounded as there,
    by the default limits.
    """
    sel = _selected(scan, skip_control)
    if not len(sel):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    groups = _groups(scan, sel)
    if groups is not None:  # inflated a group at a time, as decode_batches does
        both = [_times(buf, scan, sel[g], path) for g in groups]
        return np.concatenate([o for o, _ in both]), np.concatenate([t for _, t in both])
    return _times(buf, scan, sel, path)


def _times(
    buf: Bytes, scan: BatchScan, sel: np.ndarray, path: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`record_times` of the batches ``sel`` at once: kernel, else numpy."""
    limits = (MAX_BATCH_OUTPUT, None)
    walked = _kernel_walk(buf, scan, sel, path, limits)
    times = times_native(walked) if walked is not None else None
    if times is not None:
        return times
    return numpy_times(walk_batches(buf, scan, sel, path, limits))  # names what is wrong


def _kernel_walk(
    buf: Bytes, scan: BatchScan, sel: np.ndarray, path: str | None, limits: tuple[int, int | None]
) -> NativeWalk | None:
    """The kernel's walk of the batches ``sel``; None without a kernel or where it refuses."""
    lib = native.kernel()
    return walk_native(lib, buf, scan, sel, path, limits) if lib is not None else None


def _selected(scan: BatchScan, skip_control: bool) -> np.ndarray:
    """The batches of ``scan`` to decode."""
    return np.flatnonzero(~scan.is_control) if skip_control else np.arange(len(scan))


def decode_parts(parts: list[Part], *, headers: bool = True) -> tuple[pa.Table, np.ndarray]:
    """The batches ``sel`` of each part, decoded together (control batches left out;
    without the headers column unless ``headers``, as :func:`decode_batches`): the
    records, part after part, and each part's number of rows.

    With the kernel: raw and lz4 batches in one pass a batch (:func:`decode_fused`, each
    part's own bytes, within the sum of the budgets :func:`decode_batches` gives each
    part), else part by part. Without it the numpy walk, one numpy step per record index,
    so one call over many parts costs far less than one call per part: their batches are
    copied into one buffer for it. Bytes that do not decode raise the error of their own
    part (naming its ``path``).
    """
    rows = np.array(
        [int(p.scan.records_count[p.sel][~p.scan.is_control[p.sel]].sum()) for p in parts],
        dtype=np.int64,
    )
    lib = native.kernel()
    if lib is not None:
        fused = _fused(lib, parts, headers)
        if fused is None:
            fused = [
                decode_batches(p.buf, p.scan.take(p.sel), path=p.path, headers=headers)
                for p in parts
                if len(p.sel)
            ]
        return (pa.concat_tables(fused) if fused else empty_records(headers=headers)), rows
    scan, views, _ = gathered(parts)
    if not len(scan) or not int(scan.size.sum()):
        return empty_records(headers=headers), rows
    scan.position = np.cumsum(scan.size) - scan.size
    scan.valid_bytes = int(scan.size.sum())
    try:
        return decode_batches(b"".join(views), scan, headers=headers), rows
    except CorruptRecordError:
        for p in parts:  # the part's own error, naming its file
            decode_batches(p.buf, p.scan.take(p.sel), path=p.path, headers=headers)
        raise


def _fused(lib: ctypes.CDLL, parts: list[Part], headers: bool) -> list[pa.Table] | None:
    """The records of ``parts`` by the kernel's one-pass decode (control batches left out),
    or None where it does not take them."""
    taken, budget = [], 0
    for p in parts:
        if not len(p.sel):
            continue
        sub = p.scan.take(p.sel[~p.scan.is_control[p.sel]])
        packed = (sub.codec != 0) & (sub.size > HEADER_SIZE)
        budget += inflate_budget(int((sub.size[packed] - HEADER_SIZE).sum()))
        taken.append((p.buf, sub))
    batches = batches_of(taken)
    if batches is None:
        return None
    return decode_fused(lib, batches, (MAX_BLOCK_OUTPUT, budget), headers=headers)


@dataclasses.dataclass
class RecordWalk:
    """Where each record of some batches is, and its offset and timestamp, found by
    walking the records' length chains (no keys, values or headers decoded).

    ``scan`` holds the walked batches (its positions are not file positions); records
    are numbered batch after batch: batch ``b``'s are ``first[b] : first[b + 1]``, the
    bytes of record ``r`` are ``data[start[r]:end[r]]`` (its length varint first).
    ``ok[b]`` is False for a batch whose records do not walk cleanly: it has no records
    here, and decoding it the usual way names the problem.
    """

    scan: BatchScan
    ok: np.ndarray
    first: np.ndarray
    data: np.ndarray
    start: np.ndarray
    end: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray

    @property
    def batch(self) -> np.ndarray:
        """The batch of each record."""
        return np.repeat(np.arange(len(self.ok)), np.diff(self.first))

    def offset_records(self, ids: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """The first record at or after each target offset in batch ``ids`` (the record
        at the offset, or the next one where the cleaner removed it), or -1."""
        out = np.full(len(ids), -1, dtype=np.int64)
        ok = np.flatnonzero(ids >= 0)
        if not len(ok) or not len(self.offset):
            return out
        # offsets increase within a batch: one search on (batch, offset - base) keys
        base = self.scan.base_offset
        batch = self.batch
        keys = (batch << 32) | np.clip(self.offset - base[batch], 0, 2**32 - 1)
        g = ids[ok]
        at = np.minimum(
            np.searchsorted(keys, (g << 32) | np.clip(targets[ok] - base[g], 0, 2**32 - 1)),
            len(keys) - 1,
        )
        hit = (batch[at] == g) & (self.offset[at] >= targets[ok])
        out[ok[hit]] = at[hit]
        return out

    def timestamp_records(
        self, ids: np.ndarray, targets: np.ndarray, lo: int | np.ndarray
    ) -> np.ndarray:
        """The first record with timestamp >= target and offset >= ``lo`` (one, or one
        per target) in each target's batch (``ids``), or -1."""
        out = np.full(len(ids), -1, dtype=np.int64)
        lo = np.broadcast_to(np.asarray(lo, dtype=np.int64), np.shape(ids))
        ok = np.flatnonzero(ids >= 0)
        if not len(ok):
            return out
        first = self.first[ids[ok]]
        count = self.first[ids[ok] + 1] - first
        owner = np.repeat(np.arange(len(ok)), count)
        rec = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        good = (self.timestamp[rec] >= targets[ok][owner]) & (self.offset[rec] >= lo[ok][owner])
        owners, at = np.unique(owner[good], return_index=True)
        out[ok[owners]] = rec[good][at]
        return out

    def decode(self, records: np.ndarray, *, path: str | None = None) -> pa.Table:
        """The records ``records`` (indices), decoded, one row each, in that order.

        Each becomes a batch of its own (its batch's header, uncompressed, one record:
        offsets and timestamps stay relative to the same bases), so all are decoded in
        one call that parses nothing but them.
        """
        s = self.scan.take(self.batch[records])
        size = HEADER_SIZE + self.end[records] - self.start[records]
        head = np.zeros(len(records), dtype=HEADER_DTYPE)
        for name, value in (
            ("base_offset", s.base_offset),
            ("batch_length", size - LOG_OVERHEAD),
            ("leader_epoch", s.leader_epoch),
            ("magic", MAGIC),
            ("attributes", s.attributes & ~CODEC_MASK),
            ("last_offset_delta", s.last_offset - s.base_offset),
            ("base_timestamp", s.base_timestamp),
            ("max_timestamp", s.max_timestamp),
            ("producer_id", s.producer_id),
            ("producer_epoch", s.producer_epoch),
            ("base_sequence", s.base_sequence),
            ("records_count", 1),
        ):
            head[name] = value
        heads, view = head.tobytes(), memoryview(self.data)  # type: ignore[arg-type]  # ndarray
        pieces: list[bytes | memoryview] = []
        for i, (a, z) in enumerate(
            zip(self.start[records].tolist(), self.end[records].tolist(), strict=True)
        ):
            pieces += [heads[i * HEADER_SIZE : (i + 1) * HEADER_SIZE], view[a:z]]
        one = dataclasses.replace(
            s,
            position=np.cumsum(size) - size,
            size=size,
            attributes=s.attributes & ~CODEC_MASK,
            records_count=np.ones(len(records), np.int64),
            valid_bytes=int(size.sum()),
        )
        return decode_batches(b"".join(pieces), one, path=path)


def walk_parts(parts: list[Part]) -> RecordWalk:
    """:class:`RecordWalk` of the batches ``sel`` of each part, parts one after the
    other: the compiled kernel's walk (:func:`walk_native`, every record checked) where
    there is one and it takes every batch; else the numpy walk (:func:`walk_batches`,
    vectorised over all batches) with its timestamp and offset deltas only, where a batch
    that does not walk is set aside (``ok`` False) and the others walked again. Both give
    the same fields."""
    scan, views, one = gathered(parts)
    sel, limits = np.arange(len(scan)), (MAX_BLOCK_OUTPUT, None)
    lib = native.kernel()
    if lib is not None:
        # the lookup's parts share one buffer: its compressed blocks are read from there
        # (the same records blocks as from the views: they are decompressed into one)
        if one is not None and not (scan.codec != 0).any():
            one = None
        try:
            k = walk_native(
                lib, views if one is None else one, scan, sel, None, limits, places=True
            )
        except CorruptRecordError:  # a block that does not decompress
            k = None
        if k is not None:
            return RecordWalk(
                scan,
                np.ones(len(scan), dtype=bool),
                np.concatenate(([0], np.cumsum(k.counts))),
                k.data,
                k.walk.rec_start,  # type: ignore[arg-type]  # asked for (places)
                k.walk.rec_end,  # type: ignore[arg-type]
                k.walk.offset,
                k.walk.timestamp,
            )
    r = walk_batches(views, scan, sel, None, limits, set_aside=True)
    counts = r.ctx.counts
    rec_start = np.empty_like(r.body)
    rec_start[1:] = r.rec_end[:-1]
    rec_start[r.ctx.rec_base[counts > 0]] = r.start[counts > 0]  # a batch's first record
    return RecordWalk(
        scan,
        r.ok,
        np.concatenate(([0], np.cumsum(counts))),
        r.data,
        rec_start,
        r.rec_end,
        r.offset,
        r.timestamp,
    )


def pick_records(
    parts: list[Part],
    ids: np.ndarray,
    targets: np.ndarray,
    lo: np.ndarray,
    is_ts: np.ndarray,
) -> tuple[RecordWalk, np.ndarray]:
    """``(walk, record)``: a :class:`RecordWalk` of the batches ``sel`` of each part,
    parts one after the other, and the record each query picks in it (-1: none in its
    batch, or ``ids`` < 0). Query ``i`` looks in batch ``ids[i]`` for the first record
    with offset >= ``targets[i]`` or, where ``is_ts[i]``, with timestamp >= ``targets[i]``
    and offset >= ``lo[i]``. In the kernel (:func:`pick_native`: the walk holds just the
    picked records) where it takes every batch; else every record walked
    (:func:`walk_parts`, whose ``ok`` False marks the batches that do not walk) and the
    queries picked there (:meth:`RecordWalk.offset_records`,
    :meth:`RecordWalk.timestamp_records`)."""
    got = _kernel_picks(parts, ids, targets, lo, is_ts)
    if got is not None:
        return got
    walk = walk_parts(parts)
    record = np.full(len(ids), -1, dtype=np.int64)
    record[~is_ts] = walk.offset_records(ids[~is_ts], targets[~is_ts])
    record[is_ts] = walk.timestamp_records(ids[is_ts], targets[is_ts], lo[is_ts])
    return walk, record


def _kernel_picks(
    parts: list[Part],
    ids: np.ndarray,
    targets: np.ndarray,
    lo: np.ndarray,
    is_ts: np.ndarray,
) -> tuple[RecordWalk, np.ndarray] | None:
    """:func:`pick_records` in the kernel, the walk holding just the picked records;
    None where there is no kernel or it does not take a batch."""
    lib = native.kernel()
    if lib is None or not parts:
        return None
    g = gathered(parts, views_too=False)  # the kernel reads the one buffer where there is one
    scan = g[0]
    p = pick_native(lib, g, ids, targets, lo, is_ts)
    if p is None:
        return None
    found = np.flatnonzero(p.start >= 0)
    batch = ids[p.order][found]
    # each record once, numbered batch after batch (in data order within a batch)
    keys, first_at, which = np.unique(
        (batch << 40) | p.start[found], return_index=True, return_inverse=True
    )
    picked = found[first_at]
    per_batch = (
        np.bincount(keys >> 40, minlength=len(scan)) if len(keys) else np.zeros(len(scan), np.int64)
    )
    walk = RecordWalk(
        scan,
        np.ones(len(scan), dtype=bool),
        np.concatenate(([0], np.cumsum(per_batch))),
        p.data,
        p.start[picked],
        p.end[picked],
        p.offset[picked],
        p.timestamp[picked],
    )
    record = np.full(len(ids), -1, dtype=np.int64)
    record[p.order[found]] = which.ravel()
    return walk, record


def gathered(
    parts: list[Part], *, views_too: bool = True
) -> tuple[BatchScan, list[memoryview], Bytes | None]:
    """``(scan, views, one)``: the batches ``sel`` of each part, parts one after the
    other, as one scan, each batch's bytes (a view), and the one buffer all parts share
    (the lookup's; the scan's positions are then its positions), else None. Without
    ``views_too``, no views where there is that one buffer (a view a batch costs a
    lookup of 10,000 records ~10 ms)."""
    scan = BatchScan(
        **{  # type: ignore[arg-type]  # the array columns
            f: np.concatenate([getattr(p.scan, f)[p.sel] for p in parts])
            if parts
            else np.zeros(0, np.int64)
            for f in SCAN_COLUMNS
        },
        valid_bytes=0,
    )
    one = parts[0].buf if parts and all(p.buf is parts[0].buf for p in parts) else None
    if one is not None and not views_too:
        return scan, [], one
    views = [
        memoryview(p.buf)[a : a + z]
        for p in parts
        for a, z in zip(p.scan.position[p.sel].tolist(), p.scan.size[p.sel].tolist(), strict=True)
    ]
    return scan, views, one
