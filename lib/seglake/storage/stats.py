"""What a segment's files say of it: the catalog row's columns besides its key, path and run.

Kept in ``storage`` so the writer can describe its segments without importing ``lake``;
:mod:`seglake.lake.rows` re-exports both names.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STAT_COLUMNS", "segment_row"]

# what a segment's files say of it: the row's columns besides its key, path and run
STAT_COLUMNS = (
    "next_offset",
    "record_count",
    "min_timestamp",
    "max_timestamp",
    "size_bytes",
    "index_entries",
    "time_index_entries",
    "codec",
    "tail_min_timestamps",
)


def segment_row(topic: str, partition: int, seg: Any, path: str) -> dict[str, Any]:
    """The catalog row (no ``run_id``/``committed_at``) of a segment ``seg`` describes (a
    writer's ``SegmentInfo``, a recovery's ``SegmentRecovery``: ``base_offset`` and the
    :data:`STAT_COLUMNS` as attributes); ``path`` relative to the root."""
    return dict(
        topic=topic,
        partition=partition,
        base_offset=seg.base_offset,
        path=path,
        **{c: getattr(seg, c) for c in STAT_COLUMNS},
        index_interval_bytes=getattr(seg, "index_interval_bytes", None),
    )
