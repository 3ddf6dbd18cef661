"""A planned read narrowed to some keys (the data source's pushed ``key = ...`` /
``key IN (...)``): each planned segment's ``.keyindex`` filter asked on the planner, the
segments it rules out dropped before any task exists, the others read whole by key
(:func:`~seglake.storage.key_lookup.find_keys` in the task: the exact level, then only the
candidate records, key bytes compared).

Why on the planner, not in the task: a segment ruled out costs no Spark task at all (a key
absent everywhere is a job of no tasks), and the count of skipped segments is known where
the read is planned, so it can be said once per read. The planner reads ``48 +
filter_bytes`` (at most 128 KiB) of each planned segment, in parallel threads; a segment
whose index is missing or damaged is kept (its task scans it, and says so).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from seglake.errors import SeglakeError
from seglake.lake.scan import SegmentTask
from seglake.location import Root
from seglake.storage.index_cache import IndexCache
from seglake.storage.key_lookup import rules_out

__all__ = ["KeyPlan", "key_candidates"]

THREADS = 8


@dataclasses.dataclass(frozen=True)
class KeyPlan:
    """``tasks``: one per candidate segment; ``segments``: segments planned before the
    key filters; ``skipped``: those their filters ruled out."""

    tasks: list[SegmentTask]
    segments: int
    skipped: int

    def line(self, keys: int) -> str:
        return (
            f"seglake read: {keys} pushed key(s): {self.skipped} of {self.segments} "
            f"segment(s) skipped by their .keyindex filters, {len(self.tasks)} read by key"
        )


def per_segment(tasks: Iterable[SegmentTask]) -> list[SegmentTask]:
    """Consecutive splits of one segment joined into one task (a key read reads the
    segment by key, not its bytes in order)."""
    out = []
    for _, group in itertools.groupby(tasks, key=lambda t: (t.topic, t.partition, t.path)):
        first, *rest = group
        if rest:
            last = rest[-1]
            first = dataclasses.replace(first, end_pos=last.end_pos, hi=last.hi, extend=last.extend)
        out.append(first)
    return out


def key_candidates(
    root: Root,
    cache: IndexCache,
    tasks: list[SegmentTask],
    keys: Iterable[bytes],
    *,
    on_corrupt: str = "raise",
) -> KeyPlan:
    """``tasks`` (a scan's, in order) as one task per segment whose ``.keyindex`` filter
    may hold one of ``keys``."""
    segs = per_segment(tasks)
    asked = sorted(keys)

    def keep(t: SegmentTask) -> bool:
        try:
            seg = cache.segment(root, t.ref(), load_indexes=False, on_corrupt=on_corrupt)
            return not rules_out(seg, asked)
        except SeglakeError:
            return True  # the task meets the error (a file gone, a damaged index: scanned)

    if len(segs) > 1:
        with ThreadPoolExecutor(max_workers=min(THREADS, len(segs))) as pool:
            kept = list(pool.map(keep, segs))
    else:
        kept = [keep(t) for t in segs]
    out = [t for t, k in zip(segs, kept, strict=True) if k]
    return KeyPlan(out, len(segs), len(segs) - len(out))
