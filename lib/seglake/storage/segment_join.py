"""Segments joined from segment files whose batches move to new offsets, without decoding a
record: the bytes of a stream commit (lake/stream_commit.py plans which files go where and
commits the rows; this module writes them, as Kafka's ``LogSegment`` owns its bytes).

    part     a ``.log`` of whole batches (``size`` bytes) whose baseOffsets move by
             ``delta``, ending at ``next`` - 1 after moving (:class:`Part`)
    rebase   each batch's baseOffset + delta (bytes ``[0, 8)``; the CRC does not cover
             them: :func:`seglake.record.batch.move_base_offsets`)
    join     the parts' rebased bytes back to back as a new segment, its indexes rebuilt
             by the index interval rule (Kafka's ``LogSegment.recover``), its ``.keyindex``
             from the records' keys (the record reader): :func:`write_joined`
    append   the parts' rebased bytes at the end of an existing ``.log`` (open, locked by
             the caller), its indexes continued from its files (``IndexBuilder.resume``:
             equal to a rebuild of the whole segment; ``.keyindex``: its entries below the
             segment's next offset, then the parts' keys): :func:`append_parts`
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptIndexError, CorruptRecordError, SeglakeError, SegmentNotFoundError
from seglake.record.batch import (
    HEADER_SIZE,
    BatchHeader,
    BatchScan,
    move_base_offsets,
    scan_batches,
)
from seglake.record.reader import decode_batches
from seglake.storage.index_builder import IndexBuilder, rebuild_indexes
from seglake.storage.key_index import KeyIndex, KeyIndexBuilder, key_index_or_why
from seglake.storage.naming import INDEX_SUFFIX, KEY_INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.recovery_checks import codec_name
from seglake.storage.time_index import TimeIndex

__all__ = [
    "Joined",
    "Part",
    "append_parts",
    "first_batch_timestamp",
    "read_rebased",
    "rebase",
    "write_joined",
]


class Part(Protocol):
    """A segment file whose batches become part of a joined segment."""

    @property
    def path(self) -> str: ...  # absolute on the lake's filesystem
    @property
    def size(self) -> int: ...  # bytes of whole batches
    @property
    def delta(self) -> int: ...  # added to every batch's base offset
    @property
    def next(self) -> int: ...  # its next offset after rebasing


@dataclasses.dataclass(frozen=True)
class Joined:
    """What a join or an append wrote (``records``, ``max_timestamp`` and ``codec``: of
    the parts' batches; ``size``: the segment's bytes)."""

    size: int
    records: int
    max_timestamp: int
    codec: str
    indexes: tuple[OffsetIndex, TimeIndex]


def rebase(buf: bytes, delta: int, scan: BatchScan | None = None) -> bytes:
    """``buf`` (whole RecordBatches) with ``delta`` added to each batch's baseOffset;
    ``scan``: ``buf``'s, if already made."""
    if delta == 0 or not buf:
        return buf
    if scan is None:
        scan = scan_batches(buf, verify_crc=False)
    if scan.valid_bytes != len(buf):
        raise SeglakeError(f"staged batches end in {len(buf) - scan.valid_bytes} bad bytes")
    out = np.frombuffer(bytearray(buf), dtype=np.uint8)
    move_base_offsets(out, scan.position, scan.base_offset, delta)
    return out.tobytes()


def read_rebased(fs: pafs.FileSystem, p: Part) -> tuple[bytes, BatchScan]:
    """A part's bytes at their final offsets and their scan (CRCs checked, offsets as
    before rebasing: add ``p.delta``); :class:`SeglakeError` unless they read back whole."""
    data = lakefs.read_range(fs, p.path, 0, p.size)
    scan = scan_batches(data)
    if scan.error or scan.valid_bytes != len(data) or not len(scan):
        raise SeglakeError(
            f"{p.path}: staged segment does not read back whole: {scan.error}, "
            f"{scan.valid_bytes} of {len(data)} bytes"
        )
    if int(scan.last_offset[-1]) + p.delta + 1 != p.next:
        raise SeglakeError(
            f"{p.path}: staged segment ends at offset {int(scan.last_offset[-1]) + p.delta}, "
            f"its row at {p.next - 1}"
        )
    return rebase(data, p.delta, scan), scan


def first_batch_timestamp(fs: pafs.FileSystem, path: str) -> int:
    """maxTimestamp of a segment's first batch (Kafka's rollingBasedTimestamp)."""
    return BatchHeader.unpack_from(lakefs.read_range(fs, path, 0, HEADER_SIZE)).max_timestamp


def write_joined(
    fs: pafs.FileSystem, stem: str, parts: Sequence[Part], base_offset: int, interval: int
) -> Joined:
    """The parts rebased and joined as the segment ``stem`` + ``.log``/``.index``/
    ``.timeindex`` (base offset ``base_offset``; indexes rebuilt over all of it)."""
    read = [read_rebased(fs, p) for p in parts]
    data = b"".join(d for d, _ in read)
    scan = scan_batches(data, verify_crc=False)  # each part's CRCs were checked
    last = int(scan.last_offset[-1]) if len(scan) else -1
    if scan.error or scan.valid_bytes != len(data) or last + 1 != parts[-1].next:
        raise SeglakeError(
            f"{stem}{LOG_SUFFIX}: joined segment does not read back whole: {scan.error}, "
            f"{scan.valid_bytes} of {len(data)} bytes, expected offsets up to {parts[-1].next - 1}"
        )
    oi, ti = rebuild_indexes(scan, base_offset, interval)
    keys, _ = key_index_or_why(data, scan, base_offset, last + 1, path=stem + LOG_SUFFIX)
    lakefs.write_bytes(fs, stem + LOG_SUFFIX, data)
    lakefs.write_bytes(fs, stem + INDEX_SUFFIX, oi.to_bytes())
    lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, ti.to_bytes())
    if keys is not None:  # else records that do not decode: readers scan, and say so
        lakefs.write_bytes(fs, stem + KEY_INDEX_SUFFIX, keys.to_bytes())
    return Joined(
        len(data),
        int(scan.records_count.sum()),
        int(scan.max_timestamp.max()),
        codec_name(scan),
        (oi, ti),
    )


def append_parts(
    fs: pafs.FileSystem,
    fd: int,
    stem: str,
    parts: Sequence[Part],
    *,
    base_offset: int,
    size: int,
    next_offset: int,
    entries: tuple[int, int] | None,
    interval: int,
    before_indexes: Callable[[], None] = lambda: None,
) -> Joined:
    """The parts rebased and appended to the segment ``stem`` (its ``.log`` open as
    ``fd``) after its first ``size`` bytes (offsets below ``next_offset``; anything
    after is cut first), its index files replaced by ones continued over them.

    ``entries``: its ``(.index, .timeindex)`` entries over those bytes when its index
    files were made with ``interval`` (they are continued from their first entries),
    else None (rebuilt from a scan). ``before_indexes`` runs between the append and the
    index files."""
    os.ftruncate(fd, size)
    builder = _resume(fs, stem, base_offset, size, next_offset, entries, interval)
    keys = _resume_keys(fs, stem, base_offset, size, next_offset)
    records, max_ts, codecs = 0, -1, set()
    at = size
    for p in parts:
        data, scan = read_rebased(fs, p)
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], at + done)
        builder.add_batches(
            scan.position + at, scan.size, scan.last_offset + p.delta, scan.max_timestamp
        )
        if keys is not None:
            try:
                recs = decode_batches(data, scan, path=p.path, headers=False)  # scan's offsets
                keys.add(recs.column("key"), recs.column("offset").to_numpy() + p.delta)
            except CorruptRecordError:
                keys = None
        records += int(scan.records_count.sum())
        max_ts = max(max_ts, int(scan.max_timestamp.max()))
        codecs.add(codec_name(scan))
        at += len(data)
    before_indexes()
    oi, ti = builder.finish()
    lakefs.write_bytes(fs, stem + INDEX_SUFFIX, oi.to_bytes())
    lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, ti.to_bytes())
    nxt = parts[-1].next if parts else next_offset
    if keys is not None:
        lakefs.write_bytes(fs, stem + KEY_INDEX_SUFFIX, keys.finish(nxt).to_bytes())
    elif lakefs.exists(fs, stem + KEY_INDEX_SUFFIX):  # records that do not decode
        lakefs.delete_file(fs, stem + KEY_INDEX_SUFFIX, root=stem.rsplit("/", 1)[0])
    return Joined(at, records, max_ts, codecs.pop() if len(codecs) == 1 else "mixed", (oi, ti))


def _resume_keys(
    fs: pafs.FileSystem, stem: str, base: int, size: int, next_offset: int
) -> KeyIndexBuilder | None:
    """The key index builder after the segment's first ``size`` bytes: its ``.keyindex``
    entries below ``next_offset`` (an attempt that never committed may have added more),
    or the keys of those bytes when the file is missing, damaged or covers less (``None``
    when they do not decode)."""
    try:
        idx = KeyIndex.from_bytes(lakefs.read_all(fs, stem + KEY_INDEX_SUFFIX), base)
    except (SegmentNotFoundError, CorruptIndexError):
        idx = None
    if idx is None or idx.next_offset < next_offset:
        data = lakefs.read_range(fs, stem + LOG_SUFFIX, 0, size)
        idx, _ = key_index_or_why(data, scan_batches(data), base, next_offset)
        if idx is None:
            return None
    keep = idx.offsets.astype(np.int64) + base < next_offset
    return KeyIndexBuilder.resume(
        dataclasses.replace(idx, hashes=idx.hashes[keep], offsets=idx.offsets[keep])
    )


def _resume(
    fs: pafs.FileSystem,
    stem: str,
    base: int,
    size: int,
    next_offset: int,
    entries: tuple[int, int] | None,
    interval: int,
) -> IndexBuilder:
    """The index builder after the segment's last batch: continued from its index files
    (their first ``entries``: an attempt that never committed may have written longer
    ones), or from a scan of the ``.log`` when they are missing or ``entries`` is None."""
    if entries is not None:
        n_oi, n_ti = entries
        try:
            oi = OffsetIndex.from_bytes(
                lakefs.read_all(fs, stem + INDEX_SUFFIX)[: n_oi * OffsetIndex.ENTRY_SIZE], base
            )
            ti = TimeIndex.from_bytes(
                lakefs.read_all(fs, stem + TIME_INDEX_SUFFIX)[: n_ti * TimeIndex.ENTRY_SIZE],
                base,
            )
        except SegmentNotFoundError:
            pass
        else:
            if len(oi) == n_oi and len(ti) == n_ti:
                return IndexBuilder.resume(
                    oi,
                    ti,
                    size_bytes=size,
                    last_offset=next_offset - 1,
                    index_interval_bytes=interval,
                )
    scan = scan_batches(lakefs.read_range(fs, stem + LOG_SUFFIX, 0, size))
    builder = IndexBuilder(base, index_interval_bytes=interval)
    builder.add_batches(scan.position, scan.size, scan.last_offset, scan.max_timestamp)
    return builder
