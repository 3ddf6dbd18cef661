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
flushed). Log end offset = last valid offset + 1.

Per lake (:func:`recover_lake`): each catalog partition is recovered (only the segments
the catalog lists), and the catalog is fixed in **one** commit: truncated segments get
new rows (``replace_rows``), deleted and emptied segments lose theirs. Files are changed
before the commit; a crash in between leaves rows whose files are shorter than
``size_bytes`` says, which the next ``recover`` run finds and fixes (it is idempotent).

All file I/O goes through :mod:`seglake.fs` (``pyarrow.fs``): local paths and object
stores alike. A "truncation" rewrites the file with its valid prefix (atomically where
the filesystem renames).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError, SegmentNotFoundError
from seglake.record.batch import BatchScan, scan_batches
from seglake.record.codecs import NAMES as CODEC_NAMES
from seglake.record.control import parse_control_record
from seglake.record.decode import decode_batches, record_times
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    PENDING_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import INT32_MAX, OffsetIndex
from seglake.storage.tail_minima import batch_minima, tail_minima
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import AbortedTxn, TransactionIndex

__all__ = [
    "DEFAULT_INTERVAL",
    "PartitionRecovery",
    "SegmentRecovery",
    "delete_segment_files",
    "recover_dir",
    "recover_partition",
    "recover_segment",
]

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 4096
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclasses.dataclass
class SegmentRecovery:
    """What :func:`recover_segment` found and did (or would do, with ``dry_run``).

    Attributes:
        log_path: the ``.log``.
        base_offset: from the file name.
        original_bytes / valid_bytes: ``.log`` size before / after.
        error: why the scan stopped before the end (``None``: every batch valid).
        batches: valid batches kept.
        next_offset: last valid offset + 1 (``base_offset`` when empty).
        record_count: records kept (control records included).
        min_timestamp / max_timestamp: of the kept records (-1 when empty).
        index_entries / time_index_entries / txn_index_entries: entries after recovery.
        rebuilt: ``{suffix: reason}`` of index files rewritten (or to be rewritten).
        codec: ``none``/``gzip``/... of the data batches, ``mixed`` if several.
        dry_run: nothing was written.
    """

    log_path: str
    base_offset: int
    original_bytes: int
    valid_bytes: int
    error: str | None
    batches: int
    next_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    index_entries: int
    time_index_entries: int
    txn_index_entries: int
    rebuilt: dict[str, str]
    codec: str
    dry_run: bool = False
    tail_min_timestamps: list[dict] | None = None  # seglake.storage.tail_minima

    @property
    def size_bytes(self) -> int:
        """The ``.log`` size after recovery (the catalog's ``size_bytes``)."""
        return self.valid_bytes

    @property
    def truncated_bytes(self) -> int:
        return self.original_bytes - self.valid_bytes

    @property
    def changed(self) -> bool:
        return bool(self.truncated_bytes or self.rebuilt)

    def __str__(self) -> str:
        parts = [
            f"{self.log_path}: {self.batches} valid batch(es), offsets "
            f"{self.base_offset}..{self.next_offset - 1}"
        ]
        if self.truncated_bytes:
            parts.append(
                f"truncated {self.truncated_bytes} of {self.original_bytes} bytes "
                f"at position {self.valid_bytes} ({self.error})"
            )
        for suffix, why in self.rebuilt.items():
            parts.append(f"{suffix} rebuilt ({why})")
        if not self.changed:
            parts.append("intact")
        return "; ".join(parts)


@dataclasses.dataclass
class PartitionRecovery:
    """What :func:`recover_partition` found and did."""

    directory: str
    segments: list[SegmentRecovery] = dataclasses.field(default_factory=list)
    deleted_segments: list[int] = dataclasses.field(default_factory=list)
    removed_files: list[str] = dataclasses.field(default_factory=list)
    completed_swaps: list[str] = dataclasses.field(default_factory=list)
    dry_run: bool = False

    @property
    def log_end_offset(self) -> int | None:
        kept = [s for s in self.segments if s.base_offset not in self.deleted_segments]
        return kept[-1].next_offset if kept else None

    @property
    def changed(self) -> bool:
        return bool(
            self.deleted_segments
            or self.removed_files
            or self.completed_swaps
            or any(s.changed for s in self.segments)
        )

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "dry_run": self.dry_run,
            "log_end_offset": self.log_end_offset,
            "deleted_segments": self.deleted_segments,
            "removed_files": self.removed_files,
            "completed_swaps": self.completed_swaps,
            "segments": [
                dict(dataclasses.asdict(s), truncated_bytes=s.truncated_bytes)
                for s in self.segments
            ],
        }

    def __str__(self) -> str:
        verb = "would " if self.dry_run else ""
        lines = [
            f"{self.directory}: log end offset {self.log_end_offset}"
            + ("" if self.changed else ", nothing to do")
        ]
        lines += [f"  {s}" for s in self.segments if s.changed]
        if self.deleted_segments:
            lines.append(f"  {verb}delete segments after a truncated one: {self.deleted_segments}")
        if self.completed_swaps:
            lines.append(f"  {verb}complete swaps: {self.completed_swaps}")
        if self.removed_files:
            lines.append(f"  {verb}remove leftover files: {self.removed_files}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------- helpers


def _valid_prefix(scan: BatchScan, base_offset: int) -> tuple[int, str | None]:
    """Batches whose offsets go forward and fit a segment of ``base_offset``; beyond the
    structural checks of :func:`scan_batches` (Kafka's offset index append would fail)."""
    if not len(scan):
        return 0, None
    base, last = scan.base_offset, scan.last_offset
    bad = (base < base_offset) | (last - base_offset > INT32_MAX)
    bad[1:] |= base[1:] <= last[:-1]
    hits = np.flatnonzero(bad)
    if not len(hits):
        return len(scan), None
    i = int(hits[0])
    prev = int(last[i - 1]) if i else base_offset - 1
    return i, (
        f"position {int(scan.position[i])}: batch offsets {int(base[i])}..{int(last[i])} "
        f"do not follow {prev} in a segment of base offset {base_offset}"
    )


def _offset_index_problem(oi: OffsetIndex, scan: BatchScan) -> str | None:
    """Why ``oi`` could send a lookup past the batch it wants (``None``: it is valid).

    An entry (o, p) is safe when a batch starts at p and that batch's base offset <= o:
    every offset >= o then lies at or after p."""
    try:
        oi.sanity_check()
    except CorruptRecordError as exc:
        return str(exc)
    if not len(oi):
        return None
    pos = (
        oi.positions.astype(np.int64)
        if hasattr(oi.positions, "astype")
        else np.asarray(oi.positions, np.int64)
    )
    offs = np.asarray(oi.offsets, np.int64)
    i = np.searchsorted(scan.position, pos)
    hit = (
        (i < len(scan)) & (scan.position[np.minimum(i, max(len(scan) - 1, 0))] == pos)
        if len(scan)
        else np.zeros(len(pos), bool)
    )
    if not hit.all():
        k = int(np.argmin(hit))
        return (
            f"entry {k} (offset {int(offs[k])}, position {int(pos[k])}) does not point "
            "at the start of a batch"
        )
    below = scan.base_offset[i] > offs
    if below.any():
        k = int(np.argmax(below))
        return (
            f"entry {k} (offset {int(offs[k])}) points at a batch starting at offset "
            f"{int(scan.base_offset[i[k]])}"
        )
    return None


def _time_index_problem(
    ti: TimeIndex, scan: BatchScan, base_offset: int, next_offset: int
) -> str | None:
    """Why ``ti`` could skip a record (``None``: valid). An entry (t, o) is safe when no
    batch before the one holding o has a larger max timestamp than t."""
    try:
        ti.sanity_check()
    except CorruptRecordError as exc:
        return str(exc)
    if not len(ti):
        return None
    ts = np.asarray(ti.timestamps, np.int64)
    offs = np.asarray(ti.offsets, np.int64)
    out = (offs < base_offset) | (offs >= max(next_offset, base_offset + 1))
    if out.any():
        k = int(np.argmax(out))
        return f"entry {k} (offset {int(offs[k])}) is outside the log's offsets"
    if not len(scan):
        return None
    run = np.maximum.accumulate(scan.max_timestamp)
    j = np.searchsorted(scan.last_offset, offs, side="left")  # batch holding (or after) o
    before = np.where(j > 0, run[np.maximum(j - 1, 0)], -1)
    bad = before > ts
    if bad.any():
        k = int(np.argmax(bad))
        return (
            f"entry {k} ({int(ts[k])}, offset {int(offs[k])}) skips earlier batches with "
            f"timestamp up to {int(before[k])}"
        )
    return None


def _aborted_txns(
    buf: bytes,
    scan: BatchScan,
    state: dict[int, int],
    known: dict[tuple[int, int], int],
    base_offset: int,
    path: str,
) -> list[AbortedTxn]:
    """Kafka's producer-state walk: ``state`` maps producer id -> first offset of its open
    transaction (updated in place, so a partition's segments chain). An ABORT marker
    closes it into an :class:`AbortedTxn`; lastStableOffset = first offset of the earliest
    other open transaction, else marker offset + 1."""
    txn = np.flatnonzero(scan.is_transactional)
    if not len(txn):
        return []
    control = scan.is_control
    kinds: dict[int, bool] = {}  # batch -> is abort
    ctrl = txn[control[txn]]
    if len(ctrl):
        try:
            recs = decode_batches(buf, scan.take(ctrl), skip_control=False, path=path)
            for k, (key, value) in enumerate(
                zip(recs.column("key").to_pylist(), recs.column("value").to_pylist(), strict=True)
            ):
                kinds[int(ctrl[k])] = parse_control_record(key, value).is_abort
        except CorruptRecordError as exc:
            log.warning(
                "%s: control records do not decode (%s); txnindex from markers that do", path, exc
            )
    out: list[AbortedTxn] = []
    for b in txn.tolist():
        pid = int(scan.producer_id[b])
        if not control[b]:
            state.setdefault(pid, int(scan.base_offset[b]))
            continue
        if b not in kinds:
            continue
        marker = int(scan.base_offset[b])
        first = state.pop(pid, None)
        if kinds[b]:
            if first is None:  # began before what was scanned: keep the index's word
                first = known.get((pid, marker), base_offset)
            lso = min(state.values(), default=marker + 1)
            out.append(AbortedTxn(pid, first, marker, lso))
    return out


def _codec_name(scan: BatchScan) -> str:
    data = scan.codec[~scan.is_control] if (~scan.is_control).any() else scan.codec
    names = {CODEC_NAMES.get(int(c), f"codec{int(c)}") for c in np.unique(data)}
    if not names:
        return "none"
    return names.pop() if len(names) == 1 else "mixed"


def _timestamps(buf: bytes, scan: BatchScan, path: str) -> tuple[int, list[dict] | None]:
    """The smallest record timestamp (-1: none) and the tail minima of the kept batches
    (None, and the smallest batch base timestamp, when records do not decode)."""
    if not len(scan):
        return -1, []
    try:  # the walk checks each batch holds the records its header counts
        _, ts = record_times(buf, scan, skip_control=False, path=path)
    except CorruptRecordError:
        return int(scan.base_timestamp.min()), None
    tail = tail_minima(
        scan.base_offset, scan.position, batch_minima(ts, scan.records_count), scan.valid_bytes
    )
    return (int(ts.min()) if len(ts) else -1), tail


def _read_optional(fs: pafs.FileSystem, path: str) -> bytes | None:
    try:
        return lakefs.read_all(fs, path)
    except SegmentNotFoundError:
        return None


# ---------------------------------------------------------------------------- segment


def recover_segment(
    fs: pafs.FileSystem,
    log_path: str,
    *,
    interval: int = DEFAULT_INTERVAL,
    dry_run: bool = False,
    force: bool = False,
    producer_state: dict[int, int] | None = None,
) -> SegmentRecovery:
    """Kafka's ``LogSegment.recover`` for one segment on ``fs``.

    Args:
        fs: the filesystem; ``log_path`` names the ``.log`` (20-digit base offset).
        interval: ``log.index.interval.bytes`` for rebuilt indexes.
        dry_run: report only; write nothing.
        force: rebuild ``.index``/``.timeindex`` even when they are valid (Kafka always
            does; by default valid indexes, e.g. a broker's, are kept byte for byte).
        producer_state: open transactions ``{producer id: first offset}`` carried from
            the previous segment (updated in place).

    Returns:
        A :class:`SegmentRecovery`; never raises for bad bytes.
    """
    name = log_path.rsplit("/", 1)[-1]
    parsed = parse_segment_file_name(name)
    if parsed is None or parsed[1] != LOG_SUFFIX:
        raise SegmentNotFoundError(f"{log_path}: not a segment .log file name")
    base = parsed[0]
    stem = log_path[: -len(LOG_SUFFIX)]
    buf = lakefs.read_all(fs, log_path)
    original = len(buf)
    scan = scan_batches(buf)
    keep, why = _valid_prefix(scan, base)
    error = scan.error
    if keep < len(scan):
        cut = int(scan.position[keep])
        scan = scan.take(slice(0, keep))
        scan.valid_bytes, error = cut, why
    valid = scan.valid_bytes
    if valid < original:
        buf = buf[:valid]
    next_offset = int(scan.last_offset[-1]) + 1 if len(scan) else base
    rebuilt: dict[str, str] = {}

    oi_new, ti_new = rebuild_indexes(scan, base, interval)
    oi_bytes = _read_optional(fs, stem + INDEX_SUFFIX)
    ti_bytes = _read_optional(fs, stem + TIME_INDEX_SUFFIX)
    oi_final, ti_final = oi_new, ti_new
    if force:
        rebuilt[INDEX_SUFFIX] = rebuilt[TIME_INDEX_SUFFIX] = "forced"
    elif error:
        rebuilt[INDEX_SUFFIX] = rebuilt[TIME_INDEX_SUFFIX] = "log truncated"
    else:
        if oi_bytes is None:
            rebuilt[INDEX_SUFFIX] = "missing"
        else:
            oi_old = OffsetIndex.from_bytes(oi_bytes, base, path=stem + INDEX_SUFFIX)
            problem = _offset_index_problem(oi_old, scan)
            if problem:
                rebuilt[INDEX_SUFFIX] = problem
            else:
                oi_final = oi_old
        if ti_bytes is None:
            rebuilt[TIME_INDEX_SUFFIX] = "missing"
        else:
            ti_old = TimeIndex.from_bytes(ti_bytes, base, path=stem + TIME_INDEX_SUFFIX)
            problem = _time_index_problem(ti_old, scan, base, next_offset)
            if problem:
                rebuilt[TIME_INDEX_SUFFIX] = problem
            else:
                ti_final = ti_old
    # a rebuilt index identical to the file is not a change
    for suffix, new, old in (
        (INDEX_SUFFIX, oi_new, oi_bytes),
        (TIME_INDEX_SUFFIX, ti_new, ti_bytes),
    ):
        if suffix in rebuilt and old is not None and new.to_bytes() == bytes(old):
            del rebuilt[suffix]

    # transaction index
    tpath = stem + TXN_INDEX_SUFFIX
    txn_bytes = _read_optional(fs, tpath)
    known: dict[tuple[int, int], int] = {}
    txn_old_ok = False
    if txn_bytes is not None:
        txn_old = TransactionIndex.from_bytes(txn_bytes, base, path=tpath)
        try:
            txn_old.sanity_check()
            known = {(t.producer_id, t.last_offset): t.first_offset for t in txn_old}
            txn_old_ok = True
        except CorruptRecordError:
            pass
    aborted = _aborted_txns(
        buf, scan, producer_state if producer_state is not None else {}, known, base, log_path
    )
    txn_new = TransactionIndex(base)
    for t in aborted:
        txn_new.append(t)
    txn_entries = len(aborted)
    if txn_bytes is None:
        if aborted:
            rebuilt[TXN_INDEX_SUFFIX] = "missing"
    elif not txn_old_ok:
        rebuilt[TXN_INDEX_SUFFIX] = "fails its sanity check"
    elif set(known) != {(t.producer_id, t.last_offset) for t in aborted}:
        rebuilt[TXN_INDEX_SUFFIX] = "disagrees with the abort markers of the log"
    elif (force or error) and txn_new.to_bytes() != bytes(txn_bytes):
        rebuilt[TXN_INDEX_SUFFIX] = "log truncated" if error else "forced"

    min_ts, tail = _timestamps(buf, scan, log_path)
    report = SegmentRecovery(
        log_path=log_path,
        base_offset=base,
        original_bytes=original,
        valid_bytes=valid,
        error=error,
        batches=len(scan),
        next_offset=next_offset,
        record_count=int(scan.records_count.sum()),
        min_timestamp=min_ts,
        tail_min_timestamps=tail,
        max_timestamp=int(scan.max_timestamp.max()) if len(scan) else -1,
        index_entries=len(oi_final),
        time_index_entries=len(ti_final),
        txn_index_entries=txn_entries,
        rebuilt=rebuilt,
        codec=_codec_name(scan),
        dry_run=dry_run,
    )
    if dry_run:
        return report
    # the log first: a crash before the indexes leaves them pointing past its end, which
    # the next recovery (and every reader) detects
    if valid < original:
        lakefs.write_bytes(fs, log_path, buf)
    if INDEX_SUFFIX in rebuilt:
        lakefs.write_bytes(fs, stem + INDEX_SUFFIX, oi_new.to_bytes())
    if TIME_INDEX_SUFFIX in rebuilt:
        lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, ti_new.to_bytes())
    if TXN_INDEX_SUFFIX in rebuilt:
        if len(aborted):
            lakefs.write_bytes(fs, tpath, txn_new.to_bytes())
        else:
            lakefs.delete_file(fs, tpath)
    if report.changed:
        log.warning("recovered %s", report)
    return report


# ---------------------------------------------------------------------------- partition


def _strip_pending(name: str) -> tuple[str, str] | None:
    for suffix in PENDING_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return None


def delete_segment_files(fs: pafs.FileSystem, stem: str) -> list[str]:
    """Kafka's asynchronous delete, done at once: rename to ``.deleted``, then remove."""
    gone = []
    for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
        path = stem + suffix
        if lakefs.exists(fs, path):
            lakefs.move(fs, path, path + ".deleted")
            lakefs.delete_file(fs, path + ".deleted")
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
) -> PartitionRecovery:
    report = PartitionRecovery(directory=directory, dry_run=dry_run)
    names = lakefs.listdir(fs, directory)
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
                        lakefs.delete_file(fs, stem + s)
        if drop:
            report.removed_files.append(path)
            if not dry_run:
                lakefs.delete_file(fs, path)
    for name, swap_base in swaps:
        path = lakefs.join(directory, name)
        swap_scan = scan_batches(lakefs.read_all(fs, path))
        swap_next = int(swap_scan.last_offset[-1]) + 1 if len(swap_scan) else swap_base + 1
        for other in names:
            p = parse_segment_file_name(other)
            if p and p[1] == LOG_SUFFIX and swap_base <= p[0] < swap_next and p[0] != swap_base:
                report.deleted_segments.append(p[0])
                if not dry_run:
                    delete_segment_files(fs, lakefs.join(directory, f"{p[0]:020d}"))
        report.completed_swaps.append(path)
        if not dry_run:
            final = path[: -len(".swap")]
            lakefs.delete_file(fs, final)
            lakefs.move(fs, path, final)
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
        if cut is not None or b in missing:
            cut = b if cut is None else cut
            report.deleted_segments.append(b)
            if not dry_run and not defer_deletes:
                delete_segment_files(fs, stem)
            continue
        rec = recover_segment(
            fs,
            stem + LOG_SUFFIX,
            interval=interval,
            dry_run=dry_run,
            force=force,
            producer_state=state,
        )
        report.segments.append(rec)
        if rec.error:
            cut = b
    return report


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
