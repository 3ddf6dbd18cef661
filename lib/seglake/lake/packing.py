"""Work packed into tasks. By bytes, as Spark groups files into input partitions: a
read's segment tasks (:func:`pack`) and a compaction's merge groups
(:mod:`seglake.lake.compaction`) (:func:`pack_sizes`):

    n tasks  = ceil(total / target), target = total / parallelism within
               [min_bytes, max_bytes]; more than one: rounded up to a multiple of
               parallelism (3 tasks on 2 cores take two rounds, 4 of 3/4 the size 1.5)
    placing  largest item first, each to the least loaded task (an item larger than
             max_bytes stays alone)

By offsets, as Spark's Kafka source (``KafkaOffsetRangeCalculator``) with
``minPartitions`` / ``maxRecordsPerPartition`` (:func:`offset_ranges`): a range of more
than ``maxRecordsPerPartition`` offsets is cut into equal pieces under it; then, with
fewer ranges than ``minPartitions``, the large ranges are cut in proportion to their
offsets. A read given either knob makes one Spark task per offset range.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seglake.lake.scan import SegmentTask

__all__ = ["DEFAULT_SPLIT_BYTES", "MIN_TASK_BYTES", "SPLITS_PER_TASK", "offset_ranges", "pack"]

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
MIN_TASK_BYTES = 4 * 1024 * 1024  # Spark's spark.sql.files.openCostInBytes
# a read task takes at most this many splits' bytes: 128 MiB of log at the default split
# size (Spark's spark.sql.files.maxPartitionBytes). A Python task costs 0.05-0.07 CPU s to
# start; its memory is bounded by iter_splits' groups, not by its bytes
SPLITS_PER_TASK = 4

TopicPartition = tuple[str, int]
OffsetRange = tuple[str, int, int, int]  # topic, partition, [lo, hi)


def pack_sizes(
    sizes: Sequence[int], parallelism: int, *, max_bytes: int, min_bytes: int
) -> list[list[int]]:
    """Indexes into ``sizes`` grouped into tasks (module docstring), each task's in
    ascending order; ``[]`` for no items."""
    if not sizes:
        return []
    total = sum(sizes)
    parallelism = max(1, parallelism)
    target = max(1, min(max_bytes, max(min_bytes, -(-total // parallelism))))
    n = -(-total // target)
    if n > 1:
        n = -(-n // parallelism) * parallelism
    n = max(1, min(len(sizes), n))
    heap = [(0, k) for k in range(n)]
    tasks: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        load, k = heapq.heappop(heap)
        tasks[k].append(i)
        heapq.heappush(heap, (load + sizes[i], k))
    return [sorted(t) for t in tasks]


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` pieces, the last taking the round-off (Kafka's division)."""
    t, p, lo, hi = r
    out, remaining = [], hi - lo
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        out.append((t, p, lo, min(lo + size, hi)))
        lo = out[-1][3]
    return [x for x in out if x[3] > x[2]]


def offset_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """``ranges`` cut as Spark's ``KafkaOffsetRangeCalculator.getRanges`` cuts them
    (module docstring; empty ranges dropped). Unlike Kafka's, whose proportional
    rounding may make fewer, at least ``min_partitions`` ranges come out while some range
    holds more than one offset (the largest is halved): ``minPartitions`` is read as
    "at least that many Spark tasks"."""
    out = [r for r in ranges if r[3] > r[2]]
    if max_records_per_partition is not None:
        most = max(1, max_records_per_partition)
        out = [x for r in out for x in _divide(r, -(-(r[3] - r[2]) // most))]
    if not out or min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(r[3] - r[2] for r in out)

    def parts_of(size: int, of: int, minimum: int) -> int:  # Kafka's getPartCount
        return max(math.floor(size / of * minimum + 0.5), 1) if of else 1

    unsplit = [r for r in out if parts_of(r[3] - r[2], total, min_partitions) == 1]
    split_total = total - sum(r[3] - r[2] for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    keep = set(unsplit)
    out = [
        x
        for r in out
        for x in ([r] if r in keep else _divide(r, parts_of(r[3] - r[2], split_total, split_min)))
    ]
    while len(out) < min_partitions:
        k = max(range(len(out)), key=lambda i: out[i][3] - out[i][2])
        if out[k][3] - out[k][2] < 2:
            break
        out[k : k + 1] = _divide(out[k], 2)
    return out


def pack(
    tasks: Sequence[SegmentTask],
    parallelism: int,
    *,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    min_bytes: int = MIN_TASK_BYTES,
    max_bytes: int | None = None,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[list[SegmentTask]]:
    """Segment tasks grouped into Spark tasks, each in file order (neighbouring pieces of
    a segment share its cached state).

    By bytes (:func:`pack_sizes`): about ``total / parallelism`` each, at least
    ``min_bytes`` (a tiny window is one task, not one per partition) and at most
    ``max_bytes`` (default :data:`SPLITS_PER_TASK` x ``split_bytes``; a larger one stays
    alone). With ``min_partitions`` or ``max_records_per_partition``: one Spark task per
    offset range of :func:`offset_ranges` (a segment task over several of them is read
    by each, its offsets narrowed to the range; a :class:`~seglake.lake.scan.Scan` given
    the same knobs plans its tasks on those ranges already)."""
    if min_partitions is None and max_records_per_partition is None:
        if max_bytes is None:
            max_bytes = SPLITS_PER_TASK * split_bytes
        sizes = [t.end_pos - t.start_pos for t in tasks]
        groups = [
            [tasks[i] for i in g]
            for g in pack_sizes(sizes, parallelism, max_bytes=max_bytes, min_bytes=min_bytes)
        ]
    else:
        groups = _by_offset_range(tasks, min_partitions, max_records_per_partition)
    return [sorted(g, key=lambda t: (t.partition, t.path, t.start_pos)) for g in groups]


def _by_offset_range(
    tasks: Sequence[SegmentTask], min_partitions: int | None, max_records: int | None
) -> list[list[SegmentTask]]:
    """One group per offset range (:func:`pack`): the tasks' ``[lo, hi)`` (a partition's
    range, or a piece a scan cut already), each within its tasks' offsets, then cut."""
    windows: dict[OffsetRange, list[SegmentTask]] = {}
    for t in tasks:
        windows.setdefault((t.topic, t.partition, t.lo, t.hi), []).append(t)
    ranges = [
        (
            topic,
            p,
            max(lo, min(t.offsets[0] for t in mine)),
            min(hi, max(t.offsets[1] for t in mine)),
        )
        for (topic, p, lo, hi), mine in windows.items()
    ]
    groups: list[list[SegmentTask]] = []
    for topic, p, lo, hi in offset_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    ):
        group = [
            dataclasses.replace(t, lo=max(t.lo, lo), hi=min(t.hi, hi))
            for (wt, wp, wlo, whi), mine in windows.items()
            if (wt, wp) == (topic, p) and wlo < hi and lo < whi
            for t in mine
            if t.offsets[0] < hi and lo < t.offsets[1]
        ]
        if group:
            groups.append(group)
    return groups
