"""Sparse offset index (``.index``): offset -> batch position.

``.index`` entry, 8 bytes, big-endian::

    off size field
      0    4 relativeOffset   offset - segment base offset (int32, 0..2**31-1)
      4    4 position         byte position of a batch in the ``.log`` (int32, >= 0)

An entry ``(offset, position)`` says: the batch starting at ``position`` has last offset
``offset``. Entries are strictly increasing in both fields. Kafka writes one every
``log.index.interval.bytes`` of log (see :mod:`seglake.storage.index_builder`).

The file machinery (buffers, preallocation, trim, mmap) is
:class:`~seglake.storage.index_file.IndexFile`; the warm/cold search is
:class:`~seglake.storage.sorted_index.AbstractIndex`, shared with the time index.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple, cast

import numpy as np

from seglake.format import INT32_MAX, OFFSET_INDEX_ENTRY_SIZE
from seglake.storage.index_file import (
    DEFAULT_MAX_INDEX_SIZE,
    IndexFullError,
    InvalidIndexAppendError,
    ReadOnlyIndexError,
)
from seglake.storage.sorted_index import WARM_SECTION_BYTES, AbstractIndex

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "INT32_MAX",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "IndexFullError",
    "InvalidIndexAppendError",
    "OffsetIndex",
    "OffsetPosition",
    "ReadOnlyIndexError",
]


class OffsetPosition(NamedTuple):
    """An offset index entry: the batch at ``position`` has last offset ``offset``."""

    offset: int
    position: int


_REL = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")


class OffsetIndex(AbstractIndex):
    """The ``.index`` of a segment: sparse map from offset to batch position.

    Entry (8 bytes, big-endian): ``relativeOffset:int32, position:int32``.
    """

    ENTRY_SIZE = OFFSET_INDEX_ENTRY_SIZE
    DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
    NAME = "offset index"

    @classmethod
    def from_entries(
        cls,
        base_offset: int,
        offsets: np.ndarray | list[int],
        positions: np.ndarray | list[int],
        max_index_size: int | None = None,
    ) -> OffsetIndex:
        """A writable in-memory index holding the given entries (validated as appends)."""
        self = cls(base_offset, max_index_size)
        self.extend(offsets, positions)
        return self

    # ------------------------------------------------------------------ subclass contract
    def _key_at(self, slot: int) -> int:
        return cast(int, self._base + _REL.unpack_from(self._buf, slot * self.ENTRY_SIZE)[0])

    def _native_keys(self) -> np.ndarray:
        return self.offsets

    def _last_entry_offset(self) -> int:
        return self._key_at(self._n - 1)

    @classmethod
    def entries_ok(cls, raw: np.ndarray) -> np.ndarray:
        rel = raw["relative_offset"].astype(np.int64)
        pos = raw["position"].astype(np.int64)
        ok = (rel >= 0) & (pos >= 0)
        ok[1:] &= (rel[1:] > rel[:-1]) & (pos[1:] > pos[:-1])
        return ok

    @classmethod
    def entry_problem(cls, raw: np.ndarray, i: int) -> str:
        rel = raw["relative_offset"].astype(np.int64)
        pos = raw["position"].astype(np.int64)
        entry = f"entry (relative offset {rel[i]}, position {pos[i]})"
        if rel[i] < 0 or pos[i] < 0:
            return f"{entry} is negative"
        return (
            f"{entry} is not above the previous entry (relative offset {rel[i - 1]}, "
            f"position {pos[i - 1]}); entries must increase strictly in both fields"
        )

    # ---------------------------------------------------------------------------- reading
    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (native int64, read-only)."""
        return self._native("relative_offset", self._base)

    @property
    def positions(self) -> np.ndarray:
        """Batch positions of the entries (native int64, read-only)."""
        return self._native("position")

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (Kafka's ``lastOffset``)."""
        self._check_open()
        return self._key_at(self._n - 1) if self._n else self._base

    def entry(self, i: int) -> OffsetPosition:
        """Entry ``i`` (0-based) as absolute ``(offset, position)``."""
        i = self._check_slot(i)
        rel, pos = _OFFSET_ENTRY.unpack_from(self._buf, i * self.ENTRY_SIZE)
        return OffsetPosition(self._base + rel, pos)

    def __iter__(self) -> Iterator[OffsetPosition]:
        for i in range(self._n):
            yield self.entry(i)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= ``target_offset``; ``(base_offset, 0)`` if none.

        Kafka's ``OffsetIndex.lookup``: scan batches from the returned position to the
        first batch whose last offset is >= the target.
        """
        self._check_open()
        slot = self._floor_slot(int(target_offset))
        if slot < 0:
            return OffsetPosition(self._base, 0)
        rel, pos = _OFFSET_ENTRY.unpack_from(self._buf, slot * self.ENTRY_SIZE)
        return OffsetPosition(self._base + rel, pos)

    def lookup_many(self, targets: np.ndarray | list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`lookup`: ``(offsets, positions)`` int64 arrays."""
        slots = self._floor_slots(targets)
        if self._n == 0:
            zeros = np.zeros(slots.shape, dtype=np.int64)
            return zeros + self._base, zeros
        hit = slots >= 0
        s = np.where(hit, slots, 0)
        offsets = np.where(hit, self.offsets[s], self._base)
        positions = np.where(hit, self.positions[s], 0)
        return offsets, positions

    def upper_positions(
        self, targets: np.ndarray | list[int], end: int, beyond: int = 0
    ) -> np.ndarray:
        """Where a read that must cover each target offset may stop: the position of the
        first entry whose offset is > the target (the batch there starts after it), or
        ``end`` (the segment's size) when there is none. Vectorised; int64. ``beyond``:
        that many entries further (1: the batch at the first entry read whole too)."""
        slots = self._upper_slots(targets, strict=True) + beyond
        if self._n == 0:
            return np.full(slots.shape, end, dtype=np.int64)
        return np.where(slots < self._n, self.positions[np.minimum(slots, self._n - 1)], end)

    def upper_position(self, target_offset: int, end: int) -> int:
        """:meth:`upper_positions` of one offset."""
        return int(self.upper_positions([int(target_offset)], end)[0])

    def next_position(self, position: int, end: int) -> int:
        """The first entry's position > ``position`` (Kafka's smallestUpperBound over the
        positions, strictly above), or ``end``: one index interval read from there."""
        pos = self.positions
        i = int(np.searchsorted(pos, int(position), side="right"))
        return int(pos[i]) if i < len(pos) else end

    # ---------------------------------------------------------------------------- writing
    def append(self, offset: int, position: int) -> None:
        """Append ``(offset, position)``: ``offset`` absolute, both strictly increasing.

        Raises :class:`IndexFullError` when full and :class:`InvalidIndexAppendError`
        (a :class:`~seglake.errors.CorruptIndexError`) for an offset that does not
        increase or does not fit, naming the numbers.
        """
        self._check_writable()
        if self._n >= self._max_entries:
            raise self._full_error()
        offset, position = int(offset), int(position)
        rel = self._relative(offset, "offset")
        if not 0 <= position <= INT32_MAX:
            raise InvalidIndexAppendError(
                f"position {position} outside 0..{INT32_MAX}", path=self._path
            )
        if self._n:
            last_rel, last_pos = _OFFSET_ENTRY.unpack_from(
                self._buf, (self._n - 1) * self.ENTRY_SIZE
            )
            if rel <= last_rel:
                raise InvalidIndexAppendError(
                    f"attempt to append offset {offset} to slot {self._n}, no larger than the "
                    f"last offset appended ({self._base + last_rel})",
                    path=self._path,
                )
            if position <= last_pos:
                raise InvalidIndexAppendError(
                    f"attempt to append position {position} (offset {offset}) to slot "
                    f"{self._n}, no larger than the last position appended ({last_pos})",
                    path=self._path,
                )
        self._put(_OFFSET_ENTRY, rel, position)

    def extend(self, offsets: np.ndarray | list[int], positions: np.ndarray | list[int]) -> None:
        """Vectorised :meth:`append` of many entries; all or nothing."""
        self._check_writable()
        off = np.asarray(offsets, dtype=np.int64).ravel()
        pos = np.asarray(positions, dtype=np.int64).ravel()
        if len(off) != len(pos):
            raise ValueError(f"{len(off)} offsets but {len(pos)} positions")
        if not len(off):
            return
        self._check_room(len(off), self._max_entries)
        rel = off - self._base
        self._check_range(rel, off, "offset")
        bad = np.flatnonzero((pos < 0) | (pos > INT32_MAX))
        if len(bad):
            raise InvalidIndexAppendError(
                f"position {int(pos[bad[0]])} outside 0..{INT32_MAX}", path=self._path
            )
        prev_rel, prev_pos = (-1, -1)
        if self._n:
            prev_rel, prev_pos = _OFFSET_ENTRY.unpack_from(
                self._buf, (self._n - 1) * self.ENTRY_SIZE
            )
        all_rel = np.concatenate(([prev_rel], rel))
        all_pos = np.concatenate(([prev_pos], pos))
        bad = np.flatnonzero((all_rel[1:] <= all_rel[:-1]) | (all_pos[1:] <= all_pos[:-1]))
        if len(bad):
            i = int(bad[0])
            raise InvalidIndexAppendError(
                f"attempt to append (offset {int(off[i])}, position {int(pos[i])}) to slot "
                f"{self._n + i}, not above the previous entry (offset "
                f"{self._base + int(all_rel[i])}, position {int(all_pos[i])})",
                path=self._path,
            )
        raw = np.empty(len(off), dtype=self.DTYPE)
        raw["relative_offset"] = rel
        raw["position"] = pos
        self._put_many(raw)
