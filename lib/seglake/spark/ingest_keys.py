"""Where ingest sends each input row (the executor side, pure but for :func:`task_id`):
Kafka's default partitioner over ``key`` when there is no ``partition`` (null keys round
robin from ``task * 7919``: :class:`Partitioner`), rows grouped per (topic, partition)
(:func:`group_rows`), the count pass (:func:`count_groups`) and the ints that Spark's
``repartition`` sends to each task (:func:`task_keys`, Murmur3 as Spark's ``hash()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import SeglakeError
from seglake.record.partitioner import default_partition
from seglake.spark.task_memory import in_task_pool

__all__ = [
    "COUNT_ROWS",
    "Partitioner",
    "count_groups",
    "group_rows",
    "spark_hash_int",
    "task_id",
    "task_keys",
]

COUNT_ROWS = pa.schema(
    [
        ("task", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("count", pa.int64()),
        ("lo", pa.int64()),
        ("hi", pa.int64()),
    ]
)
NULL_KEY_STRIDE = 7919  # task t's null keys start at partition (t * 7919) % n
Key = tuple[str, int]
Batches = Iterator[pa.RecordBatch]


def task_id() -> tuple[int, str]:
    """(partition id, a file suffix unique to this task attempt) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, ".tmp"
    return ctx.partitionId(), f".tmp-{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}"


class Partitioner:
    """Partition numbers of successive batches of one task (stateful for null keys): a
    ``partition`` column's, else (or, with ``num_partitions``, where it is null) Kafka's
    default partitioner's."""

    def __init__(self, num_partitions: int | None, task: int) -> None:
        self.n = num_partitions
        self.null_start = task * NULL_KEY_STRIDE

    def __call__(self, b: pa.RecordBatch) -> np.ndarray:
        given = b.column("partition") if "partition" in b.schema.names else None
        if self.n is None:
            if given is None or given.null_count:
                n = b.num_rows if given is None else given.null_count
                raise SeglakeError(f"{n} input rows have a null partition")
            out: np.ndarray = given.to_numpy()
            return out
        keys = b.column("key")
        parts = default_partition(keys, self.n, null_start=self.null_start)
        self.null_start += keys.null_count
        if given is not None:  # the Kafka sink's rule: a null partition is the partitioner's
            null = given.is_null().to_numpy(zero_copy_only=False)
            parts = np.where(null, parts, given.fill_null(0).to_numpy())
        return parts.astype(np.int32, copy=False)


def count_groups(num_partitions: int | None) -> Callable[[Batches], Batches]:
    """mapInArrow of the count pass over (topic, key[, partition][, offset]): one row per
    (task, topic, partition) with its record count (and offset range), partitioned
    exactly as the write pass will partition (Kafka's default partitioner over ``key``
    when there is no ``partition``; null keys round robin from ``task * 7919``)."""

    def count(batches: Batches) -> list[pa.RecordBatch]:
        task = task_id()[0]
        part = Partitioner(num_partitions, task)
        stats: dict[Key, list[Any]] = {}  # count, lowest and highest offset (or None)
        for b in batches:
            offsets = None
            if "offset" in b.schema.names:
                if b.column("offset").null_count:
                    raise SeglakeError(
                        f"{b.column('offset').null_count} input rows have a "
                        "null offset: give every row an offset or none"
                    )
                offsets = b.column("offset").to_numpy()
            for key, idx in group_rows(b.column("topic"), part(b)):
                lo, hi = (
                    (None, None)
                    if offsets is None
                    else (int(offsets[idx].min()), int(offsets[idx].max()))
                )
                s = stats.setdefault(key, [0, lo, hi])
                s[0] += len(idx)
                if lo is not None:
                    s[1], s[2] = min(s[1], lo), max(s[2], hi)
        if not stats:
            return []
        cols = list(zip(*stats.values(), strict=True))
        return [
            pa.RecordBatch.from_pydict(
                {
                    "task": [task] * len(stats),
                    "topic": [k[0] for k in stats],
                    "partition": [k[1] for k in stats],
                    "count": cols[0],
                    "lo": cols[1],
                    "hi": cols[2],
                },
                schema=COUNT_ROWS,
            )
        ]

    return in_task_pool(count)


def group_rows(topics: pa.Array, parts: np.ndarray) -> list[tuple[Key, np.ndarray]]:
    """Row indices of each (topic, partition) of a batch, each in row order (vectorised);
    null topics under ``None`` (only the count pass sees them: planning rejects them)."""
    n = len(parts)
    if n == 0:
        return []
    enc = pc.dictionary_encode(topics)
    codes = enc.indices.fill_null(-1).to_numpy().astype(np.int64)
    names = [*enc.dictionary.to_pylist(), None]  # code -1: a null topic
    key = (codes << 32) | (parts.astype(np.int64) & 0xFFFFFFFF)
    if (key == key[0]).all():
        return [((names[codes[0]], int(parts[0])), np.arange(n))]
    order = np.argsort(key, kind="stable")
    cuts = np.nonzero(np.diff(key[order]))[0] + 1
    out = []
    for idx in np.split(order, cuts):
        out.append(((names[codes[idx[0]]], int(parts[idx[0]])), idx))
    return out


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` (Murmur3_x86_32.hashInt) of an int column value."""
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    k1 = rotl((value & m) * 0xCC9E2D51 & m, 15) * 0x1B873593 & m
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & m
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & m
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & m
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def task_keys(num_tasks: int) -> np.ndarray:
    """``keys[c]`` is an int that ``repartition(num_tasks, col)`` sends to task ``c``:
    one chunk per task, no sampling pass (``repartitionByRange`` samples its input)."""
    keys = np.full(num_tasks, -1, dtype=np.int32)
    missing, k = num_tasks, 0
    while missing:
        t = spark_hash_int(k) % num_tasks
        if keys[t] < 0:
            keys[t] = k
            missing -= 1
        k += 1
    return keys
