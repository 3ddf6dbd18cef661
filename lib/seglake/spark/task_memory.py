"""The Arrow memory pool of ingest's tasks: jemalloc while a task runs.

A Python worker's peak RSS while ingesting is what its allocators keep, not only what
Arrow holds. One write task of 1Mi records (bench/ingest.py's input, measured in one
process after its count pass) peaked at +92 MB over the worker's size before the task
with pyarrow's default pool (mimalloc), +70 MB with jemalloc (+72 MB with the system
allocator, and slower); Arrow itself held at most 36 MB. jemalloc reuses what it freed
within the task best. The default pool is a process-wide setting: it is switched for
the task only and put back after (a buffer remembers its pool: one that outlives the
task is freed into jemalloc, where it came from). Builds without jemalloc keep the
default pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pyarrow as pa

Batches = Iterator[pa.RecordBatch]


@contextlib.contextmanager
def task_pool() -> Iterator[pa.MemoryPool]:
    """Run the body with jemalloc as Arrow's default pool (if this build has it); its
    unused memory is offered back to the system on the way out."""
    before = pa.default_memory_pool()
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # pyarrow built without jemalloc
        pool = before
    pa.set_memory_pool(pool)
    try:
        yield pool
    finally:
        pa.set_memory_pool(before)
        pool.release_unused()


def in_task_pool(task: Callable[[Batches], list[pa.RecordBatch]]) -> Callable[[Batches], Batches]:
    """The mapInArrow function that runs ``task`` (which returns its output rows) in
    :func:`task_pool` and yields the rows once the pool is put back."""

    def run(batches: Batches) -> Batches:
        with task_pool():
            rows = task(batches)
        yield from rows

    return run
