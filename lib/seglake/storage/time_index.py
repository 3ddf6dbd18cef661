"""Sparse time index (``.timeindex``): timestamp -> offset.

Entry, 12 bytes, big-endian::

    off size field
      0    8 timestamp        largest timestamp seen in the segment up to ``offset``
      8    4 relativeOffset   offset - segment base offset (int32, 0..2**31-1)

An entry ``(T, o)`` is written while indexing some batch ``b`` (or at roll/close): ``T``
is the largest batch ``maxTimestamp`` up to and including ``b``, and ``o`` lies in
``[last offset of the first batch that reached T, last offset of b]`` (see
:mod:`seglake.storage.index_builder`). So every batch up to the one ending at ``o`` has
``maxTimestamp <= T``. Timestamps are strictly increasing (an entry is appended only when
its timestamp is greater than the last one, starting from ``-1`` for an empty index, so
they are >= 0) and offsets never decrease.

Lookups (format doc section 6):

* :meth:`TimeIndex.lookup` is Kafka's ``TimeIndex.lookup``: the largest entry with
  ``timestamp <= target``, ``(-1, base_offset)`` if none.
* :meth:`TimeIndex.lookup_strict` is seglake's exact variant: the largest entry with
  ``timestamp < target``. Every batch up to ``b`` has max timestamp ``< target``, whatever
  offset in that range the writer chose for the entry (Kafka 3.8 writes the last offset
  of the first batch that reached ``T``; older brokers the offset of the record carrying
  it), so scanning from the offset index floor of the entry's offset finds the first
  batch with ``maxTimestamp >= target``. With ``<=``, an entry whose offset lies past the
  first batch reaching ``T`` starts the scan too late for ``target == T``.
* :meth:`TimeIndex.bounds_many` is the rule every reader uses (the scan planner and
  ``LogSegment.find_offset_by_timestamp`` alike): the first record with ``timestamp >=
  target`` lies after the strict floor's offset and at or before the next entry's offset.

The file/preallocation/trim machinery is :class:`~seglake.storage.index_file.IndexFile`,
the warm/cold search :class:`~seglake.storage.sorted_index.AbstractIndex`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple, cast

import numpy as np

from seglake.format import NO_TIMESTAMP, TIME_INDEX_ENTRY_SIZE
from seglake.storage.index_file import DEFAULT_MAX_INDEX_SIZE, InvalidIndexAppendError
from seglake.storage.sorted_index import AbstractIndex

NO_ENTRY = -1  # bounds_many: no entry >= the target

__all__ = ["DEFAULT_MAX_INDEX_SIZE", "NO_ENTRY", "NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

_TS = struct.Struct(">q")
_TIME_ENTRY = struct.Struct(">qi")


class TimestampOffset(NamedTuple):
    """A time index entry: up to ``offset``, the largest timestamp is ``timestamp``."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """The ``.timeindex`` of a segment.

    Entry (12 bytes, big-endian): ``timestamp:int64, relativeOffset:int32``.
    As in Kafka, the index counts as full one slot early: the last slot is kept for the
    entry forced in when the segment is rolled or closed (``maybe_append(...,
    skip_full_check=True)``).
    """

    ENTRY_SIZE = TIME_INDEX_ENTRY_SIZE
    DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
    NAME = "time index"

    @classmethod
    def from_entries(
        cls,
        base_offset: int,
        timestamps: np.ndarray | list[int],
        offsets: np.ndarray | list[int],
        max_index_size: int | None = None,
    ) -> TimeIndex:
        """A writable in-memory index holding exactly these entries.

        Raises :class:`~seglake.storage.index_file.InvalidIndexAppendError` unless the
        timestamps are >= 0 and strictly increasing and the offsets non-decreasing.
        """
        self = cls(base_offset, max_index_size)
        self.extend(timestamps, offsets, skip_full_check=True)
        return self

    # ------------------------------------------------------------------ subclass contract
    def _key_at(self, slot: int) -> int:
        return cast(int, _TS.unpack_from(self._buf, slot * self.ENTRY_SIZE)[0])

    def _native_keys(self) -> np.ndarray:
        return self.timestamps

    def _last_entry_offset(self) -> int:
        return self.last_entry.offset

    @classmethod
    def entries_ok(cls, raw: np.ndarray) -> np.ndarray:
        ts = raw["timestamp"].astype(np.int64)
        rel = raw["relative_offset"].astype(np.int64)
        ok = (ts >= 0) & (rel >= 0)
        ok[1:] &= (ts[1:] > ts[:-1]) & (rel[1:] >= rel[:-1])
        return ok

    @classmethod
    def entry_problem(cls, raw: np.ndarray, i: int) -> str:
        ts = raw["timestamp"].astype(np.int64)
        rel = raw["relative_offset"].astype(np.int64)
        entry = f"entry (timestamp {ts[i]}, relative offset {rel[i]})"
        if ts[i] < 0 or rel[i] < 0:
            return f"{entry} is negative"
        return (
            f"{entry} does not follow the previous entry (timestamp {ts[i - 1]}, "
            f"relative offset {rel[i - 1]}); timestamps must increase strictly and "
            "offsets must not decrease"
        )

    # ------------------------------------------------------------------------- properties
    @property
    def is_full(self) -> bool:
        """Kafka's ``TimeIndex.isFull``: ``entries >= max_entries - 1``."""
        return self._n >= self._max_entries - 1

    @property
    def timestamps(self) -> np.ndarray:
        """Timestamps of the entries (native int64, read-only)."""
        return self._native("timestamp")

    @property
    def offsets(self) -> np.ndarray:
        """Absolute offsets of the entries (native int64, read-only)."""
        return self._native("relative_offset", self._base)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty (Kafka's ``lastEntry``).

        For a closed segment this holds the segment's ``largestTimestamp``.
        """
        self._check_open()
        if self._n == 0:
            return TimestampOffset(NO_TIMESTAMP, self._base)
        ts, rel = _TIME_ENTRY.unpack_from(self._buf, (self._n - 1) * self.ENTRY_SIZE)
        return TimestampOffset(ts, self._base + rel)

    def entry(self, i: int) -> TimestampOffset:
        """Entry ``i`` (0-based) as ``(timestamp, absolute offset)``."""
        i = self._check_slot(i)
        ts, rel = _TIME_ENTRY.unpack_from(self._buf, i * self.ENTRY_SIZE)
        return TimestampOffset(ts, self._base + rel)

    def __iter__(self) -> Iterator[TimestampOffset]:
        for i in range(self._n):
            yield self.entry(i)

    # ---------------------------------------------------------------------------- lookups
    def _answer(self, slot: int) -> TimestampOffset:
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self._base)
        ts, rel = _TIME_ENTRY.unpack_from(self._buf, slot * self.ENTRY_SIZE)
        return TimestampOffset(ts, self._base + rel)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Kafka's floor: largest entry with timestamp <= target, else ``(-1, base)``."""
        self._check_open()
        return self._answer(self._floor_slot(int(target_timestamp)))

    def lookup_strict(self, target_timestamp: int) -> TimestampOffset:
        """seglake's exact floor: largest entry with timestamp < target, else ``(-1, base)``.

        Start the scan for the first record with ``timestamp >= target`` at the offset
        index floor of the returned offset.
        """
        self._check_open()
        return self._answer(self._floor_slot(int(target_timestamp) - 1))

    def lookup_many(
        self, targets: np.ndarray | list[int], strict: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised lookups: ``(timestamps, offsets)`` int64 arrays.

        ``strict=True`` (the default here) is :meth:`lookup_strict`, ``False`` is
        Kafka's :meth:`lookup`. Misses give ``(-1, base_offset)``.
        """
        slots = self._floor_slots(targets, strict=strict)
        if self._n == 0:
            zeros = np.zeros(slots.shape, dtype=np.int64)
            return zeros + NO_TIMESTAMP, zeros + self._base
        hit = slots >= 0
        s = np.where(hit, slots, 0)
        return (
            np.where(hit, self.timestamps[s], NO_TIMESTAMP),
            np.where(hit, self.offsets[s], self._base),
        )

    def bounds_many(self, targets: np.ndarray | list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Where the first record with ``timestamp >= target`` can be, for each target:
        ``(first, last)`` int64 arrays of offsets.

        ``first``: one past the strict floor's offset (:meth:`lookup_strict`: every record
        up to it is older), ``base_offset`` when there is none. ``last``: the offset of the
        next entry, the first with ``timestamp >= target`` (the batch ending there holds a
        timestamp >= it), :data:`NO_ENTRY` when there is none (an active segment's last
        batches: up to the end of the segment).
        """
        slots = self._floor_slots(targets, strict=True)
        n = self._n
        if n == 0:
            zeros = np.zeros(slots.shape, dtype=np.int64)
            return zeros + self._base, zeros + NO_ENTRY
        offsets = self.offsets
        first = np.where(slots >= 0, offsets[np.maximum(slots, 0)] + 1, self._base)
        nxt = slots + 1
        last = np.where(nxt < n, offsets[np.minimum(nxt, n - 1)], NO_ENTRY)
        return first.astype(np.int64), last.astype(np.int64)

    # ---------------------------------------------------------------------------- writing
    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Kafka's ``TimeIndex.maybeAppend``; returns whether an entry was written.

        Appends ``(timestamp, offset)`` only if ``timestamp`` is greater than the last
        entry's (``-1`` when empty). Raises
        :class:`~seglake.storage.index_file.IndexFullError` when full (unless
        ``skip_full_check``, used for the entry forced in at roll/close, which may take the
        reserved last slot) and
        :class:`~seglake.storage.index_file.InvalidIndexAppendError` when ``offset`` or
        ``timestamp`` is below the last entry's.
        """
        self._check_writable()
        timestamp, offset = int(timestamp), int(offset)
        if not skip_full_check and self.is_full:
            raise self._full_error()
        n = self._n
        last_ts, last_offset = NO_TIMESTAMP, self._base
        if n:
            last_ts, rel = _TIME_ENTRY.unpack_from(self._buf, (n - 1) * self.ENTRY_SIZE)
            last_offset = self._base + rel
            if offset < last_offset:
                raise InvalidIndexAppendError(
                    f"attempt to append offset {offset} to slot {n}, below the last offset "
                    f"appended ({last_offset})",
                    path=self._path,
                )
            if timestamp < last_ts:
                raise InvalidIndexAppendError(
                    f"attempt to append timestamp {timestamp} to slot {n}, below the last "
                    f"timestamp appended ({last_ts})",
                    path=self._path,
                )
        if timestamp <= last_ts:
            return False
        rel = self._relative(offset, "offset")
        if n >= self._max_entries:
            raise self._full_error()
        self._put(_TIME_ENTRY, timestamp, rel)
        return True

    def extend(
        self,
        timestamps: np.ndarray | list[int],
        offsets: np.ndarray | list[int],
        skip_full_check: bool = False,
    ) -> None:
        """Append many entries at once; all or nothing.

        Unlike :meth:`maybe_append` every entry must be written: timestamps >= 0 and
        strictly increasing (above the last entry's), offsets non-decreasing (not below
        the last entry's). Without ``skip_full_check`` the reserved last slot stays free.
        """
        self._check_writable()
        ts = np.asarray(timestamps, dtype=np.int64).ravel()
        off = np.asarray(offsets, dtype=np.int64).ravel()
        if len(ts) != len(off):
            raise ValueError(f"{len(ts)} timestamps but {len(off)} offsets")
        if not len(ts):
            return
        self._check_room(len(ts), self._max_entries - (0 if skip_full_check else 1))
        rel = off - self._base
        self._check_range(rel, off, "offset")
        last = self.last_entry
        all_ts = np.concatenate(([last.timestamp], ts))
        all_off = np.concatenate(([last.offset if self._n else off[0]], off))
        bad = np.flatnonzero((all_ts[1:] <= all_ts[:-1]) | (all_off[1:] < all_off[:-1]))
        if len(bad):
            i = int(bad[0])
            raise InvalidIndexAppendError(
                f"attempt to append (timestamp {int(ts[i])}, offset {int(off[i])}) to slot "
                f"{self._n + i}: the previous entry is (timestamp {int(all_ts[i])}, offset "
                f"{int(all_off[i])}); timestamps must increase strictly and offsets must not "
                "decrease",
                path=self._path,
            )
        raw = np.empty(len(ts), dtype=self.DTYPE)
        raw["timestamp"] = ts
        raw["relative_offset"] = rel
        self._put_many(raw)
