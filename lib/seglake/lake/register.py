"""Register a Kafka broker's data directory in a lake: catalog rows built by scanning it.

    broker_data_dir/<topic>-<p>/<base>.log/.index/.timeindex[/.txnindex]
      -> copied to <root>/_staging/<run>/<topic>-<p>/   (the broker's files are only read)
      -> recovered there (corrupt tails cut, missing or invalid indexes rebuilt; valid
         broker indexes are kept byte for byte)
      -> one catalog commit of every non-empty segment (offset gaps of compacted topics
         allowed), then the files are moved to <root>/<topic>-<p>/ (as ingest publishes)

Copy mode only, unless the broker directory *is* the lake root: catalog paths are
relative to the root and the catalog refuses anything outside it, so a broker directory
elsewhere cannot be referenced in place. (``register(root=broker_dir, broker_dir)``
registers in place, creating ``_catalog`` inside the broker directory; a broker does
not expect that directory there, so do it on a copy the broker no longer runs on.)

Topics and their configs: a KRaft broker's topic overrides (``retention.ms``,
``cleanup.policy``, ``message.timestamp.type``... as ``kafka-configs --describe`` shows
them) are read from its metadata log (``lake/broker_configs.py``) and stored as the lake's
topic configs (``lake/topic_store.py``), one more commit after the rows' (run id
``<run>-configs``; a rerun makes whichever is missing). A topic-level setting seglake does
not know, or a value it refuses, is not kept and is named in the report. A topic whose
directories hold no records (a new or emptied topic) is registered as an empty topic: the
lake has it (``seglake config``, reads find no partition) with its configs.

Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``) and the metadata log (``__cluster_metadata``) are copied only
with ``include_internal``: they are the broker's state, not a user's records.

Skipped, each directory named with the reason in the report: directories that are not
``<topic>-<n>`` (``-delete`` / ``-future`` / ``-stray`` directories), internal topics;
files (``meta.properties``), ``.snapshot`` and checkpoint files, empty segments (a
broker's empty active segment), and pending ``.deleted``/``.cleaned``/``.swap`` files. A
run that finds no topic to register is an error and writes nothing (no empty lake); a
failed run leaves no staged copies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import ConfigError, InvalidTopicError, SegmentNotFoundError
from seglake.lake.broker_configs import broker_topic_configs
from seglake.lake.catalog import Catalog, CommitResult
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import rows_table, segment_row
from seglake.lake.staging import publish_pending
from seglake.lake.topic_store import adopt_configs
from seglake.lake_paths import CATALOG_DIR, STAGING_DIR
from seglake.storage.naming import (
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    internal_topic,
    parse_partition_dir,
    parse_segment_file_name,
    run_dir,
    validate_run_id,
    validate_topic,
)
from seglake.storage.recovery import DEFAULT_INTERVAL, PartitionRecovery, recover_dir

__all__ = ["RegisterReport", "register"]


@dataclasses.dataclass
class RegisterReport:
    root: str
    source: str
    run_id: str
    partitions: dict[str, PartitionRecovery]
    skipped: dict[str, str]  # directory name -> why it was not registered
    rows: int
    commit: CommitResult | None
    topics: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # configs kept
    empty: list[str] = dataclasses.field(default_factory=list)  # topics without records
    not_kept: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # name: why
    metadata_log: bool = True  # topic configs read from a __cluster_metadata-0 found

    def __str__(self) -> str:
        state = (
            "already registered by this run id"
            if self.commit is None or self.commit.already_committed
            else f"catalog version {self.commit.version}"
        )
        lines = [
            f"registered {self.rows} segment(s) of {len(self.partitions)} partition(s) "
            f"from {self.source} into {self.root} (run {self.run_id}, {state})"
        ]
        lines += [f"  {p}" for p in self.partitions.values() if p.changed]
        if not self.metadata_log:
            lines.append(
                "  no topic configs read: no __cluster_metadata-0 there (a ZooKeeper broker, "
                "or metadata.log.dir elsewhere: give it with --metadata-dir)"
            )
        lines += [f"  empty topic {t} (no records)" for t in self.empty]
        lines += [
            f"  topic {t}: {len(own)} config override(s) kept"
            for t, own in sorted(self.topics.items())
            if own
        ]
        lines += [
            f"  topic {t}: config {name} not kept: {why}"
            for t, own in sorted(self.not_kept.items())
            for name, why in sorted(own.items())
        ]
        lines += [f"  skipped {name}: {why}" for name, why in sorted(self.skipped.items())]
        return "\n".join(lines)


def register(
    lake: LakeHandle,
    broker_data_dir: str,
    *,
    topics: Iterable[str] | None = None,
    copy: bool = True,
    run_id: str | None = None,
    interval: int = DEFAULT_INTERVAL,
    kafka_truncate: bool = False,
    include_internal: bool = False,
    metadata_dir: str | None = None,
) -> RegisterReport:
    """Register the partitions of a broker data directory in the lake at ``root``.

    Args:
        root: lake root (created if needed).
        broker_data_dir: a broker's ``log.dirs`` entry (read only).
        topics: only these topics (default: all).
        copy: copy the files into the lake (the only mode for a directory outside the
            root; ``copy=False`` requires ``broker_data_dir`` to be the root).
        run_id: idempotency key (a rerun of a committed run id writes nothing).
        interval: ``log.index.interval.bytes`` for indexes that must be rebuilt.
        kafka_truncate: recover the copies by Kafka's rule (a damaged batch deletes the
            rest of the partition: a broker refills it from a replica). By default the
            lake's rule: only the damaged batch is cut out, later segments are kept and the
            gap is reported (a lake has no replica).
        include_internal: also copy Kafka's internal topics and the metadata log.
        metadata_dir: the broker's ``metadata.log.dir`` when it is not
            ``broker_data_dir`` (where the topic configs are read from).

    Raises:
        ConfigError: ``copy=False`` for a directory that is not the lake root.
        SegmentNotFoundError: ``broker_data_dir`` does not exist.
        ConcurrentRunError / OffsetOrderError: the partitions already hold these offsets.
    """
    wanted = None if topics is None else {validate_topic(t) for t in topics}
    sfs, src = lakefs.resolve(broker_data_dir)
    fs, base = lake.fs, lake.base
    in_place = not copy
    _check_dirs(broker_data_dir, sfs, src, lake, fs, base, in_place)
    run_id = f"register-{uuid.uuid4().hex[:12]}" if run_id is None else validate_run_id(run_id)
    catalog = lake.catalog
    skipped: dict[str, str] = {}
    meta = (sfs, src) if metadata_dir is None else lakefs.resolve(metadata_dir)
    if catalog.run_committed(run_id):  # the configs' commit may be the one missing
        dirs = _partition_dirs(sfs, src, wanted, skipped, include_internal)
        present = {topic for _, topic, _ in dirs}
        report = RegisterReport(str(lake), broker_data_dir, run_id, {}, {}, 0, None)
        return _with_configs(report, catalog, meta, present, set())
    staging = run_dir(base, STAGING_DIR, run_id)
    existed = lakefs.exists(fs, base)
    reports: dict[str, PartitionRecovery] = {}
    rows: list[dict[str, Any]] = []
    names: set[str] = set()
    try:
        for entry, topic, part in _partition_dirs(sfs, src, wanted, skipped, include_internal):
            names.add(topic)
            name = entry.base_name
            if in_place:
                work = entry.path
            else:
                work = lakefs.join(staging, name)
                _copy_segments(sfs, entry.path, fs, work)
                if not lakefs.exists(fs, work):
                    skipped[name] = "no segment files (<20-digit base offset>.log)"
                    continue
            rep = recover_dir(
                fs,
                work,
                dry_run=False,
                interval=interval,
                force=False,
                keep_valid=not kafka_truncate,
                root=base,
            )
            reports[name] = rep
            found = _partition_rows(topic, part, name, rep)
            if not found:
                skipped[name] = _why_empty(rep)
            rows += found
        if not names:  # a commit would create an empty lake, or an empty catalog version
            asked = None if wanted is None else sorted(wanted)
            raise SegmentNotFoundError(_nothing_to_register(broker_data_dir, asked, skipped))
        table = rows_table(rows)
        result = catalog.commit(table, run_id, contiguous=False)
    except BaseException:
        if not in_place:
            _discard(catalog, fs, base, run_id, made_root=not existed)
        raise
    if not in_place:
        publish_pending(lake, run_id, table)
    report = RegisterReport(str(lake), broker_data_dir, run_id, reports, skipped, len(rows), result)
    with_rows = {r["topic"] for r in rows}
    return _with_configs(report, catalog, meta, names, names - with_rows)


def _with_configs(
    report: RegisterReport,
    catalog: Catalog,
    meta: tuple[pafs.FileSystem, str],
    topics: set[str],
    empty: set[str],
) -> RegisterReport:
    """The registered ``topics`` with the broker's configs (its metadata log's; none
    without one): one commit, run id ``<run>-configs``, a no-op once made."""
    broker = broker_topic_configs(*meta)
    report.metadata_log = broker is not None
    broker = broker or {}
    configs = {t: broker.get(t, {}) for t in sorted(topics)}
    if configs:
        _, report.not_kept = adopt_configs(catalog, configs, run_id=f"{report.run_id}-configs")
    report.topics = {
        t: {k: v for k, v in own.items() if k not in report.not_kept.get(t, {})}
        for t, own in configs.items()
    }
    report.empty = sorted(empty)
    return report


def _check_dirs(
    broker_data_dir: str,
    sfs: pafs.FileSystem,
    src: str,
    lake: LakeHandle,
    fs: pafs.FileSystem,
    base: str,
    in_place: bool,
) -> None:
    """The broker data directory exists, the lake root is no file, and registering in
    place is asked only of the lake root itself (catalog paths stay inside it)."""
    if sfs.get_file_info(src).type != pafs.FileType.Directory:
        raise SegmentNotFoundError(f"{broker_data_dir}: no such broker data directory")
    if fs.get_file_info(base).type == pafs.FileType.File:
        raise SegmentNotFoundError(f"{lake}: is a file, not a lake directory")
    if in_place and (src != base or type(sfs) is not type(fs)):
        raise ConfigError(
            f"cannot register {broker_data_dir} in place in the lake {lake}: catalog paths are "
            "relative to the lake root and may not leave it; use copy mode (the default), "
            "or make the broker directory the lake root"
        )


def _partition_dirs(
    sfs: pafs.FileSystem,
    src: str,
    wanted: set[str] | None,
    skipped: dict[str, str],
    include_internal: bool,
) -> list[tuple[pafs.FileInfo, str, int]]:
    """The partition directories of a broker data directory ``src`` (of the ``wanted``
    topics, default all but internal ones): ``(entry, topic, partition)``; other
    directories noted in ``skipped`` with the reason (a lake's, a hidden one, not
    ``<topic>-<partition>``, an internal topic's)."""
    found = []
    for entry in sorted(sfs.get_file_info(pafs.FileSelector(src)), key=lambda e: e.base_name):
        name = entry.base_name
        if entry.type != pafs.FileType.Directory:
            continue
        if name in (CATALOG_DIR, STAGING_DIR) or name.startswith("."):
            skipped[name] = "a lake's or a hidden directory"
            continue
        try:
            topic, part = parse_partition_dir(name)
        except InvalidTopicError as exc:
            skipped[name] = str(exc)
            continue
        if wanted is not None and topic not in wanted:
            continue
        internal = internal_topic(topic)
        if internal and not include_internal and (wanted is None or topic not in wanted):
            skipped[name] = "Kafka's internal topic (include_internal / --include-internal)"
            continue
        found.append((entry, topic, part))
    return found


def _partition_rows(
    topic: str, part: int, name: str, rep: PartitionRecovery
) -> list[dict[str, Any]]:
    """The catalog rows of a recovered partition directory ``name``: one per segment
    that kept batches."""
    return [
        segment_row(topic, part, rec, f"{name}/{rec.base_offset:020d}{LOG_SUFFIX}")
        for rec in rep.segments
        if rec.batches and rec.base_offset not in rep.deleted_segments
    ]


def _why_empty(rep: PartitionRecovery) -> str:
    """Why a recovered partition directory gives no rows."""
    cut = [str(s) for s in rep.segments if s.truncated_bytes]
    return (
        f"no records left after recovery ({cut[0].strip()})"
        if cut
        else "no records (only empty segments)"
    )


def _discard(
    catalog: Catalog, fs: pafs.FileSystem, base: str, run_id: str, *, made_root: bool
) -> None:
    """A failed run's staged copies deleted unless its commit went through (then
    ``cleanup`` publishes them); ``_staging/`` and a root this run made go if empty."""
    staging = lakefs.join(base, STAGING_DIR)
    with contextlib.suppress(Exception):  # the run's own error is the one to report
        if catalog.run_committed(run_id):
            return
        lakefs.delete_dir(fs, run_dir(base, STAGING_DIR, run_id), root=base)
        if not lakefs.listdir(fs, staging, missing_ok=True):
            lakefs.delete_dir(fs, staging, root=base)
        if made_root and not lakefs.listdir(fs, base, missing_ok=True):
            lakefs.delete_dir(fs, base, root=base, root_itself=True)  # the root it made


def _copy_segments(sfs: pafs.FileSystem, src: str, fs: pafs.FileSystem, work: str) -> None:
    """Copy a broker partition directory's segment files (not ``.snapshot`` or
    checkpoints) to ``work``; a refused write names the copy."""
    for f in sfs.get_file_info(pafs.FileSelector(src)):
        parsed = parse_segment_file_name(f.base_name)
        if parsed and parsed[1] in SEGMENT_SUFFIXES:
            dst = lakefs.join(work, f.base_name)
            lakefs.check_regular(sfs, f.path)  # a named pipe would block the copy forever
            with lakefs.writing(dst):
                fs.create_dir(work, recursive=True)
                pafs.copy_files(f.path, dst, source_filesystem=sfs, destination_filesystem=fs)


def _nothing_to_register(
    broker_data_dir: str, topics: Iterable[str] | None, skipped: dict[str, str]
) -> str:
    """Why a register run found no topic to register (it commits nothing then)."""
    what = f" of topics {sorted(topics)}" if topics is not None else ""
    why = "; ".join(f"{n}: {r}" for n, r in sorted(skipped.items())) or (
        "no <topic>-<partition> directory"
    )
    return f"{broker_data_dir}: no topic to register{what} ({why}); no lake written"
