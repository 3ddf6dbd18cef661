"""The batches that hold point reads' answers, gathered from windows of many segments
(:class:`Gather`): their records walked (offsets and timestamps only) and the picked
records decoded, each in one call for all segments; the record reader
(:mod:`seglake.record.reader`) walks, picks and decodes them."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError
from seglake.record.reader import RecordWalk, pick_records
from seglake.record.schema import empty_records
from seglake.storage.segment_window import Window
from seglake.storage.window_records import reader_parts, walk_windows

__all__ = ["Gather"]

log = logging.getLogger("seglake.spark.lookup")  # the lookup job's log, as before


class Gather:
    """Batches holding answers, picked from windows of many segments.

    :meth:`add` returns global ids of the batches it added. :meth:`walk` then finds the
    records of all of them at once (offsets and timestamps only, :func:`walk_windows`),
    queries pick their record (:meth:`offset_records`, :meth:`timestamp_records`), and
    :meth:`decode` decodes just the picked records, in one call.
    """

    def __init__(self) -> None:
        self.parts: list[tuple[Window, np.ndarray, str]] = []
        self.first: list[int] = [0]  # global id of each part's first batch
        self.records: RecordWalk | None = None

    def add(self, w: Window, sel: np.ndarray, path: str) -> np.ndarray:
        self.parts.append((w, sel, path))
        self.first.append(self.first[-1] + len(sel))
        return np.arange(self.first[-2], self.first[-1])

    def raise_error(self, gid: int) -> None:
        """Raise the :class:`CorruptRecordError` of batch ``gid`` (one that does not walk):
        it is decoded the usual way, which names its file, position and the problem."""
        part = int(np.searchsorted(self.first, gid, side="right")) - 1
        w, sel, path = self.parts[part]
        k = gid - self.first[part]
        w.decode(sel[k : k + 1], path=path)
        raise CorruptRecordError("the records of this batch do not walk", path=path)

    def walk(self) -> np.ndarray:
        """Walk the batches' records; returns which batches do not walk (corrupt)."""
        self.records = walk_windows([(w, sel) for w, sel, _ in self.parts])
        return ~self.records.ok

    def offset_records(self, ids: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """:meth:`RecordWalk.offset_records` of the walked batches (-1 before a walk)."""
        if self.records is None:
            return np.full(len(ids), -1, dtype=np.int64)
        return self.records.offset_records(ids, targets)

    def timestamp_records(
        self, ids: np.ndarray, targets: np.ndarray, lo: int | np.ndarray
    ) -> np.ndarray:
        """:meth:`RecordWalk.timestamp_records` of the walked batches (-1 before a walk)."""
        if self.records is None:
            return np.full(len(ids), -1, dtype=np.int64)
        return self.records.timestamp_records(ids, targets, lo)

    def pick(
        self, ids: np.ndarray, targets: np.ndarray, lo: np.ndarray, is_ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`walk` and each target's record at once: ``(record, bad)``, the record
        (-1: none) of :meth:`timestamp_records` (with its ``lo``) where ``is_ts``, else of
        :meth:`offset_records`, and which batches do not walk: the reader's
        :func:`~seglake.record.reader.pick_records` (which chooses the kernel or numpy)."""
        self.records, record = pick_records(reader_parts(self.parts), ids, targets, lo, is_ts)
        return record, ~self.records.ok

    def decode(self, records: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """``(table, row)``: the records ``records`` (-1: none) decoded, ``row[i]`` the
        row of ``records[i]`` (-1: none, or it did not decode: logged)."""
        row = np.full(len(records), -1, dtype=np.int64)
        want = records >= 0
        if self.records is None or not want.any():
            return empty_records(), row
        uniq, which = np.unique(records[want], return_inverse=True)
        try:
            table = self.records.decode(uniq)
            row[want] = which
            return table, row
        except CorruptRecordError:  # decode each window's records alone: keep the good
            part = np.searchsorted(self.first, self.records.batch[uniq], side="right") - 1
            tables, n, got = [], 0, np.full(len(uniq), -1, dtype=np.int64)
            for p in np.unique(part).tolist():
                mine = np.flatnonzero(part == p)
                try:
                    tables.append(self.records.decode(uniq[mine], path=self.parts[p][2]))
                except CorruptRecordError as exc:
                    log.warning("lookup: %s", exc)
                    continue
                got[mine] = n + np.arange(len(mine))
                n += len(mine)
            row[want] = got[which]
            return (pa.concat_tables(tables) if tables else empty_records()), row
