"""Records of many segment windows at once (no Spark): :func:`decode_windows` decodes
chosen batches of several windows in one decoder call; :func:`walk_batches` finds every
record's place, offset and timestamp without decoding keys, values or headers
(:class:`RecordWalk`), and :func:`min_timestamps` each batch's smallest timestamp from
it. Extraction and lookup read with them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError
from seglake.format import LOG_OVERHEAD, LONG_MAX, LONG_MIN
from seglake.record import native
from seglake.record.batch import (
    CODEC_MASK,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    SCAN_COLUMNS,
    BatchScan,
)
from seglake.record.batch_walk import walk_batches as _walk
from seglake.record.codecs import MAX_BLOCK_OUTPUT, inflate_budget
from seglake.record.decode import decode_batches
from seglake.record.decode_fused import batches_of, decode_fused
from seglake.record.decode_native import walk_native
from seglake.record.schema import empty_records
from seglake.storage.segment_window import Window
from seglake.storage.tail_minima import batch_minima

__all__ = [
    "NO_TS_HI",
    "NO_TS_LO",
    "RecordWalk",
    "decode_windows",
    "gathered",
    "min_timestamps",
    "walk_batches",
]

NO_TS_LO, NO_TS_HI = LONG_MIN, LONG_MAX  # no timestamp bound


def decode_windows(
    parts: list[tuple[Window, np.ndarray, str | None]],
    *,
    headers: bool = True,
) -> tuple[pa.Table, np.ndarray]:
    """The batches ``sel`` of each ``(window, sel, path)``, decoded in one call (without
    the headers column unless ``headers``: :func:`~seglake.record.decode.decode_batches`).

    The numpy decoder walks the records of all batches together, one numpy step per
    record index, so one call over many windows costs far less than one call per window:
    their batches are copied into one buffer for it. The compiled kernel walks each
    window's own bytes (no copy; a call costs little). Returns the records (internal
    schema, part after part, control batches left out) and each part's number of rows.
    Bytes that do not decode raise the error of their own window (naming its file).
    """
    lib = native.kernel()
    if lib is not None:
        rows = [
            int(w.scan.records_count[sel][~w.scan.is_control[sel]].sum()) for w, sel, _ in parts
        ]
        fused = _fused(lib, parts, headers)
        if fused is not None:
            table = pa.concat_tables(fused) if fused else empty_records(headers=headers)
            return table, np.array(rows, dtype=np.int64)
        tables = [
            decode_batches(w.data, w.scan.take(sel), path=path, headers=headers)
            for w, sel, path in parts
            if len(sel)
        ]
        table = pa.concat_tables(tables) if tables else empty_records(headers=headers)
        return table, np.array(rows, dtype=np.int64)
    scans, pieces, rows, at = [], [], [], 0
    for w, sel, _ in parts:
        sub = w.scan.take(sel)
        view = memoryview(w.data)
        pieces += [
            view[p : p + z] for p, z in zip(sub.position.tolist(), sub.size.tolist(), strict=True)
        ]
        sub.position = at + np.cumsum(sub.size) - sub.size
        at += int(sub.size.sum())
        scans.append(sub)
        rows.append(int(sub.records_count[~sub.is_control].sum()))
    if not at:
        return empty_records(headers=headers), np.array(rows, dtype=np.int64)
    merged = BatchScan(
        **{f: np.concatenate([getattr(s, f) for s in scans]) for f in SCAN_COLUMNS},  # type: ignore[arg-type]
        valid_bytes=at,
    )
    try:
        table = decode_batches(b"".join(pieces), merged, headers=headers)
    except CorruptRecordError:
        for w, sel, path in parts:
            w.decode(sel, path=path, headers=headers)
        raise
    return table, np.array(rows, dtype=np.int64)


def _fused(
    lib: Any, parts: list[tuple[Window, np.ndarray, str | None]], headers: bool
) -> list[pa.Table] | None:
    """The records of ``parts`` by the kernel's one-pass decode (control batches left out;
    all within the sum of the budgets :func:`~seglake.record.decode.decode_batches` gives
    each part); None where it does not take them."""
    taken, budget = [], 0
    for w, sel, _ in parts:
        if not len(sel):
            continue
        sub = w.scan.take(sel[~w.scan.is_control[sel]])
        packed = (sub.codec != 0) & (sub.size > HEADER_SIZE)
        budget += inflate_budget(int((sub.size[packed] - HEADER_SIZE).sum()))
        taken.append((w.data, sub))
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


def walk_batches(parts: list[tuple[Window, np.ndarray]]) -> RecordWalk:
    """:class:`RecordWalk` of the batches ``sel`` of each ``(window, sel)``, parts one
    after the other: the compiled kernel's walk (:func:`walk_native`, every record
    checked) where there is one and it takes every batch; else the decoder's numpy walk
    (:func:`seglake.record.batch_walk.walk_batches`, vectorised over all batches) with
    its timestamp and offset deltas only, where a batch that does not walk is set aside
    (``ok`` False) and the others walked again. Both give the same fields."""
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
    r = _walk(views, scan, sel, None, limits, set_aside=True)
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


def gathered(
    parts: list[tuple[Window, np.ndarray]],
) -> tuple[BatchScan, list[memoryview], bytes | None]:
    """``(scan, views, one)``: the batches ``sel`` of each ``(window, sel)``, parts one
    after the other, as one scan, each batch's bytes (a view), and the one buffer all
    parts' windows share (the lookup's; the scan's positions are then its positions),
    else None."""
    scan = BatchScan(
        **{  # type: ignore[arg-type]  # the array columns
            f: np.concatenate([getattr(w.scan, f)[sel] for w, sel in parts])
            if parts
            else np.zeros(0, np.int64)
            for f in SCAN_COLUMNS
        },
        valid_bytes=0,
    )
    views = [
        memoryview(w.data)[p : p + z]
        for w, sel in parts
        for p, z in zip(w.scan.position[sel].tolist(), w.scan.size[sel].tolist(), strict=True)
    ]
    one = parts[0][0].data if parts and all(w.data is parts[0][0].data for w, _ in parts) else None
    return scan, views, one


def min_timestamps(parts: list[tuple[Window, np.ndarray]]) -> np.ndarray:
    """Smallest record timestamp of the batches ``sel`` of each ``(window, sel)``, parts
    one after the other (:func:`walk_batches`: no keys, values or headers decoded).

    Kafka keeps no minimum timestamp (CreateTime is not monotonic): finding the batches
    that hold records older than a bound takes every record's timestamp. A batch whose
    records do not walk gets the smallest int64 (so it is decoded, which names the
    problem).
    """
    walk = walk_batches(parts)
    return np.where(walk.ok, batch_minima(walk.timestamp, np.diff(walk.first)), NO_TS_LO)
