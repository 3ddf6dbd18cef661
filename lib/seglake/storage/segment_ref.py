"""SegmentRef: what storage needs to know of a committed segment (the lake builds it).

A catalog row describes a committed segment; storage never reads the catalog, so the
lake layer turns a row into this typed reference
(:func:`seglake.lake.rows.segment_refs`) and storage opens it (:meth:`SegmentRef.open`):
the final file, the run's staged copy, or the copy a later run retired
(:func:`~seglake.storage.naming.row_copies`), indexes rebuilt, if need be, with the
interval they were written with.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from seglake import lake_paths
from seglake.errors import InvalidTopicError
from seglake.storage.index_builder import DEFAULT_INTERVAL
from seglake.storage.naming import parse_segment_file_name, row_copies
from seglake.storage.segment import LogSegment
from seglake.storage.segment_files import Pin

__all__ = ["SegmentRef"]


@dataclass(frozen=True)
class SegmentRef:
    """A committed segment (frozen, picklable).

    Attributes:
        path: its ``.log``, relative to the lake root.
        size_bytes: its committed size (a batch that does not scan inside it is
            corruption, never a tail).
        next_offset: the offset after its last record (``None``: found by a scan).
        max_timestamp: its largest timestamp (``None``: read from its time index).
        run_id: the run that wrote it (where its staged or retired copy is).
        index_interval_bytes: the index interval it was written with (``None``: default).
    """

    path: str
    size_bytes: int
    next_offset: int | None = None
    max_timestamp: int | None = None
    run_id: str | None = None
    index_interval_bytes: int | None = None

    @property
    def base_offset(self) -> int:
        """Its first offset (its file's name: the catalog checks that they agree)."""
        parsed = parse_segment_file_name(self.path.rsplit("/", 1)[-1])
        if parsed is None:
            raise InvalidTopicError(f"{self.path!r} is not a segment file's path")
        return parsed[0]

    def open(
        self,
        fs: pafs.FileSystem,
        root: str,
        *,
        on_corrupt: str = "raise",
        exact_size: bool = False,
        pin: Pin | None = None,
    ) -> LogSegment:
        """The segment in the lake at ``root`` on ``fs``: read where its version is;
        ``exact_size``: the file must be exactly ``size_bytes`` (a row a later version
        replaced); ``pin``: the catalog version its reader is pinned to (:class:`Pin`)."""
        staged, retired = row_copies(root, self.path, self.run_id)
        seg = LogSegment(
            fs,
            lake_paths.safe_join(root, self.path),
            size=self.size_bytes,
            next_offset=self.next_offset,
            max_timestamp=self.max_timestamp,
            index_interval_bytes=self.index_interval_bytes or DEFAULT_INTERVAL,
            staged_path=staged,
            committed=True,
            on_corrupt=on_corrupt,
            retired_path=retired,
            exact_size=exact_size,
        )
        seg.pin = pin
        return seg
