"""Cleaning a group of segments into one (Kafka's ``Cleaner.cleanSegments``).

Each old segment's batches go through :func:`seglake.storage.cleaner.plan_batches` in
file order; the batches that stay are written back to back into ``<first base>.log``:
copied byte for byte when every record stays and no delete horizon must be set,
re-encoded (:mod:`seglake.record.rewrite`) otherwise, or reduced to an empty header.
The ``.index``/``.timeindex`` are rebuilt by the index-interval rule over the result,
the ``.txnindex`` holds the aborted transactions whose ABORT marker stays because some
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
from seglake.record.batch import scan_batches
from seglake.record.reader import decode_batches
from seglake.record.rewrite import empty_batches, rewrite_batches
from seglake.storage.cleaner import COPY, EMPTY_HEADER, REWRITE, PartitionWalk, plan_batches
from seglake.storage.index_builder import IndexBuilder
from seglake.storage.merge import MergeSource
from seglake.storage.naming import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from seglake.storage.recovery_checks import codec_name
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
    """Clean ``sources`` into one segment under ``directory`` (see the module docstring)."""
    base = sources[0].segment.base_offset
    stem = f"{directory.rstrip('/')}/{sources[0].segment.log_path.rsplit('/', 1)[-1][:-4]}"
    stats = CleanStats()
    pieces: list[bytes | memoryview] = []
    minima: list[np.ndarray] = []
    txn = TransactionIndex(base)
    codecs = []
    for src in sources:
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
            continue
        recs = decode_batches(data, scan, skip_control=False, path=src.segment.log_path)
        at = np.searchsorted(rnd.walk_bases, scan.base_offset)
        plan = plan_batches(
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
        stats.records_read += recs.num_rows
        stats.records_kept += int(plan.keep.sum())
        stats.tombstones_removed += plan.tombstones_removed
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
        ts = recs.column("timestamp").to_numpy()
        rb = np.repeat(np.arange(len(scan)), scan.records_count)
        keep_ts = np.where(plan.keep, ts, LONG_MAX)
        low = batch_minima(keep_ts, scan.records_count)
        for i in sorted(out):
            pieces.append(out[i])
            minima.append(low[i : i + 1])
            entry = rnd.walk.txn_entries.get(int(scan.base_offset[i]))
            if entry is not None:
                txn.append(entry)
        if len(out):
            codecs.append(codec_name(scan.take(np.array(sorted(out)))))
    buf = b"".join(bytes(p) for p in pieces)
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
    for suffix, payload in (
        (LOG_SUFFIX, buf),
        (INDEX_SUFFIX, oi.to_bytes()),
        (TIME_INDEX_SUFFIX, ti.to_bytes()),
        (TXN_INDEX_SUFFIX, txn.to_bytes()),
    ):
        if suffix == TXN_INDEX_SUFFIX and not len(txn):
            continue
        with fs.open_output_stream(stem + suffix) as f:
            f.write(payload)
    low = np.concatenate(minima) if minima else np.zeros(0, np.int64)
    names = set(codecs)
    info = SegmentInfo(
        base_offset=base,
        next_offset=sources[-1].next_offset,
        record_count=int(result.records_count.sum()),
        min_timestamp=int(low.min()) if len(low) and low.min() < LONG_MAX else -1,
        max_timestamp=int(result.max_timestamp.max()) if len(result) else -1,
        size_bytes=len(buf),
        index_entries=len(oi),
        time_index_entries=len(ti),
        codec=names.pop() if len(names) == 1 else ("none" if not names else "mixed"),
        log_path=stem + LOG_SUFFIX,
        index_interval_bytes=index_interval_bytes,
        tail_min_timestamps=tail_minima(result.base_offset, result.position, low, len(buf)),
    )
    return info, stats
