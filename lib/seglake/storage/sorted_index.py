"""Kafka's ``AbstractIndex`` lookups over an index file whose entries have a sorted key.

Scalar lookups read only the entries a binary search touches (``struct`` on the buffer,
zero-copy) with Kafka's warm/cold split, so an mmap'd index touches few pages; vectorised
lookups search native ``int64`` copies of the keys (:meth:`IndexFile._native`). Offsets
are stored relative to the segment's base offset, as int32.
"""

from __future__ import annotations

import numpy as np

from seglake.errors import CorruptIndexError
from seglake.format import INT32_MAX
from seglake.storage.index_file import IndexFile, InvalidIndexAppendError

WARM_SECTION_BYTES = 8192  # Kafka's AbstractIndex warm section: the last 8 KiB of entries

__all__ = ["WARM_SECTION_BYTES", "AbstractIndex"]


class AbstractIndex(IndexFile):
    """An index file whose entries are sorted by a key (an offset or a timestamp).

    Subclasses implement :meth:`_key_at` (the search key of a slot, read from the
    buffer), :meth:`_native_keys` (all keys as native ``int64``), :attr:`offsets` and
    :meth:`_last_entry_offset`.
    """

    def _key_at(self, slot: int) -> int:
        raise NotImplementedError

    def _native_keys(self) -> np.ndarray:
        raise NotImplementedError

    def _last_entry_offset(self) -> int:
        raise NotImplementedError

    @property
    def offsets(self) -> np.ndarray:
        raise NotImplementedError

    def _floor_slot(self, target: int) -> int:
        """Kafka's ``largestLowerBoundSlotFor``: slot of the largest key <= target, or -1.

        Warm/cold search: the last ``8192 // ENTRY_SIZE`` entries are the warm section,
        the pages recent reads and appends touch. When ``target`` is above the first warm
        key only the warm section is searched; otherwise the rest is.
        """
        n = self._n
        if n == 0:
            return -1
        key = self._key_at
        first_hot = max(0, n - 1 - WARM_SECTION_BYTES // self.ENTRY_SIZE)
        if key(first_hot) < target:
            lo, hi = first_hot, n - 1
        else:
            if key(0) > target:
                return -1
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = key(mid)
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        return lo

    def _floor_slots(self, targets: np.ndarray | list[int], strict: bool = False) -> np.ndarray:
        """Vectorised :meth:`_floor_slot` (``strict``: largest key < target)."""
        t = np.asarray(targets, dtype=np.int64)
        return np.searchsorted(self._native_keys(), t, side="left" if strict else "right") - 1

    def _upper_slots(self, targets: np.ndarray | list[int], strict: bool = False) -> np.ndarray:
        """Kafka's ``smallestUpperBoundSlotFor`` of each target: slot of the smallest key
        >= target (``strict``: > target), or the entry count when there is none."""
        t = np.asarray(targets, dtype=np.int64)
        return np.searchsorted(self._native_keys(), t, side="right" if strict else "left")

    def _check_slot(self, i: int) -> int:
        self._check_open()
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(
                f"{self._where()}attempt to fetch entry {i} of a {self.NAME} with {self._n} entries"
            )
        return i

    def _relative(self, offset: int, what: str) -> int:
        rel = offset - self._base
        if not 0 <= rel <= INT32_MAX:
            raise InvalidIndexAppendError(
                f"{what} {offset} does not fit the {self.NAME} of base offset {self._base} "
                f"(relative offset {rel} outside 0..{INT32_MAX})",
                path=self._path,
            )
        return rel

    def _check_range(self, rel: np.ndarray, values: np.ndarray, what: str) -> None:
        """Relative offsets in 0..INT32_MAX (``values``: the absolute ones, for messages)."""
        bad = np.flatnonzero((rel < 0) | (rel > INT32_MAX))
        if len(bad):
            self._relative(int(values[bad[0]]), what)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (Kafka's ``truncateTo``)."""
        self._truncate_to_entries(int(np.searchsorted(self.offsets, int(offset), side="left")))

    def sanity_check(self) -> None:
        """Kafka's sanity check (see :meth:`IndexFile.sanity_check`); also raises
        :class:`CorruptIndexError` when the last entry's offset is below the base offset."""
        super().sanity_check()
        if self._n:
            last = self._last_entry_offset()
            if last < self._base:
                raise CorruptIndexError(
                    f"corrupt {self.NAME}: last offset {last} is below the "
                    f"base offset {self._base}",
                    path=self._path,
                )
