"""Ingest planning (driver side, no Spark): offsets per input task, checks, write mode."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.config import LogConfig
from seglake.errors import InvalidTopicError, OffsetOrderError, SeglakeError
from seglake.spark.ingest_keys import group_rows
from seglake.spark.ingest_plan import plan_ingest


def rows(*triples, lo=None, hi=None):
    return [
        dict(task=t, topic=topic, partition=p, count=n, lo=lo, hi=hi) for t, topic, p, n in triples
    ]


def test_assigned_offsets_continue_the_log_in_input_task_order():
    counts = rows((1, "a", 0, 5), (0, "a", 0, 3), (0, "a", 1, 4), (2, "b", 0, 2))
    plan = plan_ingest(counts, {("a", 0): 100}, LogConfig(), has_offset=False)
    assert plan.task_starts == {(0, "a", 0): 100, (1, "a", 0): 103, (0, "a", 1): 0, (2, "b", 0): 0}
    a0 = plan.partitions[("a", 0)]
    assert (a0.first_offset, a0.last_offset, a0.count, a0.log_end_offset) == (100, 107, 8, 100)
    assert [p.chunk0 for p in plan.partitions.values()] == [0, 1, 2]


@pytest.mark.parametrize(
    ("conf", "has_offset", "shuffle"),
    [
        ({}, False, True),  # 3 records a piece
        ({"seglake.ingest.local.min.records": "3"}, False, False),  # large enough
        ({"seglake.ingest.shuffle": "never"}, False, False),
        (
            {"seglake.ingest.shuffle": "always", "seglake.ingest.local.min.records": "1"},
            False,
            True,
        ),
        ({"seglake.ingest.shuffle": "never"}, True, True),  # given offsets: sort
        ({"seglake.ingest.shuffle": "never", "seglake.ingest.order": "timestamp"}, False, True),
    ],
)
def test_write_mode(conf, has_offset, shuffle):
    counts = (
        rows((0, "a", 0, 3), (1, "a", 0, 3), lo=0, hi=2)
        if not has_offset
        else [
            dict(task=0, topic="a", partition=0, count=3, lo=0, hi=2),
            dict(task=1, topic="a", partition=0, count=3, lo=3, hi=5),
        ]
    )
    plan = plan_ingest(counts, {}, LogConfig.load(overrides=conf), has_offset=has_offset)
    assert plan.shuffle is shuffle


def test_hot_partition_is_cut_into_chunks_unless_ordered_by_timestamp():
    counts = rows((0, "h", 0, 2500), (0, "c", 0, 10))
    plan = plan_ingest(
        counts,
        {},
        LogConfig.load(overrides={"seglake.ingest.task.max.records": "1000"}),
        has_offset=False,
    )
    assert [(p.chunks, p.chunk0) for p in plan.partitions.values()] == [(1, 0), (3, 1)]
    assert plan.num_tasks == 4
    by_ts = plan_ingest(
        counts,
        {},
        LogConfig.load(
            overrides={
                "seglake.ingest.task.max.records": "1000",
                "seglake.ingest.order": "timestamp",
            }
        ),
        has_offset=False,
    )
    assert by_ts.num_tasks == 2


def test_given_offsets_are_checked_against_the_log_end_and_for_repeats():
    ok = [
        dict(task=0, topic="o", partition=0, count=3, lo=10, hi=20),
        dict(task=1, topic="o", partition=0, count=2, lo=5, hi=8),
    ]
    plan = plan_ingest(ok, {("o", 0): 5}, LogConfig(), has_offset=True)
    o0 = plan.partitions[("o", 0)]
    assert (o0.first_offset, o0.last_offset, o0.count) == (5, 20, 5)
    assert plan.task_starts == {}
    with pytest.raises(
        OffsetOrderError,
        match=r"o-0: input offset 5 is below .* 6 "
        r"\(offsets 5\.\.20",
    ):
        plan_ingest(ok, {("o", 0): 6}, LogConfig(), has_offset=True)
    dup = [dict(task=0, topic="o", partition=0, count=4, lo=1, hi=3)]
    with pytest.raises(OffsetOrderError, match=r"4 records but offsets 1\.\.3 span only 3"):
        plan_ingest(dup, {}, LogConfig(), has_offset=True)


def test_bad_topics_and_nulls_are_rejected_before_writing():
    with pytest.raises(InvalidTopicError, match="b a d"):
        plan_ingest(rows((0, "b a d", 0, 1)), {}, LogConfig(), has_offset=False)
    with pytest.raises(SeglakeError, match="2 input rows have a null topic or partition"):
        plan_ingest(rows((0, None, 0, 2)), {}, LogConfig(), has_offset=False)
    with pytest.raises(SeglakeError, match="partition"):
        plan_ingest(rows((0, "t", -1, 2)), {}, LogConfig(), has_offset=False)


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c.d", None]), st.integers(0, 3)), max_size=60)
)
def test_group_rows_equals_a_brute_force_grouping(pairs):
    """Null topics group under ``None`` (plan_ingest then names them), also when a batch
    holds nothing else (that used to raise IndexError in the task)."""
    topics = pa.array([t for t, _ in pairs], pa.string())
    parts = np.array([p for _, p in pairs], dtype=np.int32)
    want: dict = {}
    for i, key in enumerate(pairs):
        want.setdefault(key, []).append(i)
    got = {k: idx.tolist() for k, idx in group_rows(topics, parts)}
    assert got == want
