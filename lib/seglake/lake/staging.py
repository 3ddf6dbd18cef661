"""Lake-level operations that need no Spark: publishing a committed run's staged files,
cleaning up after failed runs, and opening partitions from the catalog (also one given
as its directory, ``<root>/<topic>-<p>``: the catalog decides what it holds).

    <root>/_catalog/                 Delta table, one row per committed segment
    <root>/<topic>-<p>/<base>.log    published segment files (+ .index, .timeindex)
    <root>/_staging/<run-id>/...     files of a run: moved out once it has committed
    <root>/_retired/<run-id>/...     files of a run that a later run replaced under the
                                     same names (compaction, merging): pinned readers of
                                     the older catalog version read them there until
                                     ``cleanup`` deletes them (:mod:`seglake.lake.garbage`)

A replacing run stages ``_replaces.json`` (the ``path`` and ``run_id`` of every row it
replaces or removes) before its commit. Publishing it first moves those rows' files to
``_retired/<their run>/`` (then marks that step done, so a rerun never retires a file
the run itself has published), then moves the new files in as for any run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import InvalidNameError, SeglakeError, SegmentNotFoundError
from seglake.lake.catalog import Catalog
from seglake.lake.garbage import Collected, catalog_orphans, collect, retire, retired_paths
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import segment_refs
from seglake.lake.snapshot import Snapshot
from seglake.lake_paths import CATALOG_DIR, RETIRED_DIR
from seglake.storage.log import PartitionLog
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    validate_run_id,
)
from seglake.testing_hooks import crash_point

REPLACES = "_replaces.json"
RETIRED_DONE = "_retired.done"


def stage_replaced(lake: LakeHandle, run_id: str, rows: pa.Table) -> None:
    """Record, in the run's staging directory, the catalog rows it replaces or removes."""
    fs, staging = lake.fs, lake.staging(run_id)
    fs.create_dir(staging, recursive=True)
    doc = {"rows": [[r["path"], r["run_id"]] for r in rows.select(["path", "run_id"]).to_pylist()]}
    lakefs.write_bytes(fs, lakefs.join(staging, REPLACES), json.dumps(doc).encode())


def discard_staging(lake: LakeHandle, run_id: str) -> None:
    """Delete the staged files of a run that did not commit."""
    lakefs.delete_dir(lake.fs, lake.staging(run_id), root=lake.base)


def _retire_replaced(lake: LakeHandle, staging: str, run_id: str) -> int:
    """Move the files of the rows a committed run replaced to ``_retired/<their run>/``."""
    fs = lake.fs
    manifest, done = lakefs.join(staging, REPLACES), lakefs.join(staging, RETIRED_DONE)
    if not lakefs.exists(fs, manifest) or lakefs.exists(fs, done):
        return 0
    retired = []
    for path, old_run in json.loads(lakefs.read_all(fs, manifest))["rows"]:
        stem = path[: -len(LOG_SUFFIX)]
        for suffix in SEGMENT_SUFFIXES:
            rel = f"{RETIRED_DIR}/{validate_run_id(old_run)}/{stem}{suffix}"
            src, dst = lake.path(stem + suffix), lake.path(rel)
            if not lakefs.exists(fs, dst):
                if not lakefs.exists(fs, src):
                    continue
                try:
                    lakefs.move(fs, src, dst)
                except SegmentNotFoundError:  # another cleanup retired it meanwhile
                    continue
                crash_point("retire")
            retired.append(rel)
    retire(lake, retired, version=lake.catalog.version(), operation="compact", run_id=run_id)
    lakefs.write_bytes(fs, done, b"")
    return len(retired)


def publish_pending(lake: LakeHandle, run_id: str, rows: pa.Table | None = None) -> int:
    """Move a committed run's staged files into their partition directories.

    Idempotent: files already moved are skipped, so a rerun after a crash between the
    commit and the moves finishes the job. Returns the number of files moved.
    """
    fs, base = lake.fs, lake.base
    staging = lake.staging(run_id)
    if not lakefs.exists(fs, staging):
        return 0
    _retire_replaced(lake, staging, run_id)
    if rows is None:
        segs = lake.catalog.segments()
        rows = segs.filter(pa.compute.equal(segs["run_id"], run_id))
    moves = []
    for rel in rows.column("path").to_pylist():
        stem = rel[: -len(LOG_SUFFIX)]
        for suffix in SEGMENT_SUFFIXES:
            moves.append((lakefs.join(staging, stem + suffix), lake.path(stem + suffix)))

    def move(pair: tuple[str, str]) -> int:
        src, dst = pair
        if not lakefs.exists(fs, src):
            return 0
        try:
            lakefs.move(fs, src, dst)
        except SegmentNotFoundError:  # another cleanup published it meanwhile
            return 0
        crash_point("publish")
        return 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        moved = sum(pool.map(move, moves))
    lakefs.delete_dir(fs, staging, root=base)
    return moved


def staged_run_committed(catalog: Catalog, name: str) -> bool:
    """Whether the directory ``_staging/<name>`` holds a committed run's files (a name no
    run id may have, :func:`~seglake.storage.naming.validate_run_id`: never)."""
    try:
        validate_run_id(name)
    except InvalidNameError:
        return False
    return catalog.run_committed(name)


def check_staged(fs: pafs.FileSystem, staging: str, rows: pa.Table, run_id: str) -> None:
    """Every file the rows name is still staged (``seglake cleanup --older-than 0`` or a
    person may have removed a running run's files): never commit rows without files."""
    have = {
        i.path.removeprefix(staging.rstrip("/") + "/")
        for i in fs.get_file_info(pafs.FileSelector(staging, recursive=True, allow_not_found=True))
    }
    want = [
        p[: -len(LOG_SUFFIX)] + s
        for p in rows.column("path").to_pylist()
        for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    ]
    missing = [w for w in want if w not in have]
    if missing:
        raise SeglakeError(
            f"run {run_id}: {len(missing)} staged file(s) disappeared before "
            f"the commit (removed by a cleanup?), e.g. {missing[:3]}; nothing "
            "was committed: rerun the run id"
        )


@dataclasses.dataclass
class CleanupReport:
    published_runs: list[str]
    removed_runs: list[str]
    kept_runs: list[str]
    retired: Collected | None = None
    catalog_orphans: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"finished publishing {len(self.published_runs)} committed run(s) "
            f"{self.published_runs}; removed {len(self.removed_runs)} uncommitted run(s) "
            f"{self.removed_runs}; kept {len(self.kept_runs)} younger than the grace "
            f"period {self.kept_runs}"
            + (f"; retired files: {self.retired}" if self.retired is not None else "")
            + (
                f"; removed {len(self.catalog_orphans)} catalog file(s) no Delta log entry "
                f"names {self.catalog_orphans[:5]}"
                if self.catalog_orphans
                else ""
            )
        )


def cleanup(
    lake: LakeHandle,
    *,
    older_than_s: float = 0.0,
    dry_run: bool = False,
    sweep_catalog: bool = True,
    delete_delay_s: float | None = None,
) -> CleanupReport:
    """Finish committed runs' moves, delete staged files of runs that never committed,
    retired files (:mod:`seglake.lake.garbage`) and, with ``sweep_catalog``, parquet
    files in ``_catalog/`` that the Delta log does not name (failed commits; never
    younger than an hour).

    ``older_than_s`` keeps staging directories modified, and files retired, more recently
    than that (a run that may still be writing, a reader pinned to an older version);
    ``delete_delay_s``, if given, is the retired files' own delay.
    """
    fs, base = lake.fs, lake.base
    staging = lake.staging_root
    retired_paths(lake)  # a damaged manifest stops the cleanup before anything changes
    catalog = lake.catalog
    report = CleanupReport([], [], [])
    now = time.time()
    for info in fs.get_file_info(pafs.FileSelector(staging, allow_not_found=True)):
        if info.type != pafs.FileType.Directory:
            continue
        run_id = info.base_name
        if catalog.exists() and staged_run_committed(catalog, run_id):
            report.published_runs.append(run_id)
            if not dry_run:
                publish_pending(lake, run_id)
            continue
        try:
            found = fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
        except FileNotFoundError:  # another cleanup removed it meanwhile
            continue
        newest = max(
            (f.mtime.timestamp() for f in found if f.mtime is not None),
            default=info.mtime.timestamp() if info.mtime else 0.0,
        )
        if now - newest < older_than_s:
            report.kept_runs.append(run_id)
            continue
        report.removed_runs.append(run_id)
        if not dry_run:
            lakefs.delete_dir(fs, info.path, root=base)
    delay = older_than_s if delete_delay_s is None else delete_delay_s
    report.retired = collect(lake, older_than_ms=int(delay * 1000), dry_run=dry_run)
    if sweep_catalog:
        report.catalog_orphans = catalog_orphans(
            lake, older_than_ms=int(older_than_s * 1000), dry_run=dry_run
        )
    return report


def open_partition(
    lake: LakeHandle,
    topic: str,
    partition: int,
    *,
    rows: pa.Table | None = None,
    on_corrupt: str = "raise",
) -> PartitionLog:
    """The committed segments of one partition, as a :class:`PartitionLog` (reads raise
    at a damaged batch, or skip it with ``on_corrupt="skip"``)."""
    if rows is None:
        rows = _partition_rows(lake, topic, partition)
    refs = [] if rows is None else segment_refs(rows)
    return PartitionLog.from_refs(lake.fs, lake.base, refs, on_corrupt=on_corrupt)


def _partition_rows(lake: LakeHandle, topic: str, partition: int) -> pa.Table | None:
    """The current catalog rows of one partition (``None``: it has none)."""
    return Snapshot.read(lake, topic, [partition]).rows.get((topic, partition))


def lake_of(path: str) -> tuple[str, str, int] | None:
    """``(root, topic, partition)`` when ``path`` is a partition directory of a lake
    (``<root>/<topic>-<p>`` with ``<root>/_catalog``), else ``None``."""
    from seglake.storage.naming import parse_partition_dir

    fs, d = lakefs.resolve(path)
    d = d.rstrip("/")
    name = d.rsplit("/", 1)[-1]
    if "/" not in d or not lakefs.exists(fs, lakefs.join(d.rsplit("/", 1)[0], CATALOG_DIR)):
        return None
    topic, partition = parse_partition_dir(name)
    root = path.rstrip("/")[: -len(name)].rstrip("/")
    return root or ("/" if path.startswith("/") else "."), topic, partition


def open_partition_dir(path: str, *, on_corrupt: str = "raise") -> PartitionLog:
    """The log of the partition directory ``path``. Inside a lake (:func:`lake_of`) the
    catalog decides what it holds (:func:`open_partition`): segments retention or
    compaction removed, whose files wait for ``file.delete.delay.ms``, and files of
    uncommitted runs are not read; a partition the catalog does not have is an error.
    Any other directory is read as a broker left it (:meth:`PartitionLog.open`)."""
    lake = lake_of(path)
    if lake is not None:
        root, topic, partition = lake
        handle = LakeHandle.open(root)  # a user's directory: its lake opened here
        rows = _partition_rows(handle, topic, partition)
        if rows is None:
            raise SegmentNotFoundError(
                f"{path}: the lake {root} has no committed segment of {topic}-{partition} "
                "(its catalog decides what a partition directory of a lake holds)"
            )
        return open_partition(handle, topic, partition, rows=rows, on_corrupt=on_corrupt)
    return PartitionLog.open(path, on_corrupt=on_corrupt)
