"""The bytes of an index file: fixed-size big-endian entries, wherever they live (read side).

An index is a pure data structure over a buffer of big-endian entries (a ``bytearray`` it
grows itself, a read-only ``bytes``/``memoryview``/``mmap`` from :meth:`from_bytes`, or
the ``mmap`` of a local file from :meth:`open`), independent of where the bytes live
(local file, object-store ranged read, in-memory build). Scalar reads ``struct`` the
buffer in place; columns are native ``int64`` copies made once per index state
(``np.frombuffer`` with a ``>i4``/``>i8`` dtype, then ``astype``), cached until the next
append/truncate (:meth:`IndexBuffer._native`).

Files a broker preallocated and did not trim (unclean shutdown) hold trailing all-zero
entries: the entries in use are the longest valid prefix (strictly increasing, see
:meth:`IndexBuffer.sanity_check`), and only zero bytes may follow it. An all-zero slot 0
counts as an entry only when the buffer is exactly one entry long or non-zero bytes
follow it (an empty preallocated file is all zeros; a real ``(base offset, 0)`` /
``(timestamp 0, base offset)`` entry followed by zeros is ambiguous and read as unused,
which keeps lookups exact: it is also the answer of an empty index).

An index is never read past the entries its ``.log`` can have (:meth:`IndexBuffer.read_limit`:
one entry per batch at most, a batch at least 61 bytes): the rest of a larger file (a
sparse multi-GiB one) is not read and counts as unused, as trailing zero entries do in
Kafka; :meth:`IndexBuffer.from_bytes` is told the file's whole ``length``.

The writable side (appends, truncation, resize, the ``mmap`` of a local file, close) is
:class:`seglake.storage.index_file.IndexFile`, a subclass. A reader that lists every entry
of a file (``seglake dump``) takes it in windows of whole entries: :func:`entry_windows`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import Any, ClassVar, Self

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import (
    CorruptIndexError,
    OffsetOrderError,
    SeglakeError,
)
from seglake.format import DEFAULT_INDEX_SIZE_MAX_BYTES as DEFAULT_MAX_INDEX_SIZE
from seglake.format import INT32_MAX
from seglake.record.batch import HEADER_SIZE

_UNLIMITED_ENTRIES = INT32_MAX

__all__ = [
    "DEFAULT_MAX_INDEX_SIZE",
    "INT32_MAX",
    "IndexBuffer",
    "IndexFullError",
    "InvalidIndexAppendError",
    "ReadOnlyIndexError",
    "entry_windows",
]


class IndexFullError(SeglakeError):
    """Append to an index that holds ``max_entries`` entries (Kafka rolls the segment first)."""


class InvalidIndexAppendError(CorruptIndexError, OffsetOrderError):
    """An append that would break the index order or does not fit an int32 field."""


class ReadOnlyIndexError(SeglakeError):
    """A write to an index opened read-only (or already closed)."""


def _round_down(number: int, factor: int) -> int:
    return factor * (number // factor)


class IndexBuffer:
    """The read side of an index: its buffer, the entries in use, columns, validation.

    Subclasses set :attr:`ENTRY_SIZE`, :attr:`DTYPE` (the big-endian on-disk entry) and
    :attr:`NAME`, and implement :meth:`entries_ok` / :meth:`entry_problem` (the order
    rules, vectorised).
    """

    ENTRY_SIZE: ClassVar[int]
    DTYPE: ClassVar[np.dtype]
    NAME: ClassVar[str]

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
    def read_limit(cls, log_size: int) -> int:
        """The most bytes of an index file in use beside a ``.log`` of ``log_size``
        bytes: one entry per batch at most, each batch at least a 61-byte header (what
        a reader reads of a larger, preallocated or sparse, file; module docstring)."""
        return cls.ENTRY_SIZE * (max(log_size, 0) // HEADER_SIZE + 1)

    @classmethod
    def from_bytes(
        cls,
        buf: bytes | bytearray | memoryview | mmap.mmap,
        base_offset: int,
        path: str | os.PathLike[str] | None = None,
        *,
        length: int | None = None,
    ) -> Self:
        """A read-only index over ``buf`` (not copied: keep ``buf`` alive and unchanged).

        ``buf`` is the index file, trimmed or preallocated, whole or its first bytes
        (:meth:`read_limit`; ``length``: the whole file's, for the sanity check). Never
        raises for its content; call :meth:`sanity_check` to validate it.
        """
        self = cls.__new__(cls)
        self._setup(base_offset, path)
        view = memoryview(buf).cast("B")
        self._buf = view
        self._length = len(view) if length is None else max(length, len(view))
        self._max_entries = self._length // cls.ENTRY_SIZE
        self._n, self._problem = self._scan_used(self._buf, len(view))
        return self

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
        """``(slot, why)`` of the first entry that breaks the order rules, or ``None``."""
        bad = np.flatnonzero(~cls.entries_ok(raw))
        return None if not len(bad) else (int(bad[0]), cls.entry_problem(raw, int(bad[0])))

    @classmethod
    def entries_ok(cls, raw: np.ndarray) -> np.ndarray:
        """Per entry of the big-endian entries ``raw``: whether it keeps the order rules
        against the entry before it (vectorised)."""
        raise NotImplementedError

    @classmethod
    def entry_problem(cls, raw: np.ndarray, i: int) -> str:
        """Why entry ``i`` of ``raw`` breaks the rules (``entries_ok(raw)[i]`` is False)."""
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


def entry_windows(
    fs: pafs.FileSystem, path: str, entry_size: int, size: int
) -> Iterator[tuple[int, bytes]]:
    """The first ``size`` bytes of an index file in windows of whole ``entry_size``-byte
    entries (at most :data:`~seglake.fs.WINDOW_BYTES` each), with each window's file
    position: a sparse or hostile multi-GiB file is never read whole, and a caller may stop
    at any window. Ends early where the file does."""
    window = entry_size * (lakefs.WINDOW_BYTES // entry_size)
    pos = 0
    while pos < size:
        chunk = lakefs.read_range(fs, path, pos, min(window, size - pos))
        if not chunk:
            return
        yield pos, chunk
        pos += len(chunk)
