"""Build a segment's ``.index`` and ``.timeindex`` exactly as a Kafka broker does.

The rules are Kafka's ``LogSegment.append`` (one call per batch, as for produce
requests) and ``LogSegment.recover`` (read on Kafka's trunk; the fixtures' 3.8 broker
follows them). Per batch, in this order:

1. **max timestamp so far**: if the batch's ``maxTimestamp`` is greater than the largest
   seen so far in the segment (initially ``-1``), it becomes the max and the batch's
   **last** offset becomes ``offset_of_max_timestamp`` (Kafka's
   ``shallowOffsetOfMaxTimestampSoFar``). This happens *before* step 2, so the batch being
   indexed counts.
2. **index entry**: if the bytes counted since the last entry **exceed**
   ``index_interval_bytes``, append ``(batch last offset, batch position)`` to the offset
   index and ``maybe_append(max timestamp so far, offset_of_max_timestamp)`` to the time
   index (written only if that timestamp is greater than the last entry's), and reset
   the count to 0.
3. add the batch size to the count.

:meth:`IndexBuilder.finish` (Kafka: segment roll or close) forces the final time index
entry ``(max timestamp, offset_of_max_timestamp)`` if its timestamp is greater than the
last entry's, so a closed segment's last time index entry holds its ``largestTimestamp``.

What the broker fixtures show (``shared/fixtures/kafka-3.8-broker``, see
``tests/compat/test_fixture_indexes.py``):

* ``__cluster_metadata-0`` (3,840 batches): the rules above give its 67 offset index and 68
  time index entries byte for byte; the first entry is ``(57, 4168)``, so the first batch
  is never indexed (the count starts at 0). Taking the max timestamp *before* the batch
  being indexed (step 1 after step 2) gives 68 entries too, but all 67 written at index
  moments are wrong (first: ``(1728480972482, 56)`` instead of the broker's
  ``(1728480972983, 57)``): the indexed batch's own ``maxTimestamp`` counts.
* The time index offset is the last offset of the batch that *first reached* the max
  timestamp, not necessarily the batch being indexed (the format doc's wording); the two
  agree whenever batch timestamps increase, as in every fixture, so Kafka's source decides.
* A broker restart resets the byte count and a clean close forces one time index entry.
  ``__consumer_offsets-0`` (4 runs: leader epochs 2, 4, 6, 8) and ``__consumer_offsets-20``
  (epochs 0, 6) are reproduced byte for byte by a new builder resumed on the same indexes
  at each leader-epoch change (:class:`IndexBuilder` with ``offset_index``/``time_index``)
  plus :meth:`IndexBuilder.finish` per run: no run wrote more than 4,096 bytes, hence an
  empty ``.index``, and there is one time index entry per run. Their offsets are
  contiguous (nothing was compacted away: the log cleaner never touches the active
  segment).
"""

from __future__ import annotations

import numpy as np

from seglake.errors import ConfigError
from seglake.format import DEFAULT_INDEX_INTERVAL_BYTES as DEFAULT_INTERVAL
from seglake.format import INT32_MAX, NO_TIMESTAMP
from seglake.record.batch import BatchScan
from seglake.storage.offset_index import InvalidIndexAppendError, OffsetIndex
from seglake.storage.time_index import TimeIndex

__all__ = ["DEFAULT_INTERVAL", "IndexBuilder", "prefix_indexes", "rebuild_indexes"]


class IndexBuilder:
    """Incremental builder of a segment's offset and time indexes (Kafka's append rules).

    Args:
        base_offset: the segment's base offset.
        index_interval_bytes: ``log.index.interval.bytes``.
        max_index_entries: capacity of the offset index (``LogConfig.max_index_entries``);
            ``None``: unlimited.
        max_time_index_entries: capacity of the time index (``LogConfig.
            max_time_index_entries``; the last slot is reserved for :meth:`finish`);
            ``None``: unlimited.
        offset_index, time_index: existing writable indexes to append to instead (e.g.
            mapped files from :meth:`OffsetIndex.open`); the builder then resumes as Kafka
            does after a restart: byte count 0, max timestamp from the time index's last
            entry. The ``max_*`` arguments are ignored for an index given here.
    """

    def __init__(
        self,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INTERVAL,
        max_index_entries: int | None = None,
        max_time_index_entries: int | None = None,
        offset_index: OffsetIndex | None = None,
        time_index: TimeIndex | None = None,
    ) -> None:
        self._base = int(base_offset)
        self._interval = int(index_interval_bytes)
        if self._interval < 0:  # Kafka's minimum is 0 (an entry per batch)
            raise ConfigError(f"index.interval.bytes {self._interval}: expected >= 0")
        if offset_index is None:
            offset_index = OffsetIndex(
                self._base,
                None if max_index_entries is None else max_index_entries * OffsetIndex.ENTRY_SIZE,
            )
        if time_index is None:
            time_index = TimeIndex(
                self._base,
                None
                if max_time_index_entries is None
                else max_time_index_entries * TimeIndex.ENTRY_SIZE,
            )
        for idx in (offset_index, time_index):
            if idx.base_offset != self._base:
                raise InvalidIndexAppendError(
                    f"{idx.NAME} has base offset {idx.base_offset}, the builder {self._base}",
                    path=idx.path,
                )
        self._oi = offset_index
        self._ti = time_index
        last = time_index.last_entry  # Kafka: maxTimestampAndOffsetSoFar after a reload
        self._max_ts = last.timestamp
        self._offset_of_max = last.offset
        self._since = 0
        self._last_offset = (
            max(offset_index.last_offset, last.offset)
            if (len(offset_index) or len(time_index))
            else self._base - 1
        )
        self._batches = 0

    @classmethod
    def resume(
        cls,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        *,
        size_bytes: int,
        last_offset: int,
        index_interval_bytes: int = DEFAULT_INTERVAL,
    ) -> IndexBuilder:
        """Continue a closed segment's indexes as if its batches had never stopped:
        the state :func:`rebuild_indexes` has after the segment's last batch, so appending
        batches and calling :meth:`finish` gives the indexes a rebuild of the grown
        segment gives, byte for byte (a broker restart instead resets the byte count).

        ``offset_index``/``time_index``: the closed segment's (made by these rules and
        :meth:`finish`), read-only is fine; ``size_bytes``: the ``.log``'s length;
        ``last_offset``: its last batch's last offset. Kept state: bytes since the last
        offset index entry (``size - its position``, all of it without one), the max
        timestamp and its offset (the time index's last entry, which :meth:`finish`
        forced); the forced entry itself is dropped unless an index moment wrote it (an
        offset index entry at or after its offset).
        """
        base = offset_index.base_offset
        oi = OffsetIndex.from_entries(base, offset_index.offsets, offset_index.positions)
        ts, offs = time_index.timestamps, time_index.offsets
        last = time_index.last_entry
        if len(ts) and (not len(oi) or int(offs[-1]) > oi.last_offset):
            ts, offs = ts[:-1], offs[:-1]  # forced by finish(), not at an index moment
        self = cls(base, index_interval_bytes=index_interval_bytes, offset_index=oi)
        self._ti = TimeIndex.from_entries(base, ts, offs)
        self._max_ts, self._offset_of_max = int(last.timestamp), int(last.offset)
        self._since = int(size_bytes) - (int(oi.positions[-1]) if len(oi) else 0)
        self._last_offset = int(last_offset)
        return self

    # ------------------------------------------------------------------------- properties
    @property
    def base_offset(self) -> int:
        return self._base

    @property
    def offset_index(self) -> OffsetIndex:
        return self._oi

    @property
    def time_index(self) -> TimeIndex:
        return self._ti

    @property
    def max_timestamp(self) -> int:
        """Largest batch ``maxTimestamp`` so far (``-1`` if none)."""
        return self._max_ts

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the first batch that reached :attr:`max_timestamp` (base if none)."""
        return self._offset_of_max

    @property
    def bytes_since_last_entry(self) -> int:
        return self._since

    @property
    def batches(self) -> int:
        """Batches added through this builder."""
        return self._batches

    @property
    def is_full(self) -> bool:
        """Either index is full: Kafka rolls the segment before the next batch."""
        return self._oi.is_full or self._ti.is_full

    def _must_roll(self) -> bool:
        """Kafka's index-full roll check; a segment without batches takes one regardless
        (a first batch never adds an index entry), so tiny index sizes cannot loop."""
        empty = self._batches == 0 and not len(self._oi) and not len(self._ti)
        return self.is_full and not empty

    def fits(self, last_offset: int) -> bool:
        """``last_offset`` is representable relative to the base offset (else: roll)."""
        return 0 <= int(last_offset) - self._base <= INT32_MAX

    # ---------------------------------------------------------------------------- adding
    def _check_offset(self, last_offset: int, previous: int, position: int) -> None:
        if last_offset < self._base:
            raise InvalidIndexAppendError(
                f"batch last offset {last_offset} is below the segment base offset {self._base}",
                path=self._oi.path,
                position=position,
            )
        if last_offset <= previous:
            raise InvalidIndexAppendError(
                f"batch last offset {last_offset} is not above the previous batch's {previous}",
                path=self._oi.path,
                position=position,
            )

    def add_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> bool:
        """Account one batch; ``False`` (nothing changed) if the segment must roll first.

        The segment must roll when an index is full or ``last_offset`` does not fit an
        int32 relative offset.
        """
        self._check_offset(last_offset, self._last_offset, position)
        if self._must_roll() or last_offset - self._base > INT32_MAX:
            return False
        if max_timestamp > self._max_ts:
            self._max_ts = max_timestamp
            self._offset_of_max = last_offset
        if self._since > self._interval:
            self._oi.append(last_offset, position)
            self._ti.maybe_append(self._max_ts, self._offset_of_max)
            self._since = 0
        self._since += size
        self._last_offset = last_offset
        self._batches += 1
        return True

    def add_batches(
        self,
        positions: np.ndarray,
        sizes: np.ndarray,
        last_offsets: np.ndarray,
        max_timestamps: np.ndarray,
    ) -> int:
        """Account batches in log order (columns as in :class:`~seglake.record.batch.BatchScan`).

        Returns how many were added: all of them, unless the segment must roll first (an
        index became full, or a last offset does not fit an int32 relative offset), in
        which case the rest belong to a new segment. Equivalent to :meth:`add_batch` per
        batch, but vectorised: running maximum, byte counts and the index appends are
        numpy; the only Python loop hops from one index entry to the next.
        """
        pos = np.asarray(positions, dtype=np.int64).ravel()
        size = np.asarray(sizes, dtype=np.int64).ravel()
        last = np.asarray(last_offsets, dtype=np.int64).ravel()
        mts = np.asarray(max_timestamps, dtype=np.int64).ravel()
        k = len(pos)
        if not len(size) == len(last) == len(mts) == k:
            raise ValueError(
                f"column lengths differ: positions {k}, sizes {len(size)}, "
                f"last_offsets {len(last)}, max_timestamps {len(mts)}"
            )
        if k == 0:
            return 0
        self._check_offset(int(last[0]), self._last_offset, int(pos[0]))
        steps = np.flatnonzero(last[1:] <= last[:-1])
        if len(steps):
            i = int(steps[0]) + 1
            self._check_offset(int(last[i]), int(last[i - 1]), int(pos[i]))
        over = np.flatnonzero(last - self._base > INT32_MAX)
        limit = int(over[0]) if len(over) else k
        if self._must_roll() or limit == 0:
            return 0
        if self.is_full:  # an empty segment with full indexes takes its first batch only
            limit = 1
        run, off_max = self._max_so_far(mts, last)
        # byte count before batch i with no entry in between: cum[i] - origin
        cum = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(size, out=cum[1:])
        at = self._entry_slots(cum[:limit])
        consumed = limit
        if len(at):
            ts_at = run[at]  # non-decreasing, never below the time index's last timestamp
            kept = ts_at > np.concatenate(([self._ti.last_entry.timestamp], ts_at[:-1]))
            # Kafka checks for a full index before each batch: stop after the entry that fills one
            oi_used = len(self._oi) + np.arange(1, len(at) + 1)
            ti_used = len(self._ti) + np.cumsum(kept)
            full = np.flatnonzero(
                (oi_used >= self._oi.max_entries) | (ti_used >= self._ti.max_entries - 1)
            )
            if len(full):
                stop = int(full[0]) + 1
                at, kept, ts_at = at[:stop], kept[:stop], ts_at[:stop]
                consumed = int(at[-1]) + 1
            self._oi.extend(last[at], pos[at])
            self._ti.extend(ts_at[kept], off_max[at][kept])
            origin = int(cum[at[-1]])
        else:
            origin = -self._since
        j = consumed - 1
        self._since = int(cum[consumed]) - origin
        self._max_ts = int(run[j])
        self._offset_of_max = int(off_max[j])
        self._last_offset = int(last[j])
        self._batches += consumed
        return consumed

    def _max_so_far(self, mts: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Kafka's ``maxTimestampAndOffsetSoFar`` after each batch: the running max
        timestamp (including the batch) and the last offset of the batch that first
        reached it."""
        run = np.maximum.accumulate(mts)
        np.maximum(run, self._max_ts, out=run)
        before = np.empty_like(run)
        before[0] = self._max_ts
        before[1:] = run[:-1]
        src = np.where(mts > before, np.arange(len(mts)), -1)
        np.maximum.accumulate(src, out=src)
        return run, np.where(src >= 0, last[np.maximum(src, 0)], self._offset_of_max)

    def _entry_slots(self, heads: np.ndarray) -> np.ndarray:
        """The batches that get an index entry (``log.index.interval.bytes``: once the
        bytes since the last entry exceed it), ``heads`` the byte count before each."""
        # the entry after one at batch j goes to the first batch with cum > cum[j] + interval
        following = np.searchsorted(heads, heads + self._interval, side="right").tolist()
        slots: list[int] = []
        i = int(np.searchsorted(heads, self._interval - self._since, side="right"))
        while i < len(heads):
            slots.append(i)
            i = following[i]
        return np.asarray(slots, dtype=np.int64)

    def finish(self) -> tuple[OffsetIndex, TimeIndex]:
        """Roll/close: force the final time index entry; returns both indexes.

        Kafka's ``onBecomeInactiveSegment``/``close``: ``maybe_append(max timestamp,
        offset_of_max_timestamp, skip_full_check=True)``, a no-op when that timestamp is
        not above the last entry's. Idempotent; trimming/closing files is the caller's.
        """
        if self._max_ts != NO_TIMESTAMP:
            self._ti.maybe_append(self._max_ts, self._offset_of_max, skip_full_check=True)
        return self._oi, self._ti


def rebuild_indexes(
    scan: BatchScan, base_offset: int, interval: int = DEFAULT_INTERVAL
) -> tuple[OffsetIndex, TimeIndex]:
    """Kafka's ``LogSegment.recover`` index rebuild from a batch scan of a whole ``.log``.

    Returns in-memory indexes (unlimited capacity); ``to_bytes()`` gives the files a
    broker writes when the segment was written in one run (see the module docstring).
    Raises :class:`~seglake.storage.offset_index.InvalidIndexAppendError` if a batch's
    offsets go backwards or do not fit the segment.
    """
    builder = IndexBuilder(base_offset, index_interval_bytes=interval)
    added = builder.add_batches(scan.position, scan.size, scan.last_offset, scan.max_timestamp)
    if added < len(scan):
        raise InvalidIndexAppendError(
            f"batch last offset {int(scan.last_offset[added])} does not fit a segment of base "
            f"offset {base_offset} (relative offsets are int32)",
            position=int(scan.position[added]),
        )
    return builder.finish()


def prefix_indexes(
    oi: OffsetIndex, ti: TimeIndex, size: int, next_offset: int
) -> tuple[OffsetIndex, TimeIndex] | None:
    """The indexes of a grown segment as they hold for its first ``size`` bytes (offsets
    below ``next_offset``): the entries before them, read-only; None if no entry lies past
    them. A segment grown in place (lake/stream_append.py) only appends entries, so these
    are the older version's but for its final time index entry, which a lookup does
    without (it reads on to the segment's end)."""
    n_oi = int(np.searchsorted(oi.positions, size, side="left"))
    n_ti = int(np.searchsorted(ti.offsets, next_offset, side="left"))
    if n_oi == len(oi) and n_ti == len(ti):
        return None
    return (
        OffsetIndex.from_bytes(oi.to_bytes()[: n_oi * oi.ENTRY_SIZE], oi.base_offset, path=oi.path),
        TimeIndex.from_bytes(ti.to_bytes()[: n_ti * ti.ENTRY_SIZE], ti.base_offset, path=ti.path),
    )
