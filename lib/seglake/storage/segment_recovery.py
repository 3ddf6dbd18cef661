"""Kafka's ``LogSegment.recover`` for one segment (see :mod:`seglake.storage.recovery`)::

scan batches from position 0: magic 2, length bounds, CRC-32C, offsets that go
forward and fit the segment (relative offsets are int32)
first invalid batch at position P  ->  .log truncated to P
.index / .timeindex                 ->  kept if valid for what remains, else rebuilt
.txnindex                           ->  rebuilt from the ABORT markers
.keyindex                           ->  kept if equal to one built from what remains
                                        (the record reader's keys), else written
"""

from __future__ import annotations

import dataclasses
import logging

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError, SegmentNotFoundError
from seglake.record.batch import BatchScan, scan_batches
from seglake.storage.damaged_batches import DroppedBytes, drop_damaged
from seglake.storage.index_builder import DEFAULT_INTERVAL, rebuild_indexes
from seglake.storage.key_index import key_index_or_why
from seglake.storage.naming import (
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.recovery_checks import (
    aborted_txns,
    codec_name,
    offset_index_problem,
    read_optional,
    segment_timestamps,
    time_index_problem,
    valid_prefix,
)
from seglake.storage.recovery_report import SegmentRecovery
from seglake.storage.segment_files import SegmentFiles
from seglake.storage.segment_window import data_end
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import AbortedTxn, TransactionIndex

__all__ = ["DEFAULT_INTERVAL", "recover_segment"]

log = logging.getLogger("seglake.storage.recovery")


def recover_segment(
    fs: pafs.FileSystem,
    log_path: str,
    *,
    interval: int = DEFAULT_INTERVAL,
    dry_run: bool = False,
    force: bool = False,
    producer_state: dict[int, int] | None = None,
    skip_damaged: bool = False,
    root: str | None = None,
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
        skip_damaged: keep the valid batches after a damaged one (the lake's rule,
            :mod:`seglake.storage.damaged_batches`): the ``.log`` is rewritten without the
            damaged bytes, their offsets become a gap. Default: Kafka's truncation.
        root: the lake root its deletes must stay inside (default: the segment's
            directory).

    Returns:
        A :class:`SegmentRecovery`; never raises for bad bytes.
    """
    name = log_path.rsplit("/", 1)[-1]
    parsed = parse_segment_file_name(name)
    if parsed is None or parsed[1] != LOG_SUFFIX:
        raise SegmentNotFoundError(f"{log_path}: not a segment .log file name")
    base = parsed[0]
    stem = log_path[: -len(LOG_SUFFIX)]
    length = lakefs.file_size(fs, log_path)
    # zeros after the last batch (a preallocated segment) end it unread, as in Kafka's
    # recovery: only the bytes before them are read, the file trimmed to them
    original = lakefs.read_range(
        fs, log_path, 0, data_end(SegmentFiles(fs, log_path, base), length)
    )
    buf, scan, error, dropped = _valid_log(original, base, skip_damaged)
    if error is None and len(original) < length:  # cut there, as at any invalid batch
        error = (
            f"position {len(original)}: only zeros follow, to the end of the file "
            f"({length} bytes): a preallocated segment's unused tail"
        )
    next_offset = int(scan.last_offset[-1]) + 1 if len(scan) else base
    indexes = _Indexes.recover(
        fs, stem, scan, base, next_offset, interval, force, error, dropped, len(original)
    )
    txn = _TxnIndex.recover(
        fs, stem + TXN_INDEX_SUFFIX, buf, scan, base, producer_state, force, error, log_path
    )
    idx, not_built = key_index_or_why(buf, scan, base, next_offset, path=log_path)
    keys = None if idx is None else idx.to_bytes()
    rebuilt = {**indexes.rebuilt, **txn.rebuilt}
    min_ts, tail = segment_timestamps(buf, scan, log_path)
    report = SegmentRecovery(
        log_path=log_path,
        base_offset=base,
        original_bytes=length,
        valid_bytes=scan.valid_bytes,
        error=error,
        batches=len(scan),
        next_offset=next_offset,
        record_count=int(scan.records_count.sum()),
        min_timestamp=min_ts,
        tail_min_timestamps=tail,
        max_timestamp=int(scan.max_timestamp.max()) if len(scan) else -1,
        index_entries=len(indexes.offset_final),
        time_index_entries=len(indexes.time_final),
        txn_index_entries=len(txn.aborted),
        rebuilt=rebuilt,
        codec=codec_name(scan),
        dry_run=dry_run,
        dropped=dropped,
        index_interval_bytes=interval,
        key_index=not_built or _key_index_change(fs, stem, keys or b"", error),
    )
    if not dry_run:
        where = log_path.rsplit("/", 1)[0] if root is None else root
        _write_back(fs, where, log_path, length, buf, dropped, indexes, txn, rebuilt)
        if keys is not None and report.key_index is not None:
            lakefs.write_bytes(fs, stem + KEY_INDEX_SUFFIX, keys)
        elif keys is None and lakefs.exists(fs, stem + KEY_INDEX_SUFFIX):
            lakefs.delete_file(fs, stem + KEY_INDEX_SUFFIX, root=where)  # not the log's
        if report.changed:
            log.warning("recovered %s", report)
    return report


def _write_back(
    fs: pafs.FileSystem,
    root: str,
    log_path: str,
    original_bytes: int,
    buf: bytes,
    dropped: list[DroppedBytes],
    indexes: _Indexes,
    txn: _TxnIndex,
    rebuilt: dict[str, str],
) -> None:
    """The recovered files written over the segment's: the valid ``.log`` (when bytes
    were cut) and the indexes recovery rebuilt."""
    stem = log_path[: -len(LOG_SUFFIX)]
    # the log first: a crash before the indexes leaves them pointing past its end, which
    # the next recovery (and every reader) detects. A rewrite moves the batches after a
    # dropped stretch back, so their old entries could point at later batches: the
    # indexes go first (a reader rebuilds missing ones in memory)
    rewritten = _rewritten(dropped)
    if rewritten:
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            lakefs.delete_file(fs, stem + suffix, root=root)
    if len(buf) < original_bytes:
        lakefs.write_bytes(fs, log_path, buf)
    if INDEX_SUFFIX in rebuilt or rewritten:
        lakefs.write_bytes(fs, stem + INDEX_SUFFIX, indexes.offset_new.to_bytes())
    if TIME_INDEX_SUFFIX in rebuilt or rewritten:
        lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, indexes.time_new.to_bytes())
    if TXN_INDEX_SUFFIX in rebuilt:
        if len(txn.aborted):
            lakefs.write_bytes(fs, stem + TXN_INDEX_SUFFIX, txn.new.to_bytes())
        else:
            lakefs.delete_file(fs, stem + TXN_INDEX_SUFFIX, root=root)


def _key_index_change(fs: pafs.FileSystem, stem: str, keys: bytes, error: str | None) -> str | None:
    """Why the ``.keyindex`` must be written (it is not ``keys``, the index of the
    valid log), or ``None``."""
    old = read_optional(fs, stem + KEY_INDEX_SUFFIX)
    if old is not None and bytes(old) == keys:
        return None
    return "missing" if old is None else ("log truncated" if error else "damaged or stale")


def _rewritten(dropped: list[DroppedBytes]) -> bool:
    """Damaged bytes were cut out of the middle of the log (not a truncation)."""
    return any(d.last_offset is not None for d in dropped)


def _valid_log(
    buf: bytes, base: int, skip_damaged: bool
) -> tuple[bytes, BatchScan, str | None, list[DroppedBytes]]:
    """The log's valid batches: its valid prefix (Kafka's rule), or with
    ``skip_damaged`` every valid batch, the damaged stretches dropped. ``(bytes, their
    scan, the error that stopped the scan, what was dropped)``."""
    scan = scan_batches(buf)
    keep, why = valid_prefix(scan, base)
    error = scan.error
    if keep < len(scan):
        cut = int(scan.position[keep])
        scan = scan.take(slice(0, keep))
        scan.valid_bytes, error = cut, why
    dropped: list[DroppedBytes] = []
    if skip_damaged and error:
        buf, dropped = drop_damaged(buf, scan, error, base)
        scan = scan_batches(buf)  # the rewritten log: every batch valid
    return buf[: scan.valid_bytes], scan, error, dropped


@dataclasses.dataclass
class _Indexes:
    """The ``.index``/``.timeindex`` built from the valid log, the ones recovery keeps
    (the files when valid), and why each was rebuilt (suffix -> reason)."""

    offset_new: OffsetIndex
    time_new: TimeIndex
    offset_final: OffsetIndex
    time_final: TimeIndex
    rebuilt: dict[str, str]

    @classmethod
    def recover(
        cls,
        fs: pafs.FileSystem,
        stem: str,
        scan: BatchScan,
        base: int,
        next_offset: int,
        interval: int,
        force: bool,
        error: str | None,
        dropped: list[DroppedBytes],
        log_size: int,
    ) -> _Indexes:
        oi_new, ti_new = rebuild_indexes(scan, base, interval)
        # never past the entries the log can have (a sparse multi-GiB index)
        oi_bytes = read_optional(fs, stem + INDEX_SUFFIX, OffsetIndex.read_limit(log_size))
        ti_bytes = read_optional(fs, stem + TIME_INDEX_SUFFIX, TimeIndex.read_limit(log_size))
        oi_final, ti_final = oi_new, ti_new
        rebuilt: dict[str, str] = {}
        if force:
            rebuilt[INDEX_SUFFIX] = rebuilt[TIME_INDEX_SUFFIX] = "forced"
        elif error:
            why = "log rewritten" if _rewritten(dropped) else "log truncated"
            rebuilt[INDEX_SUFFIX] = rebuilt[TIME_INDEX_SUFFIX] = why
        else:
            if oi_bytes is None:
                rebuilt[INDEX_SUFFIX] = "missing"
            else:
                oi_old = OffsetIndex.from_bytes(oi_bytes, base, path=stem + INDEX_SUFFIX)
                problem = offset_index_problem(oi_old, scan)
                if problem:
                    rebuilt[INDEX_SUFFIX] = problem
                else:
                    oi_final = oi_old
            if ti_bytes is None:
                rebuilt[TIME_INDEX_SUFFIX] = "missing"
            else:
                ti_old = TimeIndex.from_bytes(ti_bytes, base, path=stem + TIME_INDEX_SUFFIX)
                problem = time_index_problem(ti_old, scan, base, next_offset)
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
        return cls(oi_new, ti_new, oi_final, ti_final, rebuilt)


@dataclasses.dataclass
class _TxnIndex:
    """The ``.txnindex`` the log's ABORT markers call for, and why the file must be
    rewritten (``rebuilt``: empty when it stays)."""

    aborted: list[AbortedTxn]
    new: TransactionIndex
    rebuilt: dict[str, str]

    @classmethod
    def recover(
        cls,
        fs: pafs.FileSystem,
        tpath: str,
        buf: bytes,
        scan: BatchScan,
        base: int,
        producer_state: dict[int, int] | None,
        force: bool,
        error: str | None,
        log_path: str,
    ) -> _TxnIndex:
        txn_bytes = read_optional(fs, tpath)
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
        state = producer_state if producer_state is not None else {}
        aborted = aborted_txns(buf, scan, state, known, base, log_path)
        new = TransactionIndex(base)
        for t in aborted:
            new.append(t)
        rebuilt: dict[str, str] = {}
        if txn_bytes is None:
            if aborted:
                rebuilt[TXN_INDEX_SUFFIX] = "missing"
        elif not txn_old_ok:
            rebuilt[TXN_INDEX_SUFFIX] = "fails its sanity check"
        elif set(known) != {(t.producer_id, t.last_offset) for t in aborted}:
            rebuilt[TXN_INDEX_SUFFIX] = "disagrees with the abort markers of the log"
        elif (force or error) and new.to_bytes() != bytes(txn_bytes):
            rebuilt[TXN_INDEX_SUFFIX] = "log truncated" if error else "forced"
        return cls(aborted, new, rebuilt)
