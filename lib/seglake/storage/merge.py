"""Merging adjacent segments of a partition without decoding a record.

A RecordBatch is self-contained (absolute base offset, its own CRC), so segments are
merged by concatenating their ``.log`` bytes: the batches come out byte for byte, at
new positions. Only what depends on positions is made anew::

    <first base>.log        old .log files, in offset order, back to back
    <first base>.index      Kafka's index-interval rule over the concatenated batches
    <first base>.timeindex  (IndexBuilder, as LogSegment.recover rebuilds them)
    <first base>.txnindex   old .txnindex files concatenated (absolute offsets, markers
                            in log order, so lastOffset still increases)
    <first base>.keyindex   the old key indexes' entries together (each old segment's
                            file, or its keys read from its .log where it has none usable)
    tail minima             from the old rows' checkpoints (no record is read)

Groups are formed as Kafka's ``Cleaner.groupSegmentsBySize`` forms them (see
:func:`group_segments`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from seglake.errors import CorruptRecordError
from seglake.format import INT32_MAX, LONG_MAX
from seglake.record.batch import BatchScan
from seglake.storage.index_builder import IndexBuilder
from seglake.storage.key_index import KeyIndex, KeyIndexBuilder
from seglake.storage.key_lookup import segment_key_index
from seglake.storage.log_copy import LogOutput
from seglake.storage.naming import (
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.recovery_checks import codec_name, codecs_name
from seglake.storage.segment import LogSegment
from seglake.storage.tail_minima import TAIL_POINTS
from seglake.storage.time_index import TimeIndex
from seglake.storage.writer import SegmentInfo

__all__ = ["MergeSource", "group_segments", "merge_segments", "merged_tail"]

OFFSET_ENTRY, TIME_ENTRY = OffsetIndex.ENTRY_SIZE, TimeIndex.ENTRY_SIZE


def group_segments(
    base_offsets: Sequence[int],
    sizes: Sequence[int],
    index_entries: Sequence[int],
    time_index_entries: Sequence[int],
    *,
    max_size: int,
    max_index_size: int,
    first_uncleanable: int,
) -> list[tuple[int, int]]:
    """Kafka's ``Cleaner.groupSegmentsBySize``: ``[start, stop)`` runs of segments.

    A group starts with the next segment and takes the following one while the group's
    ``.log`` bytes stay ``<= max_size`` (``segment.bytes``), its ``.index`` bytes (8 per
    entry) and ``.timeindex`` bytes (12 per entry) each ``<= max_index_size``
    (``segment.index.bytes``), and the next segment is empty or its last offset (bounded
    by the following segment's base offset - 1, or ``first_uncleanable - 1`` for the
    last) minus the group's base offset fits the 4-byte relative offset (``<= 2**31-1``).
    """
    # Not LogSegment.shouldRoll (storage/roll.py): Kafka's cleaner groups whole old
    # segments by its own rule (Cleaner.groupSegmentsBySize: <= not >, index bytes
    # summed, empty segments joined), so merges keep it as Kafka does.
    n = len(base_offsets)
    groups: list[tuple[int, int]] = []
    i = 0
    while i < n:
        start = i
        log_size = int(sizes[i])
        idx = int(index_entries[i]) * OFFSET_ENTRY
        tidx = int(time_index_entries[i]) * TIME_ENTRY
        i += 1
        while i < n:
            last = int(base_offsets[i + 1]) - 1 if i + 1 < n else first_uncleanable - 1
            if not (
                log_size + int(sizes[i]) <= max_size
                and idx + int(index_entries[i]) * OFFSET_ENTRY <= max_index_size
                and tidx + int(time_index_entries[i]) * TIME_ENTRY <= max_index_size
                and (int(sizes[i]) == 0 or last - int(base_offsets[start]) <= INT32_MAX)
            ):
                break
            log_size += int(sizes[i])
            idx += int(index_entries[i]) * OFFSET_ENTRY
            tidx += int(time_index_entries[i]) * TIME_ENTRY
            i += 1
        groups.append((start, i))
    return groups


@dataclasses.dataclass(frozen=True)
class MergeSource:
    """One old segment of a group: the segment and what its catalog row says of it."""

    segment: LogSegment
    next_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    tail_min_timestamps: list[dict[str, Any]] | None


def merged_tail(sources: Sequence[MergeSource]) -> list[dict[str, Any]] | None:
    """Tail minima of the concatenation: each old checkpoint's minimum lowered by the
    smallest timestamp of every later segment (``None`` if any is unknown)."""
    if any(s.tail_min_timestamps is None for s in sources):
        return None
    later = LONG_MAX
    out: list[dict[str, Any]] = []
    for s in reversed(sources):
        points = [
            {"offset": int(p["offset"]), "min_timestamp": min(int(p["min_timestamp"]), later)}
            for p in s.tail_min_timestamps or ()
        ]
        out = points + out
        if s.record_count:
            later = min(later, int(s.min_timestamp))
    kept = [
        p for i, p in enumerate(out) if i == 0 or p["min_timestamp"] != out[i - 1]["min_timestamp"]
    ]
    if len(kept) > TAIL_POINTS:  # every checkpoint is exact: any subset with the first is too
        pick = np.unique(np.linspace(0, len(kept) - 1, TAIL_POINTS).astype(np.int64))
        kept = [kept[int(i)] for i in pick]
    return kept


def merge_segments(
    fs: pafs.FileSystem,
    directory: str,
    sources: Sequence[MergeSource],
    *,
    index_interval_bytes: int,
) -> SegmentInfo:
    """Write the concatenation of ``sources`` as one segment under ``directory``.

    Every old ``.log`` is copied as it is (:class:`~seglake.storage.log_copy.LogOutput`:
    by the kernel on a local disk) and checked from its batch headers alone (magic,
    lengths, offsets increasing; CRCs are not recomputed): it must be its row's size and
    end exactly at a batch boundary; otherwise :class:`CorruptRecordError` names the file.
    """
    base = sources[0].segment.base_offset
    builder = IndexBuilder(base, index_interval_bytes=index_interval_bytes)
    stem = f"{directory.rstrip('/')}/{segment_file_name(base)[: -len(LOG_SUFFIX)]}"
    fs.create_dir(directory, recursive=True)
    txn = bytearray()
    keys: KeyIndexBuilder | None = KeyIndexBuilder(base)
    codecs = []
    with LogOutput(fs, stem + LOG_SUFFIX) as out:
        for src in sources:
            seg = src.segment
            scan = _append_from_file(out, builder, seg, base)
            txn += seg.files.index_file(TXN_INDEX_SUFFIX) or b""
            if keys is not None:
                try:
                    keys.add_index(segment_key_index(seg))
                except CorruptRecordError:  # records that do not decode: no .keyindex
                    keys = None
            if len(scan):
                codecs.append(codec_name(scan))
        position = out.size
    oi, ti = builder.finish()
    nxt = sources[-1].next_offset
    write_indexes(fs, stem, oi, ti, bytes(txn), None if keys is None else keys.finish(nxt))
    counted = [s for s in sources if s.record_count]
    return SegmentInfo(
        base_offset=base,
        next_offset=sources[-1].next_offset,
        record_count=sum(s.record_count for s in sources),
        min_timestamp=min((s.min_timestamp for s in counted), default=sources[0].min_timestamp),
        max_timestamp=max(s.max_timestamp for s in sources),
        size_bytes=position,
        index_entries=len(oi),
        time_index_entries=len(ti),
        codec=codecs_name(codecs),
        log_path=stem + LOG_SUFFIX,
        index_interval_bytes=index_interval_bytes,
        tail_min_timestamps=merged_tail(sources),
    )


def _append_from_file(
    out: LogOutput, builder: IndexBuilder, seg: LogSegment, base: int
) -> BatchScan:
    """Kafka's ``LogSegment.appendFromFile``: ``seg``'s ``.log`` appended to ``out`` as it
    is and its batches to the indexes of the merged segment (base offset ``base``); its
    batch headers (returned) must be whole batches of its row's size that fit, else
    :class:`CorruptRecordError` names the file."""
    position = out.size
    scan = out.append(seg)
    if scan.error is not None or scan.valid_bytes != seg.size:
        raise CorruptRecordError(
            f"segment to merge is not whole batches ({scan.error}); run `recover`",
            path=seg.log_path,
            position=scan.valid_bytes,
        )
    added = builder.add_batches(
        scan.position + position, scan.size, scan.last_offset, scan.max_timestamp
    )
    if added < len(scan):
        raise CorruptRecordError(
            f"batch ending at offset {int(scan.last_offset[added])} does not fit the "
            f"merged segment of base offset {base} (relative offsets or index "
            "capacity)",
            path=seg.log_path,
            position=int(scan.position[added]),
        )
    return scan


def write_indexes(
    fs: pafs.FileSystem,
    stem: str,
    oi: OffsetIndex,
    ti: TimeIndex,
    txn: bytes,
    keys: KeyIndex | None,
) -> None:
    """A new segment's ``.index``, ``.timeindex``, ``.keyindex`` (unless ``None``) and
    (with entries) ``.txnindex`` written at ``stem``."""
    for suffix, payload in (
        (INDEX_SUFFIX, oi.to_bytes()),
        (TIME_INDEX_SUFFIX, ti.to_bytes()),
        (KEY_INDEX_SUFFIX, b"" if keys is None else keys.to_bytes()),
        (TXN_INDEX_SUFFIX, txn),
    ):
        if suffix in (TXN_INDEX_SUFFIX, KEY_INDEX_SUFFIX) and not payload:
            continue
        with fs.open_output_stream(stem + suffix) as f:
            f.write(payload)
