"""The plan of a streaming micro-batch's segments (no Spark, no segment bytes): staged
pieces and a partition's newest segment as :class:`Source`\\ s with the delta that moves
their batches to their final offsets, grouped into segments by Kafka's roll rules
(:func:`roll`), and the catalog row of a joined segment (:func:`joined_row`). The bytes
(rebase, join, append) are storage/segment_join.py's.

    Source   a segment file (staged piece or the newest segment), its catalog row's
             numbers, and ``delta``: what its batches' baseOffsets move by
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from seglake.config import LogConfig
from seglake.format import LONG_MAX
from seglake.lake.rows import segment_row
from seglake.storage.naming import partition_dir_name, segment_file_name
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.roll import ActiveSegment, roll_reason
from seglake.storage.tail_minima import TAIL_POINTS
from seglake.storage.time_index import TimeIndex

__all__ = ["Source", "joined_row", "roll", "source"]


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


def roll(
    sources: list[Source], config: LogConfig, rolling: Callable[[Source], int]
) -> list[list[Source]]:
    """Sources joined into segments by Kafka's roll rules (storage/roll.py's
    :func:`roll_reason`, each source taken as one batch): a source starts a new segment
    when the joined bytes would pass ``log.segment.bytes``, when its largest timestamp is
    more than ``log.roll.ms`` (less the jitter) after the segment's first batch's
    (``rolling``, read only for a group's first source), or when its offsets would not fit
    int32 relative offsets. A source
    larger than ``log.segment.bytes`` is a segment of its own. Rolling at whole sources
    never joins what Kafka would have rolled (pieces are written by the same rules)."""
    groups: list[list[Source]] = []
    segment = ActiveSegment(0)
    for s in sources:
        if not groups or roll_reason(
            segment,
            batch_size=s.size,
            batch_last_offset=s.next - 1,
            batch_max_timestamp=s.max_timestamp,
            config=config,
        ):
            groups.append([s])
            segment = ActiveSegment(s.base, s.size, rolling(s))
        else:
            groups[-1].append(s)
            segment.size += s.size
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
