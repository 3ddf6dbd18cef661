"""A read of the lake planned without Spark, as pyiceberg's ``Table.scan() ->
plan_files() -> FileScanTask``: a :class:`Scan` of a
:class:`~seglake.lake.snapshot.Snapshot` plans :class:`SegmentTask` s, which
:func:`seglake.lake.packing.pack` groups into Spark tasks.

    bounds   per partition ``[lo, hi)``: the scan's offsets (one range, or one per
             partition), with ``seek_times`` the offsets of its times (Kafka's
             offsetsForTimes; no record >= the end: the log end), within the log
    ranges   with ``minPartitions`` / ``maxRecordsPerPartition``: cut as Spark's Kafka
             source cuts them (:func:`~seglake.lake.packing.offset_ranges`)
    segments those holding offsets of the range; without ``seek_times`` (a time
             filter) only those whose catalog min/max timestamps meet the times, each
             entered at its time index's strict floor of the start and read up to the
             first of its catalog tail minima >= the end
             (:mod:`seglake.storage.tail_minima`)
    tasks    one per segment, a large one cut at offset-index positions
             ``split_bytes`` apart; under read_committed each carries the aborted
             transactions of its range (Kafka's collectAbortedTxns)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from seglake.errors import ConfigError, DataLossError
from seglake.format import ISOLATION_LEVELS
from seglake.lake.packing import DEFAULT_SPLIT_BYTES, offset_ranges
from seglake.lake.snapshot import Snapshot, TopicPartition
from seglake.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, PartitionLog
from seglake.storage.segment import LogSegment
from seglake.storage.segment_ref import SegmentRef
from seglake.storage.tail_minima import cutoff
from seglake.storage.time_index import NO_ENTRY
from seglake.storage.txn_index import collect_aborted
from seglake.storage.window_records import NO_TS_HI, NO_TS_LO

__all__ = [
    "ALL",
    "Range",
    "Scan",
    "ScanPlan",
    "SegmentTask",
    "aborted_in",
    "check_isolation_level",
    "offset_bound",
    "resume_offset",
]

Range = tuple[int, int]  # [lo, hi)
ALL: Range = (NO_TS_LO, NO_TS_HI)  # unbounded
Aborted = tuple[tuple[int, int, int], ...]  # (producer id, first offset, last offset)


def check_isolation_level(level: str, option: str = "isolation_level") -> str:
    """``level`` if it is one of :data:`ISOLATION_LEVELS`, else a
    :class:`~seglake.errors.ConfigError` naming ``option``."""
    if level not in ISOLATION_LEVELS:
        raise ConfigError(f"{option}: {level!r} is not one of {list(ISOLATION_LEVELS)}")
    return level


@dataclasses.dataclass(frozen=True, order=True)
class SegmentTask:
    """Bytes ``[start_pos, end_pos)`` of one segment file to read, and what to keep of
    them: offsets ``[lo, hi)``, timestamps ``[ts_lo, ts_hi)``, not the ``aborted``
    transactions (read_committed). ``extend``: the batch at ``end_pos`` may hold offsets
    below ``hi`` (read its header too). ``version``: the catalog version planned on (a
    file of it gone since is a :class:`~seglake.errors.VersionSupersededError`)."""

    topic: str
    partition: int
    path: str
    size: int
    base_offset: int
    next_offset: int
    run_id: str | None
    index_interval_bytes: int | None
    start_pos: int
    end_pos: int
    extend: bool
    lo: int
    hi: int
    ts_lo: int = NO_TS_LO
    ts_hi: int = NO_TS_HI
    aborted: Aborted = ()
    version: int | None = None

    @property
    def nbytes(self) -> int:
        return self.end_pos - self.start_pos

    @property
    def offsets(self) -> Range:
        """The offsets it may return: ``[lo, hi)`` within its segment's."""
        return max(self.lo, self.base_offset), min(self.hi, self.next_offset)

    def ref(self) -> SegmentRef:
        """Its segment, as the index cache opens it."""
        return SegmentRef(
            path=self.path,
            size_bytes=self.size,
            next_offset=self.next_offset,  # a file cut short names its lost offsets
            run_id=self.run_id or None,
            index_interval_bytes=self.index_interval_bytes,
        )


@dataclasses.dataclass(frozen=True)
class ScanPlan:
    """A scan's tasks and what planning them took."""

    tasks: list[SegmentTask]
    catalog_version: int
    segments: int
    ranges: dict[TopicPartition, Range]
    tail_bytes: int = 0  # planned bytes past the end time: timestamps read, little decoded
    driver_bytes: int = 0  # read by the planner (set by a caller that counts them)
    seconds: float = 0.0

    @property
    def planned_bytes(self) -> int:
        return sum(t.nbytes for t in self.tasks)

    def summary(self) -> str:
        return (
            f"catalog version {self.catalog_version}: {self.segments} segment(s), "
            f"{len(self.tasks)} split(s), {self.planned_bytes} log bytes planned "
            f"({self.tail_bytes} past the end time), {self.driver_bytes} bytes read by "
            f"the driver to plan ({self.seconds:.2f} s)"
        )


@dataclasses.dataclass(frozen=True)
class Scan:
    """A read of ``snapshot``'s partitions (module docstring).

    offsets: ``[lo, hi)`` of every partition, or per partition (those only).
    times: ``[start, end)`` epoch ms: a filter of the records' timestamps, or with
        ``seek_times`` the offsets of the range (Kafka source's ``*ByTimestamp``).
    min_partitions, max_records_per_partition: the Kafka source's ``minPartitions`` and
        ``maxRecordsPerPartition`` (:func:`~seglake.lake.packing.offset_ranges`).
    """

    snapshot: Snapshot
    offsets: Range | Mapping[TopicPartition, Range] = ALL
    times: Range = ALL
    seek_times: bool = False
    isolation_level: str = "read_uncommitted"
    split_bytes: int = DEFAULT_SPLIT_BYTES
    min_partitions: int | None = None
    max_records_per_partition: int | None = None

    def ranges(self) -> dict[TopicPartition, Range]:
        """Each partition's ``[lo, hi)`` in its log (``lo >= hi``: nothing to read)."""
        whole = None if isinstance(self.offsets, Mapping) else self.offsets
        per = self.offsets if isinstance(self.offsets, Mapping) else {}
        out: dict[TopicPartition, Range] = {}
        for tp in self.snapshot.partitions if whole is not None else sorted(per):
            if tp not in self.snapshot.rows:
                continue
            log = self.snapshot.log(tp)
            lso, leo = log.log_start_offset, log.log_end_offset
            lo, hi = whole if whole is not None else per[tp]
            if self.seek_times:
                lo, hi = (
                    max(lo, _seek(log, self.times[0], lso)),
                    min(hi, _seek(log, self.times[1], leo)),
                )
            out[tp] = max(lo, lso), min(hi, leo)
        return out

    def plan(self) -> list[SegmentTask]:
        """The tasks of the scan (one catalog read: the snapshot's)."""
        return self.planned().tasks

    def tasks(self) -> Iterator[SegmentTask]:
        """:meth:`plan`'s tasks one segment at a time, each segment's indexes read only
        when its tasks are asked for: a reader that stops early (``consume
        --max-messages``, ``read``) plans no further than it reads."""
        for mine, _ in self._segments(self.ranges()):
            yield from mine

    def planned(self) -> ScanPlan:
        """:meth:`plan` with the segments read, the bytes past the end time and each
        partition's range."""
        ranges = self.ranges()
        tasks: list[SegmentTask] = []
        nsegs = tail = 0
        for mine, t in self._segments(ranges):
            tasks += mine
            nsegs, tail = nsegs + 1, tail + t
        return ScanPlan(tasks, self.snapshot.version, nsegs, ranges, tail)

    def _segments(
        self, ranges: dict[TopicPartition, Range]
    ) -> Iterator[tuple[list[SegmentTask], int]]:
        """``(tasks, bytes past the end time)`` of each segment read, in
        the order of the ranges' pieces (:func:`~seglake.lake.packing.offset_ranges`)."""
        pieces = offset_ranges(
            [(t, p, lo, hi) for (t, p), (lo, hi) in ranges.items()],
            min_partitions=self.min_partitions,
            max_records_per_partition=self.max_records_per_partition,
        )
        for topic, p, lo, hi in pieces:
            yield from self._partition_tasks((topic, p), (lo, hi))

    def _partition_tasks(
        self, tp: TopicPartition, offsets: Range
    ) -> Iterator[tuple[list[SegmentTask], int]]:
        """The tasks of one partition's offsets ``[lo, hi)`` (inside its log), a segment
        at a time: ``(tasks, bytes past the end time)``."""
        log, meta = self.snapshot.log(tp), self.snapshot.meta(tp)
        (lo, hi), filtering = offsets, not self.seek_times
        ts_lo, ts_hi = self.times if filtering else ALL
        chosen: list[tuple[int, int, int]] = []  # (segment, first, end offset)
        # rows sorted by base offset, disjoint: from the floor of lo to the first at hi
        # (a point read of a partition of thousands of segments looks at a few)
        floor = int(np.searchsorted(log.base_offsets, lo, side="right")) - 1
        for i in range(max(floor, 0), len(meta)):
            r = meta[i]
            if r["base_offset"] >= hi:
                break
            if r["next_offset"] <= lo or r["next_offset"] == r["base_offset"]:
                continue
            if filtering and (r["max_timestamp"] < ts_lo or r["min_timestamp"] >= ts_hi):
                continue
            first, last = lo, hi
            if ts_lo > r["min_timestamp"]:
                first = max(lo, _time_seek(log.segments[i], ts_lo))
            stop = cutoff(r["tail_min_timestamps"], ts_hi) if filtering else None
            if stop is not None:  # no record from there on is older than the end
                last = min(hi, stop)
            if first < min(last, r["next_offset"]):
                chosen.append((i, first, last))
        aborted: Aborted = ()
        if self.isolation_level == "read_committed" and chosen:
            aborted = aborted_in(log.segments[chosen[0][0] :], lo, hi)
        for i, first, last in chosen:
            seg = log.segments[i]
            base = SegmentTask(
                tp[0], tp[1], meta[i]["path"], int(meta[i]["size_bytes"]),
                meta[i]["base_offset"], meta[i]["next_offset"], meta[i]["run_id"],
                meta[i].get("index_interval_bytes"), 0, 0, False, lo, last,
                ts_lo, ts_hi, aborted, self.snapshot.version,
            )  # fmt: skip
            mine = _segment_tasks(seg, base, first, self.split_bytes)
            past_end = ts_hi < NO_TS_HI and meta[i]["max_timestamp"] >= ts_hi
            tail = _tail_bytes(seg, ts_hi, mine) if past_end else 0
            yield mine, tail


def offset_bound(
    log: PartitionLog,
    tp: TopicPartition,
    *,
    offset: int = EARLIEST_TIMESTAMP,
    timestamp: int | None = None,
    strict: bool = False,
    fail_on_data_loss: bool = True,
    option: str = "offset",
    within_log: bool = True,
) -> int:
    """One end of a read of ``tp``'s log, as Spark's Kafka source resolves it: the first
    offset with a timestamp >= ``timestamp`` (offsetsForTimes; none: the log end, or
    with ``strict`` an error), else ``offset`` (-2 / -1: the log start / end; outside
    the log: an error, or clamped to it without ``fail_on_data_loss``; as given
    without ``within_log``). ``option`` names the bound in errors
    (:class:`~seglake.errors.ConfigError`)."""
    lso, leo = log.log_start_offset, log.log_end_offset
    if timestamp is not None:
        hit = log.offsets_for_times(timestamp)
        if hit is not None:
            return hit.offset
        if strict:
            raise ConfigError(
                f"{option}: no record of {tp[0]}-{tp[1]} has a timestamp >= "
                f"{timestamp} (largest {int(log.max_timestamps.max())}); "
                "startingOffsetsByTimestampStrategy=latest starts at the log end instead"
            )
        return leo
    if offset == EARLIEST_TIMESTAMP:
        return lso
    if offset == LATEST_TIMESTAMP:
        return leo
    if not within_log:
        return offset
    if lso <= offset <= leo or not fail_on_data_loss:
        return min(max(offset, lso), leo)
    raise ConfigError(
        f"{option}: offset {offset} of {tp[0]}-{tp[1]} is outside "
        f"its log [{lso}, {leo}] (failOnDataLoss=false clamps it)"
    )


def resume_offset(
    log: PartitionLog, tp: TopicPartition, offset: int, *, fail_on_data_loss: bool, where: str
) -> int:
    """Where a stream that stopped before ``offset`` of ``tp`` goes on: there, or at the
    log start when retention or compaction removed the offsets between (Kafka's data
    loss: a :class:`~seglake.errors.DataLossError` with ``fail_on_data_loss``)."""
    lso = log.log_start_offset
    if offset >= lso:
        return offset
    if fail_on_data_loss:
        raise DataLossError(
            f"{tp[0]}-{tp[1]}: offsets {offset}..{lso - 1} are no longer in the lake "
            f"{where} (log start offset {lso}: removed by retention or "
            "compaction) before this stream read them. Some data may have been "
            "lost; set the source option failOnDataLoss to false to skip them"
        )
    return lso


def _seek(log: PartitionLog, ts: int, otherwise: int) -> int:
    """The offset of ``ts`` (offsetsForTimes; no record >= it: the log end), or
    ``otherwise`` for an unbounded side."""
    if ts in ALL:
        return otherwise
    hit = log.offsets_for_times(ts)
    return hit.offset if hit is not None else log.log_end_offset


def _tail_bytes(seg: LogSegment, ts_hi: int, tasks: list[SegmentTask]) -> int:
    """Bytes of ``tasks`` (of ``seg``) from the batch where the largest timestamp so far
    reaches ``ts_hi`` (time index) on: there, batches are mostly dropped by their
    timestamps alone."""
    nxt = int(seg.time_index.bounds_many([ts_hi])[1][0])
    if nxt == NO_ENTRY:
        return 0
    at = seg.floor_position(nxt)
    return sum(max(0, t.end_pos - max(t.start_pos, at)) for t in tasks)


def _time_seek(seg: LogSegment, ts_lo: int) -> int:
    """First offset of ``seg`` that may hold a timestamp >= ``ts_lo``: after the offset of
    the time index's strict floor (every record up to it is older: the entry holds the
    largest timestamp so far)."""
    return int(seg.time_index.bounds_many([ts_lo])[0][0])


def aborted_in(segments: Iterable[LogSegment], lo: int, hi: int) -> Aborted:
    """Aborted transactions overlapping ``[lo, hi)`` of a partition, from its
    ``segments`` (in offset order, the first holding ``lo``): Kafka's
    collectAbortedTxns walk (what read_committed drops: ``txn_index.aborted_records``)."""
    txns = collect_aborted((s.txn_index for s in segments), lo, hi)
    return tuple((a.producer_id, a.first_offset, a.last_offset) for a in txns)


def _segment_tasks(
    seg: LogSegment, base: SegmentTask, first: int, split_bytes: int
) -> list[SegmentTask]:
    """The tasks of one segment (``base`` with ``hi`` its last offset to read): from
    ``first`` on, cut at offset-index positions ``split_bytes`` apart."""
    hi, size = base.hi, base.size
    last_needs_index = hi < base.next_offset
    if first <= base.base_offset and not last_needs_index and size <= split_bytes:
        bounds, extend = [0, size], False
    else:
        start = seg.floor_position(first)
        end = seg.upper_position(hi - 1) if last_needs_index else size
        extend = last_needs_index and end < size
        bounds = [start]
        if end - start > split_bytes:
            pos = seg.offset_index.positions
            last = start
            for c in pos[(pos > start) & (pos < end)].tolist():
                if c - last >= split_bytes:
                    bounds.append(c)
                    last = c
        bounds.append(end)
    n = len(bounds) - 1
    return [
        dataclasses.replace(
            base, start_pos=bounds[k], end_pos=bounds[k + 1], extend=bool(extend and k == n - 1)
        )
        for k in range(n)
    ]
