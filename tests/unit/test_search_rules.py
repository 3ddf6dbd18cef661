"""Kafka's search rules in their classes, against brute force: ``LogSegments`` (floor /
higher segment, the first segment that may hold a timestamp, the largest timestamp's
segment) and the offset index's upper bounds (``smallestUpperBound``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.storage.log_segments import NONE, LogSegments
from seglake.storage.offset_index import OffsetIndex

bases = st.lists(st.integers(0, 10_000), min_size=0, max_size=40, unique=True).map(sorted)
times = st.integers(-1, 5_000)


@settings(max_examples=300, deadline=None)
@given(bases, st.data())
def test_log_segments_equal_brute_force(base, data) -> None:
    maxes = data.draw(st.lists(times, min_size=len(base), max_size=len(base)))
    segs = LogSegments(np.array(base, dtype=np.int64), np.array(maxes, dtype=np.int64))
    offsets = data.draw(st.lists(st.integers(-5, 10_010), max_size=30))
    stamps = data.draw(st.lists(times, max_size=30))
    for o in offsets:
        floor = max((i for i, b in enumerate(base) if b <= o), default=NONE)
        higher = min((i for i, b in enumerate(base) if b > o), default=NONE)
        assert segs.floor(o) == floor
        assert segs.higher(o) == higher
    assert segs.floor_many(np.array(offsets, dtype=np.int64)).tolist() == [
        segs.floor(o) for o in offsets
    ]
    for t in stamps:
        # the first segment such that no earlier segment (nor it, before it) could hold
        # a timestamp >= t: the first whose running maximum reaches t
        first = next((i for i in range(len(base)) if max(maxes[: i + 1]) >= t), NONE)
        assert segs.for_time(t) == first
    assert segs.for_time_many(np.array(stamps, dtype=np.int64)).tolist() == [
        segs.for_time(t) for t in stamps
    ]
    largest = maxes.index(max(maxes)) if maxes else NONE
    assert segs.largest() == largest


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 500), max_size=30, unique=True).map(sorted), st.data())
def test_offset_index_upper_bounds_equal_brute_force(rel, data) -> None:
    base = 1000
    positions = [100 * (i + 1) for i in range(len(rel))]
    oi = OffsetIndex.from_entries(base, [base + r for r in rel], positions)
    end = 100 * (len(rel) + 2)
    targets = data.draw(st.lists(st.integers(base - 3, base + 505), max_size=30))
    for t in targets:
        above = [p for r, p in zip(rel, positions, strict=True) if base + r > t]
        assert oi.upper_position(t, end) == (above[0] if above else end)
    assert oi.upper_positions(np.array(targets, dtype=np.int64), end).tolist() == [
        oi.upper_position(t, end) for t in targets
    ]
    for p in data.draw(st.lists(st.integers(0, end), max_size=10)):
        after = [q for q in positions if q > p]
        assert oi.next_position(p, end) == (after[0] if after else end)
