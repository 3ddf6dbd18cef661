"""The ``compact`` run's driver side (no Spark): per partition, what to do and the report.

Per partition, ``cleanup.policy`` (and ``--merge-only``) decides:

    merge      ``delete`` topics, or ``--merge-only``: adjacent segments concatenated
               into groups up to ``segment.bytes`` (:mod:`seglake.storage.merge`)
    compact    ``compact`` / ``compact,delete`` topics: Kafka's cleaner
               (:mod:`seglake.lake.cleaning`)

Tasks run through ``map_tasks`` (Spark's, or the builtin ``map`` in tests): one per
cleaned group; merge groups packed by bytes into a multiple of ``parallelism`` tasks of
:data:`MERGE_TASK_MIN_BYTES` to :data:`MERGE_TASK_MAX_BYTES` (:func:`seglake.lake.packing.
pack_sizes`, as a read's splits), each merging its groups in turn. The driver commits every
partition's new rows in ONE catalog commit (:func:`seglake.lake.rewrite.commit_rewrite`).
Merges of a lake on the local filesystem totalling at most ``driver_merge_bytes`` run on
the driver instead, in threads: the kernel copies their bytes
(:mod:`seglake.storage.log_copy`), so a task would add its fixed cost (measured: 0.5 -
1.5 s for the 2M bench's 24 groups) and no speed.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.lake import runs
from seglake.lake.cleaning import analyze_partition, clean_group, cleanable
from seglake.lake.handle import LakeHandle
from seglake.lake.packing import pack_sizes
from seglake.lake.rewrite import commit_rewrite, merge_group, plan_merge_groups
from seglake.lake.staging import discard_staging, publish_pending
from seglake.lake.tasks import MapTasks, in_process
from seglake.lake.topic_store import topic_configs
from seglake.storage.clean import CleanRound, CleanStats
from seglake.storage.naming import validate_partition, validate_run_id

__all__ = ["CompactOptions", "CompactResult", "PartitionSummary", "new_run_id", "run_compaction"]

MERGE_THREADS = 4  # merges the driver runs at once (the kernel copies: I/O bound)
# merge groups packed into tasks of about this many bytes (a task's fixed cost is about
# what copying tens of MiB costs; a group larger than the maximum is a task alone)
MERGE_TASK_MIN_BYTES = 64 << 20
MERGE_TASK_MAX_BYTES = 1 << 30


def parse_partitions(partitions: str | Iterable[int] | None) -> list[int] | None:
    """``"0,3"`` or ``[0, 3]`` as a list (``None``: all); anything else: ConfigError."""
    if partitions is None:
        return None
    items = partitions.split(",") if isinstance(partitions, str) else list(partitions)
    try:
        return [validate_partition(int(str(p).strip())) for p in items if str(p).strip()]
    except ValueError as exc:
        raise ConfigError(f"partitions {partitions!r}: expected numbers like 0,3 ({exc})") from None


def new_run_id() -> str:
    """``compact-<UTC time>-<8 hex digits>``."""
    return runs.new_run_id("compact-")


@dataclasses.dataclass(frozen=True)
class CompactOptions:
    """What a ``compact`` run does (built once where it is asked for: ``seglake.spark.
    compact``'s keywords, the job's flags; passed down whole).

    topics, partitions: only these (default: all; a topic name or several; partitions as
        ``"0,3"`` or numbers).
    merge_only: concatenate adjacent segments up to ``segment.bytes``, never clean.
    dry_run: plan and report, write nothing.
    conf: Kafka-named settings that win over the topic configs stored in the lake
        (``{"segment.bytes": "1048576", "delete.retention.ms": "0"}``).
    base: broker-level settings (``--conf-file``; default Kafka's).
    run_id: idempotency key (rerunning a committed run only finishes publishing).
    now_ms: the cleaner's clock (default: now).
    """

    topics: str | Iterable[str] | None = None
    partitions: str | Iterable[int] | None = None
    merge_only: bool = False
    dry_run: bool = False
    conf: Mapping[str, Any] | None = None
    base: LogConfig | None = None
    run_id: str | None = None
    now_ms: int | None = None


@dataclasses.dataclass
class PartitionSummary:
    """One partition's before/after (``dirty_ratio``/``checkpoint``: compaction only)."""

    topic: str
    partition: int
    action: str
    segments_before: int
    bytes_before: int
    segments_after: int
    bytes_after: int
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    dirty_ratio: float | None = None
    checkpoint: int | None = None
    seconds: float = 0.0
    bytes_read: int = 0  # by the tasks (compaction: the analysis and the groups)
    bytes_written: int = 0


@dataclasses.dataclass
class CompactResult:
    run_id: str
    committed: bool
    already_committed: bool
    dry_run: bool
    version: int | None
    partitions: list[PartitionSummary]
    seconds: float

    def summary(self) -> str:
        """One line per partition, then the run."""
        head = (
            f"{'partition':<28}{'action':<9}{'segments':>13}{'bytes':>25}{'kept':>11}"
            f"{'removed':>10}{'tombst.':>9}{'dirty':>7}{'checkpoint':>12}{'s':>7}"
        )
        lines = [head]
        for p in self.partitions:
            ratio = "-" if p.dirty_ratio is None else f"{p.dirty_ratio:.2f}"
            ckpt = "-" if p.checkpoint is None else str(p.checkpoint)
            lines.append(
                f"{p.topic + '-' + str(p.partition):<28}{p.action:<9}"
                f"{f'{p.segments_before} -> {p.segments_after}':>13}"
                f"{f'{p.bytes_before:,} -> {p.bytes_after:,}':>25}"
                f"{p.records_kept:>11,}{p.records_removed:>10,}{p.tombstones_removed:>9,}"
                f"{ratio:>7}{ckpt:>12}{p.seconds:>7.2f}"
            )
        if self.already_committed:
            state = "was already committed: nothing to do"
        elif self.dry_run:
            state = "dry run: nothing written"
        elif self.committed:
            state = f"committed as catalog version {self.version}"
        else:
            state = "nothing to rewrite"
        lines.append(f"run {self.run_id}: {state}, {self.seconds:.1f} s")
        return "\n".join(lines)


def _task(
    lake: LakeHandle, run_id: str, spec: tuple[Any, ...]
) -> tuple[dict[str, Any], CleanStats | None]:
    """One segment group: ``("merge", rows, interval)`` or ``("clean", rows, interval,
    round)``."""
    if spec[0] == "merge":
        return merge_group(lake, run_id, spec[1], index_interval_bytes=spec[2]), None
    return clean_group(lake, run_id, spec[1], spec[3], index_interval_bytes=spec[2])


def _analyze(
    lake: LakeHandle, now_ms: int, spec: tuple[list[dict[str, Any]], LogConfig]
) -> tuple[dict[str, Any], CleanRound | None, int]:
    return analyze_partition(lake, spec[0], cfg=spec[1], now_ms=now_ms)


def run_compaction(
    lake: LakeHandle,
    options: CompactOptions = CompactOptions(),
    *,
    map_tasks: MapTasks = in_process,
    driver_merge_bytes: int = 0,
    parallelism: int = 1,
) -> CompactResult:
    """Plan, run the tasks, commit, publish; see the module docstring (``parallelism``:
    the cores ``map_tasks`` runs on)."""
    started = time.time()
    o, dry_run = options, options.dry_run
    run_id = new_run_id() if o.run_id is None else validate_run_id(o.run_id)
    catalog = lake.catalog
    catalog.require()
    if catalog.run_committed(run_id):
        publish_pending(lake, run_id)
        return CompactResult(run_id, False, True, dry_run, catalog.version(), [], 0.0)
    version = catalog.version()
    topics = [o.topics] if isinstance(o.topics, str) else o.topics  # one name, or several
    rows = catalog.segments(
        list(topics) if topics else None, parse_partitions(o.partitions), version=version
    )
    base = o.base or LogConfig()
    configs = topic_configs(catalog, base.with_overrides(o.conf), version=version)
    now_ms = int(time.time() * 1000) if o.now_ms is None else o.now_ms
    plans, to_analyze = _plan_partitions(rows, configs, o.merge_only, now_ms)
    analyses = map_tasks(
        functools.partial(_analyze, lake, now_ms),
        [(p.to_pylist(), cfg) for _, p, cfg in to_analyze],
    )
    plans += _plan_cleaning(to_analyze, analyses)
    specs = [s for _, ss in plans for s in ss]
    if dry_run or not specs:
        for summary, ss in plans:
            summary.segments_after -= sum(len(s[1]) - 1 for s in ss)
        return CompactResult(
            run_id, False, False, dry_run, version, [p for p, _ in plans], time.time() - started
        )
    t0 = time.time()
    _publish_replaced_runs(lake, specs)
    try:
        outputs = _run_tasks(
            lake,
            functools.partial(_task, lake, run_id),
            specs,
            map_tasks,
            driver_merge_bytes,
            parallelism,
        )
    except BaseException:
        discard_staging(lake, run_id)  # the tasks that did finish staged files
        raise
    new_rows = [row for row, _ in outputs]
    result = commit_rewrite(lake, run_id, new_rows, [r for s in specs for r in s[1]])
    _summarize(plans, outputs, time.time() - t0)
    return CompactResult(
        run_id,
        result.committed,
        result.already_committed,
        False,
        result.version,
        [p for p, _ in plans],
        time.time() - started,
    )


_Plans = list[tuple[PartitionSummary, list[tuple[Any, ...]]]]  # per partition: its task specs
_ToAnalyze = list[tuple[PartitionSummary, pa.Table, LogConfig]]


def _publish_replaced_runs(lake: LakeHandle, specs: list[tuple[Any, ...]]) -> None:
    """The runs whose segments ``specs`` replace, published first where their files are
    still staged (the driver died before publishing, or is publishing now): else this
    run's publish would retire the wrong files under the same names and that run's late
    moves would overwrite the new ones."""
    for old_run in sorted({r["run_id"] for s in specs for r in s[1]}):
        publish_pending(lake, old_run)


def _plan_partitions(
    rows: pa.Table, configs: LogConfig, merge_only: bool, now_ms: int
) -> tuple[_Plans, _ToAnalyze]:
    """Each partition's plan by its topic's ``cleanup.policy``: merge groups (``delete``
    topics, ``merge_only``), or a cleaning to analyze first (``compact`` topics whose
    dirty section is due: Kafka's ``LogCleanerManager.grabFilthiestCompactedLog``), or
    nothing (``skip``)."""
    plans: _Plans = []
    to_analyze: _ToAnalyze = []
    for (topic, partition), prow in _by_partition(rows):
        cfg = configs.for_topic(topic)
        size = int(pa.compute.sum(prow["size_bytes"]).as_py() or 0)
        summary = PartitionSummary(
            topic,
            partition,
            "merge",
            prow.num_rows,
            size,
            prow.num_rows,
            size,
            records_kept=int(pa.compute.sum(prow["record_count"]).as_py() or 0),
        )
        if merge_only or not cfg.compact:
            groups = plan_merge_groups(
                prow, segment_bytes=cfg.segment_bytes, segment_index_bytes=cfg.index_size_max_bytes
            )
            plans.append((summary, [("merge", g, cfg.index_interval_bytes) for g in groups]))
            continue
        summary.action = "compact"
        bounds = cleanable(prow, cfg, now_ms)
        summary.dirty_ratio, summary.checkpoint = bounds["dirty_ratio"], bounds["first_dirty"]
        if bounds["due"]:
            to_analyze.append((summary, prow, cfg))
        else:
            summary.action = "skip"
            plans.append((summary, []))
    return plans, to_analyze


def _plan_cleaning(to_analyze: _ToAnalyze, analyses: list[Any]) -> _Plans:
    """The cleaning groups of each analyzed partition (up to its first uncleanable
    offset; Kafka cleans single-segment groups too), or ``skip``."""
    plans: _Plans = []
    for (summary, prow, cfg), (bounds, rnd, read) in zip(to_analyze, analyses, strict=True):
        summary.dirty_ratio = bounds["dirty_ratio"]
        summary.bytes_read += read
        if rnd is None:
            summary.action = "skip"
            plans.append((summary, []))
            continue
        groups = plan_merge_groups(
            prow.filter(pa.compute.less(prow["base_offset"], rnd.upper_bound)),
            segment_bytes=cfg.segment_bytes,
            segment_index_bytes=cfg.index_size_max_bytes,
            first_uncleanable=rnd.upper_bound,
            min_len=1,
        )
        summary.checkpoint = rnd.upper_bound
        plans.append((summary, [("clean", g, cfg.index_interval_bytes, rnd) for g in groups]))
    return plans


def _summarize(plans: _Plans, outputs: list[Any], elapsed: float) -> None:
    """Each partition's summary from its tasks' outputs (in plan order): segments and
    bytes after, bytes read and written, records and tombstones removed."""
    i = 0
    for summary, ss in plans:
        out = outputs[i : i + len(ss)]
        i += len(ss)
        summary.segments_after -= sum(len(s[1]) - 1 for s in ss)
        old = [r for s in ss for r in s[1]]
        summary.bytes_after += sum(r["size_bytes"] for r, _ in out) - sum(
            r["size_bytes"] for r in old
        )
        cleaned = [st for _, st in out if st is not None]
        summary.bytes_read += sum(st.bytes_read for st in cleaned)
        summary.bytes_written += sum(st.bytes_written for st in cleaned)
        if cleaned:
            read = sum(st.records_read for st in cleaned)
            kept = sum(st.records_kept for st in cleaned)
            summary.records_removed = read - kept
            summary.records_kept -= read - kept
            summary.tombstones_removed = sum(st.tombstones_removed for st in cleaned)
        summary.seconds = elapsed


def _run_tasks(
    lake: LakeHandle,
    fn: Callable[[tuple[Any, ...]], Any],
    specs: list[tuple[Any, ...]],
    map_tasks: MapTasks,
    limit: int,
    parallelism: int,
) -> list[Any]:
    """Every spec's output, in order: merges on the driver (threads) when the lake is on
    the local filesystem and they total at most ``limit`` bytes, else packed into tasks
    (module docstring); the rest through ``map_tasks``, one task each."""
    merges = [i for i, s in enumerate(specs) if s[0] == "merge"]
    sizes = [sum(r["size_bytes"] for r in specs[i][1]) for i in merges]
    out: list[Any] = [None] * len(specs)
    tasks = [[i] for i, s in enumerate(specs) if s[0] != "merge"]
    if merges and sum(sizes) <= limit and lake.is_local:
        with ThreadPoolExecutor(max_workers=min(MERGE_THREADS, len(merges))) as pool:
            for i, o in zip(merges, pool.map(fn, [specs[i] for i in merges]), strict=True):
                out[i] = o
    else:
        packed = pack_sizes(
            sizes, parallelism, max_bytes=MERGE_TASK_MAX_BYTES, min_bytes=MERGE_TASK_MIN_BYTES
        )
        tasks += [[merges[k] for k in t] for t in packed]
    done = map_tasks(functools.partial(_run_each, fn), [[specs[i] for i in t] for t in tasks])
    for t, outputs in zip(tasks, done, strict=True):
        for i, o in zip(t, outputs, strict=True):
            out[i] = o
    return out


def _run_each(fn: Callable[[tuple[Any, ...]], Any], specs: list[tuple[Any, ...]]) -> list[Any]:
    """One task: ``fn`` of each of its specs, in turn."""
    return [fn(s) for s in specs]


def _by_partition(rows: pa.Table) -> list[tuple[tuple[str, int], pa.Table]]:
    keys = sorted(set(zip(rows["topic"].to_pylist(), rows["partition"].to_pylist(), strict=True)))
    out = []
    for t, p in keys:
        mask = pa.compute.and_(
            pa.compute.equal(rows["topic"], t), pa.compute.equal(rows["partition"], p)
        )
        out.append(((t, p), rows.filter(mask)))
    return out
