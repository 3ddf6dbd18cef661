"""A lake opened at one catalog version: ``seglake.open(root)``."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.api.partition import LRU, Partition
from seglake.api.show import As, html_table, output
from seglake.errors import CatalogError, ConfigError, SegmentNotFoundError
from seglake.lake.handle import LakeHandle
from seglake.lake.snapshot import Snapshot
from seglake.lake.time_travel import version_as_of
from seglake.location import Root
from seglake.render import iso, size_text
from seglake.storage.segment_window import check_on_corrupt
from seglake.times import TimeLike, to_millis

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

DEFAULT_CACHE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class OpenOptions:
    """How a lake is opened: :func:`open`'s keywords (documented there), built once
    there and handed to :class:`Lake` whole."""

    version: int | None = None
    storage_options: Mapping[str, str] | None = None
    cache_bytes: int = DEFAULT_CACHE_BYTES
    on_corrupt: str = "raise"
    timestamp_as_of: TimeLike | None = None


class Lake:
    """A lake opened at one catalog version (see :func:`open`)."""

    def __init__(self, root: Root, options: OpenOptions = OpenOptions()) -> None:
        self.handle = LakeHandle.open(root, options.storage_options)  # the one parse
        self.location = self.handle.location  # catalog and segment files
        self.root = self.location.root
        self.on_corrupt = check_on_corrupt(options.on_corrupt)
        self.catalog = self.handle.catalog
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._cache = LRU(options.cache_bytes)
        self._load(_as_of(self.handle, options.version, options.timestamp_as_of))

    def _load(self, version: int | None) -> None:
        snapshot = Snapshot.read(self.handle, version=None if version is None else int(version))
        self.version = snapshot.version
        self._rows = snapshot.table
        self._by_key: dict[tuple[str, int], pa.Table] = dict(snapshot.rows)

    def replaced(self, topic: str, partition: int) -> set[int]:
        """Base offsets of this version's rows of ``topic``-``partition`` that the newest
        catalog version removed or replaced (a compaction keeps a group's first name):
        their readers must find the file exactly as committed (one catalog version check
        per call; none of it when this is the newest version). A newest version whose
        rows cannot be read (a bad row) tells nothing: every row is checked so."""
        from seglake.lake.pinned import row_identities

        rows = self._by_key.get((topic, int(partition)))
        newest = self.catalog.version()
        if rows is None or newest == self.version:
            return set()
        try:
            at = Snapshot.read(self.handle, topic, [int(partition)], version=newest)
            now = row_identities(at.table)
        except CatalogError:  # this version's rows were checked when it was read
            return set(rows.column("base_offset").to_pylist())
        gone = {(b, n, s) for b, n, s in row_identities(rows) - now}
        if gone and self._only_appends_since():  # grown tails: the old row is their prefix
            grown = {b: (n, s) for b, n, s in now}
            gone = {
                (b, n, s)
                for b, n, s in gone
                if b not in grown or grown[b][0] < n or grown[b][1] < s
            }
        return {b for b, _, _ in gone}

    def _only_appends_since(self) -> bool:
        """Every catalog change after this version is a ``commit`` (ingest, stream batch):
        those replace a row only by growing a partition's newest segment, whose file then
        starts with the old row's bytes (a copy, or the same file appended in place)."""
        newer = self.catalog.version() - self.version
        return all(
            h.seglake_operation == "commit"
            for h in self.catalog.history(limit=newer)
            if h.version > self.version
        )

    def refresh(
        self, version: int | None = None, *, timestamp_as_of: TimeLike | None = None
    ) -> Lake:
        """Move to the catalog's newest version (or ``version``, or the version at
        ``timestamp_as_of``); returns ``self``.

        Cached partitions whose catalog rows did not change keep their read indexes.
        """
        old = self._by_key
        self._load(_as_of(self.handle, version, timestamp_as_of))
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

    def find(
        self,
        topic: str,
        key: bytes | str | Sequence[bytes | str | None],
        start: TimeLike | None = None,
        end: TimeLike | None = None,
        *,
        as_: As = "pandas",
        isolation_level: str = "read_uncommitted",
    ) -> Any:
        """Every record of ``topic`` whose key is ``key`` (or one of a list of keys), with
        ``start <= timestamp < end`` when given: the data source's columns (``key``,
        ``value``, ``topic``, ``partition``, ``offset``, ...), by partition then offset;
        ``isolation_level="read_committed"``: not the records of aborted transactions.
        Without Spark: each partition's :meth:`Partition.find`, through the segments' key
        indexes."""
        keys = [key] if isinstance(key, bytes | str) else list(key)
        parts = [
            self.partition(topic, p).find(
                keys, start, end, as_="arrow", isolation_level=isolation_level
            )
            for p in self.partitions(topic)
        ]
        if not parts:
            raise SegmentNotFoundError(
                f"{self.root}: no segments of topic {topic!r} in catalog version {self.version}"
            )
        return output(pa.concat_tables(parts), as_)

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
        for c in ("min_timestamp", "max_timestamp"):  # ms precision: no overflow after 2262
            ms = pa.array(df[c].to_numpy(), pa.int64(), mask=df[c].to_numpy() < 0)
            df[c + "_utc"] = ms.cast(pa.timestamp("ms", tz="UTC")).to_pandas()
        return df

    def _repr_html_(self) -> str:
        d = self.describe()
        head = (
            f"<b>seglake</b> {html.escape(self.root)} &nbsp; catalog version {self.version}"
            f" &nbsp; {len(self.topics())} topics, {len(d)} partitions, "
            f"{int(d['segments'].sum())} segments, {int(d['records'].sum())} records, "
            f"{size_text(int(d['size_bytes'].sum()))}"
        )
        rows = [
            [
                r.topic,
                r.partition,
                r.segments,
                r.log_start_offset,
                r.log_end_offset,
                r.records,
                size_text(r.size_bytes),
                iso(r.min_timestamp),
                iso(r.max_timestamp),
                r.index_entries,
                r.codec,
            ]
            for r in d.itertuples()
        ]
        table = html_table(
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

    # -- point lookups ----------------------------------------------------------------
    def lookup(
        self,
        queries: pd.DataFrame | pa.Table,
        *,
        latest_per_key: bool = False,
        isolation_level: str = "read_uncommitted",
    ) -> pd.DataFrame | pa.Table:
        """Answer point queries in this process, as the Spark ``lookup`` job answers them
        (same rules and code: :mod:`seglake.lake.lookup_local`), at this lake's version.

        ``queries``: a pandas DataFrame or Arrow table with ``topic``, ``partition`` and
        ``offset`` and/or ``timestamp`` (epoch ms, -1 latest, -2 earliest, -3 max
        timestamp; a datetime; or a string: epoch ms or ISO-8601), one of them per row.
        Returns one row per query, in order (pandas for pandas, Arrow for Arrow): the
        job's columns (``key``, ``value``, ``topic``, ``partition``, ``offset``,
        ``timestamp``, ``timestampType``, ``headers``, ``query_offset``,
        ``query_timestamp``, ``status``) and statuses (``ok``, ``offset_out_of_range``,
        ``no_record_at_offset``, ``no_record_for_timestamp``, ``log_end_offset``,
        ``unknown_partition``, ``invalid_query``, ...: see :mod:`seglake.spark.lookup`).

        A ``key`` column (str as UTF-8, or bytes) makes its rows key queries (partition
        null or absent: every partition of the topic): each answered by every record
        with those key bytes (``latest_per_key``: the last one per partition), the
        query's columns and ``query_key`` echoed, or one ``no_record_for_key`` row
        (:mod:`seglake.lake.lookup_keys`). ``isolation_level="read_committed"``: key
        queries leave out the records of aborted transactions (the latest per key is the
        latest committed one); offset and time queries answer as read_uncommitted.

        Raises:
            InputSchemaError: a query column missing.
        """
        from seglake.config import LogConfig
        from seglake.lake.lookup_local import lookup_local
        from seglake.lake.lookup_plan import partition_arrays
        from seglake.storage.index_cache import get_cache

        cached = getattr(self, "_lookup_parts", None)  # the job's broadcast, per version
        if cached is None or cached[0] != self.version:
            snapshot = Snapshot(self.location, self.version, self._by_key)
            cached = self._lookup_parts = (self.version, partition_arrays(snapshot))
        out = lookup_local(
            self.location,
            cached[1],
            queries,
            version=self.version,
            cache=get_cache(LogConfig().index_cache_bytes),
            on_corrupt=self.on_corrupt,
            latest_per_key=latest_per_key,
            isolation_level=isolation_level,
        )
        return out if isinstance(queries, pa.Table) else out.to_pandas()

    # -- pictures ---------------------------------------------------------------------
    def plot_segments(self, topic: str) -> Figure:
        """Segments of every partition of ``topic`` on a time axis; see :mod:`seglake.plot`."""
        from seglake import plot

        return plot.plot_segments(topic, self._topic_segments(topic), self.version)

    def plot_rate(self, topic: str, bucket: str = "1min") -> Figure:
        """Messages per ``bucket`` (a pandas frequency) of ``topic``, per partition."""
        from seglake import plot

        self._topic_segments(topic)  # a topic without partitions is an error
        timestamps = {}
        for p in self.partitions(topic):
            records = self.partition(topic, p)._records()  # every record, planned
            timestamps[p] = np.concatenate(
                [t.column("timestamp").to_numpy() for t in records] or [np.array([], np.int64)]
            )
        return plot.plot_rate(topic, timestamps, bucket, self.version)

    def _topic_segments(self, topic: str) -> pd.DataFrame:
        """Catalog rows of ``topic``; ValueError if it has no partition."""
        if not self.partitions(topic):
            raise ValueError(f"topic {topic!r} has no partitions in {self.root}")
        return self.segments(topic)


def _as_of(lake: LakeHandle, version: int | None, timestamp_as_of: TimeLike | None) -> int | None:
    """``version``, or the catalog version at ``timestamp_as_of`` (Delta's rule:
    :func:`seglake.lake.time_travel.version_as_of`); not both."""
    if timestamp_as_of is None:
        return version
    if version is not None:
        raise ConfigError(
            "version, timestamp_as_of: cannot specify both version and timestamp when "
            "time travelling (as in Delta)"
        )
    return version_as_of(lake, to_millis(timestamp_as_of))


def open(
    root: Root,
    *,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    on_corrupt: str = "raise",
    timestamp_as_of: TimeLike | None = None,
) -> Lake:
    """Open the lake at ``root`` (path or URI) at catalog ``version`` (default: newest),
    or at the version ``timestamp_as_of`` names (ms, datetime or ISO-8601), as Delta's
    ``timestampAsOf`` picks it: the last catalog commit at or before that time.

    ``storage_options``: deltalake-style options (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
    ...) for both the catalog and the segment files (:class:`~seglake.location.LakeLocation`).
    ``cache_bytes`` bounds the decoded records kept for repeated point lookups.
    ``on_corrupt``: a damaged batch (CRC mismatch, bad magic or length, offsets going
    backwards) makes a read raise :class:`CorruptRecordError` naming the file, position
    and offsets (``"raise"``, the default), or with ``"skip"`` is left out with a
    :class:`~seglake.errors.CorruptBatchWarning` saying which (``Partition.skipped``
    lists them); every other record is still returned.

    Raises:
        CatalogError: no catalog at ``root`` (or no such version).
        ConfigError: ``timestamp_as_of`` before the first commit or after the newest.
    """
    return Lake(
        root, OpenOptions(version, storage_options, cache_bytes, on_corrupt, timestamp_as_of)
    )
