"""Where a segment's files are: the final path, the run's staged copy, or the copy a
later run retired (:class:`SegmentFiles`, mixed into
:class:`~seglake.storage.segment.LogSegment`).

    a catalog row (path P, run R) reads, once, the first that exists of
        <root>/_retired/R/P   a later run (compaction, merge) replaced P under its name
        <root>/_staging/R/P   committed, not moved out of staging yet
        <root>/P
    and switches between the staged and final copies when the one in use moves away.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, NoReturn, Protocol, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError, SegmentReplacedError
from seglake.storage.naming import LOG_SUFFIX

if TYPE_CHECKING:
    from seglake.storage.segment import LogSegment

__all__ = ["Pin", "SegmentFiles"]

_T = TypeVar("_T")


class Pin(Protocol):
    """A reader pinned to one catalog version, asked (on these error paths only) whether
    a committed segment's file is still the one its row describes; the lake layer's
    :class:`~seglake.lake.pinned.PinnedVersion` (storage never reads the catalog).

        missing(seg, exc)  the .log is gone, or is not the row's (another segment's
                           under its name): ``exc``, or the error to raise instead
        short(seg)         the .log ends before the row's size_bytes: the error to
                           raise for a row a later version replaced, else None (the
                           segment then reports the lost records)
    """

    def missing(self, seg: LogSegment, exc: SegmentNotFoundError) -> Exception: ...

    def short(self, seg: LogSegment) -> Exception | None: ...


class SegmentFiles:
    """File access of a segment (needs ``fs``, ``log_path``, ``stem``, ``size``,
    ``_other_path``, ``_retired_path``, ``_located``, ``exact_size``)."""

    fs: pafs.FileSystem
    log_path: str
    stem: str
    _other_path: str | None
    _retired_path: str | None
    _located: bool
    exact_size: bool
    _replaced: SegmentReplacedError | None = None  # set once the exact size check failed
    _handle: tuple[str, pa.NativeFile] | None = None  # object stores: the open .log
    pin: Pin | None = None  # the catalog version its reader is pinned to (lake readers)

    if TYPE_CHECKING:

        @property
        def size(self) -> int: ...

        def not_row_file(self, why: str) -> SegmentReplacedError: ...

    def _locate(self) -> None:
        """Once: switch to the retired or staged copy if there is one (see the class)."""
        if self._located:
            if self._replaced is not None:
                self.gone(self._replaced)
            return
        self._located = True
        retired = self._retired_path
        if retired is not None and self._exists(retired):
            self._other_path = None
            self.log_path, self.stem = retired, retired[: -len(LOG_SUFFIX)]
        elif self._other_path is not None and self._exists(self._other_path):
            self._fallback()
        if self.exact_size:
            try:
                length = self._file_size()
            except SegmentNotFoundError:
                return  # the read that follows names the missing file
            if length != self.size:
                self._replaced = self.not_row_file(f"the file there has {length} bytes")
                self.gone(self._replaced)

    def gone(self, exc: SegmentNotFoundError) -> NoReturn:
        """Raise the error for a ``.log`` found missing (no copy left) or not its row's
        (:meth:`not_row_file`): ``exc``, or what the reader's :class:`Pin` makes of it (a
        later catalog version removed or replaced the segment)."""
        err = exc if self.pin is None else self.pin.missing(self, exc)  # type: ignore[arg-type]
        if err is exc:
            raise exc
        raise err from exc

    def _fallback(self) -> bool:
        """Switch between the final and the staged copy (the one in use is missing: not
        moved out of staging yet, or moved since); False if the other is missing too."""
        retired = self._retired_path
        if retired is not None and retired != self.log_path and self._exists(retired):
            self._other_path = None  # retired while in use: the copy of this row's version
            self.log_path, self.stem = retired, retired[: -len(LOG_SUFFIX)]
            return True
        other = self._other_path
        if other is None or not self._exists(other):
            return False
        self._other_path = self.log_path
        self.log_path, self.stem = other, other[: -len(LOG_SUFFIX)]
        return True

    def _log_read(self, read: Callable[[str], _T]) -> _T:
        """``read(path of the .log in use)``, once more on the other copy if it is gone."""
        self._locate()
        try:
            return read(self.log_path)
        except SegmentNotFoundError as exc:
            if not self._fallback():
                self.gone(exc)
        try:
            return read(self.log_path)
        except SegmentNotFoundError as exc:
            self.gone(exc)

    def _exists(self, log_path: str) -> bool:
        """Whether a ``.log`` is at ``log_path``. On an object store by opening it (one
        HEAD, no listing), the handle kept for the reads that follow."""
        if lakefs.renames_atomically(self.fs):
            return lakefs.exists(self.fs, log_path)
        try:
            self._handle = (log_path, lakefs.open_ranged(self.fs, log_path))
        except SegmentNotFoundError:
            return False
        return True

    def _file_size(self) -> int:
        """Bytes of the ``.log`` in use (from its kept handle, if it has one)."""
        kept = self._handle
        if kept is not None and kept[0] == self.log_path:
            return int(kept[1].size())
        return lakefs.file_size(self.fs, self.log_path)

    def _ranged(self, start: int, length: int) -> bytes:
        """One ranged read of the ``.log`` in use. On an object store its handle is kept
        (opening costs a metadata request, S3's HEAD: one per file, not one per read);
        a kept handle whose object went away since is dropped and the file opened anew
        (which names a missing file). A local open costs nothing: one per read."""
        if lakefs.renames_atomically(self.fs):
            return lakefs.read_range(self.fs, self.log_path, start, length)
        kept = self._handle
        if kept is not None and kept[0] == self.log_path:
            try:
                return lakefs.read_at(kept[1], self.log_path, start, length, opened=0)
            except OSError:  # the object was deleted or replaced since it was opened
                self._handle = None
        f = lakefs.open_ranged(self.fs, self.log_path)
        self._handle = (self.log_path, f)
        return lakefs.read_at(f, self.log_path, start, length)

    def _read_range(self, start: int, length: int) -> bytes:
        return self._log_read(lambda _: self._ranged(start, length))

    def read_ranges_into(self, ranges: list[tuple[int, int]], out: memoryview) -> list[int]:
        """:meth:`_read_range` of each ``(start, length)`` into ``out``, back to back,
        the ``.log`` opened once; returns the bytes each read got."""
        return self._log_read(lambda p: lakefs.read_ranges_into(self.fs, p, ranges, out))

    def _read_file(self, suffix: str) -> bytes:
        self._locate()
        try:
            return lakefs.read_all(self.fs, self.stem + suffix)
        except SegmentNotFoundError as exc:
            if suffix == LOG_SUFFIX:
                self.gone(exc)
            if not self._fallback():
                raise
            return lakefs.read_all(self.fs, self.stem + suffix)

    def longer(self) -> bool:
        """Whether the ``.log`` in use is longer than ``size`` (one metadata request)."""
        self._locate()
        return self._file_size() > self.size

    def open_local_log(self) -> BinaryIO | None:
        """The ``.log`` in use, opened for reading, when the filesystem is the local one
        (``None`` otherwise): for copying its bytes without reading them into Python."""
        if not lakefs.is_local(self.fs):
            return None

        def opened(path: str) -> BinaryIO:
            try:
                return open(path, "rb")  # the caller closes it
            except FileNotFoundError:
                raise SegmentNotFoundError(f"{path}: no such file") from None

        return self._log_read(opened)

    def log_bytes(self) -> bytes:
        """The whole ``.log``."""
        return self._read_range(0, self.size)

    def index_file(self, suffix: str) -> bytes | None:
        """An index file of the segment (``None`` if it is missing)."""
        try:
            return self._read_file(suffix)
        except SegmentNotFoundError:
            return None
