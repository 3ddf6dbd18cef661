"""A segment's files and the catalog row they must match (:class:`SegmentFiles`, owned
by :class:`~seglake.storage.segment.LogSegment`): where they are, reading them, and the
file's identity (the row's ``size_bytes`` and ``next_offset``; a :class:`Pin` asked when
the file is found missing, not its row's, or shorter than its row).

    a catalog row (path P, run R) reads, once, the first that exists of
        <root>/_retired/R/P   a later run (compaction, merge) replaced P under its name
        <root>/_staging/R/P   committed, not moved out of staging yet
        <root>/P
    and switches between the staged and final copies when the one in use moves away.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO, NoReturn, Protocol, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError, SegmentReplacedError
from seglake.record import native
from seglake.record.batch import SkippedBatch, scan_batches
from seglake.storage.naming import LOG_SUFFIX

__all__ = ["Pin", "SegmentFiles"]

_T = TypeVar("_T")


class Pin(Protocol):
    """A reader pinned to one catalog version, asked (on these error paths only) whether
    a committed segment's file is still the one its row describes; the lake layer's
    :class:`~seglake.lake.pinned.PinnedVersion` (storage never reads the catalog).

        missing(files, exc)  the .log is gone, or is not the row's (another segment's
                             under its name): ``exc``, or the error to raise instead
        short(files)         the .log ends before the row's size_bytes: the error to
                             raise for a row a later version replaced, else None (the
                             segment then reports the lost records)
    """

    def missing(self, files: SegmentFiles, exc: SegmentNotFoundError) -> Exception: ...

    def short(self, files: SegmentFiles) -> Exception | None: ...


class SegmentFiles:
    """The files of the segment at ``log_path`` (base offset ``base_offset``) on ``fs``.

    Args:
        row_size, row_next_offset: the catalog row's ``size_bytes`` and ``next_offset``
            (``None``: not a lake row, or not known).
        staged_path, retired_path: the run's staged copy and the copy a later run retired
            (module docstring).
        exact_size: the ``.log`` must be exactly ``row_size`` bytes, else it is another
            segment's (checked at the first access).
    """

    def __init__(
        self,
        fs: pafs.FileSystem,
        log_path: str,
        base_offset: int,
        *,
        row_size: int | None = None,
        row_next_offset: int | None = None,
        staged_path: str | None = None,
        retired_path: str | None = None,
        exact_size: bool = False,
    ) -> None:
        self.fs = fs
        self.log_path = log_path
        self.stem = log_path[: -len(LOG_SUFFIX)]
        self.base_offset = base_offset
        self.row_size, self.row_next_offset = row_size, row_next_offset
        self._other_path = staged_path  # the copy not in use: staged, or final after a switch
        self._retired_path = retired_path
        self.exact_size = exact_size and row_size is not None
        self._located = staged_path is None and retired_path is None and not self.exact_size
        self._replaced: SegmentReplacedError | None = None  # the exact size check failed
        self._handle: tuple[str, pa.NativeFile] | None = None  # object stores: the open .log
        self.pin: Pin | None = None  # the catalog version its reader is pinned to
        self._checked_for: Pin | None = None  # the reader whose copies were last looked for
        self._lost_tail: SkippedBatch | None = None  # a .log cut short: what it lost
        self._cut_checked = False

    # -- identity ---------------------------------------------------------------------
    def not_row_file(self, why: str) -> SegmentReplacedError:
        """The file at ``log_path`` is not the one its catalog row describes (a later run
        published another segment under its name; the row's own copy is gone). Checked
        at no cost on every lake window (an offset at or past the row's ``next_offset``;
        a batch running past ``size_bytes`` in a longer file), and for rows a later
        catalog version replaced (``exact_size``) once per open: the file's length."""
        return SegmentReplacedError(
            f"{self.log_path}: not the file of its catalog row (size_bytes {self.row_size}, "
            f"next_offset {self.row_next_offset}): {why}; a later catalog version replaced "
            "it under the same name"
        )

    def gone(self, exc: SegmentNotFoundError) -> NoReturn:
        """Raise the error for a ``.log`` found missing (no copy left) or not its row's
        (:meth:`not_row_file`): ``exc``, or what the reader's :class:`Pin` makes of it (a
        later catalog version removed or replaced the segment)."""
        err = exc if self.pin is None else self.pin.missing(self, exc)
        if err is exc:
            raise exc
        raise err from exc

    def lost_tail(self, size: int) -> SkippedBatch | None:
        """What a ``.log`` cut short (shorter than ``size``) lost, found once: from the
        end of its last whole batch to the row's ``size_bytes`` and ``next_offset`` (one
        read of the file: error path only). ``None`` when its batches still reach the
        row's last offset: bytes went from its middle, not its end (a recovery's rewrite
        without a damaged batch, before its commit: the damaged batch's offsets are the
        gap recovery reports)."""
        if not self._cut_checked:
            self._lost_tail, self._cut_checked = self._find_lost_tail(size), True
        return self._lost_tail

    def _find_lost_tail(self, size: int) -> SkippedBatch | None:
        length = self.file_size()
        scan = scan_batches(self.read_range(0, length), skip_corrupt=True)
        first = int(scan.last_offset[-1]) + 1 if len(scan) else self.base_offset
        nxt = self.row_next_offset
        if nxt is not None and first >= nxt:
            return None
        last = first - 1 if nxt is None else int(nxt) - 1
        gone = f"offsets {first}..{last}" if nxt is not None else f"offsets from {first}"
        why = (
            f"cut short: the file has {length} bytes, its catalog row {size} "
            f"(size_bytes); {gone} are gone (data loss; `seglake recover` commits what is "
            "left)"
        )
        return SkippedBatch(scan.valid_bytes, size - scan.valid_bytes, first, last, why)

    # -- where the files are ----------------------------------------------------------
    def locate(self) -> None:
        """Once: switch to the retired or staged copy if there is one (module docstring);
        with ``exact_size``, check the ``.log``'s length against the row."""
        if self._located:
            if self._replaced is not None:
                self.gone(self._replaced)
            return
        self._located = True
        self._checked_for = self.pin
        retired = self._retired_path
        if retired is not None and self._exists(retired):
            self._other_path = None
            self._use(retired)
        elif self._other_path is not None and self._exists(self._other_path):
            self.fallback()
        if self.exact_size:
            try:
                length = self.file_size()
            except SegmentNotFoundError:
                return  # the read that follows names the missing file
            if length != self.row_size:
                self._replaced = self.not_row_file(f"the file there has {length} bytes")
                self.gone(self._replaced)

    def retired_since(self) -> bool:
        """Whether a later run retired this row's files since they were located (a
        segment kept open, e.g. in the index cache, while a compaction replaced it under
        its name): then switch to the retired copy, the one this row's version reads (one
        existence check; none once on the retired copy or for a row without a run).

        Once per reader: no request when the reader now pinned (:attr:`pin`, the same
        object) already looked, here or when the files were located, as a segment it
        opened itself would not look again (a compaction meanwhile: its pin's error
        paths). Not once per pinned version: a pin of an older version is made again
        after a compaction (a notebook ``Lake`` looks up twice); unpinned readers look
        every time."""
        retired = self._retired_path
        if retired is None or retired == self.log_path or not self._located:
            return False
        if self.pin is not None and self._checked_for is self.pin:
            return False
        self._checked_for = self.pin
        if not self._exists(retired):
            return False
        self._other_path, self._replaced = None, None
        self._use(retired)
        return True

    def _use(self, log_path: str) -> None:
        self.log_path, self.stem = log_path, log_path[: -len(LOG_SUFFIX)]

    def fallback(self) -> bool:
        """Switch between the final and the staged copy (the one in use is missing: not
        moved out of staging yet, or moved since); False if the other is missing too."""
        retired = self._retired_path
        if retired is not None and retired != self.log_path and self._exists(retired):
            self._other_path = None  # retired while in use: the copy of this row's version
            self._use(retired)
            return True
        other = self._other_path
        if other is None or not self._exists(other):
            return False
        self._other_path = self.log_path
        self._use(other)
        return True

    def _log_read(self, read: Callable[[str], _T]) -> _T:
        """``read(path of the .log in use)``, once more on the other copy if it is gone."""
        self.locate()
        try:
            return read(self.log_path)
        except SegmentNotFoundError as exc:
            if not self.fallback():
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

    # -- reading them -----------------------------------------------------------------
    def file_size(self) -> int:
        """Bytes of the ``.log`` in use. On an object store from its kept handle, opened
        if there is none: the HEAD that gives the size is the one the reads that follow
        use (not a HEAD for the size, then another to open it)."""
        kept = self._handle
        if kept is None or kept[0] != self.log_path:
            if lakefs.renames_atomically(self.fs):
                return lakefs.file_size(self.fs, self.log_path)
            kept = self._handle = (self.log_path, lakefs.open_ranged(self.fs, self.log_path))
        return int(kept[1].size())

    def log_size(self) -> int:
        """:meth:`file_size` of the ``.log``, located first, on the other copy if it is
        gone (the missing file's error otherwise)."""
        self.locate()
        try:
            return self.file_size()
        except SegmentNotFoundError as exc:
            if not self.fallback():
                self.gone(exc)
            return self.file_size()

    def _ranged(self, start: int, length: int) -> bytes:
        """One ranged read of the ``.log`` in use. On an object store its handle is kept
        (opening costs a metadata request, S3's HEAD: one per file, not one per read);
        a kept handle whose object went away since is dropped and the file opened anew
        (which names a missing file). A local open costs nothing: one per read."""
        if lakefs.renames_atomically(self.fs):
            return lakefs.read_range(self.fs, self.log_path, start, length)
        return self._through_handle(
            lambda f, opened: lakefs.read_at(f, self.log_path, start, length, opened=opened)
        )

    def _through_handle(self, read: Callable[[pa.NativeFile, int], _T]) -> _T:
        """``read(handle, files opened)`` through the kept handle of the ``.log`` in use
        (object stores), opened if there is none; a kept handle whose object went away
        since is dropped and the file opened anew (which names a missing file)."""
        kept = self._handle
        if kept is not None and kept[0] == self.log_path:
            try:
                return read(kept[1], 0)
            except OSError:  # the object was deleted or replaced since it was opened
                self._handle = None
        f = lakefs.open_ranged(self.fs, self.log_path)
        self._handle = (self.log_path, f)
        return read(f, 1)

    def read_range(self, start: int, length: int) -> bytes:
        """``length`` bytes of the ``.log`` from ``start`` (fewer at its end)."""
        return self._log_read(lambda _: self._ranged(start, length))

    def read_ranges_into(self, ranges: list[tuple[int, int]], out: memoryview) -> list[int]:
        """:meth:`read_range` of each ``(start, length)`` into ``out``, back to back,
        the ``.log`` opened once (on an object store: its kept handle, see :meth:`_ranged`);
        returns the bytes each read got."""
        if lakefs.renames_atomically(self.fs):  # (a local file: many ranges in one call)
            return self._log_read(
                lambda p: lakefs.read_ranges_into(
                    self.fs, p, ranges, out, pread_many=native.pread_ranges
                )
            )
        return self._log_read(
            lambda p: self._through_handle(
                lambda f, opened: lakefs.read_ranges_into(
                    self.fs, p, ranges, out, handle=f, opened=opened
                )
            )
        )

    def read_file(self, suffix: str) -> bytes:
        """The whole file of the segment with ``suffix``."""
        return self._whole(suffix, lakefs.read_all)

    def _whole(self, suffix: str, read: Callable[[pafs.FileSystem, str], _T]) -> _T:
        """``read(fs, path)`` of the segment's file with ``suffix``, on the other copy if
        it is gone."""
        self.locate()
        try:
            return read(self.fs, self.stem + suffix)
        except SegmentNotFoundError as exc:
            if suffix == LOG_SUFFIX:
                self.gone(exc)
            if not self.fallback():
                raise
            return read(self.fs, self.stem + suffix)

    def read_index(self, suffix: str, limit: int) -> tuple[bytes, int]:
        """At most ``limit`` bytes of the segment's index file with ``suffix`` (an index
        is never read past the entries its log can have), and the file's length."""
        self.locate()
        try:
            return lakefs.read_head(self.fs, self.stem + suffix, limit)
        except SegmentNotFoundError:
            if not self.fallback():
                raise
            return lakefs.read_head(self.fs, self.stem + suffix, limit)

    def longer(self, size: int) -> bool:
        """Whether the ``.log`` in use is longer than ``size`` (one metadata request)."""
        self.locate()
        return self.file_size() > size

    def open_local_log(self) -> BinaryIO | None:
        """The ``.log`` in use, opened for reading, when the filesystem is the local one
        (``None`` otherwise): for copying its bytes without reading them into Python."""
        if not lakefs.is_local(self.fs):
            return None

        def opened(path: str) -> BinaryIO:
            lakefs.check_regular(self.fs, path)
            try:
                return open(path, "rb")  # the caller closes it
            except FileNotFoundError:
                raise SegmentNotFoundError(f"{path}: no such file") from None

        return self._log_read(opened)

    def index_file(self, suffix: str) -> bytes | None:
        """An index file of the segment (``None`` if it is missing)."""
        try:
            return self.read_file(suffix)
        except SegmentNotFoundError:
            return None

    def index_buffer(self, suffix: str) -> pa.Buffer | None:
        """:meth:`index_file` as an Arrow buffer (a large file parsed in place)."""
        try:
            return self._whole(suffix, lakefs.read_all_buffer)
        except SegmentNotFoundError:
            return None
