"""One topic-partition of a lake at the lake's pinned catalog version."""

from __future__ import annotations

import dataclasses
import html
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.api.show import As, html_table, output
from seglake.lake.key_plan import per_segment
from seglake.lake.pinned import PinnedVersion
from seglake.lake.rows import segment_refs
from seglake.lake.scan import ALL, Range, Scan, SegmentTask, check_isolation_level
from seglake.lake.scan_read import SplitReads, read_tasks
from seglake.lake.snapshot import Snapshot
from seglake.record.batch import SkippedBatch
from seglake.record.schema import empty_records, to_kafka_source
from seglake.render import iso, size_text
from seglake.storage.log import PartitionLog
from seglake.storage.segment import TimestampOffset
from seglake.storage.stats import STAT_COLUMNS
from seglake.storage.window_records import NO_TS_HI, NO_TS_LO
from seglake.times import TimeLike, to_millis

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from seglake.api.lake import Lake


class LRU:
    """Decoded chunks by key, least recently used dropped beyond ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[Any, pa.Table] = OrderedDict()

    def get(self, key: Any) -> pa.Table | None:
        t = self._items.get(key)
        if t is not None:
            self._items.move_to_end(key)
        return t

    def put(self, key: Any, t: pa.Table) -> None:
        if key in self._items:
            return
        self._items[key] = t
        self.bytes += t.nbytes
        while self.bytes > self.max_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self.bytes -= old.nbytes

    def drop(self, topic: str, partition: int) -> None:
        for key in [k for k in self._items if k[:2] == (topic, partition)]:
            self.bytes -= self._items.pop(key).nbytes


class Partition:
    """One topic-partition of a lake at the lake's pinned catalog version.

    Get one with :meth:`Lake.partition`; it keeps its :class:`PartitionLog` (and so every
    index already read) for the lake's lifetime.
    """

    def __init__(self, lake: Lake, topic: str, partition: int, rows: pa.Table) -> None:
        self.lake = lake
        self.topic = topic
        self.partition = partition
        self.rows = rows
        fs, base = lake.handle.fs, lake.handle.base
        self.log = PartitionLog.from_refs(
            fs,
            base,
            segment_refs(rows),
            on_corrupt=lake.on_corrupt,
            replaced=lake.replaced(topic, partition),
            # a file of this version gone or replaced since: one VersionSupersededError
            pin=PinnedVersion(lake.handle, lake.version, rows={(topic, partition): rows}),
        )
        # every read is planned on this (one partition at the lake's version, this log)
        self._snapshot = Snapshot.of_log(
            lake.location, lake.version, (topic, partition), rows, self.log
        )
        self._by_base = {s.base_offset: s for s in self.log.segments}
        self._min_ts = rows.column("min_timestamp").to_numpy()
        self._max_ts = rows.column("max_timestamp").to_numpy()

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic!r}, {self.partition}, segments={len(self.log.segments)}, "
            f"offsets={self.log_start_offset}..{self.log_end_offset})"
        )

    @property
    def log_start_offset(self) -> int:
        """First offset (smallest base offset in the catalog)."""
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Last offset + 1."""
        return self.log.log_end_offset

    @property
    def skipped(self) -> list[tuple[str, SkippedBatch]]:
        """``(file, batch)`` of each damaged batch skipped so far (``on_corrupt="skip"``)."""
        return self.log.skipped

    def segments(self) -> pd.DataFrame:
        """This partition's catalog rows."""
        return self.rows.to_pandas()

    def read(self, offset: int, max_records: int = 10, *, as_: As = "pandas") -> Any:
        """Up to ``max_records`` records from ``offset`` on (Kafka source columns).

        Offsets below the log start read from the log start; at or past the log end, none.
        Planned as every read is: a :class:`~seglake.lake.scan.Scan` of the offsets
        ``[offset, offset + max_records)`` (then windows twice as wide, where compaction
        or control records left gaps) cut at every offset index position, so each task is
        one index interval of the plan's segment. Each is read whole by
        :func:`~seglake.lake.scan_read.read_tasks` and kept in the lake's LRU cache: a
        repeated lookup near an offset decodes nothing.
        """
        if max_records < 0:
            raise ValueError(f"max_records {max_records} < 0")
        tp = (self.topic, self.partition)
        want, leo = max(int(offset), self.log_start_offset), self.log_end_offset
        lo, span, need = want, max(max_records, 1), max_records
        parts, done = [], set()
        while need > 0 and lo < leo:
            hi = min(lo + span, leo)
            for task in Scan(self._snapshot, offsets={tp: (lo, hi)}, split_bytes=1).tasks():
                key = (*tp, task.base_offset, task.start_pos)
                if need == 0:
                    break
                if key in done:  # read whole by the previous window
                    continue
                done.add(key)
                t = self._interval(key, task)
                k = int(np.searchsorted(t.column("offset").to_numpy(), want, side="left"))
                if k < t.num_rows:
                    t = t.slice(k, need)
                    parts.append(t)
                    need -= t.num_rows
                    want = int(t.column("offset")[-1].as_py()) + 1
            lo, span = max(hi, want), 2 * span
        if not parts:
            t = to_kafka_source(empty_records(), *tp)
        elif len(parts) == 1:
            t = parts[0]
        else:
            t = pa.concat_tables(parts)
        return output(t, as_)

    def _interval(self, key: tuple[str, int, int, int], task: SegmentTask) -> pa.Table:
        """Every record (Kafka source columns) of ``task``'s bytes, one index interval
        of its segment: the task read with its segment's offsets, from the lake's cache."""
        cache = self.lake._cache
        t = cache.get(key)
        if t is None:
            whole = dataclasses.replace(
                task, lo=task.base_offset, hi=task.next_offset, extend=False
            )
            t = self._read_tasks([whole], SplitReads())
            # its own buffers (the decoder's are sized for more): the LRU counts them
            t = t.take(np.arange(t.num_rows))
            cache.put(key, t)
        return t

    def _records(self, offsets: Range = ALL) -> Iterator[pa.Table]:
        """Records (internal columns, no headers) of ``offsets`` of this partition, one
        planned task at a time (at most a split of log each): the pictures' reads."""
        how = SplitReads(headers=False, records=True)
        for task in Scan(self._snapshot, offsets=offsets).tasks():
            yield self._read_tasks([task], how)

    def _read_tasks(self, tasks: list[SegmentTask], how: SplitReads) -> pa.Table:
        """``tasks`` (planned on :attr:`_snapshot`) read with this partition's segments."""
        return read_tasks(lambda t: self._by_base[t.base_offset], tasks, how)

    def offsets_for_times(self, ts: TimeLike) -> TimestampOffset | None:
        """Kafka's offsetsForTimes for this partition.

        Args:
            ts: epoch ms, datetime, ISO string (before 1970: ConfigError); or -2 /
                ``"earliest"``, -1 / ``"latest"`` (``(-1, offset)``), -3 / ``"max"`` the
                first record with the largest timestamp.

        Returns:
            ``TimestampOffset(timestamp, offset)`` of the first record with timestamp >=
            ``ts``, or ``None`` when there is none.
        """
        return self.log.offsets_for_times(to_millis(ts, allow_special=True))

    def range(self, start: TimeLike, end: TimeLike, *, as_: As = "pandas") -> Any:
        """Records with ``start <= timestamp < end``, in offset order.

        Exact under non-monotonic timestamps: a :class:`~seglake.lake.scan.Scan` with the
        time filter plans the read (segments pruned with the catalog's min/max
        timestamps, each entered at its time index's floor of ``start`` and read up to
        the first of its tail minima >= ``end``), :func:`~seglake.lake.scan_read.read_tasks`
        reads it with this partition's segments.

        Raises:
            ValueError: ``start`` after ``end`` (as Kafka's source refuses it; an equal
                pair is the empty range).
        """
        lo, hi = to_millis(start), to_millis(end)
        if lo > hi:
            raise ValueError(f"range: start {start!r} ({lo} ms) is after end {end!r} ({hi} ms)")
        tp = (self.topic, self.partition)
        if hi == lo:
            return output(to_kafka_source(empty_records(), *tp), as_)
        tasks = Scan(self._snapshot, times=(lo, hi)).plan()
        return output(self._read_tasks(tasks, SplitReads()), as_)

    def find(
        self,
        keys: Sequence[bytes | str | None],
        start: TimeLike | None = None,
        end: TimeLike | None = None,
        *,
        as_: As = "pandas",
        isolation_level: str = "read_uncommitted",
    ) -> Any:
        """Every record whose key is one of ``keys`` (bytes; str as UTF-8), with
        ``start <= timestamp < end`` when given, in offset order (Kafka source columns;
        ``isolation_level="read_committed"`` leaves out aborted transactions' records,
        by default they are read as read_uncommitted reads them).

        Planned as every read is (a :class:`~seglake.lake.scan.Scan`: segments pruned by
        the catalog's min/max timestamps, aborted transactions under read_committed),
        then read by key as the data source's pushed-down keys and ``consume --key`` are
        (:func:`~seglake.lake.scan_read.read_tasks`: each segment's ``.keyindex``, its
        filter, its sorted hashes, then the key bytes compared). A segment without a
        usable key index is scanned: one warning says which and why.
        """
        lo = NO_TS_LO if start is None else to_millis(start)
        hi = NO_TS_HI if end is None else to_millis(end)
        level = check_isolation_level(isolation_level)
        asked = tuple(k.encode() if isinstance(k, str) else k for k in keys if k is not None)
        how = SplitReads(isolation_level=level, keys=asked, scanned=[])
        tasks = per_segment(Scan(self._snapshot, times=(lo, hi), isolation_level=level).tasks())
        t = self._read_tasks(tasks, how)
        if how.scanned:
            warnings.warn(
                f"{self.topic}-{self.partition}: {len(how.scanned)} segment(s) scanned without "
                f"a key index, e.g. {how.scanned[0]}",
                stacklevel=3,
            )
        return output(t, as_)

    def summary(self) -> dict[str, Any]:
        """One :meth:`Lake.describe` row."""
        r = self.rows
        mins = self._min_ts[self._min_ts >= 0]
        return {
            "topic": self.topic,
            "partition": self.partition,
            "segments": r.num_rows,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "records": int(pc.sum(r.column("record_count")).as_py() or 0),
            "size_bytes": int(pc.sum(r.column("size_bytes")).as_py() or 0),
            "min_timestamp": int(mins.min()) if len(mins) else -1,
            "max_timestamp": int(self._max_ts.max()) if len(self._max_ts) else -1,
            "index_entries": int(pc.sum(r.column("index_entries")).as_py() or 0),
            "time_index_entries": int(pc.sum(r.column("time_index_entries")).as_py() or 0),
            "codec": ",".join(sorted(set(r.column("codec").to_pylist()))),
        }

    def _repr_html_(self) -> str:
        s = self.summary()
        head = (
            f"<b>{html.escape(self.topic)}-{self.partition}</b> &nbsp; offsets "
            f"{s['log_start_offset']}..{s['log_end_offset']} &nbsp; {s['records']} records "
            f"&nbsp; {size_text(s['size_bytes'])} &nbsp; {iso(s['min_timestamp'])} .. "
            f"{iso(s['max_timestamp'])} UTC &nbsp; catalog version {self.lake.version}"
        )
        cols = [
            self.rows.column(c).to_pylist()
            for c in ("base_offset", *STAT_COLUMNS[: STAT_COLUMNS.index("codec") + 1])
        ]
        rows = [
            [b, n, c, iso(lo), iso(hi), size_text(sz), ie, te, codec]
            for b, n, c, lo, hi, sz, ie, te, codec in zip(*cols, strict=True)
        ]
        table = html_table(
            [
                "base offset",
                "next offset",
                "records",
                "min timestamp (UTC)",
                "max timestamp (UTC)",
                "size",
                "index entries",
                "time index entries",
                "codec",
            ],
            rows,
            right={0, 1, 2, 5, 6, 7},
        )
        return f"<div>{head}{table}</div>"

    def plot_index(self, segment_base_offset: int | None = None) -> Figure:
        """Index entries of one segment (default: the first); see :mod:`seglake.plot`."""
        from seglake import plot

        name = f"{self.topic}-{self.partition}"
        seg = plot.segment_of(name, self.log, segment_base_offset)
        parts = list(self._records((seg.base_offset, seg.next_offset)))
        recs = pa.concat_tables(parts) if parts else empty_records(headers=False)
        return plot.plot_index(name, seg, recs)
