"""The bytes of an index file: fixed-size big-endian entries, wherever they live.

An index is a pure data structure over a buffer of big-endian entries (a ``bytearray`` it
grows itself, a read-only ``bytes``/``memoryview``/``mmap`` from :meth:`from_bytes`, or
the ``mmap`` of a local file from :meth:`open`), independent of where the bytes live
(local file, object-store ranged read, in-memory build). Scalar reads ``struct`` the
buffer in place; columns are native ``int64`` copies made once per index state
(``np.frombuffer`` with a ``>i4``/``>i8`` dtype, then ``astype``), cached until the next
append/truncate (:meth:`IndexFile._native`).

Files a broker preallocated and did not trim (unclean shutdown) hold trailing all-zero
entries: the entries in use are the longest valid prefix (strictly increasing, see
:meth:`IndexFile.sanity_check`), and only zero bytes may follow it. An all-zero slot 0
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
from pathlib import Path
from typing import Any, ClassVar, Self

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
_UNLIMITED_ENTRIES = INT32_MAX

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "INT32_MAX",
    "IndexFile",
    "IndexFullError",
    "InvalidIndexAppendError",
    "ReadOnlyIndexError",
]


class IndexFullError(SeglakeError):
    """Append to an index that holds ``max_entries`` entries (Kafka rolls the segment first)."""


class InvalidIndexAppendError(CorruptIndexError, OffsetOrderError):
    """An append that would break the index order or does not fit an int32 field."""


class ReadOnlyIndexError(SeglakeError):
    """A write to an index opened read-only (or already closed)."""


def _round_down(number: int, factor: int) -> int:
    return factor * (number // factor)


class IndexFile:
    """Fixed-size big-endian entries in a buffer: what every index file shares.

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (the big-endian on-disk entry) and
    :attr:`NAME`, and implement :meth:`_first_invalid` (the order rules, vectorised),
    which finds the entries in use of a preallocated file.

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

    @classmethod
    def _first_invalid(cls, raw: np.ndarray) -> tuple[int, str] | None:
        """``(slot, why)`` of the first entry that breaks the order rules, or ``None``
        (vectorised over the big-endian entries ``raw``)."""
        raise NotImplementedError

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

    def sanity_check(self) -> None:
        """The file part of Kafka's sanity check, plus the order of every entry in use.

        Raises :class:`CorruptIndexError` (with the path and the numbers) when the length
        is not a multiple of the entry size, or when non-zero bytes follow the longest
        valid prefix (an entry out of order, negative, or garbage).
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

    def _check_writable(self) -> None:
        if self._closed or not self._writable:
            state = "closed" if self._closed else "read-only"
            raise ReadOnlyIndexError(f"{self._where()}{self.NAME} is {state}")

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
