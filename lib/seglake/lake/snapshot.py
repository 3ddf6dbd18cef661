"""The lake's partitions at one catalog version, read once: each partition's catalog rows
and, on first use, its log (segments from the index cache). A
:class:`~seglake.lake.scan.Scan` plans on one; a stream keeps one between micro-batches.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa

from seglake.format import LONG_MAX, LONG_MIN
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import catalog_schema, segment_refs
from seglake.location import LakeLocation
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.log import PartitionLog

__all__ = ["Snapshot", "TopicPartition", "by_partition", "log_rows"]

TopicPartition = tuple[str, int]


def by_partition(rows: pa.Table) -> dict[TopicPartition, pa.Table]:
    """Catalog rows (sorted by topic, partition) split per topic-partition (slices)."""
    if not rows.num_rows:
        return {}
    topics = rows.column("topic").to_numpy(zero_copy_only=False)
    parts = rows.column("partition").to_numpy()
    change = np.nonzero((topics[1:] != topics[:-1]) | (parts[1:] != parts[:-1]))[0] + 1
    bounds = [0, *change.tolist(), len(topics)]
    return {
        (str(topics[a]), int(parts[a])): rows.slice(a, b - a) for a, b in itertools.pairwise(bounds)
    }


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Partitions of the lake at ``root`` at catalog ``version`` (-1: no catalog yet):
    ``rows`` per partition, sorted by topic and partition; logs opened with
    ``on_corrupt`` (:class:`~seglake.storage.segment.LogSegment`'s) from ``cache``."""

    root: LakeLocation
    version: int
    rows: Mapping[TopicPartition, pa.Table]
    on_corrupt: str = "raise"
    cache: IndexCache | None = dataclasses.field(default=None, compare=False, repr=False)
    _logs: dict[TopicPartition, PartitionLog] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def read(
        cls,
        lake: LakeHandle,
        topics: str | Iterable[str] | None = None,
        partitions: Iterable[int] | None = None,
        *,
        version: int | None = None,
        cache: IndexCache | None = None,
        on_corrupt: str = "raise",
    ) -> Snapshot:
        """One catalog read: the rows of ``topics`` (``None``: all) and ``partitions``
        at ``version`` (``None``: the newest)."""
        catalog = lake.catalog
        version = catalog.version() if version is None else version
        rows = catalog.segments(topics, partitions, version=version)
        return cls(lake.location, version, by_partition(rows), on_corrupt, cache)

    @classmethod
    def of_log(
        cls, root: LakeLocation, version: int, tp: TopicPartition, rows: pa.Table, log: PartitionLog
    ) -> Snapshot:
        """One partition whose ``rows`` a reader read at ``version`` and whose ``log``
        (their segments) it holds: no catalog read, no segment opened again."""
        return cls(root, version, {tp: rows}, _logs={tp: log})

    @classmethod
    def of_partition_log(cls, root: LakeLocation, log: PartitionLog) -> Snapshot:
        """A log a reader opened itself (a broker's partition directory, or one of a lake
        opened through its catalog: ``seglake consume``, ``read``) as a snapshot of its
        one partition (version -1), with the rows :func:`log_rows` gives it."""
        return cls.of_log(root, -1, (log.topic, log.partition), log_rows(log), log)

    def select(self, partitions: Iterable[TopicPartition]) -> Snapshot:
        """These partitions only (the logs opened so far kept)."""
        keep = {tp: self.rows[tp] for tp in sorted(partitions) if tp in self.rows}
        logs = {tp: log for tp, log in self._logs.items() if tp in keep}
        return dataclasses.replace(self, rows=keep, _logs=logs)

    @property
    def table(self) -> pa.Table:
        """All the rows, as one table (sorted by topic and partition)."""
        return pa.concat_tables(self.rows.values()) if self.rows else catalog_schema().empty_table()

    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self.rows)

    def log(self, tp: TopicPartition) -> PartitionLog:
        """``tp``'s log (its segments from the cache; indexes read when a lookup needs
        them)."""
        log = self._logs.get(tp)
        if log is None:
            cache = self.cache or get_cache()
            log = self._logs[tp] = cache.partition_log(
                self.root, tp, segment_refs(self.rows[tp]), self.on_corrupt
            )
        return log

    @property
    def starts(self) -> dict[TopicPartition, int]:
        """Each partition's log start offset."""
        return {tp: self.log(tp).log_start_offset for tp in self.rows}

    @property
    def ends(self) -> dict[TopicPartition, int]:
        """Each partition's log end offset."""
        return {tp: self.log(tp).log_end_offset for tp in self.rows}


def log_rows(log: PartitionLog) -> pa.Table:
    """The rows a :class:`~seglake.lake.scan.Scan` plans a log's read on, from what the log
    knows without reading its segments: each segment's path, size and base offset; its
    next offset a committed segment's row's, else the next segment's base offset (the
    last one's: the log end offset; an upper bound where compaction left a gap); its
    timestamps unknown (smallest and largest int64: a time filter prunes none of its
    segments, no tail minima)."""
    segs = log.segments
    bounds = [*(s.base_offset for s in segs[1:]), log.log_end_offset][: len(segs)]
    nexts = [s.next_offset if s.committed else b for s, b in zip(segs, bounds, strict=True)]
    n = len(segs)
    return pa.table(
        {
            "path": pa.array([s.log_path for s in segs], pa.string()),
            "size_bytes": pa.array([s.size for s in segs], pa.int64()),
            "base_offset": pa.array([s.base_offset for s in segs], pa.int64()),
            "next_offset": pa.array(nexts, pa.int64()),
            "min_timestamp": pa.array([LONG_MIN] * n, pa.int64()),
            "max_timestamp": pa.array([LONG_MAX] * n, pa.int64()),
            "tail_min_timestamps": pa.nulls(n, pa.list_(pa.struct([("offset", pa.int64())]))),
            "run_id": pa.nulls(n, pa.string()),
            "index_interval_bytes": pa.nulls(n, pa.int64()),
        }
    )
