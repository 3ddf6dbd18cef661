"""Work items packed into tasks by bytes, as Spark groups files into input partitions:
a read's splits (:func:`seglake.spark.extract_plan.pack_splits`) and a compaction's
merge groups (:mod:`seglake.lake.compaction`).

    n tasks  = ceil(total / target), target = total / parallelism within
               [min_bytes, max_bytes]; more than one: rounded up to a multiple of
               parallelism (3 tasks on 2 cores take two rounds, 4 of 3/4 the size 1.5)
    placing  largest item first, each to the least loaded task (an item larger than
             max_bytes stays alone)
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

__all__ = ["pack"]


def pack(
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
