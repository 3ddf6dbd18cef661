"""Retention on a lake: the rules (:mod:`seglake.storage.retention`) planned on the
catalog, the rows removed in **one** commit (readers stop seeing the segments at once),
the files retired (:mod:`seglake.lake.garbage`: readers pinned to an older version keep
reading them) and deleted once older than ``file.delete.delay.ms``.

A crash between the commit and the retirement leaves files without rows below the
partition's log start offset (invisible: no row); the next run retires them, and deletes
leftover ``.deleted`` files, before planning.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import pyarrow as pa

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.lake.garbage import Collected, collect, retire, retired_paths
from seglake.lake.handle import LakeHandle
from seglake.lake.topic_store import topic_rules
from seglake.storage.naming import parse_segment_file_name, partition_dir_name, validate_run_id
from seglake.storage.retention import RetentionRules

__all__ = [
    "RetentionOptions",
    "RetentionReport",
    "apply_retention",
    "finish_interrupted_deletes",
]

Key = tuple[str, int]


@dataclasses.dataclass
class RetentionReport:
    root: str
    rules: RetentionRules
    deleted: pa.Table
    leftovers_finished: list[str]
    collected: Collected | None = None
    catalog_version: int | None = None
    run_id: str | None = None
    dry_run: bool = False

    @property
    def files_deleted(self) -> list[str]:
        return self.collected.deleted if self.collected else []

    def __str__(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        lines = [f"{self.root}: retention rules: {self.rules}"]
        lines.append(
            f"{self.root}: retention {verb} {self.deleted.num_rows} segment(s)"
            + (
                f" (catalog version {self.catalog_version}, run {self.run_id})"
                if self.catalog_version is not None
                else ""
            )
            + (
                f"; {'would retire' if self.dry_run else 'retired'} "
                f"{len(self.leftovers_finished)} leftover file(s) of an interrupted run"
                if self.leftovers_finished
                else ""
            )
        )
        for r in self.deleted.select(
            ["topic", "partition", "base_offset", "next_offset", "size_bytes", "reason"]
        ).to_pylist():
            lines.append(
                f"  {r['topic']}-{r['partition']} segment {r['base_offset']} "
                f"(offsets ..{r['next_offset'] - 1}, {r['size_bytes']} bytes): "
                f"{r['reason']}"
            )
        if self.collected is not None:
            lines.append(f"files: {'would have ' if self.dry_run else ''}{self.collected}")
        return "\n".join(lines)


def finish_interrupted_deletes(
    lake: LakeHandle, rows: pa.Table, *, version: int, dry_run: bool = False
) -> list[str]:
    """Delete ``.deleted`` files; retire segment files without a row below their
    partition's log start offset (left by a crash between a commit and its retirement)."""
    fs, base = lake.fs, lake.base
    found: list[str] = []
    starts: dict[Key, int] = {}
    for t, p, b in zip(
        rows.column("topic").to_pylist(),
        rows.column("partition").to_pylist(),
        rows.column("base_offset").to_pylist(),
        strict=True,
    ):
        starts[(t, p)] = min(b, starts.get((t, p), b))
    known = retired_paths(lake)
    orphans: list[str] = []
    for (t, p), start in sorted(starts.items()):
        d = partition_dir_name(t, p)
        for name in lakefs.listdir(fs, lake_paths.safe_join(base, d), missing_ok=True):
            rel = f"{d}/{name}"
            parsed = parse_segment_file_name(name)
            if name.endswith(".deleted"):
                found.append(rel)
                if not dry_run:
                    lakefs.delete_file(fs, lake_paths.safe_join(base, rel), root=base)
            elif parsed is not None and parsed[0] < start and rel not in known:
                found.append(rel)
                orphans.append(rel)
    if orphans and not dry_run:
        retire(lake, orphans, version=version, operation="retention (interrupted run)")
    return found


def _check_log_starts(
    lake: LakeHandle, rules: RetentionRules, leo: dict[tuple[str, int], int]
) -> None:
    """Kafka's deleteRecords: a partition the lake has not (UNKNOWN_TOPIC_OR_PARTITION)
    or an offset past its log end offset (OFFSET_OUT_OF_RANGE) is an error, not a no-op."""
    for (t, p), offset in sorted((rules.log_start_offsets or {}).items()):
        if (t, p) not in leo:
            have = sorted(q for s, q in leo if s == t)
            where = f"topic {t!r} has partitions {have}" if have else f"no topic {t!r}"
            raise ConfigError(f"{lake}: log start offset {t}:{p}:{offset}: {where} in the lake")
        if offset > leo[(t, p)]:
            raise ConfigError(
                f"{lake}: log start offset {t}:{p}:{offset} is past the partition's log end "
                f"offset {leo[(t, p)]}"
            )


@dataclasses.dataclass(frozen=True)
class RetentionOptions:
    """How a retention run runs (its rules: :class:`~seglake.storage.retention.
    RetentionRules`); built once from the arguments both the CLI and the job take
    (:func:`seglake.cli.jobargs.retention_from_args`).

    now_ms: the clock the rules are planned at (default: now).
    topics: only these (default: all).
    run_id: the catalog commit's run id (default: a new one).
    dry_run: report, change nothing.
    delete_delay_ms: retired files older than this are deleted (default
        ``file.delete.delay.ms``; 0: this run's at once).
    """

    now_ms: int | None = None
    topics: list[str] | None = None
    run_id: str | None = None
    dry_run: bool = False
    delete_delay_ms: int | None = None


def apply_retention(
    lake: LakeHandle, rules: RetentionRules, options: RetentionOptions = RetentionOptions()
) -> RetentionReport:
    """Plan ``rules`` on the catalog, remove the rows in one commit, retire the files,
    then delete every retired file older than ``options.delete_delay_ms``.

    Raises:
        ConfigError: ``rules`` is empty (a retention run asked for nothing).
    """
    o = options
    run_id, topics, dry_run = o.run_id, o.topics, o.dry_run
    if run_id is not None:
        validate_run_id(run_id)
    delay = LogConfig().file_delete_delay_ms if o.delete_delay_ms is None else o.delete_delay_ms
    now_ms = int(time.time() * 1000) if o.now_ms is None else o.now_ms
    catalog = lake.catalog
    version = catalog.version()
    rows = catalog.segments(topics, version=version)
    _check_log_starts(lake, rules, catalog.log_end_offsets(version=version))
    per_topic, asked = topic_rules(catalog, rows, rules, version=version)
    if not asked:
        raise ConfigError(
            "retention: no rule given (log.retention.ms, log.retention.bytes, a log start "
            "offset, or a topic's retention.ms/retention.bytes in `seglake config`); Kafka's "
            "broker defaults apply only when asked for (--broker-defaults)"
        )
    leftovers = finish_interrupted_deletes(lake, rows, version=version, dry_run=dry_run)
    plan = pa.concat_tables(
        [
            r.plan(rows.filter(pa.compute.equal(rows["topic"], t)), now_ms)
            for t, r in per_topic.items()
        ]
        or [rules.plan(rows, now_ms)]
    )
    report = RetentionReport(str(lake), rules, plan, leftovers, dry_run=dry_run)
    if plan.num_rows and not dry_run:
        run_id = run_id or f"retention-{uuid.uuid4().hex[:12]}"
        result = catalog.remove(plan, run_id)
        report.catalog_version, report.run_id = result.version, run_id
        retire(
            lake,
            plan.column("path").to_pylist(),
            version=result.version,
            operation="retention",
            run_id=run_id,
        )
    report.collected = collect(lake, older_than_ms=delay, dry_run=dry_run)
    return report
