"""Tail minima (seglake.storage.tail_minima) against brute force: each checkpoint's
minimum over the records after it, the cutoff never skips a record older than the end
and stops within one grid step and one batch of the best batch boundary; the writer's
and recovery's checkpoints agree and hold on broker-written fixtures too."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.config import LogConfig
from seglake.record.reader import read_log
from seglake.storage.recovery import recover_segment
from seglake.storage.tail_minima import (
    TAIL_STEP,
    batch_minima,
    cutoff,
    tail_minima,
    tail_step,
)
from tests.conftest import FIXTURES
from tests.unit.test_writer import make_records, new_log

INT64_MAX = np.iinfo(np.int64).max


def check_tail(tail: list[dict], offsets: np.ndarray, timestamps: np.ndarray) -> None:
    """Every checkpoint's minimum is that of the records at or after its offset (brute
    force); offsets increase, minima strictly increase; the first is the first record."""
    assert tail, "a segment with records has checkpoints"
    assert tail[0]["offset"] <= int(offsets.min())
    for a, b in itertools.pairwise(tail):
        assert a["offset"] < b["offset"] and a["min_timestamp"] < b["min_timestamp"]
    for point in tail:
        after = timestamps[offsets >= point["offset"]]  # none: only empty batches after
        assert point["min_timestamp"] == (int(after.min()) if len(after) else INT64_MAX), point


@st.composite
def segments(draw):
    """Batches (first offsets, positions, sizes) with records of any timestamps."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=40))
    sizes = draw(st.lists(st.integers(61, 5000), min_size=len(counts), max_size=len(counts)))
    n = sum(counts)
    ts = np.array(draw(st.lists(st.integers(-5, 60), min_size=n, max_size=n)), np.int64)
    gaps = draw(st.lists(st.integers(0, 3), min_size=len(counts), max_size=len(counts)))
    first = np.cumsum(np.array(counts) + np.array(gaps)) - np.array(counts)  # compaction gaps
    pos = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return first, pos, np.array(sizes), np.array(counts), ts


@settings(max_examples=300, deadline=None)
@given(segments(), st.integers(1, 40), st.sampled_from([1, 500, 4000]), st.integers(-6, 62))
def test_checkpoints_and_cutoff_equal_brute_force(seg, points, min_step, end):
    first, pos, sizes, counts, ts = seg
    offsets = np.concatenate([f + np.arange(c) for f, c in zip(first, counts, strict=True)]).astype(
        np.int64
    )
    size = int(pos[-1] + sizes[-1])
    mins = batch_minima(ts, counts)
    for i, c in enumerate(counts):  # batch_minima is each batch's min
        mine = ts[offsets >= first[i]][:c]
        assert mins[i] == (mine.min() if c else INT64_MAX)
    tail = tail_minima(first, pos, mins, size, points=points, min_step=min_step)
    assert len(tail) <= points
    if not len(ts):
        assert all(p["min_timestamp"] == INT64_MAX for p in tail)
        return
    check_tail(tail, offsets, ts)
    stop = cutoff(tail, end)
    read_end = size if stop is None else int(pos[np.searchsorted(first, stop)])
    # never skips a record older than the end
    assert (ts[offsets >= (stop if stop is not None else offsets.max() + 1)] >= end).all()
    # stops within one grid step and one batch of the best batch boundary
    ok = [i for i in range(len(first)) if (ts[offsets >= first[i]] >= end).all()]
    best = int(pos[ok[0]]) if ok else size
    step = tail_step(size, points=points, min_step=min_step)
    assert step >= min_step and step * points >= size
    assert read_end - best <= step + int(sizes.max())


def test_cutoff_of_unknown_or_late_tail_is_none():
    assert cutoff(None, 5) is None
    assert cutoff([], 5) is None
    tail = [{"offset": 10, "min_timestamp": 1}, {"offset": 20, "min_timestamp": 4}]
    assert cutoff(tail, 5) is None
    assert cutoff(tail, 4) == 20 and cutoff(tail, 1) == 10


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_writer_and_recovery_agree_with_brute_force(tmp_path: Path, codec: str) -> None:
    recs = make_records(3000, seed=7)
    cfg = LogConfig(segment_bytes=40_000, batch_size=900, compression_type=codec)
    log = new_log(tmp_path)
    infos = log.append(recs, config=cfg)
    assert len(infos) >= 3
    fs = pafs.LocalFileSystem()
    for info in infos:
        seg = read_log(Path(info.log_path).read_bytes())[0]
        check_tail(
            info.tail_min_timestamps,
            seg.column("offset").to_numpy(),
            seg.column("timestamp").to_numpy(),
        )
        if info.size_bytes > 2 * TAIL_STEP:  # non-monotonic: the minimum moves
            assert len(info.tail_min_timestamps) > 1
        rec = recover_segment(fs, info.log_path, dry_run=True)
        assert rec.tail_min_timestamps == info.tail_min_timestamps


def test_broker_segments() -> None:
    fs = pafs.LocalFileSystem()
    paths = sorted(FIXTURES.glob("*/*.log"))
    assert paths
    for p in paths:
        recs = read_log(p.read_bytes(), skip_control=False)[0]
        rec = recover_segment(fs, str(p), dry_run=True)
        if recs.num_rows:
            check_tail(
                rec.tail_min_timestamps,
                recs.column("offset").to_numpy(),
                recs.column("timestamp").to_numpy(),
            )
