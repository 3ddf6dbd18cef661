"""Sparse offset index (``.index``) and the machinery shared with the time index.

``.index`` entry, 8 bytes, big-endian::

    off size field
      0    4 relativeOffset   offset - segment base offset (int32, 0..2**31-1)
      4    4 position         byte position of a batch in the ``.log`` (int32, >= 0)

An entry ``(offset, position)`` says: the batch starting at ``position`` has last offset
``offset``. Entries are strictly increasing in both fields. Kafka writes one every
``log.index.interval.bytes`` of log (see :mod:`seglake.storage.index_builder`).

Design
------
An index is a pure data structure over a buffer of big-endian entries (a ``bytearray`` it
grows itself, a read-only ``bytes``/``memoryview``/``mmap`` from :meth:`from_bytes`, or
the ``mmap`` of a local file from :meth:`open`), independent of where the bytes live
(local file, object-store ranged read, in-memory build):

* scalar lookups read only the entries a binary search touches (``struct`` on the
  buffer, zero-copy) with Kafka's warm/cold split, so an mmap'd index touches few pages;
* vectorised lookups (``lookup_many``) and the column properties use native ``int64``
  copies made once per index state (``np.frombuffer`` with a ``>i4``/``>i8`` dtype, then
  ``astype``), cached until the next append/truncate.

Files a broker preallocated and did not trim (unclean shutdown) hold trailing all-zero
entries: the entries in use are the longest valid prefix (strictly increasing, see
:meth:`AbstractIndex.sanity_check`), and only zero bytes may follow it. An all-zero slot 0
counts as an entry only when the buffer is exactly one entry long or non-zero bytes
follow it (an empty preallocated file is all zeros; a real ``(base offset, 0)`` /
``(timestamp 0, base offset)`` entry followed by zeros is ambiguous and read as unused,
which keeps lookups exact: it is also the answer of an empty index).

Concurrent lookups are safe; appends, truncation, resize and close need the caller's lock
(Kafka's index lock), as does reading while another thread appends.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np

from seglake.errors import (
    ConfigError,
    CorruptIndexError,
    OffsetOrderError,
    SeglakeError,
    SegmentNotFoundError,
)

INT32_MAX = 2**31 - 1
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # log.index.size.max.bytes
WARM_SECTION_BYTES = 8192  # Kafka's AbstractIndex warm section: the last 8 KiB of entries
_UNLIMITED_ENTRIES = INT32_MAX

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "IndexFullError",
    "InvalidIndexAppendError",
    "OffsetIndex",
    "OffsetPosition",
    "ReadOnlyIndexError",
]


class IndexFullError(SeglakeError):
    """Append to an index that holds ``max_entries`` entries (Kafka rolls the segment first)."""


class InvalidIndexAppendError(CorruptIndexError, OffsetOrderError):
    """An append that would break the index order or does not fit an int32 field."""


class ReadOnlyIndexError(SeglakeError):
    """A write to an index opened read-only (or already closed)."""


class OffsetPosition(NamedTuple):
    """An offset index entry: the batch at ``position`` has last offset ``offset``."""

    offset: int
    position: int


def _round_down(number: int, factor: int) -> int:
    return factor * (number // factor)


class AbstractIndex:
    """Fixed-size big-endian entries with a sorted key; what both mmap'd indexes share.

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (the big-endian on-disk entry),
    :attr:`NAME`, implement :meth:`_key_at` (the search key of a slot, read from the
    buffer), :meth:`_native_keys` (all keys as native ``int64``) and
    :meth:`_first_invalid` (the order rules, vectorised).

    Construction: ``Cls(base_offset, max_index_size)`` is an empty in-memory writable
    index (``max_index_size=None``: no limit); :meth:`from_bytes` wraps bytes read from
    anywhere (read-only, zero-copy); :meth:`open` maps a local file.
    """

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype]
    NAME: ClassVar[str]

    def __init__(
        self,
        base_offset: int,
        max_index_size: int | None = DEFAULT_MAX_INDEX_SIZE,
        *,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        self._setup(base_offset, path)
        self._buf = bytearray()
        self._writable = True
        self._max_entries = self._entries_for_size(max_index_size)

    # ----------------------------------------------------------------------- construction
    def _setup(self, base_offset: int, path: str | os.PathLike[str] | None) -> None:
        self._base = int(base_offset)
        self._path: str | None = None if path is None else str(path)
        self._buf: Any = b""
        self._mmap: mmap.mmap | None = None  # set only for a file we mapped ourselves
        self._file_backed = False
        self._writable = False
        self._closed = False
        self._n = 0
        self._max_entries = 0
        self._length = 0  # bytes of the underlying buffer/file, for the length check
        self._problem: tuple[int, str] | None = None  # (slot, why) of a non-zero tail
        self._version = 0
        self._cache: dict[str, Any] = {}

    @classmethod
    def _entries_for_size(cls, max_index_size: int | None) -> int:
        if max_index_size is None:
            return _UNLIMITED_ENTRIES
        if max_index_size < cls.ENTRY_SIZE:
            raise ConfigError(
                f"log.index.size.max.bytes={max_index_size} is smaller than one "
                f"{cls.NAME} entry ({cls.ENTRY_SIZE} bytes)"
            )
        return max_index_size // cls.ENTRY_SIZE

    @classmethod
    def from_bytes(
        cls,
        buf: bytes | bytearray | memoryview | mmap.mmap,
        base_offset: int,
        path: str | os.PathLike[str] | None = None,
    ) -> Self:
        """A read-only index over ``buf`` (not copied: keep ``buf`` alive and unchanged).

        ``buf`` is the whole index file, trimmed or preallocated. Never raises for its
        content; call :meth:`sanity_check` to validate it.
        """
        self = cls.__new__(cls)
        self._setup(base_offset, path)
        view = memoryview(buf).cast("B")
        self._buf = view
        self._length = len(view)
        self._max_entries = len(view) // cls.ENTRY_SIZE
        self._n, self._problem = self._scan_used(self._buf, self._length)
        return self

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        base_offset: int,
        writable: bool = False,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> Self:
        """Map a local index file.

        Read-only: the file must exist; its entries are the longest valid prefix.
        Writable: a missing file is created preallocated to ``max_index_size`` rounded
        down to a multiple of the entry size (zero-filled); an existing one is resized to
        that size (never below its used length) so appends can go on, as Kafka does for
        the active segment, and must pass :meth:`sanity_check` (a corrupt index is rebuilt,
        not appended to). :meth:`close` (or :meth:`trim`) shrinks it to the used length.
        """
        p = Path(path)
        self = cls.__new__(cls)
        self._setup(base_offset, p)
        if not writable:
            if not p.is_file():
                raise SegmentNotFoundError(f"{p}: no such {cls.NAME} file")
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size:
                    self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._buf = self._mmap if self._mmap is not None else b""
            self._length = size
            self._max_entries = size // cls.ENTRY_SIZE
            self._n, self._problem = self._scan_used(self._buf, size)
            return self
        target = _round_down(max_index_size, cls.ENTRY_SIZE)
        if target < cls.ENTRY_SIZE:
            raise ConfigError(
                f"log.index.size.max.bytes={max_index_size} is smaller than one "
                f"{cls.NAME} entry ({cls.ENTRY_SIZE} bytes)"
            )
        created = not p.exists()
        self._file_backed = True
        self._writable = True
        if created:
            with open(p, "wb") as f:
                f.truncate(target)
            self._map_file(target)
            return self
        size = p.stat().st_size
        self._map_file(size)
        self._n, self._problem = self._scan_used(self._buf, size)
        try:
            self.sanity_check()
        except CorruptIndexError:
            self._release()
            raise
        self.resize(max(target, self._n * cls.ENTRY_SIZE))
        return self

    def _map_file(self, size: int) -> None:
        if size:
            with open(str(self._path), "r+b") as f:
                self._mmap = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_WRITE)
            self._buf = self._mmap
        else:
            self._mmap = None
            self._buf = b""
        self._length = size
        self._max_entries = size // self.ENTRY_SIZE

    @classmethod
    def _scan_used(cls, buf: Any, length: int) -> tuple[int, tuple[int, str] | None]:
        """(entries in use, (slot, why) if non-zero bytes follow them) of a whole file."""
        total = length // cls.ENTRY_SIZE
        if total == 0:
            return 0, None
        raw = np.frombuffer(buf, dtype=cls.DTYPE, count=total)
        bad = cls._first_invalid(raw)
        n = total if bad is None else bad[0]
        tail_start = n * cls.ENTRY_SIZE
        tail = np.frombuffer(
            buf, dtype=np.uint8, count=total * cls.ENTRY_SIZE - tail_start, offset=tail_start
        )
        tail_dirty = bool(tail.any())
        if n >= 1 and total > 1 and not raw[0].tobytes().strip(b"\0"):
            # slot 0 all zero: an entry only if something follows it
            rest = np.frombuffer(
                buf, dtype=np.uint8, count=(total - 1) * cls.ENTRY_SIZE, offset=cls.ENTRY_SIZE
            )
            if not rest.any():
                return 0, None
        if not tail_dirty or bad is None:
            return n, None
        return n, bad

    # ------------------------------------------------------------------ subclass contract
    def _key_at(self, slot: int) -> int:
        raise NotImplementedError

    def _native_keys(self) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def _first_invalid(cls, raw: np.ndarray) -> tuple[int, str] | None:
        """``(slot, why)`` of the first entry that breaks the order rules, or ``None``."""
        raise NotImplementedError

    # ------------------------------------------------------------------------- properties
    @property
    def base_offset(self) -> int:
        return self._base

    @property
    def path(self) -> str | None:
        return self._path

    @property
    def entries(self) -> int:
        """Entries in use."""
        return self._n

    def __len__(self) -> int:
        return self._n

    @property
    def max_entries(self) -> int:
        """Entries the index can hold (Kafka: file length / entry size)."""
        return self._max_entries

    @property
    def is_full(self) -> bool:
        """No slot left: Kafka rolls the segment before the next append."""
        return self._n >= self._max_entries

    @property
    def writable(self) -> bool:
        return self._writable and not self._closed

    @property
    def length(self) -> int:
        """Bytes of the underlying file or buffer (preallocated files: the whole size)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes in use: ``entries * ENTRY_SIZE`` (what :meth:`to_bytes` returns)."""
        return self._n * self.ENTRY_SIZE

    def __repr__(self) -> str:
        where = f" {self._path}" if self._path else ""
        return (
            f"{type(self).__name__}(base_offset={self._base}, entries={self._n}, "
            f"max_entries={self._max_entries}{where})"
        )

    # ---------------------------------------------------------------------------- reading
    def _check_open(self) -> None:
        if self._closed:
            raise ReadOnlyIndexError(f"{self._where()}{self.NAME} is closed")

    def _where(self) -> str:
        return f"{self._path}: " if self._path else ""

    def to_bytes(self) -> bytes:
        """The used entries, trimmed, exactly as a closed Kafka index file holds them."""
        self._check_open()
        with memoryview(self._buf) as view:
            return bytes(view[: self._n * self.ENTRY_SIZE])

    def raw_entries(self) -> np.ndarray:
        """Zero-copy big-endian structured view of the used entries.

        It pins the buffer: drop it before :meth:`close`/:meth:`trim` of a mapped file.
        """
        self._check_open()
        if self._n == 0:
            return np.zeros(0, dtype=self.DTYPE)
        return np.frombuffer(self._buf, dtype=self.DTYPE, count=self._n)

    def _native(self, field: str, shift: int = 0) -> np.ndarray:
        """Column ``field`` (+ ``shift``) of the used entries: read-only native int64 copy.

        Cached until the next append/truncate.
        """
        self._check_open()
        cache = self._cache
        if cache.get("@version") != self._version:
            cache.clear()
            cache["@version"] = self._version
        name = f"{field}+{shift}"
        col = cache.get(name)
        if col is None:
            if self._n:
                raw = np.frombuffer(self._buf, dtype=self.DTYPE, count=self._n)
                col = raw[field].astype(np.int64)
                del raw
                if shift:
                    col += shift
            else:
                col = np.zeros(0, dtype=np.int64)
            col.flags.writeable = False
            cache[name] = col
        return col

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

    def _check_slot(self, i: int) -> int:
        self._check_open()
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(
                f"{self._where()}attempt to fetch entry {i} of a {self.NAME} with {self._n} entries"
            )
        return i

    # ----------------------------------------------------------------------- validation
    def sanity_check(self) -> None:
        """Kafka's sanity check, plus the order of every entry in use.

        Raises :class:`CorruptIndexError` (with the path and the numbers) when the length
        is not a multiple of the entry size, when non-zero bytes follow the longest valid
        prefix (an entry out of order, negative, or garbage), or when the last entry's
        offset is below the base offset.
        """
        self._check_open()
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.NAME} is corrupt: found {self._length} bytes, which is not a multiple "
                f"of the {self.ENTRY_SIZE}-byte entry size",
                path=self._path,
            )
        if self._problem is not None:
            slot, why = self._problem
            raise CorruptIndexError(
                f"{self.NAME} is corrupt at slot {slot} of "
                f"{self._length // self.ENTRY_SIZE}: {why}",
                path=self._path,
                position=slot * self.ENTRY_SIZE,
            )
        if self._n:
            last = self._last_entry_offset()
            if last < self._base:
                raise CorruptIndexError(
                    f"corrupt {self.NAME}: last offset {last} is below the "
                    f"base offset {self._base}",
                    path=self._path,
                )

    def _last_entry_offset(self) -> int:
        raise NotImplementedError

    # ---------------------------------------------------------------------------- writing
    def _check_writable(self) -> None:
        if self._closed or not self._writable:
            state = "closed" if self._closed else "read-only"
            raise ReadOnlyIndexError(f"{self._where()}{self.NAME} is {state}")

    def _relative(self, offset: int, what: str) -> int:
        rel = offset - self._base
        if not 0 <= rel <= INT32_MAX:
            raise InvalidIndexAppendError(
                f"{what} {offset} does not fit the {self.NAME} of base offset {self._base} "
                f"(relative offset {rel} outside 0..{INT32_MAX})",
                path=self._path,
            )
        return rel

    def _reserve(self, count: int) -> int:
        """Byte position of slot ``entries``, growing an in-memory buffer for ``count`` more."""
        size = self.ENTRY_SIZE
        at = self._n * size
        need = at + count * size
        if not self._file_backed and need > len(self._buf):
            cap = self._max_entries * size
            grown = bytearray(min(max(2 * len(self._buf), need, 64 * size), cap))
            grown[: len(self._buf)] = self._buf  # a new buffer: live views keep the old one
            self._buf = grown
        return at

    def _commit(self, count: int) -> None:
        self._n += count
        self._version += 1
        if not self._file_backed:
            self._length = self._n * self.ENTRY_SIZE

    def _put(self, packer: struct.Struct, *fields: int) -> None:
        """Write one entry at slot ``entries`` (capacity and order already checked)."""
        at = self._reserve(1)  # may replace self._buf
        packer.pack_into(self._buf, at, *fields)
        self._commit(1)

    def _put_many(self, raw: np.ndarray) -> None:
        """Write big-endian entries at slot ``entries`` (capacity and order already checked)."""
        count = len(raw)
        if count:
            at = self._reserve(count)
            with memoryview(self._buf) as view:
                view[at : at + count * self.ENTRY_SIZE] = raw.tobytes()
            self._commit(count)

    def _check_room(self, count: int, limit: int) -> None:
        if self._n + count > limit:
            raise IndexFullError(
                f"{self._where()}{count} entries do not fit the {self.NAME} "
                f"({self._n} of {self._max_entries} entries used)"
            )

    def _check_range(self, rel: np.ndarray, values: np.ndarray, what: str) -> None:
        """Relative offsets in 0..INT32_MAX (``values``: the absolute ones, for messages)."""
        bad = np.flatnonzero((rel < 0) | (rel > INT32_MAX))
        if len(bad):
            self._relative(int(values[bad[0]]), what)

    def _full_error(self) -> IndexFullError:
        return IndexFullError(
            f"{self._where()}attempt to append to a full {self.NAME} "
            f"({self._n} of {self._max_entries} entries)"
        )

    def _truncate_to_entries(self, n: int) -> None:
        self._check_writable()
        n = max(0, min(int(n), self._n))
        if n == self._n:
            return
        start, end = n * self.ENTRY_SIZE, self._n * self.ENTRY_SIZE
        with memoryview(self._buf) as view:
            view[start:end] = bytes(end - start)  # a reopened untrimmed file must not see them
        self._n = n
        self._version += 1
        if not self._file_backed:
            self._length = n * self.ENTRY_SIZE

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (Kafka's ``truncateTo``)."""
        self._truncate_to_entries(int(np.searchsorted(self.offsets, int(offset), side="left")))

    @property
    def offsets(self) -> np.ndarray:
        raise NotImplementedError

    def reset(self) -> None:
        """Remove all entries (Kafka's ``reset`` before a rebuild)."""
        self._truncate_to_entries(0)

    def resize(self, max_index_size: int | None) -> None:
        """Set the capacity to ``max_index_size`` rounded down to whole entries.

        Never below the used length. A mapped file is truncated/extended to that size
        (zero-filled), as Kafka's ``resize``; ``None`` (in-memory only) means no limit.
        """
        self._check_writable()
        used = self._n * self.ENTRY_SIZE
        if not self._file_backed:
            if max_index_size is None:
                entries = _UNLIMITED_ENTRIES
            else:
                entries = max(0, max_index_size) // self.ENTRY_SIZE
            self._max_entries = max(entries, self._n)
            if len(self._buf) > self._max_entries * self.ENTRY_SIZE:
                self._buf = bytearray(memoryview(self._buf)[: self._max_entries * self.ENTRY_SIZE])
            return
        if max_index_size is None:
            raise ConfigError(f"{self._where()}a mapped {self.NAME} needs a size limit")
        size = max(_round_down(max_index_size, self.ENTRY_SIZE), used)
        if size == self._length:
            return
        self._unmap()
        os.truncate(str(self._path), size)
        self._map_file(size)

    def trim(self) -> None:
        """Shrink to the used length (Kafka's ``trimToValidSize``); the index is then full."""
        self.resize(self._n * self.ENTRY_SIZE)

    def flush(self) -> None:
        """Write a mapped file's dirty pages (no-op for other buffers)."""
        if self._mmap is not None and self._writable and not self._closed:
            self._mmap.flush()

    def _unmap(self, *, strict: bool = True) -> None:
        """Unmap our mmap. Live ``raw_entries()`` views make that impossible: raise
        (``strict``, before a resize) or leave the mapping to them (read-only close)."""
        if self._mmap is None:
            return
        if self._writable:
            self._mmap.flush()
        try:
            self._mmap.close()
        except BufferError:
            if strict:
                raise SeglakeError(
                    f"{self._where()}cannot unmap the {self.NAME}: numpy views from "
                    "raw_entries() are still alive"
                ) from None
        self._mmap = None
        self._buf = b""

    def _release(self) -> None:
        self._cache.clear()
        if self._mmap is not None:
            self._unmap(strict=self._writable)
        elif isinstance(self._buf, memoryview):
            with contextlib.suppress(BufferError):  # raw_entries() views alive: they keep it
                self._buf.release()
        self._buf = b""
        self._closed = True

    def close(self) -> None:
        """Trim a writable index to its used length, then release the buffer/mapping."""
        if self._closed:
            return
        if self._writable:
            self.trim()
        self._release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REL = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")


class OffsetIndex(AbstractIndex):
    """The ``.index`` of a segment: sparse map from offset to batch position.

    Entry (8 bytes, big-endian): ``relativeOffset:int32, position:int32``.
    """

    ENTRY_SIZE = 8
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
        return self._base + _REL.unpack_from(self._buf, slot * 8)[0]

    def _native_keys(self) -> np.ndarray:
        return self.offsets

    def _last_entry_offset(self) -> int:
        return self._key_at(self._n - 1)

    @classmethod
    def _first_invalid(cls, raw: np.ndarray) -> tuple[int, str] | None:
        rel = raw["relative_offset"].astype(np.int64)
        pos = raw["position"].astype(np.int64)
        ok = (rel >= 0) & (pos >= 0)
        ok[1:] &= (rel[1:] > rel[:-1]) & (pos[1:] > pos[:-1])
        bad = np.flatnonzero(~ok)
        if not len(bad):
            return None
        i = int(bad[0])
        entry = f"entry (relative offset {rel[i]}, position {pos[i]})"
        if rel[i] < 0 or pos[i] < 0:
            why = f"{entry} is negative"
        else:
            why = (
                f"{entry} is not above the previous entry (relative offset {rel[i - 1]}, "
                f"position {pos[i - 1]}); entries must increase strictly in both fields"
            )
        return i, why

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
        rel, pos = _OFFSET_ENTRY.unpack_from(self._buf, i * 8)
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
        rel, pos = _OFFSET_ENTRY.unpack_from(self._buf, slot * 8)
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
            last_rel, last_pos = _OFFSET_ENTRY.unpack_from(self._buf, (self._n - 1) * 8)
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
            prev_rel, prev_pos = _OFFSET_ENTRY.unpack_from(self._buf, (self._n - 1) * 8)
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
