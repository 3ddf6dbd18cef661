"""Recovery after an unclean stop: Kafka's ``LogSegment.recover`` and ``LogLoader``.

Per segment (:func:`recover_segment`)::

    scan batches from position 0: magic 2, length bounds, CRC-32C, offsets that go
    forward and fit the segment (relative offsets are int32)
    first invalid batch at position P  ->  .log truncated to P
    .index / .timeindex                 ->  kept if valid for what remains, else rebuilt
                                            (Kafka's append rules, IndexBuilder)
    .txnindex                           ->  rebuilt from the ABORT markers of transactional
                                            batches when it disagrees with them

Per partition directory (:func:`recover_partition`), first as Kafka's
``LogLoader.removeTempFilesAndCollectSwapFiles`` does:

* ``*.deleted`` and ``*.cleaned`` files are removed (and ``.swap`` files at or above the
  smallest ``.cleaned`` offset: that swap never completed);
* an index ``.swap`` is removed (its index is rebuilt); a ``.log.swap`` is completed:
  the segments it replaces (base offsets in its ``[base, next offset)``) are deleted, the
  swap is renamed to its final name and its indexes rebuilt;

then every segment is recovered in offset order; the segments after the first one that
had to be truncated are deleted (the log must stay contiguous; Kafka: they were not
flushed). Log end offset = last valid offset + 1. That is the rule for a broker's
partition directory, where a replica refills what was cut.

A lake has no replica: its recovery (``keep_valid``, :mod:`seglake.lake.recovery`) keeps
the later segments and rewrites a damaged segment without its damaged batches
(:mod:`seglake.storage.damaged_batches`), so only their offsets are lost (a gap, as
after compaction); Kafka's rule stays available there (``--kafka-truncate``).

Per lake (:func:`recover_lake`): each catalog partition is recovered (only the segments
the catalog lists), and the catalog is fixed in **one** commit: truncated segments get
new rows (``replace_rows``), deleted and emptied segments lose theirs. Files are changed
before the commit; a crash in between leaves rows whose files are shorter than
``size_bytes`` says, which the next ``recover`` run finds and fixes (it is idempotent).

Modules: this one (partition directories), :mod:`~seglake.storage.segment_recovery` (one
segment), :mod:`~seglake.storage.recovery_checks` (the checks on a batch scan) and
:mod:`~seglake.storage.recovery_report` (what was found and done).

All file I/O goes through :mod:`seglake.fs` (``pyarrow.fs``): local paths and object
stores alike. A "truncation" rewrites the file with its valid prefix (atomically where
the filesystem renames).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError
from seglake.record.batch import scan_batches
from seglake.storage.naming import (
    LOG_SUFFIX,
    PENDING_SUFFIXES,
    SEGMENT_SUFFIXES,
    parse_segment_file_name,
)
from seglake.storage.recovery_report import PartitionRecovery, SegmentRecovery
from seglake.storage.segment_recovery import DEFAULT_INTERVAL, recover_segment

__all__ = [
    "DEFAULT_INTERVAL",
    "PartitionRecovery",
    "SegmentRecovery",
    "delete_segment_files",
    "recover_dir",
    "recover_partition",
    "recover_segment",
]

INDEX_SUFFIXES = tuple(s for s in SEGMENT_SUFFIXES if s != LOG_SUFFIX)  # .keyindex too


def _strip_pending(name: str) -> tuple[str, str] | None:
    for suffix in PENDING_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return None


def delete_segment_files(fs: pafs.FileSystem, stem: str, *, root: str) -> list[str]:
    """Kafka's asynchronous delete, done at once: rename to ``.deleted``, then remove
    (inside ``root`` only: :func:`seglake.lake_paths.check_delete`)."""
    gone = []
    for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
        path = stem + suffix
        if lakefs.exists(fs, path):
            lakefs.move(fs, path, path + ".deleted")
            lakefs.delete_file(fs, path + ".deleted", root=root)
            gone.append(path)
    return gone


def recover_dir(
    fs: pafs.FileSystem,
    directory: str,
    *,
    dry_run: bool,
    interval: int,
    force: bool,
    only: set[int] | None = None,
    defer_deletes: bool = False,
    keep_valid: bool = False,
    intervals: Mapping[int, int] | None = None,
    root: str | None = None,
) -> PartitionRecovery:
    """Recover the partition directory ``directory`` on ``fs`` (see the module docstring).

    ``only``: recover just these segments (a lake's catalogued ones; any missing is
    reported deleted); ``defer_deletes``: leave whole-segment deletions to the caller.
    ``keep_valid`` (the lake's rule): skip damaged batches (:mod:`.damaged_batches`) and
    keep the segments after a damaged one, leaving offset gaps, instead of Kafka's cut.
    ``intervals``: ``log.index.interval.bytes`` per base offset (default ``interval``).
    ``root``: the lake root every delete must stay inside (default ``directory``).
    """
    root = directory if root is None else root
    report = PartitionRecovery(directory=directory, dry_run=dry_run)
    names = lakefs.listdir(fs, directory)
    swaps = _remove_temp_files(fs, root, directory, names, report, only=only, dry_run=dry_run)
    _complete_swaps(fs, root, directory, names, swaps, report, dry_run=dry_run)
    names = lakefs.listdir(fs, directory) if not dry_run else names
    bases = sorted(
        p[0]
        for n in names
        if (p := parse_segment_file_name(n))
        and p[1] == LOG_SUFFIX
        and p[0] not in report.deleted_segments
    )
    if only is not None:
        missing = sorted(only - set(bases) - set(report.deleted_segments))
        bases = sorted(set(bases) & only)
    else:
        missing = []
    state: dict[int, int] = {}
    cut: int | None = None  # base offset of the first truncated (or missing) segment
    for b in sorted(set(bases) | set(missing)):
        stem = lakefs.join(directory, f"{b:020d}")
        if (cut is not None and not keep_valid) or b in missing:
            cut = b if cut is None else cut
            report.deleted_segments.append(b)
            if not dry_run and not defer_deletes:
                delete_segment_files(fs, stem, root=root)
            continue
        rec = recover_segment(
            fs,
            stem + LOG_SUFFIX,
            interval=(intervals or {}).get(b, interval),
            dry_run=dry_run,
            force=force,
            producer_state=state,
            skip_damaged=keep_valid,
            root=root,
        )
        report.segments.append(rec)
        if rec.error:
            cut = b
    return report


def _remove_temp_files(
    fs: pafs.FileSystem,
    root: str,
    directory: str,
    names: list[str],
    report: PartitionRecovery,
    *,
    only: set[int] | None,
    dry_run: bool,
) -> list[tuple[str, int]]:
    """Kafka's ``removeTempFilesAndCollectSwapFiles``: ``.deleted`` and ``.cleaned``
    files removed (and every swap file at or above the smallest ``.cleaned`` base), an
    index swap removed, the indexes of a swapped segment removed (they are rebuilt);
    returns the ``.log`` swaps to complete, ``(name, base offset)``."""
    pending = [(n, *pend) for n in names if (pend := _strip_pending(n))]
    cleaned = [parse_segment_file_name(inner) for _, inner, sfx in pending if sfx == ".cleaned"]
    min_cleaned = min((c[0] for c in cleaned if c), default=None)
    swaps: list[tuple[str, int]] = []
    for name, inner, suffix in pending:
        parsed = parse_segment_file_name(inner)
        path = lakefs.join(directory, name)
        drop = (
            suffix in (".deleted", ".cleaned")
            or parsed is None
            or (min_cleaned is not None and parsed[0] >= min_cleaned)
        )
        if suffix == ".swap" and not drop and parsed is not None:
            if parsed[1] == LOG_SUFFIX:
                swaps.append((name, parsed[0]))
            else:
                drop = True  # an index swap: removed, the index is rebuilt
            # Kafka deletes the base file's indexes either way; they are rebuilt
            stem = lakefs.join(directory, f"{parsed[0]:020d}")
            for s in INDEX_SUFFIXES:
                if lakefs.exists(fs, stem + s) and not (only is not None and parsed[0] not in only):
                    report.removed_files.append(stem + s)
                    if not dry_run:
                        lakefs.delete_file(fs, stem + s, root=root)
        if drop:
            report.removed_files.append(path)
            if not dry_run:
                lakefs.delete_file(fs, path, root=root)
    return swaps


def _complete_swaps(
    fs: pafs.FileSystem,
    root: str,
    directory: str,
    names: list[str],
    swaps: list[tuple[str, int]],
    report: PartitionRecovery,
    *,
    dry_run: bool,
) -> None:
    """Kafka's ``completeSwapOperations``: the segments a ``.log`` swap replaces (its
    offsets' range) deleted, the swap file renamed over its base file."""
    for name, swap_base in swaps:
        path = lakefs.join(directory, name)
        swap_scan = scan_batches(lakefs.read_all(fs, path))
        swap_next = int(swap_scan.last_offset[-1]) + 1 if len(swap_scan) else swap_base + 1
        for other in names:
            p = parse_segment_file_name(other)
            if p and p[1] == LOG_SUFFIX and swap_base <= p[0] < swap_next and p[0] != swap_base:
                report.deleted_segments.append(p[0])
                if not dry_run:
                    delete_segment_files(fs, lakefs.join(directory, f"{p[0]:020d}"), root=root)
        report.completed_swaps.append(path)
        if not dry_run:
            final = path[: -len(".swap")]
            lakefs.delete_file(fs, final, root=root)
            lakefs.move(fs, path, final)


def recover_partition(
    directory: str, *, dry_run: bool = False, interval: int = DEFAULT_INTERVAL, force: bool = False
) -> PartitionRecovery:
    """Recover a partition directory as Kafka's ``LogLoader`` does after an unclean stop.

    Leftover ``.deleted``/``.cleaned`` files are removed, ``.swap`` files completed, every
    segment recovered (:func:`recover_segment`) and the segments after the first truncated
    one deleted. ``directory`` is a local path or a URI.
    """
    fs, d = lakefs.resolve(directory)
    if fs.get_file_info(d).type != pafs.FileType.Directory:
        raise SegmentNotFoundError(f"{directory}: no such partition directory")
    return recover_dir(fs, d, dry_run=dry_run, interval=interval, force=force)
