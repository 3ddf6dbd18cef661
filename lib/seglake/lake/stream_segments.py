"""The parts a streaming micro-batch's segments are joined from (no Spark): staged pieces
and a partition's newest segment as :class:`Source`\\ s, their batches moved to their final
offsets (:func:`rebase`), grouped into segments by Kafka's roll rules (:func:`roll`), and
the catalog row of a joined segment (:func:`joined_row`).

    Source   a segment file (staged piece or the newest segment), its catalog row's
             numbers, and ``delta``: what its batches' baseOffsets move by
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import SeglakeError
from seglake.format import LONG_MAX
from seglake.lake.rows import segment_row
from seglake.record.batch import HEADER_SIZE, BatchHeader, BatchScan, scan_batches
from seglake.storage.naming import partition_dir_name, segment_file_name
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.roll import roll_time_limit
from seglake.storage.tail_minima import TAIL_POINTS
from seglake.storage.time_index import TimeIndex

__all__ = [
    "MAX_RELATIVE",
    "Source",
    "first_batch_timestamp",
    "joined_row",
    "read_rebased",
    "rebase",
    "roll",
    "source",
]

MAX_RELATIVE = (1 << 31) - 1  # offsets in a segment's indexes are int32 from its base


@dataclasses.dataclass(frozen=True)
class Source:
    """A segment file that becomes (part of) a segment of the batch's commit."""

    path: str  # absolute on the lake's filesystem
    delta: int  # added to every batch's base offset
    base: int  # first offset after rebasing
    next: int
    size: int
    min_timestamp: int  # -1: no record
    max_timestamp: int
    tail_minima: list[dict[str, Any]] | None  # offsets before rebasing
    row: dict[str, Any] = dataclasses.field(compare=False, repr=False)  # its catalog (or piece) row


def source(path: str, delta: int, r: dict[str, Any]) -> Source:
    """A :class:`Source` from a catalog (or piece) row ``r`` moved by ``delta``."""
    first = r["base_offset"] + delta
    return Source(
        path,
        delta,
        first,
        first + r["next_offset"] - r["base_offset"],
        r["size_bytes"],
        r["min_timestamp"],
        r["max_timestamp"],
        r["tail_min_timestamps"],
        r,
    )


def rebase(buf: bytes, delta: int, scan: BatchScan | None = None) -> bytes:
    """``buf`` (whole RecordBatches) with ``delta`` added to each batch's baseOffset.

    RecordBatch v2: ``baseOffset int64 | batchLength int32 | ... | crc uint32 | attributes
    ...``; the CRC-32C covers ``attributes`` to the end, so the offsets move without
    re-encoding or a new CRC. ``scan``: ``buf``'s, if already made."""
    if delta == 0 or not buf:
        return buf
    if scan is None:
        scan = scan_batches(buf, verify_crc=False)
    if scan.valid_bytes != len(buf):
        raise SeglakeError(f"staged batches end in {len(buf) - scan.valid_bytes} bad bytes")
    out = np.frombuffer(bytearray(buf), dtype=np.uint8)
    pos = np.asarray(scan.position, dtype=np.int64)
    bases = np.asarray(scan.base_offset, dtype=np.int64) + delta
    out[(pos[:, None] + np.arange(8)).ravel()] = bases.astype(">i8").view(np.uint8)
    return out.tobytes()


def read_rebased(fs: pafs.FileSystem, s: Source) -> tuple[bytes, BatchScan]:
    """A source's bytes at their final offsets and their scan (CRCs checked, offsets as
    before rebasing: add ``s.delta``); :class:`SeglakeError` unless they read back whole."""
    data = lakefs.read_range(fs, s.path, 0, s.size)
    scan = scan_batches(data)
    if scan.error or scan.valid_bytes != len(data) or not len(scan):
        raise SeglakeError(
            f"{s.path}: staged segment does not read back whole: {scan.error}, "
            f"{scan.valid_bytes} of {len(data)} bytes"
        )
    if int(scan.last_offset[-1]) + s.delta + 1 != s.next:
        raise SeglakeError(
            f"{s.path}: staged segment ends at offset {int(scan.last_offset[-1]) + s.delta}, "
            f"its row at {s.next - 1}"
        )
    return rebase(data, s.delta, scan), scan


def first_batch_timestamp(fs: pafs.FileSystem, path: str) -> int:
    """maxTimestamp of a segment's first batch (Kafka's rollingBasedTimestamp)."""
    return BatchHeader.unpack_from(lakefs.read_range(fs, path, 0, HEADER_SIZE)).max_timestamp


def roll(
    sources: list[Source], config: LogConfig, rolling: Callable[[Source], int]
) -> list[list[Source]]:
    """Sources joined into segments by Kafka's roll rules (storage/roll.py) at source
    granularity: a source starts a new segment when the joined bytes would pass
    ``log.segment.bytes``, when its largest timestamp is more than ``log.roll.ms`` (less
    the jitter) after the segment's first batch's (``rolling``, read only for a group's
    first source), or when its offsets would not fit int32 relative offsets. A source
    larger than ``log.segment.bytes`` is a segment of its own. Rolling at whole sources
    never joins what Kafka would have rolled (pieces are written by the same rules)."""
    groups: list[list[Source]] = []
    size = 0
    since = 0
    for s in sources:
        g = groups[-1] if groups else None
        if (
            g is None
            or size + s.size > config.segment_bytes
            or s.next - 1 - g[0].base > MAX_RELATIVE
            or s.max_timestamp - since > roll_time_limit(g[0].base, config)
        ):
            groups.append([s])
            size = s.size
            since = rolling(s)
        else:
            g.append(s)
            size += s.size
    return groups


def joined_row(
    key: tuple[str, int],
    group: list[Source],
    *,
    records: int,
    max_timestamp: int,
    size: int,
    indexes: tuple[OffsetIndex, TimeIndex],
    codec: str,
    interval: int,
) -> dict[str, Any]:
    """The catalog row of a segment joined from ``group`` (no record decoded)."""
    oi, ti = indexes
    mins = [s.min_timestamp for s in group if s.min_timestamp >= 0]
    stats = types.SimpleNamespace(
        base_offset=group[0].base,
        next_offset=group[-1].next,
        record_count=records,
        min_timestamp=min(mins) if mins else -1,
        max_timestamp=max_timestamp,
        size_bytes=size,
        index_entries=len(oi),
        time_index_entries=len(ti),
        codec=codec,
        tail_min_timestamps=join_minima(group),
        index_interval_bytes=interval,
    )
    return segment_row(
        *key, stats, f"{partition_dir_name(*key)}/{segment_file_name(group[0].base)}"
    )


def join_minima(group: list[Source]) -> list[dict[str, Any]] | None:
    """Tail minima of joined segments: each source's checkpoints (offsets rebased) lowered
    to the minimum of every later source, equal minima collapsed, thinned evenly to
    :data:`TAIL_POINTS` (dropping checkpoints is safe: a filter reads further); None if a
    source's are unknown."""
    out: list[dict[str, Any]] = []
    later = LONG_MAX
    for s in reversed(group):
        if s.tail_minima is None:
            return None
        out[:0] = [
            {"offset": p["offset"] + s.delta, "min_timestamp": min(p["min_timestamp"], later)}
            for p in s.tail_minima
        ]
        if s.min_timestamp >= 0:
            later = min(later, s.min_timestamp)
    kept = [
        p for i, p in enumerate(out) if i == 0 or p["min_timestamp"] != out[i - 1]["min_timestamp"]
    ]
    if len(kept) > TAIL_POINTS:
        pick = np.unique(np.linspace(0, len(kept) - 1, TAIL_POINTS).round().astype(int))
        kept = [kept[i] for i in pick]
    return kept
