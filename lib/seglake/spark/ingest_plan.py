"""Ingest planning on the driver (pure, no Spark): from the count pass's rows to the
offsets, chunks and write mode of a run.

    count rows: (task, topic, partition, count, lo, hi)  one per input task and partition
      -> per partition: offsets [first, last], checked against the catalog's log end
         offset (given offsets: >= it and no repeats)
      -> shuffle or not (``seglake.ingest.shuffle``):
         no shuffle: each (task, partition) piece is written by its input task, offsets
             first + the counts of the earlier tasks (input order)
         shuffle: a partition is cut into ceil(count / task.max.records) chunks by
             offset range, one write task per chunk
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from seglake.config import LogConfig
from seglake.errors import OffsetOrderError, SeglakeError
from seglake.format import MAX_OFFSET
from seglake.record.encode_input import offset_too_high
from seglake.storage.naming import partition_dir_name

Key = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class PartitionPlan:
    """How one topic-partition is written: its offsets and the chunks (tasks) it is cut in."""

    first_offset: int  # first offset this run writes (assigned) or min given offset
    last_offset: int
    count: int
    chunks: int
    chunk0: int  # global chunk id of this partition's first chunk
    log_end_offset: int


@dataclasses.dataclass(frozen=True)
class IngestPlan:
    """The plan of a run: partitions, per-task starts (assigned offsets), write mode."""

    partitions: dict[Key, PartitionPlan]
    task_starts: dict[tuple[int, str, int], int]
    shuffle: bool

    @property
    def num_tasks(self) -> int:
        """Write tasks of the shuffle mode (one per chunk)."""
        return sum(p.chunks for p in self.partitions.values())

    @property
    def log_end(self) -> dict[Key, int]:
        return {k: p.log_end_offset for k, p in self.partitions.items()}


def plan_ingest(
    counts: Iterable[Mapping[str, Any]],
    log_end: Mapping[Key, int],
    config: LogConfig,
    *,
    has_offset: bool,
) -> IngestPlan:
    """Check the counted input against the catalog and plan the write (see module doc)."""
    per_task = sorted(counts, key=lambda r: (r["topic"] or "", r["partition"] or 0, r["task"]))
    stats: dict[Key, list[int]] = {}
    for r in per_task:
        t, p, n = r["topic"], r["partition"], int(r["count"])
        if t is None or p is None:
            raise SeglakeError(f"{n} input rows have a null topic or partition")
        s = stats.get((t, p))
        if s is None:
            stats[(t, p)] = [n, r["lo"], r["hi"]]
        else:
            s[0] += n
            if has_offset:
                s[1], s[2] = min(s[1], r["lo"]), max(s[2], r["hi"])
    partitions: dict[Key, PartitionPlan] = {}
    chunk0 = 0
    for (t, p), (n, lo, hi) in sorted(stats.items()):
        partition_dir_name(t, p)  # validates both before any file is touched
        end = log_end.get((t, p), 0)
        if has_offset:
            lo, hi = int(lo), int(hi)
            if lo < end:
                raise OffsetOrderError(
                    f"{t}-{p}: input offset {lo} is below the partition's log end offset {end}"
                    f" (offsets {lo}..{hi} in the input; the lake already holds up to {end - 1})"
                )
            if hi - lo + 1 < n:
                raise OffsetOrderError(
                    f"{t}-{p}: {n} records but offsets {lo}..{hi} span only {hi - lo + 1}: "
                    "offsets repeat"
                )
        else:
            lo, hi = end, end + n - 1
        if hi > MAX_OFFSET:
            given = "input offset" if has_offset else f"offset of record {n} from log end {end}:"
            raise OffsetOrderError(offset_too_high(f"{t}-{p}: {given}", hi))
        by_ts = config.ingest_order == "timestamp" and not has_offset
        chunks = 1 if by_ts else max(1, math.ceil(n / config.task_max_records))
        partitions[(t, p)] = PartitionPlan(lo, hi, n, chunks, chunk0, end)
        chunk0 += chunks
    task_starts: dict[tuple[int, str, int], int] = {}
    if not has_offset:
        nxt = {k: plan.first_offset for k, plan in partitions.items()}
        for r in per_task:
            key = (r["topic"], r["partition"])
            task_starts[(r["task"], *key)] = nxt[key]
            nxt[key] += int(r["count"])
    return IngestPlan(partitions, task_starts, _shuffle(per_task, config, has_offset))


def _shuffle(per_task: list[Mapping[str, Any]], config: LogConfig, has_offset: bool) -> bool:
    """Whether the write needs a shuffle (see ``seglake.ingest.shuffle``)."""
    if has_offset or config.ingest_order == "timestamp" or config.ingest_shuffle == "always":
        return True  # given offsets may come in any order; timestamp order needs a sort
    if config.ingest_shuffle == "never" or not per_task:
        return False
    mean = sum(int(r["count"]) for r in per_task) / len(per_task)
    return mean < config.local_min_records


def stat_files(paths: Iterable[str]) -> list[tuple[str, int, int]] | None:
    """``(path, size, mtime ms)`` of each input file (``DataFrame.inputFiles()``), or
    ``None`` when there are none (in-memory data) or one cannot be stat'ed."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    paths = sorted(paths)
    if not paths:
        return None
    try:
        resolved = [pafs.FileSystem.from_uri(p) for p in paths]
        infos = [fs.get_file_info(path) for fs, path in resolved]
    except (ValueError, OSError, pa.ArrowException):
        return None
    if any(i.type != pafs.FileType.File for i in infos):
        return None
    return [(p, i.size, i.mtime_ns // 1_000_000) for p, i in zip(paths, infos, strict=True)]


def segment_counts(rows: Any) -> dict[tuple[str, int], int]:
    """Records per (topic, partition) of a run's segment rows."""
    agg = rows.group_by(["topic", "partition"]).aggregate([("record_count", "sum")])
    return {
        (t, int(p)): int(c)
        for t, p, c in zip(*(agg.column(i).to_pylist() for i in range(3)), strict=True)
    }
