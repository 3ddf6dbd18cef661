"""The writable side of an index file: appends, truncation, resize, ``mmap`` of a local file.

The read side (buffer, entries in use, columns, sanity check) is
:class:`seglake.storage.index_buffer.IndexBuffer`; see its module for the byte layout and
how a preallocated file's entries in use are found.

Concurrent lookups are safe; appends, truncation, resize and close need the caller's lock
(Kafka's index lock), as does reading while another thread appends.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from pathlib import Path
from typing import Self

import numpy as np

from seglake.errors import ConfigError, CorruptIndexError, SeglakeError, SegmentNotFoundError
from seglake.format import INT32_MAX
from seglake.storage.index_buffer import (
    _UNLIMITED_ENTRIES,
    DEFAULT_MAX_INDEX_SIZE,
    IndexBuffer,
    IndexFullError,
    InvalidIndexAppendError,
    ReadOnlyIndexError,
    _round_down,
)

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "INT32_MAX",
    "IndexFile",
    "IndexFullError",
    "InvalidIndexAppendError",
    "ReadOnlyIndexError",
]


class IndexFile(IndexBuffer):
    """Fixed-size big-endian entries in a buffer: what every index file shares.

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (the big-endian on-disk entry) and
    :attr:`NAME`, and implement :meth:`_first_invalid` (the order rules, vectorised),
    which finds the entries in use of a preallocated file.

    Construction: ``Cls(base_offset, max_index_size)`` is an empty in-memory writable
    index (``max_index_size=None``: no limit); :meth:`from_bytes` wraps bytes read from
    anywhere (read-only, zero-copy); :meth:`open` maps a local file.
    """

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
