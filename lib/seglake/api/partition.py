"""One topic-partition of a lake at the lake's pinned catalog version."""

from __future__ import annotations

import html
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.api.show import As, html_table, output
from seglake.lake.pinned import PinnedVersion
from seglake.lake.rows import segment_refs
from seglake.lake.scan import Scan
from seglake.lake.scan_read import SplitReads, read_tasks
from seglake.lake.snapshot import Snapshot
from seglake.record.batch import SkippedBatch
from seglake.record.schema import empty_records, to_kafka_source
from seglake.render import iso, size_text
from seglake.storage.key_lookup import find_keys
from seglake.storage.log import PartitionLog
from seglake.storage.segment import TimestampOffset
from seglake.storage.stats import STAT_COLUMNS
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
        self._min_ts = rows.column("min_timestamp").to_numpy()
        self._bounds: dict[int, np.ndarray] = {}
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
        Records are decoded one index interval (chunk) at a time and the decoded chunks
        kept in the lake's LRU cache, so a repeated lookup near an offset decodes nothing.
        """
        if max_records < 0:
            raise ValueError(f"max_records {max_records} < 0")
        log = self.log
        offset = max(int(offset), self.log_start_offset)
        i = log.segment_index_for_offset(offset) if max_records else None
        parts, need = [], max_records
        while i is not None and i < len(log.segments) and need > 0:
            bounds = self._chunk_bounds(i)
            j = int(np.searchsorted(bounds, offset, side="right")) - 1
            while j < len(bounds) - 1 and need > 0:
                t = self._chunk(i, bounds, j)
                offs = t.column("offset").to_numpy()
                k = int(np.searchsorted(offs, offset, side="left"))
                if k < len(offs):
                    t = t.slice(k, need)
                    parts.append(t)
                    need -= t.num_rows
                j += 1
            i += 1
            offset = 0
        if not parts:
            t = to_kafka_source(empty_records(), self.topic, self.partition)
        elif len(parts) == 1:
            t = parts[0]
        else:
            t = pa.concat_tables(parts)
        return output(t, as_)

    def _chunk_bounds(self, i: int) -> np.ndarray:
        """Offsets splitting segment ``i`` into index intervals: segment base, each offset
        index entry's offset + 1, the segment's next offset."""
        b = self._bounds.get(i)
        if b is None:
            seg = self.log.segments[i]
            inner = seg.offset_index.offsets + 1
            inner = inner[(inner > seg.base_offset) & (inner < seg.next_offset)]
            b = self._bounds[i] = np.unique(
                np.concatenate([[seg.base_offset], inner, [seg.next_offset]]).astype(np.int64)
            )
        return b

    def _chunk(self, i: int, bounds: np.ndarray, j: int) -> pa.Table:
        """Decoded records (Kafka source columns) of chunk ``j`` of segment ``i``."""
        seg = self.log.segments[i]
        key = (self.topic, self.partition, seg.base_offset, j)
        cache = self.lake._cache
        t = cache.get(key)
        if t is None:
            recs = seg.read_records(int(bounds[j]), int(bounds[j + 1]))
            t = to_kafka_source(recs, self.topic, self.partition)
            cache.put(key, t)
        return t

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
        snapshot = Snapshot.of_log(self.lake.location, self.lake.version, tp, self.rows, self.log)
        tasks = Scan(snapshot, times=(lo, hi)).plan()
        segments = {s.base_offset: s for s in self.log.segments}
        recs = read_tasks(lambda t: segments[t.base_offset], tasks, SplitReads())
        return output(recs, as_)

    def find(
        self,
        keys: Sequence[bytes | str | None],
        start: TimeLike | None = None,
        end: TimeLike | None = None,
        *,
        as_: As = "pandas",
    ) -> Any:
        """Every record whose key is one of ``keys`` (bytes; str as UTF-8), with
        ``start <= timestamp < end`` when given, in offset order (Kafka source columns;
        aborted transactional records included, as read_uncommitted reads them).

        Each segment is asked through its ``.keyindex`` (:func:`~seglake.storage.
        key_lookup.find_keys`: its filter, its sorted hashes, then the key bytes compared);
        segments whose time range misses ``[start, end)`` are skipped. A segment without
        a usable key index is scanned: one warning says which and why.
        """
        lo = None if start is None else to_millis(start)
        hi = None if end is None else to_millis(end)
        parts, scanned = [], []
        for seg in self.log.segments:
            if lo is not None and seg.max_timestamp < lo:
                continue
            m = find_keys(seg, list(keys))
            if m.scanned:
                scanned.append(m.status)
            t = m.records.drop_columns(["query"])
            ts = t.column("timestamp")
            if lo is not None:
                t = t.filter(pc.greater_equal(ts, lo))
                ts = t.column("timestamp")
            if hi is not None:
                t = t.filter(pc.less(ts, hi))
            parts.append(t)
        if scanned:
            warnings.warn(
                f"{self.topic}-{self.partition}: {len(scanned)} segment(s) scanned without "
                f"a key index, e.g. {scanned[0]}",
                stacklevel=3,
            )
        recs = pa.concat_tables(parts) if parts else empty_records()
        return output(to_kafka_source(recs, self.topic, self.partition), as_)

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

        return plot.plot_index(f"{self.topic}-{self.partition}", self.log, segment_base_offset)
