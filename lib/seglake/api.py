"""The notebook / driver-side API: ``seglake.open(root)``, no Spark needed.

    lake = seglake.open("/data/lake")       # catalog version pinned here
    lake.topics(); lake.partitions("orders"); lake.segments("orders"); lake.describe()
    p = lake.partition("orders", 3)
    p.read(1234, max_records=10)            # pandas (as_="arrow" for a pyarrow Table)
    p.offsets_for_times("2026-01-01T00:05:00Z")   # also ms, datetime, -1/-2/-3
    p.range("2026-01-01T00:05", "2026-01-01T00:06")  # start <= timestamp < end, exact
    lake.refresh()                          # move to the catalog's newest version

Reads are consistent: every call on a :class:`Lake` sees the catalog version it was
opened (or last refreshed) at, even if ingest runs commit meanwhile. Opened partitions are
cached with their segments, whose indexes are read once, so a warm point lookup costs a
ranged read of one index interval and the decode of the batches in it.

Records come back in the Spark Kafka source's shape (``key, value, topic, partition,
offset, timestamp, timestampType, headers``), the same columns the jobs return.

Pictures (matplotlib, imported only when asked for): :meth:`Lake.plot_segments`,
:meth:`Lake.plot_rate`, :meth:`Partition.plot_index`; see :mod:`seglake.plot`.
"""

from __future__ import annotations

import datetime as dt
import html
import itertools
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError
from seglake.lake.catalog import Catalog
from seglake.record.schema import empty_records, to_kafka_source
from seglake.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLog,
)
from seglake.storage.segment import TimestampOffset
from seglake.storage.tail_minima import cutoff

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["Lake", "Partition", "TimestampOffset", "open", "to_millis"]

As = Literal["pandas", "arrow"]
TimeLike = int | str | dt.datetime | dt.date | np.datetime64 | Any
_MAX_HTML_ROWS = 50
DEFAULT_CACHE_BYTES = 64 << 20


# ---------------------------------------------------------------------------------- times


def to_millis(ts: TimeLike, *, allow_special: bool = False) -> int:
    """Epoch milliseconds of ``ts``.

    Accepts an int (ms; with ``allow_special`` also -1 latest, -2 earliest, -3 max), a
    ``datetime``/``pandas.Timestamp``/``numpy.datetime64`` or an ISO-8601 string. Naive
    times are UTC.

    Raises:
        ValueError: negative ms (other than -1/-2/-3 when allowed), or an unparsable value.
    """
    if isinstance(ts, (bool, np.bool_)):
        raise ValueError(f"timestamp {ts!r}: expected ms, datetime or ISO string")
    if isinstance(ts, (int, np.integer)):
        ms = int(ts)
        if ms < 0 and not (
            allow_special and ms in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP)
        ):
            raise ValueError(
                f"timestamp {ms}: expected epoch ms >= 0"
                + (" or -1 (latest), -2 (earliest), -3 (max)" if allow_special else "")
            )
        return ms
    if isinstance(ts, np.datetime64):
        return int(ts.astype("datetime64[ms]").astype(np.int64))
    if isinstance(ts, str):
        text = ts.strip()
        if text.lstrip("-").isdigit():
            return to_millis(int(text), allow_special=allow_special)
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"timestamp {ts!r}: not epoch ms or an ISO-8601 time") from exc
        return to_millis(parsed)
    if isinstance(ts, dt.datetime):  # pandas.Timestamp too
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.UTC)
        # integer arithmetic: float timestamps lose the last millisecond
        delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
    if isinstance(ts, dt.date):
        return to_millis(dt.datetime(ts.year, ts.month, ts.day))
    raise ValueError(f"timestamp {ts!r}: expected ms, datetime or ISO string")


def _iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return ""
    t = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _output(t: pa.Table, as_: As) -> Any:
    if as_ == "arrow":
        return t
    if as_ == "pandas":
        return t.to_pandas()
    raise ValueError(f"as_={as_!r}: expected 'pandas' or 'arrow'")


def _html_table(headers: list[str], rows: list[list[Any]], *, right: set[int]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for r in rows[:_MAX_HTML_ROWS]:
        cells = "".join(
            f'<td style="text-align:{"right" if i in right else "left"}">{html.escape(str(v))}</td>'
            for i, v in enumerate(r)
        )
        body.append(f"<tr>{cells}</tr>")
    if len(rows) > _MAX_HTML_ROWS:
        body.append(
            f'<tr><td colspan="{len(headers)}">... {len(rows) - _MAX_HTML_ROWS} more</td></tr>'
        )
    return (
        f'<table class="seglake"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


class _LRU:
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


# ---------------------------------------------------------------------------------- partition


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
        fs, base = lakefs.resolve(lake.root)
        self.log = PartitionLog.from_rows(fs, base, rows)
        self._min_ts = rows.column("min_timestamp").to_numpy()
        self._bounds: dict[int, np.ndarray] = {}
        self._max_ts = rows.column("max_timestamp").to_numpy()
        self._tails = rows.column("tail_min_timestamps").to_pylist()

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
        return _output(t, as_)

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
            ts: epoch ms, datetime, ISO string; or -2 earliest / -1 latest (``(-1, offset)``)
                / -3 the first record with the largest timestamp.

        Returns:
            ``TimestampOffset(timestamp, offset)`` of the first record with timestamp >=
            ``ts``, or ``None`` when there is none.
        """
        return self.log.offsets_for_times(to_millis(ts, allow_special=True))

    def _candidates(self, start: int, end: int) -> np.ndarray:
        """Segments that may hold a record with start <= timestamp < end (catalog min/max)."""
        keep = (self._max_ts >= start) & (self._min_ts < end) & (self._max_ts >= 0)
        return np.nonzero(keep)[0]

    def range(self, start: TimeLike, end: TimeLike, *, as_: As = "pandas") -> Any:
        """Records with ``start <= timestamp < end``, in offset order.

        Exact under non-monotonic timestamps: segments are pruned with the catalog's
        min/max timestamps; in a segment whose smallest timestamp is below ``start`` the
        read starts at its first record with timestamp >= ``start`` (time index), and
        every record after it is filtered, since a later record may carry any timestamp,
        up to the first of the segment's tail minima >= ``end``
        (:mod:`seglake.storage.tail_minima`).
        """
        lo, hi = to_millis(start), to_millis(end)
        parts = []
        if hi > lo:
            for i in self._candidates(lo, hi):
                seg = self.log.segments[i]
                first = None
                if self._min_ts[i] < lo:
                    found = seg.find_offset_by_timestamp(lo, self.log_start_offset)
                    if found is None:
                        continue
                    first = found.offset
                t = seg.read_records(first, cutoff(self._tails[i], hi))
                ts = t.column("timestamp")
                parts.append(t.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi))))
        recs = pa.concat_tables(parts) if parts else empty_records()
        return _output(to_kafka_source(recs, self.topic, self.partition), as_)

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
            f"&nbsp; {_size(s['size_bytes'])} &nbsp; {_iso(s['min_timestamp'])} .. "
            f"{_iso(s['max_timestamp'])} UTC &nbsp; catalog version {self.lake.version}"
        )
        cols = [
            self.rows.column(c).to_pylist()
            for c in (
                "base_offset",
                "next_offset",
                "record_count",
                "min_timestamp",
                "max_timestamp",
                "size_bytes",
                "index_entries",
                "time_index_entries",
                "codec",
            )
        ]
        rows = [
            [b, n, c, _iso(lo), _iso(hi), _size(sz), ie, te, codec]
            for b, n, c, lo, hi, sz, ie, te, codec in zip(*cols, strict=True)
        ]
        table = _html_table(
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

        return plot.plot_index(self, segment_base_offset)


# ---------------------------------------------------------------------------------- lake


class Lake:
    """A lake opened at one catalog version (see :func:`open`)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        version: int | None = None,
        storage_options: Mapping[str, str] | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.root = os.fspath(root)
        self.catalog = Catalog(self.root, storage_options=storage_options)
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._cache = _LRU(cache_bytes)
        self._load(version)

    def _load(self, version: int | None) -> None:
        self.version = self.catalog.version() if version is None else int(version)
        self._rows = self.catalog.segments(version=self.version)
        topics = self._rows.column("topic").to_numpy(zero_copy_only=False)
        parts = self._rows.column("partition").to_numpy()
        self._by_key: dict[tuple[str, int], pa.Table] = {}
        if self._rows.num_rows:
            # rows are sorted by (topic, partition, base_offset): slice runs of equal keys
            change = np.nonzero((topics[1:] != topics[:-1]) | (parts[1:] != parts[:-1]))[0] + 1
            bounds = [0, *change.tolist(), len(topics)]
            for a, b in itertools.pairwise(bounds):
                self._by_key[(str(topics[a]), int(parts[a]))] = self._rows.slice(a, b - a)

    def refresh(self, version: int | None = None) -> Lake:
        """Move to the catalog's newest version (or ``version``); returns ``self``.

        Cached partitions whose catalog rows did not change keep their read indexes.
        """
        old = self._by_key
        self._load(version)
        for key in list(self._partitions):
            new = self._by_key.get(key)
            if new is None or not new.equals(old.get(key)):
                del self._partitions[key]
                self._cache.drop(*key)
        return self

    def __repr__(self) -> str:
        return (
            f"Lake({self.root!r}, version={self.version}, topics={len(self.topics())}, "
            f"segments={self._rows.num_rows})"
        )

    def topics(self) -> list[str]:
        """Topics with at least one committed segment, sorted."""
        return sorted({t for t, _ in self._by_key})

    def partitions(self, topic: str) -> list[int]:
        """Partition numbers of ``topic``, sorted."""
        return sorted(p for t, p in self._by_key if t == topic)

    def segments(self, topic: str | None = None) -> pd.DataFrame:
        """Catalog rows (all, or of one topic) as a pandas DataFrame."""
        t = self._rows
        if topic is not None:
            t = t.filter(pc.equal(t.column("topic"), topic))
        return t.to_pandas()

    def partition(self, topic: str, partition: int) -> Partition:
        """One partition (cached: its indexes are read once per lake version).

        Raises:
            SegmentNotFoundError: no committed segment of that topic-partition.
        """
        key = (topic, int(partition))
        p = self._partitions.get(key)
        if p is None:
            rows = self._by_key.get(key)
            if rows is None:
                known = ", ".join(f"{t}-{q}" for t, q in sorted(self._by_key)[:10])
                raise SegmentNotFoundError(
                    f"{self.root}: no segments of {topic}-{partition} in catalog version "
                    f"{self.version} (partitions: {known or 'none'})"
                )
            p = self._partitions[key] = Partition(self, topic, key[1], rows)
        return p

    def describe(self) -> pd.DataFrame:
        """Per topic-partition: segments, offsets, records, bytes, time range, index entries."""
        import pandas as pd

        rows = [self.partition(t, p).summary() for t, p in sorted(self._by_key)]
        df = pd.DataFrame(
            rows,
            columns=[
                "topic",
                "partition",
                "segments",
                "log_start_offset",
                "log_end_offset",
                "records",
                "size_bytes",
                "min_timestamp",
                "max_timestamp",
                "index_entries",
                "time_index_entries",
                "codec",
            ],
        )
        for c in ("min_timestamp", "max_timestamp"):
            df[c + "_utc"] = pd.to_datetime(df[c].where(df[c] >= 0), unit="ms", utc=True)
        return df

    def _repr_html_(self) -> str:
        d = self.describe()
        head = (
            f"<b>seglake</b> {html.escape(self.root)} &nbsp; catalog version {self.version}"
            f" &nbsp; {len(self.topics())} topics, {len(d)} partitions, "
            f"{int(d['segments'].sum())} segments, {int(d['records'].sum())} records, "
            f"{_size(int(d['size_bytes'].sum()))}"
        )
        rows = [
            [
                r.topic,
                r.partition,
                r.segments,
                r.log_start_offset,
                r.log_end_offset,
                r.records,
                _size(r.size_bytes),
                _iso(r.min_timestamp),
                _iso(r.max_timestamp),
                r.index_entries,
                r.codec,
            ]
            for r in d.itertuples()
        ]
        table = _html_table(
            [
                "topic",
                "partition",
                "segments",
                "log start offset",
                "log end offset",
                "records",
                "size",
                "min timestamp (UTC)",
                "max timestamp (UTC)",
                "index entries",
                "codec",
            ],
            rows,
            right={1, 2, 3, 4, 5, 6, 9},
        )
        return f"<div>{head}{table}</div>"

    # -- pictures ---------------------------------------------------------------------
    def plot_segments(self, topic: str) -> Figure:
        """Segments of every partition of ``topic`` on a time axis; see :mod:`seglake.plot`."""
        from seglake import plot

        return plot.plot_segments(self, topic)

    def plot_rate(self, topic: str, bucket: str = "1min") -> Figure:
        """Messages per ``bucket`` (a pandas frequency) of ``topic``, per partition."""
        from seglake import plot

        return plot.plot_rate(self, topic, bucket)


def open(
    root: str | os.PathLike[str],
    *,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> Lake:
    """Open the lake at ``root`` (path or URI) at catalog ``version`` (default: newest).

    ``cache_bytes`` bounds the decoded records kept for repeated point lookups.

    Raises:
        CatalogError: no catalog at ``root`` (or no such version).
    """
    return Lake(root, version=version, storage_options=storage_options, cache_bytes=cache_bytes)
