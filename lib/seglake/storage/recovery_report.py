"""What recovery found and did: :class:`SegmentRecovery` (one ``.log`` and its indexes)
and :class:`PartitionRecovery` (a partition directory), printable and JSON-able."""

from __future__ import annotations

import dataclasses
from typing import Any

from seglake.storage.damaged_batches import DroppedBytes

__all__ = ["PartitionRecovery", "SegmentRecovery"]


@dataclasses.dataclass
class SegmentRecovery:
    """What :func:`recover_segment` found and did (or would do, with ``dry_run``).

    Attributes:
        log_path: the ``.log``.
        base_offset: from the file name.
        original_bytes / valid_bytes: ``.log`` size before / after.
        error: why the scan stopped before the end (``None``: every batch valid).
        batches: valid batches kept.
        next_offset: last valid offset + 1 (``base_offset`` when empty).
        record_count: records kept (control records included).
        min_timestamp / max_timestamp: of the kept records (-1 when empty).
        index_entries / time_index_entries / txn_index_entries: entries after recovery.
        rebuilt: ``{suffix: reason}`` of index files rewritten (or to be rewritten).
        key_index: why the ``.keyindex`` was (or is to be) written (``None``: kept as it
            is). seglake's own file: writing it is not a change of a Kafka segment
            (:attr:`changed`), so a broker's intact directory stays "intact".
        codec: ``none``/``gzip``/... of the data batches, ``mixed`` if several.
        dry_run: nothing was written.
        dropped: damaged stretches left out of the rewritten ``.log`` (``skip_damaged``).
    """

    log_path: str
    base_offset: int
    original_bytes: int
    valid_bytes: int
    error: str | None
    batches: int
    next_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    index_entries: int
    time_index_entries: int
    txn_index_entries: int
    rebuilt: dict[str, str]
    codec: str
    dry_run: bool = False
    tail_min_timestamps: list[dict[str, Any]] | None = None  # seglake.storage.tail_minima
    dropped: list[DroppedBytes] = dataclasses.field(default_factory=list)
    index_interval_bytes: int | None = None  # log.index.interval.bytes of a rebuild
    key_index: str | None = None

    @property
    def size_bytes(self) -> int:
        """The ``.log`` size after recovery (the catalog's ``size_bytes``)."""
        return self.valid_bytes

    @property
    def truncated_bytes(self) -> int:
        return self.original_bytes - self.valid_bytes

    @property
    def changed(self) -> bool:
        return bool(self.truncated_bytes or self.rebuilt)

    def __str__(self) -> str:
        parts = [
            f"{self.log_path}: {self.batches} valid batch(es), offsets "
            f"{self.base_offset}..{self.next_offset - 1}"
        ]
        if self.dropped:
            parts += [str(d) for d in self.dropped]
        elif self.truncated_bytes:
            parts.append(
                f"truncated {self.truncated_bytes} of {self.original_bytes} bytes "
                f"at position {self.valid_bytes} ({self.error})"
            )
        for suffix, why in self.rebuilt.items():
            parts.append(f"{suffix} rebuilt ({why})")
        if self.key_index is not None:
            parts.append(f".keyindex written ({self.key_index})")
        if not self.changed:
            parts.append("intact")
        return "; ".join(parts)


@dataclasses.dataclass
class PartitionRecovery:
    """What :func:`recover_partition` found and did."""

    directory: str
    segments: list[SegmentRecovery] = dataclasses.field(default_factory=list)
    deleted_segments: list[int] = dataclasses.field(default_factory=list)
    removed_files: list[str] = dataclasses.field(default_factory=list)
    completed_swaps: list[str] = dataclasses.field(default_factory=list)
    dry_run: bool = False
    # offsets that were in the log and are no longer readable: {file, position,
    # first_offset, last_offset, reason} (filled in by the lake, which knows the old rows)
    lost: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def log_end_offset(self) -> int | None:
        kept = [s for s in self.segments if s.base_offset not in self.deleted_segments]
        return kept[-1].next_offset if kept else None

    @property
    def changed(self) -> bool:
        return bool(
            self.deleted_segments
            or self.removed_files
            or self.completed_swaps
            or any(s.changed for s in self.segments)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "dry_run": self.dry_run,
            "log_end_offset": self.log_end_offset,
            "deleted_segments": self.deleted_segments,
            "removed_files": self.removed_files,
            "completed_swaps": self.completed_swaps,
            "lost": self.lost,
            "segments": [
                dict(dataclasses.asdict(s), truncated_bytes=s.truncated_bytes)
                for s in self.segments
            ],
        }

    def __str__(self) -> str:
        verb = "would " if self.dry_run else ""
        lines = [
            f"{self.directory}: log end offset {self.log_end_offset}"
            + ("" if self.changed else ", nothing to do")
        ]
        lines += [f"  {s}" for s in self.segments if s.changed]
        lines += [
            f"  {'would lose' if self.dry_run else 'lost'} offsets "
            f"{x['first_offset']}..{x['last_offset']} "
            f"({x['file']} position {x['position']}: {x['reason']})"
            for x in self.lost
        ]
        if self.deleted_segments:
            lines.append(f"  {verb}delete segments after a truncated one: {self.deleted_segments}")
        if self.completed_swaps:
            lines.append(f"  {verb}complete swaps: {self.completed_swaps}")
        if self.removed_files:
            lines.append(f"  {verb}remove leftover files: {self.removed_files}")
        return "\n".join(lines)
