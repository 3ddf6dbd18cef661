"""Packing segment tasks into Spark tasks (seglake.lake.packing): by bytes as Spark packs
files, by offsets as Spark's KafkaOffsetRangeCalculator (minPartitions,
maxRecordsPerPartition)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.lake.packing import offset_ranges, pack
from seglake.lake.scan import SegmentTask


def task(
    partition: int, path: str, size: int, lo: int = 0, hi: int = 10, base: int = 0, nxt: int = 10
) -> SegmentTask:
    return SegmentTask("t", partition, path, size, base, nxt, None, None, 0, size, False, lo, hi)


def test_pack_balances_and_keeps_tiny_plans_in_one_task():
    def split(i: int, size: int) -> SegmentTask:
        return task(i % 3, f"p{i}", size)

    tiny = [split(i, 1000) for i in range(8)]
    assert [len(t) for t in pack(tiny, 4)] == [8]
    big = [split(i, s) for i, s in enumerate([30, 20, 20, 10, 10, 5, 5] * 4)]
    tasks = pack(big, 4, max_bytes=100, min_bytes=1)
    assert sorted(s.path for t in tasks for s in t) == sorted(s.path for s in big)
    loads = [sum(s.end_pos for s in t) for t in tasks]
    assert len(tasks) == 4 and max(loads) - min(loads) <= 30
    assert [len(t) for t in pack([split(0, 500), split(1, 10)], 2, max_bytes=100, min_bytes=1)] == [
        1,
        1,
    ]
    assert pack([], 2) == []
    # 250 bytes in tasks of at most 100: 3 would take two rounds of 2 cores, 4 take 1.5
    even = pack([split(i, 10) for i in range(25)], 2, max_bytes=100, min_bytes=1)
    assert [sum(s.end_pos for s in t) for t in even] == [70, 60, 60, 60]


def test_offset_ranges_are_kafkas():
    """KafkaOffsetRangeCalculatorSuite's cases: no knob or enough ranges, nothing cut;
    a skewed partition cut in proportion, the small one left whole."""
    r = [("t", 1, 1, 2), ("t", 2, 1, 3)]
    assert offset_ranges(r) == r
    assert offset_ranges(r, min_partitions=2) == r
    assert offset_ranges([("t", 1, 1, 5)], min_partitions=3) == [
        ("t", 1, 1, 2),
        ("t", 1, 2, 3),
        ("t", 1, 3, 5),
    ]
    assert offset_ranges([("t", 1, 1, 101), ("t", 2, 1, 6)], min_partitions=3) == [
        ("t", 1, 1, 51),
        ("t", 1, 51, 101),
        ("t", 2, 1, 6),
    ]
    assert offset_ranges([("t", 1, 0, 0)], min_partitions=3) == []
    assert offset_ranges([("t", 1, 0, 10)], max_records_per_partition=4) == [
        ("t", 1, 0, 3),
        ("t", 1, 3, 6),
        ("t", 1, 6, 10),
    ]


ranges_st = st.lists(st.integers(0, 500), min_size=1, max_size=6)
knob = st.one_of(st.none(), st.integers(1, 40))


@given(ranges_st, knob, knob)
@settings(max_examples=300, deadline=None)
def test_offset_ranges_cover_every_offset_once_within_the_bounds(sizes, least, most):
    ranges = [("t", p, 100 * p, 100 * p + n) for p, n in enumerate(sizes)]
    got = offset_ranges(ranges, min_partitions=least, max_records_per_partition=most)
    covered = sorted((p, o) for _, p, lo, hi in got for o in range(lo, hi))
    assert covered == [(p, o) for _, p, lo, hi in ranges for o in range(lo, hi)]
    if most is not None:
        assert all(hi - lo <= most for *_, lo, hi in got)
    if least is not None:
        assert len(got) >= min(least, sum(sizes))


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(1, 1000)), min_size=1, max_size=8),
    st.integers(1, 4),
    knob,
    knob,
)
@settings(max_examples=100, deadline=None)
def test_pack_by_offsets_reads_every_offset_once_and_no_task_too_many(
    segs, parallelism, least, most
):
    """Whole-segment tasks of two partitions: packed with the knobs, every offset is in
    exactly one Spark task (a task's pieces of a segment: its offsets narrowed), no task
    holds more than ``most`` offsets, and there are at least ``least`` tasks."""
    tasks, at = [], {0: 0, 1: 0}
    for i, (n, size) in enumerate(segs):
        p = i % 2
        tasks.append(task(p, f"{p}/{at[p]:020d}.log", size, 0, 10**9, at[p], at[p] + n))
        at[p] += n
    groups = pack(tasks, parallelism, min_partitions=least, max_records_per_partition=most)
    offsets = [[(t.partition, o) for t in g for o in range(*t.offsets)] for g in groups]
    flat = sorted(x for g in offsets for x in g)
    assert flat == sorted((p, o) for p in at for o in range(at[p]))
    if most is not None:
        assert all(len(g) <= most for g in offsets)
    if least is not None:
        assert len(groups) >= min(least, sum(at.values()))
    by_bytes = [t for g in pack(tasks, parallelism) for t in g]
    assert sorted(by_bytes) == sorted(tasks)
