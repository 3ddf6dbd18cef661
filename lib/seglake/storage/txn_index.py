"""Transaction index (``.txnindex``): the aborted transactions whose markers are in a segment.

Entry, 34 bytes, big-endian::

    off size field
      0    2 version            0
      2    8 producerId
     10    8 firstOffset        first offset of the transaction (may precede the segment)
     18    8 lastOffset         offset of the ABORT marker (in this segment)
     26    8 lastStableOffset   LSO when the transaction completed

Entries are appended in marker order, so ``lastOffset`` strictly increases. The file is
not preallocated (Kafka appends through a file channel), so there are no trailing zeros.

read_committed readers use :func:`collect_aborted` (Kafka's ``collectAbortedTxns``) to
get the transactions overlapping a fetch, then drop the records of those producers within
``[firstOffset, lastOffset]``: :func:`aborted_records`, the one home of that rule (every
read_committed read drops its records through it; :meth:`TransactionIndex.aborted_mask`
does the matching for whole columns at once).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, cast

import numpy as np

from seglake.errors import CorruptIndexError, SegmentNotFoundError
from seglake.storage.index_file import InvalidIndexAppendError, ReadOnlyIndexError

CURRENT_VERSION = 0
ENTRY_SIZE = 34
ENTRY_DTYPE = np.dtype(
    [
        ("version", ">i2"),
        ("producer_id", ">i8"),
        ("first_offset", ">i8"),
        ("last_offset", ">i8"),
        ("last_stable_offset", ">i8"),
    ]
)
_ENTRY = struct.Struct(">hqqqq")

__all__ = [
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "aborted_records",
    "collect_aborted",
]


class AbortedTxn(NamedTuple):
    """One aborted transaction: ``producer_id``'s records in ``[first, last]`` are dropped."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndexSearchResult(NamedTuple):
    """Kafka's ``TxnIndexSearchResult``.

    ``is_complete``: an entry with ``lastStableOffset >= upper_bound_offset`` was reached,
    so no later segment can hold a transaction overlapping the range.
    """

    aborted: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The aborted transactions of one segment (34-byte big-endian entries).

    ``TransactionIndex(base_offset)`` is an empty writable index; :meth:`from_bytes`
    wraps a file's bytes without copying (read-only). Columns are native int64 copies
    made on first use. ``base_offset`` is optional (entries hold absolute offsets); when
    given, appends and :meth:`sanity_check` also require ``lastOffset >= base_offset``.
    """

    ENTRY_SIZE = ENTRY_SIZE
    DTYPE = ENTRY_DTYPE
    NAME = "transaction index"

    def __init__(
        self, base_offset: int | None = None, path: str | os.PathLike[str] | None = None
    ) -> None:
        self._base = None if base_offset is None else int(base_offset)
        self._path: str | None = None if path is None else str(path)
        self._buf: bytearray | memoryview = bytearray()
        self._writable = True
        self._cols: dict[str, np.ndarray] | None = None

    @classmethod
    def from_bytes(
        cls,
        buf: bytes | bytearray | memoryview,
        base_offset: int | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> TransactionIndex:
        """A read-only index over ``buf`` (not copied). Call :meth:`sanity_check` to validate."""
        self = cls(base_offset, path)
        self._buf = memoryview(buf).cast("B")
        self._writable = False
        return self

    @classmethod
    def open(cls, path: str | os.PathLike[str], base_offset: int | None = None) -> TransactionIndex:
        """Read a local ``.txnindex`` (a missing file is an empty index, as in Kafka)."""
        p = Path(path)
        if p.exists() and not p.is_file():
            raise SegmentNotFoundError(f"{p}: not a transaction index file")
        data = p.read_bytes() if p.exists() else b""
        return cls.from_bytes(data, base_offset, p)

    @property
    def base_offset(self) -> int | None:
        """The segment's base offset (``None``: unknown, the base offset checks are skipped)."""
        return self._base

    @property
    def entries(self) -> int:
        return len(self._buf) // ENTRY_SIZE

    def __len__(self) -> int:
        return self.entries

    def __repr__(self) -> str:
        return f"TransactionIndex(base_offset={self._base}, entries={self.entries})"

    def _columns(self) -> dict[str, np.ndarray]:
        if self._cols is None:
            n = self.entries
            if n:
                raw = np.frombuffer(self._buf, dtype=ENTRY_DTYPE, count=n)
                cols = {name: raw[name].astype(np.int64) for name in ENTRY_DTYPE.names or ()}
                del raw
            else:
                cols = {name: np.zeros(0, np.int64) for name in ENTRY_DTYPE.names or ()}
            for col in cols.values():
                col.flags.writeable = False
            self._cols = cols
        return self._cols

    @property
    def producer_ids(self) -> np.ndarray:
        return self._columns()["producer_id"]

    @property
    def first_offsets(self) -> np.ndarray:
        return self._columns()["first_offset"]

    @property
    def last_offsets(self) -> np.ndarray:
        return self._columns()["last_offset"]

    @property
    def last_stable_offsets(self) -> np.ndarray:
        return self._columns()["last_stable_offset"]

    def entry(self, i: int) -> AbortedTxn:
        if not 0 <= i < self.entries:
            raise IndexError(
                f"attempt to fetch entry {i} of a transaction index with {self.entries} entries"
            )
        _version, pid, first, last, lso = _ENTRY.unpack_from(self._buf, i * ENTRY_SIZE)
        return AbortedTxn(pid, first, last, lso)

    def __iter__(self) -> Iterator[AbortedTxn]:
        for i in range(self.entries):
            yield self.entry(i)

    def all_aborted(self) -> list[AbortedTxn]:
        return list(self)

    def to_bytes(self) -> bytes:
        """The file content (``entries * 34`` bytes, plus any partial tail as read)."""
        return bytes(self._buf)

    # ---------------------------------------------------------------------------- writing
    def append(self, txn: AbortedTxn) -> None:
        """Append an aborted transaction; its ``last_offset`` must exceed the last one's."""
        buf = self._buf
        if not self._writable or not isinstance(buf, bytearray):
            raise ReadOnlyIndexError(f"{self._path or 'transaction index'}: read-only")
        pid, first, last, lso = (int(x) for x in txn)
        if first > last:
            raise InvalidIndexAppendError(
                f"aborted transaction of producer {pid}: first offset {first} is above its "
                f"last offset {last}",
                path=self._path,
            )
        if self._base is not None and last < self._base:
            raise InvalidIndexAppendError(
                f"aborted transaction of producer {pid}: last offset {last} is below the "
                f"segment base offset {self._base}",
                path=self._path,
            )
        n = self.entries
        if n:
            prev_last = _ENTRY.unpack_from(self._buf, (n - 1) * ENTRY_SIZE)[3]
            if last <= prev_last:
                raise InvalidIndexAppendError(
                    f"the last offset of appended transactions must increase: {last} is not "
                    f"greater than the current last offset {prev_last}",
                    path=self._path,
                )
        buf += _ENTRY.pack(CURRENT_VERSION, pid, first, last, lso)
        self._cols = None

    # ---------------------------------------------------------------------------- reading
    def search(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns`` with its completeness flag.

        In file order, collect entries with ``lastOffset >= fetch_offset`` and
        ``firstOffset < upper_bound_offset``; stop after the first entry whose
        ``lastStableOffset >= upper_bound_offset`` (``is_complete``).
        """
        c = self._columns()
        lso = c["last_stable_offset"]
        stops = np.flatnonzero(lso >= upper_bound_offset)
        end = int(stops[0]) + 1 if len(stops) else len(lso)
        sel = np.flatnonzero(
            (c["last_offset"][:end] >= fetch_offset)
            & (c["first_offset"][:end] < upper_bound_offset)
        )
        aborted = [
            AbortedTxn(
                int(c["producer_id"][i]),
                int(c["first_offset"][i]),
                int(c["last_offset"][i]),
                int(lso[i]),
            )
            for i in sel
        ]
        return TxnIndexSearchResult(aborted, bool(len(stops)))

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``."""
        return self.search(fetch_offset, upper_bound_offset).aborted

    def aborted_mask(
        self, offsets: np.ndarray | list[int], producer_ids: np.ndarray | list[int]
    ) -> np.ndarray:
        """``mask[i]``: record ``offsets[i]`` of ``producer_ids[i]`` is in an aborted txn.

        A record is aborted when an entry has its producer id and
        ``firstOffset <= offset <= lastOffset`` (the ABORT marker itself, at
        ``lastOffset``, is included; readers skip control batches anyway). A producer has
        one transaction open at a time, so its ranges do not overlap: each record is
        matched against the entry of its producer with the largest ``firstOffset <=
        offset``, for all records at once (``O((records + entries) log entries)``).
        """
        off = np.asarray(offsets, dtype=np.int64)
        pid = np.asarray(producer_ids, dtype=np.int64)
        if off.shape != pid.shape:
            raise ValueError(f"offsets {off.shape} and producer_ids {pid.shape} differ in shape")
        if self.entries == 0 or off.size == 0:
            return np.zeros(off.shape, dtype=bool)
        c = self._columns()
        t_pid, t_first, t_last = c["producer_id"], c["first_offset"], c["last_offset"]
        # rank producers and first offsets so that (producer, offset) packs into one int64
        pids = np.unique(t_pid)
        firsts = np.unique(t_first)
        width = len(firsts) + 1
        t_key = np.searchsorted(pids, t_pid) * width + np.searchsorted(firsts, t_first, "right")
        order = np.argsort(t_key, kind="stable")
        t_key = t_key[order]
        flat_pid, flat_off = pid.ravel(), off.ravel()
        g = np.searchsorted(pids, flat_pid)
        known = pids[np.minimum(g, len(pids) - 1)] == flat_pid
        r_key = g * width + np.searchsorted(firsts, flat_off, "right")
        slot = np.searchsorted(t_key, r_key, side="right") - 1
        cand = order[np.maximum(slot, 0)]
        hit = (
            known
            & (slot >= 0)
            & (t_pid[cand] == flat_pid)
            & (t_first[cand] <= flat_off)
            & (flat_off <= t_last[cand])
        )
        return cast(np.ndarray, hit.reshape(off.shape))

    # ----------------------------------------------------------------------- validation
    def sanity_check(self, *, first_slot: int = 0, file_size: int | None = None) -> None:
        """Kafka's check (length a multiple of 34) plus version 0, ``first <= last``,
        ``last >= base_offset`` and strictly increasing ``last``; raises
        :class:`~seglake.errors.CorruptIndexError` naming the entry and the numbers.

        A file checked window by window (never read whole) passes each window with the
        entry before it: ``first_slot`` is that entry's slot in the file, ``file_size``
        the file's length (for the length check)."""
        size = len(self._buf) if file_size is None else file_size
        if size % ENTRY_SIZE:
            raise CorruptIndexError(
                f"transaction index is corrupt: found {size} bytes, which is not a multiple "
                f"of the {ENTRY_SIZE}-byte entry size",
                path=self._path,
            )
        n = self.entries
        if n == 0:
            return
        raw = np.frombuffer(self._buf, dtype=ENTRY_DTYPE, count=n)
        version = raw["version"].astype(np.int64)
        del raw
        c = self._columns()
        first, last = c["first_offset"], c["last_offset"]
        checks: list[tuple[np.ndarray, Callable[[int], str]]] = [
            (version != CURRENT_VERSION, lambda i: f"unexpected version {version[i]}"),
            (first > last, lambda i: f"first offset {first[i]} is above last offset {last[i]}"),
        ]
        if self._base is not None:
            checks.append(
                (
                    last < self._base,
                    lambda i: f"last offset {last[i]} is below the base offset {self._base}",
                )
            )
        order_bad = np.zeros(n, dtype=bool)
        order_bad[1:] = last[1:] <= last[:-1]
        checks.append(
            (
                order_bad,
                lambda i: (
                    f"last offset {last[i]} is not greater than the previous entry's {last[i - 1]}"
                ),
            )
        )
        worst: tuple[int, str] | None = None
        for bad, why in checks:
            idx = np.flatnonzero(bad)
            if len(idx) and (worst is None or idx[0] < worst[0]):
                worst = (int(idx[0]), why(int(idx[0])))
        if worst is not None:
            slot, why_text = worst
            slot += first_slot
            raise CorruptIndexError(
                f"transaction index is corrupt at entry {slot}: {why_text}",
                path=self._path,
                position=slot * ENTRY_SIZE,
            )


def collect_aborted(
    indexes: Iterable[TransactionIndex | None], lo: int, hi: int
) -> TransactionIndex:
    """Aborted transactions overlapping ``[lo, hi)`` of a partition: Kafka's
    ``collectAbortedTxns`` walk over the ``.txnindex`` of each segment from the one holding
    ``lo`` on (``None``: a segment without one), stopping at the first complete search.
    Returned as one in-memory index (ordered by last offset) for :meth:`aborted_mask`."""
    found: list[AbortedTxn] = []
    for idx in indexes:
        if idx is None:
            continue
        res = idx.search(lo, hi)
        found += res.aborted
        if res.is_complete:
            break
    out = TransactionIndex()
    for a in sorted(found, key=lambda a: a.last_offset):
        out.append(a)
    return out


def aborted_records(
    aborted: Iterable[tuple[int, int, int]],
    offsets: np.ndarray,
    producer_ids: np.ndarray,
    transactional: np.ndarray,
) -> np.ndarray:
    """Kafka's read_committed rule over decoded records: ``mask[i]`` when record ``i``
    (``offsets[i]``, ``producer_ids[i]``, its batch ``transactional[i]``) belongs to one of
    the ``aborted`` transactions ``(producer id, first offset, last offset)`` (what
    :func:`collect_aborted` found for the read). A non-transactional batch is never
    dropped, whatever its producer id."""
    txns = sorted(aborted, key=lambda a: a[2])
    if not txns or not len(offsets):
        return np.zeros(len(offsets), dtype=bool)
    index = TransactionIndex()
    for pid, first, last in txns:
        index.append(AbortedTxn(pid, first, last, last))
    return cast(np.ndarray, index.aborted_mask(offsets, producer_ids) & transactional)
