"""Recovery of a whole lake: every catalogued partition recovered
(:mod:`seglake.storage.recovery`), then the catalog fixed in one commit (rows of
truncated, rewritten or re-indexed segments replaced, rows of deleted segments removed),
then the removed segments' files deleted.

A lake has no replica, so by default nothing valid is dropped: a damaged batch (CRC
mismatch, torn bytes) is cut out of its segment, which is rewritten with the valid
batches before and after it (:mod:`seglake.storage.damaged_batches`), and the later
segments stay. Only the damaged batch's offsets are lost: a gap inside the segment (its
row keeps ``base_offset``/``next_offset``, ``record_count`` drops), which readers step over
as over compacted offsets. The report names the offsets lost, the file and the position.
``kafka_truncate=True`` is Kafka's ``LogLoader`` rule instead: the segment truncated at
the damage, every later segment of the partition deleted.

Indexes are rebuilt with the segment's recorded ``index_interval_bytes`` (the catalog
column; null in older catalogs: the ``interval`` argument).

The ``recover`` Spark job runs this same :func:`recover_lake` with Spark's ``map_tasks``:
one partition per task (:func:`recover_partition_rows`), the commit on the driver
(:func:`apply_recovery_fix`).
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.config import LogConfig
from seglake.errors import SeglakeError
from seglake.lake.catalog import Catalog
from seglake.lake.garbage import collect, retire
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import STAT_COLUMNS, catalog_schema, rows_table, segment_row
from seglake.lake.staging import publish_pending, staged_run_committed
from seglake.lake.stream_append import cut_uncommitted
from seglake.lake.tasks import MapTasks, in_process
from seglake.lake.topic_store import topic_configs
from seglake.storage.damaged_batches import DroppedBytes
from seglake.storage.naming import partition_dir_name, segment_file_name
from seglake.storage.recovery import DEFAULT_INTERVAL, PartitionRecovery, recover_dir

__all__ = [
    "LakeRecovery",
    "RecoverOptions",
    "apply_recovery_fix",
    "recover_lake",
    "recover_partition_rows",
]


@dataclasses.dataclass
class LakeRecovery:
    """What :func:`recover_lake` did: per-partition reports and the catalog fix."""

    root: str
    partitions: list[PartitionRecovery]
    rows_replaced: int = 0
    rows_removed: int = 0
    catalog_version: int | None = None
    run_id: str | None = None
    dry_run: bool = False

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.partitions) or bool(
            self.rows_replaced or self.rows_removed
        )

    def __str__(self) -> str:
        verb = "would " if self.dry_run else ""
        lines = [str(p) for p in self.partitions if p.changed]
        lines.append(
            f"{self.root}: {len(self.partitions)} partition(s) checked, "
            f"{sum(p.changed for p in self.partitions)} changed; catalog: {verb}replace "
            f"{self.rows_replaced} row(s), {verb}remove {self.rows_removed}"
            + (
                f" (version {self.catalog_version}, run {self.run_id})"
                if self.catalog_version is not None
                else ""
            )
        )
        return "\n".join(lines)


# a row that differs in any of these is replaced (tail minima: also filled in for rows of
# a catalog made before them, and never left wrong, which would make a time filter skip)
_COMPARED = STAT_COLUMNS


def recover_partition_rows(
    lake: LakeHandle,
    rows: pa.Table,
    *,
    dry_run: bool = False,
    interval: int = DEFAULT_INTERVAL,
    force: bool = False,
    kafka_truncate: bool = False,
) -> tuple[PartitionRecovery, list[dict[str, Any]], list[tuple[str, int, int]]]:
    """Recover the catalogued segments of one partition (its catalog ``rows``).

    Returns the report, replacement rows for segments whose row no longer matches, and
    the keys of segments to remove from the catalog (deleted after a truncated one, or
    left empty). Whole-segment file deletions are left to the caller, after its commit.
    This is also what one Spark task of the ``recover`` job runs. ``kafka_truncate``:
    Kafka's rule (cut at the damage, delete the later segments) instead of the lake's.
    """
    fs, base = lake.fs, lake.base
    current = rows.to_pylist()
    if not current:
        raise SeglakeError("recover_partition_rows: no rows")
    topic, part = current[0]["topic"], int(current[0]["partition"])
    directory = lake_paths.safe_join(base, current[0]["path"]).rsplit("/", 1)[0]
    by_base = {int(r["base_offset"]): r for r in current}
    if not dry_run:  # bytes a stream batch appended in place and never committed
        cut_uncommitted(fs, lake, current)
    if fs.get_file_info(directory).type != pafs.FileType.Directory:
        report = PartitionRecovery(
            directory=directory, dry_run=dry_run, deleted_segments=sorted(by_base)
        )
    else:
        report = recover_dir(
            fs,
            directory,
            dry_run=dry_run,
            interval=interval,
            force=force,
            only=set(by_base),
            defer_deletes=True,
            keep_valid=not kafka_truncate,
            root=base,
            intervals={
                b: r["index_interval_bytes"]
                for b, r in by_base.items()
                if r.get("index_interval_bytes") is not None
            },
        )
    replace, remove = _row_changes(report, by_base, topic, part)
    report.deleted_segments = sorted(set(report.deleted_segments))
    report.lost = lost_offsets(report, by_base, directory)
    return report, replace, remove


def _row_changes(
    report: PartitionRecovery, by_base: dict[int, dict[str, Any]], topic: str, part: int
) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]]]:
    """The catalog changes a partition's recovery makes: ``(replace, remove)``, the new row
    of each cataloged segment whose row changed, and the key of each one deleted (one
    left without batches is added to ``report.deleted_segments``)."""
    replace, remove = [], []
    for rec in report.segments:
        old = by_base.get(rec.base_offset)
        if old is None:
            continue
        if rec.batches == 0:
            report.deleted_segments.append(rec.base_offset)
            continue
        new = segment_row(topic, part, rec, old["path"])
        if old.get("index_interval_bytes") is not None or not rec.rebuilt:
            new["index_interval_bytes"] = old.get("index_interval_bytes")
        if any(new[c] != old.get(c) for c in (*_COMPARED, "index_interval_bytes")):
            replace.append(new)
    for b in sorted(set(report.deleted_segments)):
        if b in by_base:
            remove.append((topic, part, b))
    return replace, remove


def lost_offsets(
    report: PartitionRecovery, rows: dict[int, dict[str, Any]], directory: str
) -> list[dict[str, Any]]:
    """The offsets of the catalog ``rows`` ({base offset: row}) that the recovery in
    ``report`` made unreadable: dropped stretches, cut tails, files cut short (shorter
    than their row's ``size_bytes``, also at a batch boundary), deleted segments."""
    lost = []
    for rec in report.segments:
        old = rows.get(rec.base_offset)
        if old is None or rec.base_offset in report.deleted_segments:
            continue
        end = int(old["next_offset"]) - 1
        drops = rec.dropped or (
            [DroppedBytes(rec.valid_bytes, rec.truncated_bytes, rec.next_offset, None, rec.error)]
            if rec.error
            else []
        )
        size = int(old["size_bytes"])
        if rec.original_bytes < size and all(d.last_offset is not None for d in drops):
            # a file cut short at a batch boundary: nothing in it is damaged, the
            # committed batches past its end are gone
            why = f"cut short: the file has {rec.original_bytes} bytes, its catalog row {size}"
            drops = [*drops, DroppedBytes(rec.original_bytes, 0, rec.next_offset, None, why)]
        for d in drops:
            last = end if d.last_offset is None else d.last_offset
            if last >= d.first_offset:
                lost.append(
                    dict(
                        file=rec.log_path,
                        position=d.position,
                        first_offset=d.first_offset,
                        last_offset=last,
                        reason=d.error,
                    )
                )
    for b in report.deleted_segments:
        if b in rows and int(rows[b]["next_offset"]) > b:
            lost.append(
                dict(
                    file=lakefs.join(directory, f"{b:020d}.log"),
                    position=0,
                    first_offset=b,
                    last_offset=int(rows[b]["next_offset"]) - 1,
                    reason="segment deleted",
                )
            )
    return lost


def apply_recovery_fix(
    lake: LakeHandle,
    partitions: list[PartitionRecovery],
    replace: list[dict[str, Any]],
    remove: list[tuple[str, int, int]],
    *,
    run_id: str | None = None,
    dry_run: bool = False,
    delete_delay_ms: int | None = None,
) -> LakeRecovery:
    """The driver's half: one catalog commit for every partition's fix, then retire the
    files of removed segments and delete retired files older than ``delete_delay_ms``
    (default ``file.delete.delay.ms``)."""
    report = LakeRecovery(
        root=str(lake),
        partitions=partitions,
        rows_replaced=len(replace),
        rows_removed=len(remove),
        dry_run=dry_run,
    )
    if dry_run or not (replace or remove):
        return report
    run_id = run_id or f"recover-{uuid.uuid4().hex[:12]}"
    result = lake.catalog.replace_rows(rows_table(replace), run_id, remove=remove)
    report.catalog_version, report.run_id = result.version, run_id
    retire(
        lake,
        [f"{partition_dir_name(t, p)}/{segment_file_name(b)}" for t, p, b in remove],
        version=result.version,
        operation="recover",
        run_id=run_id,
    )
    delay = LogConfig().file_delete_delay_ms if delete_delay_ms is None else delete_delay_ms
    collect(lake, older_than_ms=delay)
    return report


def _partition_groups(rows: pa.Table) -> list[list[dict[str, Any]]]:
    """Catalog rows grouped per partition, in (topic, partition) order, as plain lists
    without ``committed_at`` (picklable task inputs)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows.to_pylist():
        r.pop("committed_at", None)
        groups.setdefault((r["topic"], r["partition"]), []).append(r)
    return [groups[k] for k in sorted(groups)]


def _recover_task(
    lake: LakeHandle,
    dry_run: bool,
    force: bool,
    kafka_truncate: bool,
    intervals: dict[str, int],
    rows: list[dict[str, Any]],
) -> tuple[PartitionRecovery, list[dict[str, Any]], list[tuple[str, int, int]]]:
    """One partition's :func:`recover_partition_rows` (a task of :func:`recover_lake`)."""
    schema = pa.schema([f for f in catalog_schema() if f.name != "committed_at"])
    return recover_partition_rows(
        lake,
        pa.Table.from_pylist(rows, schema=schema),
        dry_run=dry_run,
        interval=intervals[rows[0]["topic"]],
        force=force,
        kafka_truncate=kafka_truncate,
    )


def fallback_intervals(catalog: Catalog, topics: Iterable[str], base: LogConfig) -> dict[str, int]:
    """``index.interval.bytes`` each topic's indexes are rebuilt with where a row has no
    recorded one: the topic's config (:mod:`seglake.lake.topic_config`) over ``base``."""
    configs = topic_configs(catalog, base)
    return {t: configs.for_topic(t).index_interval_bytes for t in set(topics)}


@dataclasses.dataclass(frozen=True)
class RecoverOptions:
    """How a lake's recovery runs; built once from the arguments both ``seglake recover``
    and the job take (:func:`seglake.cli.jobargs.recover_options`).

    dry_run: report, change nothing.
    interval: ``index.interval.bytes`` of rebuilt indexes where a row has none recorded
        and ``config`` is not given.
    force: rebuild valid indexes too (Kafka always rebuilds).
    topics: only these (default: all).
    run_id: the catalog commit's run id.
    delete_delay_ms: removed files older than this are deleted (default
        ``file.delete.delay.ms``).
    kafka_truncate: Kafka's rule: the segments after a damaged one are deleted too.
    config: the settings the topics' configs override (default: ``interval`` as
        ``index.interval.bytes``).
    """

    dry_run: bool = False
    interval: int = DEFAULT_INTERVAL
    force: bool = False
    topics: Iterable[str] | None = None
    run_id: str | None = None
    delete_delay_ms: int | None = None
    kafka_truncate: bool = False
    config: LogConfig | None = None


def recover_lake(
    lake: LakeHandle,
    options: RecoverOptions = RecoverOptions(),
    *,
    map_tasks: MapTasks = in_process,
) -> LakeRecovery:
    """Recover every catalogued partition of a lake and fix the catalog in one commit.

    Committed runs whose files are still staged are published first. Segments are
    recovered in place (damaged batches cut out, torn tails truncated, indexes rebuilt)
    and their rows replaced; segments left empty lose their rows, then their files. With
    ``kafka_truncate`` (Kafka's rule) the segments after a damaged one are deleted too.
    One partition a task through ``map_tasks`` (the ``recover`` job: Spark's).
    """
    o = options
    dry_run, force, kafka_truncate, topics = o.dry_run, o.force, o.kafka_truncate, o.topics
    catalog = lake.catalog
    catalog.require()
    if not dry_run:
        for run in lakefs.listdir(lake.fs, lake.staging_root, missing_ok=True):
            if staged_run_committed(catalog, run):
                publish_pending(lake, run)
    groups = _partition_groups(catalog.segments(list(topics) if topics is not None else None))
    intervals = fallback_intervals(
        catalog,
        [g[0]["topic"] for g in groups],
        LogConfig(index_interval_bytes=o.interval) if o.config is None else o.config,
    )
    task = functools.partial(_recover_task, lake, dry_run, force, kafka_truncate, intervals)
    results = map_tasks(task, groups)
    partitions = [r[0] for r in results]
    replace = [row for r in results for row in r[1]]
    remove = [key for r in results for key in r[2]]
    return apply_recovery_fix(
        lake,
        partitions,
        replace,
        remove,
        run_id=o.run_id,
        dry_run=dry_run,
        delete_delay_ms=o.delete_delay_ms,
    )
