"""Reading a :class:`~seglake.lake.scan.Scan`'s planned tasks (splits), as Spark's
executors and the notebook API do: one ranged read per split, the batches of all splits
read together walked and decoded together, then offsets, timestamps, control batches and
aborted transactions filtered.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptIndexError
from seglake.lake.key_plan import per_segment
from seglake.lake.pinned import PinnedVersion
from seglake.lake.scan import Scan, SegmentTask
from seglake.lake.snapshot import Snapshot
from seglake.location import LakeLocation, Root
from seglake.record.batch import HEADER_SIZE
from seglake.record.schema import (
    KAFKA_SOURCE_SCHEMA,
    empty_records,
    to_kafka_source,
    without_headers,
)
from seglake.storage.index_cache import IndexCache
from seglake.storage.key_lookup import find_keys
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from seglake.storage.segment_window import Window
from seglake.storage.txn_index import aborted_records
from seglake.storage.window_records import (
    NO_TS_HI,
    NO_TS_LO,
    decode_windows,
    min_timestamps,
)


@dataclasses.dataclass
class SplitReads:
    """How splits are read (:func:`read_splits`, :func:`iter_splits`, :func:`read_split`).

    isolation_level: ``"read_committed"`` drops records of aborted transactions.
    on_corrupt: ``"raise"`` a damaged batch (:class:`~seglake.errors.CorruptRecordError`,
        file, position, offsets) or ``"skip"`` it, described in ``skipped``.
    skipped: receives one line per damaged batch skipped.
    version: the catalog version the splits were planned on: a file of it gone, or read
        shorter than its row's size (a torn tail reads on), because a later version
        removed or replaced the segment raises
        :class:`~seglake.errors.VersionSupersededError` (:mod:`seglake.lake.pinned`).
    by_user: ``version`` is one the read asked for (``versionAsOf``), not the current
        one it was planned on (the error then says the lake changed under the read).
    headers: the ``headers`` column (else none, and none of their bytes copied).
    records: the internal record columns (millisecond timestamps, producer ids; what
        the CLI prints) instead of the Kafka source's.
    keys: only records with one of these keys (bytes compared exactly), each split's
        segment read by key (:func:`~seglake.storage.key_lookup.find_keys`: its
        ``.keyindex``, else scanned).
    scanned: receives one line per segment read by key without a usable index.
    """

    isolation_level: str = "read_uncommitted"
    on_corrupt: str = "raise"
    skipped: list[str] | None = None
    version: int | None = None
    by_user: bool = True
    headers: bool = True
    records: bool = False
    keys: tuple[bytes, ...] | None = None
    scanned: list[str] | None = None


def read_split(
    cache: IndexCache, root: Root, split: SegmentTask, how: SplitReads | None = None
) -> pa.Table:
    """Records of one split (Kafka source schema): one ranged read of its bytes."""
    return read_splits(cache, root, [split], how)


GROUP_BYTES = 8 << 20  # log bytes decoded in one call by iter_splits


def iter_splits(
    cache: IndexCache,
    root: Root,
    splits: list[SegmentTask],
    how: SplitReads | None = None,
    *,
    group_bytes: int = GROUP_BYTES,
) -> Iterator[pa.Table]:
    """The records of ``splits`` as :func:`read_splits` returns them, one table per group
    of consecutive splits of about ``group_bytes`` log bytes (a larger split alone): a
    task's memory stays bounded by the group, and Spark takes a group's rows while the
    next one decodes."""
    group: list[SegmentTask] = []
    size = 0
    for i, s in enumerate(splits):
        group.append(s)
        size += s.end_pos - s.start_pos
        if size >= group_bytes or i == len(splits) - 1:
            yield read_splits(cache, root, group, how)
            group, size = [], 0


def read_splits(
    cache: IndexCache, root: Root, splits: list[SegmentTask], how: SplitReads | None = None
) -> pa.Table:
    """Records of several splits (Kafka source schema), read as ``how`` says
    (:class:`SplitReads`; default: uncommitted, a damaged batch raises, not pinned):
    each split one ranged read, the batches of all of them walked and decoded together
    (vectorised over all their batches)."""
    how = how or SplitReads()
    pin = None if how.version is None else PinnedVersion(root, how.version, by_user=how.by_user)

    def segment(split: SegmentTask) -> LogSegment:
        return cache.segment(
            root, split.ref(), load_indexes=False, on_corrupt=how.on_corrupt, pin=pin
        )

    return read_tasks(segment, splits, how)


def read_tasks(
    segment: Callable[[SegmentTask], LogSegment], splits: list[SegmentTask], how: SplitReads
) -> pa.Table:
    """:func:`read_splits` of the segments ``segment`` opens for each split (a reader
    that holds its partition's log: the notebook API); the segments' own ``on_corrupt``
    and pin apply, not ``how``'s."""
    if how.keys is not None:
        return _by_key(segment, splits, how)
    parts = [_split_batches(segment(s), s, how.skipped) for s in splits]
    # a batch whose largest timestamp is >= end may hold nothing older than end: read
    # its timestamps alone before decoding it (the tail of a segment, mostly)
    unsure = [
        (w, np.flatnonzero(keep & (w.scan.max_timestamp >= s.ts_hi)))
        if s.ts_hi < NO_TS_HI
        else (w, np.zeros(0, np.int64))
        for s, (w, keep, _) in zip(splits, parts, strict=True)
    ]
    if any(len(u) for _, u in unsure):
        least, at = min_timestamps(unsure), 0
        for s, (_, u), (_, keep, _) in zip(splits, unsure, parts, strict=True):
            keep[u[least[at : at + len(u)] >= s.ts_hi]] = False
            at += len(u)
    table, rows = decode_windows(
        [(w, np.flatnonzero(keep), path) for w, keep, path in parts], headers=how.headers
    )
    out, at = [], 0
    for split, n in zip(splits, rows.tolist(), strict=True):
        if n:
            out.append(_output(_split_records(table.slice(at, n), split, how), split, how))
        at += n
    return _concat(out, how)


def _by_key(
    segment: Callable[[SegmentTask], LogSegment], splits: list[SegmentTask], how: SplitReads
) -> pa.Table:
    """:func:`read_tasks` of ``how.keys``: each segment's records of the keys found once
    (:func:`find_keys`), then each split's offsets, times and transactions kept."""
    found: dict[tuple[str, int, str], pa.Table] = {}
    out = []
    for s in splits:
        at = (s.topic, s.partition, s.path)
        if at not in found:
            seg = segment(s)
            m = find_keys(seg, how.keys or ())
            if m.scanned and how.scanned is not None:
                how.scanned.append(f"{seg.log_path}: {m.status}")
            if how.skipped is not None:  # damaged batches skipped (ignoreCorruptBatches)
                how.skipped += [b.describe(seg.log_path) for _, b in sorted(seg.skipped.items())]
            t = m.records.drop_columns(["query"])
            found[at] = t if how.headers else t.drop_columns(["headers"])
        kept = _split_records(found[at], s, how)
        if kept.num_rows:
            out.append(_output(kept, s, how))
    return _concat(out, how)


def _output(t: pa.Table, split: SegmentTask, how: SplitReads) -> pa.Table:
    return t if how.records else to_kafka_source(t, split.topic, split.partition)


def _concat(out: list[pa.Table], how: SplitReads) -> pa.Table:
    if out:
        return pa.concat_tables(out)
    if how.records:
        return empty_records(headers=how.headers)
    return (
        KAFKA_SOURCE_SCHEMA if how.headers else without_headers(KAFKA_SOURCE_SCHEMA)
    ).empty_table()


LOG_SPLIT_BYTES = 1 << 20  # log bytes of one table of log_records


def log_records(
    root: LakeLocation,
    log: PartitionLog,
    lo: int,
    hi: int,
    *,
    isolation_level: str = "read_uncommitted",
    split_bytes: int = LOG_SPLIT_BYTES,
    expect: int | None = None,
    keys: Sequence[bytes] | None = None,
) -> Iterator[pa.Table]:
    """Records (internal schema) of a log a reader opened itself with ``lo <= offset <
    hi``, read as every read is: a :class:`~seglake.lake.scan.Scan` of its snapshot
    (:meth:`~seglake.lake.snapshot.Snapshot.of_partition_log`) planned a segment at a
    time, each task read by :func:`read_tasks` with the log's own segments. One table
    per task of at most about ``split_bytes`` of log (none empty): memory stays bounded,
    and a reader that stops early plans and reads no further. ``expect``: the reader
    wants about that many records (``consume --max-messages``, ``read``): the offsets
    ``[lo, lo + expect)`` are planned first, alone (the batches holding them, not a
    whole split), then the rest. ``keys``: only records with one of these keys, a segment
    at a time through its key index (:func:`find_keys`; a segment without a usable one is
    scanned, and a warning says so)."""
    lo = max(lo, log.log_start_offset)  # nothing below the log start is visible
    if keys is not None:
        expect = None  # a key read reads a segment at a time
    cuts = [lo, min(hi, lo + expect), hi] if expect is not None else [lo, hi]
    segments = {s.base_offset: s for s in log.segments}
    how = SplitReads(isolation_level=isolation_level, records=True)
    if keys is not None:
        how.keys, how.scanned = tuple(keys), []
    snapshot = Snapshot.of_partition_log(root, log)
    for a, b in itertools.pairwise(cuts):
        if a >= b:
            continue
        scan = Scan(
            snapshot,
            offsets={(log.topic, log.partition): (a, b)},
            isolation_level=isolation_level,
            split_bytes=split_bytes,
        )
        tasks = scan.tasks() if keys is None else per_segment(scan.tasks())
        for task in tasks:
            t = read_tasks(lambda s: segments[s.base_offset], [task], how)
            for line in how.scanned or ():
                warnings.warn(f"key read without a key index: {line}", stacklevel=2)
            if how.scanned:
                how.scanned.clear()
            if t.num_rows:
                yield t


def _split_batches(
    seg: LogSegment, split: SegmentTask, skipped: list[str] | None
) -> tuple[Window, np.ndarray, str]:
    """The window of a split of ``seg`` and which of its batches may hold records to
    return (the damaged batches skipped in it described in ``skipped``)."""
    w = _split_window(seg, split.start_pos, split.end_pos, split.hi, split.extend)
    if skipped is not None:
        skipped += [
            b.describe(seg.log_path)
            for at, b in sorted(seg.skipped.items())
            if w.start <= at < w.end
        ]
    s = w.scan
    keep = (s.last_offset >= split.lo) & (s.base_offset < split.hi) & ~s.is_control
    if split.ts_lo > NO_TS_LO:
        keep &= s.max_timestamp >= split.ts_lo
    return w, keep, seg.log_path


def _split_records(t: pa.Table, split: SegmentTask, how: SplitReads) -> pa.Table:
    """Decoded records of a split's batches -> the split's rows (internal schema)."""
    isolation_level = how.isolation_level
    lo, hi, ts_lo, ts_hi = split.lo, split.hi, split.ts_lo, split.ts_hi
    off = t.column("offset").to_numpy()
    mask = (off >= lo) & (off < hi)
    if ts_lo > NO_TS_LO or ts_hi < NO_TS_HI:
        ts = t.column("timestamp").to_numpy()
        mask &= (ts >= ts_lo) & (ts < ts_hi)
    if isolation_level == "read_committed" and split.aborted:
        mask &= ~aborted_records(
            split.aborted,
            off,
            t.column("producer_id").to_numpy(),
            t.column("transactional").to_numpy(zero_copy_only=False),
        )
    return keep_rows(t, mask)


def keep_rows(t: pa.Table, mask: np.ndarray) -> pa.Table:
    """``t.filter(mask)`` copying only what it must: the longest run of kept rows is a
    zero-copy slice, the rows before and after it are filtered (copied). A window's rows
    are one run with its edges ragged (CreateTime is not monotonic), so most rows go to
    Spark straight from the decoder's buffers.

        mask  0 0 1 0 1 1 1 1 1 1 1 0 1 0 0
              '- filter -''---- slice ----''- filter -'
    """
    drop = np.flatnonzero(~mask)
    if not len(drop):
        return t
    # runs of kept rows lie between dropped ones (and the ends): the longest one
    bounds = np.concatenate(([-1], drop, [len(mask)]))
    k = int(np.argmax(np.diff(bounds)))
    a, b = int(bounds[k]) + 1, int(bounds[k + 1])
    if b - a == len(mask) - len(drop):  # the only run: no copy at all
        return t.slice(a, b - a)
    pieces = [t.slice(0, a).filter(pa.array(mask[:a])), t.slice(a, b - a)]
    pieces.append(t.slice(b).filter(pa.array(mask[b:])))
    # no empty chunks: each would be an Arrow batch of no rows for Spark to take
    kept = [c for p in pieces for c in p.to_batches() if c.num_rows]
    return pa.Table.from_batches(kept, schema=t.schema)


def _split_window(seg: LogSegment, start: int, end: int, hi: int, extend: bool) -> Window:
    """The whole batches of ``[start, end)`` (one ranged read); with ``extend``, also the
    batch starting at ``end`` when it may hold offsets below ``hi`` (its header is read
    with the range, the rest only if needed)."""
    size = seg.size
    extend = extend and end < size
    w = seg.window(start, end + HEADER_SIZE if extend else end)
    whole = min(end, size) - start
    if seg.on_corrupt == "skip":  # a file cut short ends at its noted cut (skip mode)
        whole = min([whole, *(at - start for at in seg.skipped if start <= at < start + whole)])
    if w.scan.valid_bytes < whole:
        raise CorruptIndexError(
            f"split [{start}, {end}) does not hold whole batches: {w.scan.error}", path=seg.log_path
        )
    if extend and (not len(w.scan) or int(w.scan.last_offset[-1]) < hi - 1):
        w = seg.with_batch_at(w, end)
    return w
