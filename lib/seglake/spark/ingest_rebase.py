"""One-pass ingest: the direct path's write without the count pass before it.

The count pass exists to give each (input task, partition) piece its first offset before
the write: the earlier tasks' records of the partition come first. Where the input's
footers prove the write needs no shuffle, the write runs at once instead:

    write (one Spark job)   every task's pieces start at the partition's log end offset
                            (task 0's are then final); tasks after the first stage under
                            ``_staging/<run>/task=<i>/<topic>-<p>/`` (ingest_tasks.task_dir)
    counts (driver)         per (task, topic, partition), from the segment rows: what the
                            count pass would have given (a piece has a segment iff it has
                            records), planned by the same ``plan_ingest``
    rebase (driver)         each later task's segments: ``delta`` = planned start - log
                            end offset added to every batch's baseOffset in the staged
                            ``.log`` (8 bytes outside the CRC: what a broker does to a
                            producer's batch; patched in place, local lake), the three
                            files renamed to the new base offset in the run's usual
                            staging layout, the row's offsets moved by ``delta``

Indexes hold offsets relative to the segment's base offset, and batching and rolls
depend on relative offsets only (with ``log.roll.jitter.ms`` 0), so the files are byte
for byte those of the two-pass write (tests/spark/test_direct_ingest.py).
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import SeglakeError
from seglake.lake.handle import LakeHandle
from seglake.lake_paths import STAGING_DIR
from seglake.record.batch import move_base_offsets
from seglake.record.header_scan import scan_headers
from seglake.spark.arrow_input import Normalizer, Split, split_topics
from seglake.spark.ingest_tasks import SEGMENT_ROWS, task_dir
from seglake.storage.key_index import move_key_index
from seglake.storage.naming import (
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    partition_dir_name,
    run_dir,
    segment_file_name,
)

Key = tuple[str, int]
_PREFIX = task_dir(1).removesuffix("1")  # "task=": no partition directory has a '='


def one_pass(
    split_list: list[Split],
    norm: Normalizer,
    num_partitions: int | None,
    config: LogConfig,
    lake: LakeHandle,
) -> bool:
    """Whether the write may run without a count pass: offsets assigned in input order,
    Kafka's partitioner (``num_partitions``), a local lake (staged files patched in
    place), no roll jitter (it follows the base offset), valid non-null topics, and no
    shuffle: ``seglake.ingest.shuffle=never``, or ``auto`` and the pieces average at
    least ``local.min.records`` even if every task had every (topic, partition)."""
    if (
        num_partitions is None
        or config.ingest_order != "input"
        or config.ingest_shuffle == "always"
        or any(c.roll_jitter_ms > 0 for c in config.every_topic())
        or not lake.is_local
    ):
        return False
    column = "topic" if norm.topic is None else None
    try:
        stats = [split_topics(s, column) for s in split_list]
        names: set[Any] = set().union(*(t for _, t, _ in stats)) if column else {norm.topic}
        for t in names:
            partition_dir_name(t, num_partitions - 1)
    except Exception:  # odd types, invalid names: the two passes report them as before
        return False
    if any(nulls for _, _, nulls in stats):
        return False
    if config.ingest_shuffle == "never":
        return True
    rows = sum(r for r, _, _ in stats)
    pieces = sum(min(r, max(len(t), 1) * num_partitions) for r, t, _ in stats)
    return pieces > 0 and rows >= config.local_min_records * pieces


def _task(path: str) -> int:
    head = path.split("/", 1)[0]
    return int(head.removeprefix(_PREFIX)) if head.startswith(_PREFIX) else 0


def counts(rows: pa.Table) -> list[dict[str, Any]]:
    """The count pass's rows (task, topic, partition, count) from one-pass segment rows."""
    out: dict[tuple[int, str, int], int] = {}
    cols = ("path", "topic", "partition", "record_count")
    for path, t, p, n in zip(*(rows.column(c).to_pylist() for c in cols), strict=True):
        key = (_task(path), t, p)
        out[key] = out.get(key, 0) + n
    return [
        {"task": k[0], "topic": k[1], "partition": k[2], "count": n, "lo": None, "hi": None}
        for k, n in out.items()
    ]


def rebase(
    lake: LakeHandle,
    run_id: str,
    rows: pa.Table,
    task_starts: Mapping[tuple[int, str, int], int],
    log_end: Mapping[Key, int],
) -> pa.Table:
    """The later tasks' staged segments moved to their planned offsets (module doc)."""
    fs, base = lake.fs, lake.base
    staging = run_dir(base, STAGING_DIR, run_id)
    out = rows.to_pylist()
    moved = set()
    for r in out:
        task = _task(r["path"])
        if not task:
            continue
        key = (r["topic"], r["partition"])
        delta = task_starts[(task, *key)] - log_end.get(key, 0)
        src = lakefs.join(staging, r["path"]).removesuffix(LOG_SUFFIX)
        if delta:
            _patch(src + LOG_SUFFIX, delta, r["next_offset"] - r["base_offset"])
        r["base_offset"] += delta
        r["next_offset"] += delta
        r["path"] = f"{partition_dir_name(*key)}/{segment_file_name(r['base_offset'])}"
        dst = lakefs.join(staging, r["path"]).removesuffix(LOG_SUFFIX)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            lakefs.move(fs, src + suffix, dst + suffix)
        move_key_index(fs, src + KEY_INDEX_SUFFIX, dst + KEY_INDEX_SUFFIX, delta)
        for point in r["tail_min_timestamps"] or ():
            point["offset"] += delta
        moved.add(task)
    for task in moved:
        lakefs.delete_dir(fs, lakefs.join(staging, task_dir(task)), root=base)
    return pa.Table.from_pylist(out, schema=SEGMENT_ROWS)


def _patch(path: str, delta: int, span: int) -> None:
    """Add ``delta`` to the baseOffset of every batch of the local ``.log`` at ``path``
    (``span``: its row's next - base offset, checked against the batches)."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        scan = scan_headers(mm)
        if scan.error or scan.valid_bytes != len(mm) or not len(scan):
            raise SeglakeError(f"{path}: staged segment does not read back whole")
        if int(scan.last_offset[-1]) + 1 - int(scan.base_offset[0]) != span:
            raise SeglakeError(f"{path}: staged batches do not span its row's offsets")
        data = np.frombuffer(mm, dtype=np.uint8)
        try:
            move_base_offsets(data, scan.position, scan.base_offset, delta)
        finally:
            del data  # no export of the map may be left when it closes
