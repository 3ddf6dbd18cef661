"""Retention: delete whole segments from the oldest, by Kafka's rules
(``UnifiedLog.deleteOldSegments``), catalog first, then files.

Per partition, segments sorted by base offset, the newest never deleted by these rules;
each rule deletes a prefix of what the previous ones left, so the result is a prefix:

    time     log.retention.ms >= 0: while now - largestTimestamp > retention.ms
             (a segment without timestamps uses its commit time, as Kafka uses mtime)
    size     log.retention.bytes >= 0: while total - segment size >= retention.bytes
    start    a log start offset L (deleteRecords): while the next segment's base <= L

:func:`apply_retention` removes the rows in **one** catalog commit (readers stop seeing
the segments at once), then renames each file to ``.deleted`` and removes it. A crash
between the commit and the deletes leaves files without rows below the partition's log
start offset (invisible: no row); the next run removes them, and leftover ``.deleted``
files, before planning.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.storage.naming import (
    parse_segment_file_name,
    partition_dir_name,
    validate_partition,
    validate_topic,
)

__all__ = [
    "RetentionReport",
    "apply_retention",
    "delete_segment_files",
    "finish_interrupted_deletes",
    "parse_log_start_offsets",
    "plan_retention",
]

Key = tuple[str, int]


def parse_log_start_offsets(specs: Iterable[str]) -> dict[Key, int]:
    """``["orders:3:1000"]`` -> ``{("orders", 3): 1000}`` (topic names have no ``:``)."""
    out: dict[Key, int] = {}
    for spec in specs:
        parts = spec.rsplit(":", 2)
        try:
            topic, part, off = parts
            key = (validate_topic(topic), validate_partition(int(part)))
            out[key] = int(off)
        except ValueError as exc:
            raise ConfigError(
                f"log start offset {spec!r}: expected TOPIC:PARTITION:OFFSET ({exc})"
            ) from None
        if out[key] < 0:
            raise ConfigError(f"log start offset {spec!r} is negative")
    return out


def _largest_timestamps(rows: pa.Table) -> np.ndarray:
    ts = rows.column("max_timestamp").to_numpy().astype(np.int64)
    if (ts < 0).any():
        committed = pc.cast(rows.column("committed_at"), pa.int64()).to_numpy() // 1000
        ts = np.where(ts < 0, committed, ts)
    return ts


def plan_retention(
    rows: pa.Table,
    *,
    now_ms: int,
    retention_ms: int = -1,
    retention_bytes: int = -1,
    log_start_offsets: Mapping[Key, int] | None = None,
) -> pa.Table:
    """Catalog rows of the segments retention deletes (with a ``reason`` column).

    Args:
        rows: catalog rows (any partitions; e.g. :meth:`Catalog.segments`).
        now_ms: the current time, epoch ms.
        retention_ms: ``log.retention.ms`` (-1: no time limit).
        retention_bytes: ``log.retention.bytes`` per partition (-1: no size limit).
        log_start_offsets: ``{(topic, partition): offset}`` to delete below.
    """
    starts = dict(log_start_offsets or {})
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]
    )
    topic = rows.column("topic").to_pylist()
    part = rows.column("partition").to_pylist()
    base = rows.column("base_offset").to_numpy()
    size = rows.column("size_bytes").to_numpy()
    largest = _largest_timestamps(rows) if rows.num_rows else np.zeros(0, np.int64)
    take: list[int] = []
    reasons: list[str] = []
    i, n = 0, rows.num_rows
    while i < n:
        j = i
        while j < n and topic[j] == topic[i] and part[j] == part[i]:
            j += 1
        k = i  # segments i..k-1 are deleted so far; j-1 (the newest) never by these rules
        if retention_ms >= 0:
            while k < j - 1 and now_ms - int(largest[k]) > retention_ms:
                take.append(k)
                reasons.append(
                    f"time: largest timestamp {int(largest[k])} older than "
                    f"{now_ms} - {retention_ms}"
                )
                k += 1
        if retention_bytes >= 0:
            left = int(size[k:j].sum())
            while k < j - 1 and left - int(size[k]) >= retention_bytes:
                left -= int(size[k])
                take.append(k)
                reasons.append(
                    f"size: partition stays at {left} >= {retention_bytes} bytes without it"
                )
                k += 1
        start = starts.get((topic[i], part[i]))
        if start is not None:
            while k < j - 1 and int(base[k + 1]) <= start:
                take.append(k)
                reasons.append(
                    f"log start offset {start}: next segment starts at {int(base[k + 1])}"
                )
                k += 1
        i = j
    out = rows.take(pa.array(take, pa.int64()))
    return out.append_column("reason", pa.array(reasons, pa.string()))


@dataclasses.dataclass
class RetentionReport:
    root: str
    deleted: pa.Table
    files_deleted: list[str]
    leftovers_finished: list[str]
    catalog_version: int | None = None
    run_id: str | None = None
    dry_run: bool = False

    def __str__(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        lines = []
        for r in self.deleted.select(
            ["topic", "partition", "base_offset", "next_offset", "size_bytes", "reason"]
        ).to_pylist():
            lines.append(
                f"  {r['topic']}-{r['partition']} segment {r['base_offset']} "
                f"(offsets ..{r['next_offset'] - 1}, {r['size_bytes']} bytes): "
                f"{r['reason']}"
            )
        head = (
            f"{self.root}: retention {verb} {self.deleted.num_rows} segment(s)"
            + (
                f" (catalog version {self.catalog_version}, run {self.run_id})"
                if self.catalog_version is not None
                else ""
            )
            + (
                f"; finished {len(self.leftovers_finished)} interrupted delete(s)"
                if self.leftovers_finished
                else ""
            )
        )
        return "\n".join([head, *lines])


def finish_interrupted_deletes(root: str, rows: pa.Table, *, dry_run: bool = False) -> list[str]:
    """Remove ``.deleted`` files, and segment files without a row below their partition's
    log start offset (left by a crash between a retention commit and its deletes)."""
    fs, base = lakefs.resolve(root)
    done: list[str] = []
    starts: dict[Key, int] = {}
    for t, p, b in zip(
        rows.column("topic").to_pylist(),
        rows.column("partition").to_pylist(),
        rows.column("base_offset").to_pylist(),
        strict=True,
    ):
        starts[(t, p)] = min(b, starts.get((t, p), b))
    for (t, p), start in sorted(starts.items()):
        d = lakefs.safe_join(base, partition_dir_name(t, p))
        for name in lakefs.listdir(fs, d, missing_ok=True):
            parsed = parse_segment_file_name(name)
            stale = name.endswith(".deleted") or (parsed is not None and parsed[0] < start)
            if stale:
                done.append(lakefs.join(d, name))
                if not dry_run:
                    lakefs.delete_file(fs, lakefs.join(d, name))
    return done


def delete_segment_files(root: str, keys: Iterable[tuple[str, int, int]]) -> list[str]:
    """Rename each file of the segments to ``.deleted``, then remove it (idempotent)."""
    from seglake.lake.recovery import delete_segments

    return delete_segments(root, keys)


def apply_retention(
    root: str,
    *,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    now_ms: int | None = None,
    log_start_offsets: Mapping[Key, int] | None = None,
    topics: Iterable[str] | None = None,
    config: LogConfig | None = None,
    run_id: str | None = None,
    dry_run: bool = False,
    delete_files: bool = True,
) -> RetentionReport:
    """Plan retention on the catalog, remove the rows in one commit, then the files.

    ``retention_ms``/``retention_bytes`` default to ``config`` (``LogConfig()``: 168 h,
    unlimited). ``delete_files=False`` leaves the file deletes to the caller (the Spark
    job runs them in tasks); :func:`finish_interrupted_deletes` catches up either way.
    """
    from seglake.lake.catalog import Catalog

    config = config or LogConfig()
    retention_ms = config.retention_ms if retention_ms is None else retention_ms
    retention_bytes = config.retention_bytes if retention_bytes is None else retention_bytes
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    catalog = Catalog(root)
    rows = catalog.segments(list(topics) if topics is not None else None)
    leftovers = finish_interrupted_deletes(root, rows, dry_run=dry_run)
    plan = plan_retention(
        rows,
        now_ms=now_ms,
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        log_start_offsets=log_start_offsets,
    )
    report = RetentionReport(root, plan, [], leftovers, dry_run=dry_run)
    if dry_run or not plan.num_rows:
        return report
    run_id = run_id or f"retention-{uuid.uuid4().hex[:12]}"
    keys = list(
        zip(
            plan.column("topic").to_pylist(),
            plan.column("partition").to_pylist(),
            plan.column("base_offset").to_pylist(),
            strict=True,
        )
    )
    result = catalog.remove(keys, run_id)
    report.catalog_version, report.run_id = result.version, run_id
    if delete_files:
        report.files_deleted = delete_segment_files(root, keys)
    return report
