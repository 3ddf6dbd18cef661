"""Cleaning a group of segments into one (Kafka's ``Cleaner.cleanSegments``).

Each old segment's batches go through :func:`seglake.storage.cleaner.plan_batches` in
file order; the batches that stay are written back to back into ``<first base>.log``:
copied byte for byte when every record stays and no delete horizon must be set,
re-encoded (:mod:`seglake.record.rewrite`) otherwise, or reduced to an empty header.
The ``.index``/``.timeindex`` are rebuilt by the index-interval rule over the result,
the ``.keyindex`` is built from the result's records (the record reader), the
``.txnindex`` holds the aborted transactions whose ABORT marker stays because some
of their batches do (``CleanedTransactionMetadata``), the tail minima come from the
kept records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake.errors import CorruptRecordError
from seglake.format import LONG_MAX
from seglake.record.batch import BatchScan, scan_batches
from seglake.record.reader import decode_batches
from seglake.record.rewrite import empty_batches, rewrite_batches
from seglake.storage.cleaner import (
    COPY,
    EMPTY_HEADER,
    REWRITE,
    BatchPlan,
    PartitionWalk,
    plan_batches,
)
from seglake.storage.index_builder import IndexBuilder
from seglake.storage.key_index import key_index_of_log
from seglake.storage.merge import MergeSource, write_indexes
from seglake.storage.naming import LOG_SUFFIX
from seglake.storage.recovery_checks import codec_name, codecs_name
from seglake.storage.tail_minima import batch_minima, tail_minima
from seglake.storage.txn_index import TransactionIndex
from seglake.storage.writer import SegmentInfo

__all__ = ["CleanStats", "clean_segments"]


@dataclasses.dataclass
class CleanStats:
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0


@dataclasses.dataclass(frozen=True)
class CleanRound:
    """What every group of a partition's round shares."""

    walk_bases: np.ndarray  # base offsets of every batch of the partition (the walk's order)
    walk: PartitionWalk
    map_keys: pa.Array
    map_offsets: np.ndarray
    latest_offset: int  # the offset map's latestOffset (first uncleanable - 1)
    upper_bound: int  # the round's first uncleanable offset
    now_ms: int
    delete_retention_ms: int


def clean_segments(
    fs: pafs.FileSystem,
    directory: str,
    sources: Sequence[MergeSource],
    rnd: CleanRound,
    *,
    index_interval_bytes: int,
) -> tuple[SegmentInfo, CleanStats]:
    """Clean ``sources`` into one segment under ``directory`` (see the module docstring):
    each source's batches cleaned into the new log (:func:`_clean_into`), its indexes
    built over the result, its files written."""
    base = sources[0].segment.base_offset
    stem = f"{directory.rstrip('/')}/{sources[0].segment.log_path.rsplit('/', 1)[-1][:-4]}"
    stats = CleanStats()
    cleaned = _Cleaned(txn=TransactionIndex(base))
    for src in sources:
        _clean_into(src, rnd, stats, cleaned)
    buf = b"".join(bytes(p) for p in cleaned.pieces)
    stats.bytes_written = len(buf)
    result = scan_batches(buf)
    builder = IndexBuilder(base, index_interval_bytes=index_interval_bytes)
    if builder.add_batches(
        result.position, result.size, result.last_offset, result.max_timestamp
    ) < len(result):
        raise CorruptRecordError(
            f"cleaned segment of base offset {base} overflows its indexes", path=stem + LOG_SUFFIX
        )
    oi, ti = builder.finish()
    fs.create_dir(directory, recursive=True)
    with fs.open_output_stream(stem + LOG_SUFFIX) as f:
        f.write(buf)
    keys = key_index_of_log(buf, result, base, sources[-1].next_offset, path=stem + LOG_SUFFIX)
    write_indexes(fs, stem, oi, ti, cleaned.txn.to_bytes(), keys)
    low = np.concatenate(cleaned.minima) if cleaned.minima else np.zeros(0, np.int64)
    info = SegmentInfo(
        base_offset=base,
        next_offset=sources[-1].next_offset,
        record_count=int(result.records_count.sum()),
        min_timestamp=int(low.min()) if len(low) and low.min() < LONG_MAX else -1,
        max_timestamp=int(result.max_timestamp.max()) if len(result) else -1,
        size_bytes=len(buf),
        index_entries=len(oi),
        time_index_entries=len(ti),
        codec=codecs_name(cleaned.codecs),
        log_path=stem + LOG_SUFFIX,
        index_interval_bytes=index_interval_bytes,
        tail_min_timestamps=tail_minima(result.base_offset, result.position, low, len(buf)),
    )
    return info, stats


@dataclasses.dataclass
class _Cleaned:
    """The new segment so far: its batches' bytes in order, each batch's smallest kept
    timestamp, its ``.txnindex`` and the codecs of the batches kept."""

    txn: TransactionIndex
    pieces: list[bytes | memoryview] = dataclasses.field(default_factory=list)
    minima: list[np.ndarray] = dataclasses.field(default_factory=list)
    codecs: list[str] = dataclasses.field(default_factory=list)


def _clean_into(src: MergeSource, rnd: CleanRound, stats: CleanStats, cleaned: _Cleaned) -> None:
    """Kafka's ``cleanInto``: one old segment's batches filtered (:func:`_filter`) and the
    ones that stay appended to ``cleaned`` (copied, re-encoded or emptied)."""
    data = src.segment.log_bytes()
    stats.bytes_read += len(data)
    scan = scan_batches(data)
    if scan.error is not None or scan.valid_bytes != len(data):
        raise CorruptRecordError(
            f"segment to clean is not whole valid batches ({scan.error}); run `recover`",
            path=src.segment.log_path,
            position=scan.valid_bytes,
        )
    if not len(scan):
        return
    recs = decode_batches(data, scan, skip_control=False, path=src.segment.log_path)
    plan = _filter(scan, recs, rnd)
    stats.records_read += recs.num_rows
    stats.records_kept += int(plan.keep.sum())
    stats.tombstones_removed += plan.tombstones_removed
    out = _retained_batches(data, scan, recs, plan)
    ts = recs.column("timestamp").to_numpy()
    keep_ts = np.where(plan.keep, ts, LONG_MAX)
    low = batch_minima(keep_ts, scan.records_count)
    for i in sorted(out):
        cleaned.pieces.append(out[i])
        cleaned.minima.append(low[i : i + 1])
        entry = rnd.walk.txn_entries.get(int(scan.base_offset[i]))
        if entry is not None:
            cleaned.txn.append(entry)
    if len(out):
        cleaned.codecs.append(codec_name(scan.take(np.array(sorted(out)))))


def _filter(scan: BatchScan, recs: pa.Table, rnd: CleanRound) -> BatchPlan:
    """Kafka's ``filterTo`` over one segment's batches and records (control ones too):
    :func:`~seglake.storage.cleaner.plan_batches` with the round's offset map."""
    at = np.searchsorted(rnd.walk_bases, scan.base_offset)
    return plan_batches(
        base_offset=scan.base_offset,
        last_offset=scan.last_offset,
        attributes=scan.attributes,
        base_timestamp=scan.base_timestamp,
        producer_id=scan.producer_id,
        producer_epoch=scan.producer_epoch,
        records_count=scan.records_count,
        can_discard=rnd.walk.can_discard[at],
        record_offset=recs.column("offset").to_numpy(),
        record_key=recs.column("key"),
        record_has_value=recs.column("value").is_valid().to_numpy(zero_copy_only=False),
        map_keys=rnd.map_keys,
        map_offsets=rnd.map_offsets,
        latest_offset=rnd.latest_offset,
        last_records=rnd.walk.last_records,
        upper_bound=rnd.upper_bound,
        now_ms=rnd.now_ms,
        delete_retention_ms=rnd.delete_retention_ms,
    )


def _retained_batches(
    data: bytes, scan: BatchScan, recs: pa.Table, plan: BatchPlan
) -> dict[int, bytes | memoryview]:
    """Kafka's ``buildRetainedRecordsInto``: the bytes of each batch that stays, by its
    index: copied whole, re-encoded with the kept records, or an empty header."""
    out: dict[int, bytes | memoryview] = {}
    view = memoryview(data)
    for i in np.flatnonzero(plan.action == COPY).tolist():
        p = int(scan.position[i])
        out[i] = view[p : p + int(scan.size[i])]
    rewrite = np.flatnonzero(plan.action == REWRITE)
    if len(rewrite):
        rb = np.repeat(np.arange(len(scan)), scan.records_count)
        mask = plan.keep & np.isin(rb, rewrite)
        kept = recs.filter(pa.array(mask))
        counts = np.bincount(rb[mask], minlength=len(scan))[rewrite]
        for i, b in zip(
            rewrite.tolist(),
            rewrite_batches(scan, rewrite, kept, counts, plan.horizon[rewrite]),
            strict=True,
        ):
            out[i] = b
    empty = np.flatnonzero(plan.action == EMPTY_HEADER)
    for i, b in zip(empty.tolist(), empty_batches(scan, empty), strict=True):
        out[i] = b
    return out
