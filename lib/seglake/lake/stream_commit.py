"""One streaming micro-batch's catalog commit (no Spark): the pieces its tasks staged ->
the partitions' segments, one catalog commit idempotent per (query id, batch id).

    tasks:   _staging/<piece>/<topic>-<p>/<base>.log/.index/.timeindex    one piece per
             task attempt; assigned offsets relative (the task's first record of a
             partition is offset 0), given offsets as given
    here:    per partition, in task order: each piece's batches rebased onto the log end
             offset (the 8-byte baseOffset of a RecordBatch v2 is outside its CRC, so
             this is what a broker does to a producer's batch), appended after the bytes
             of the partition's newest segment while it is under ``log.segment.bytes``
             (a new staged copy with the same base offset and name), rolled at
             ``log.segment.bytes``; indexes rebuilt by the index interval rule over the
             whole segment (as Kafka's ``LogSegment.recover``), the row from the batch
             headers and the sources' rows
          -> _staging/<run>/<topic>-<p>/...   then ONE catalog commit of run
             ``stream-<query id>-<batch id>`` (the replaced newest segments in the same
             commit), then the files are published and the pieces dropped

A replayed batch (the driver died after the commit, before Spark's commit log) finds its
run id committed: it only finishes the publish and drops the pieces. A batch whose driver
died before the commit is rewritten by Spark: its first pieces are garbage that
``seglake cleanup`` (or the next ingest's sweep) removes.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import OffsetOrderError, SeglakeError
from seglake.lake.catalog import Catalog, CommitResult
from seglake.lake.rows import rows_table, segment_row
from seglake.lake.staging import STAGING, publish_pending, stage_replaced
from seglake.record.batch import scan_batches
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    partition_dir_name,
    segment_file_name,
)
from seglake.storage.recovery_checks import codec_name
from seglake.storage.tail_minima import TAIL_POINTS

MAX_RELATIVE = (1 << 31) - 1  # offsets in a segment's indexes are int32 from its base
# what a piece's rows (and the newest segment's) must say of each segment
PIECE_COLUMNS = (
    "topic",
    "partition",
    "base_offset",
    "next_offset",
    "size_bytes",
    "path",
    "min_timestamp",
    "tail_min_timestamps",
)


@dataclasses.dataclass(frozen=True)
class Piece:
    """What one write task staged: ``rows`` (topic, partition, base_offset, next_offset,
    size_bytes, path relative to ``_staging/<stage>/``), ``order`` its input order."""

    stage: str
    order: int
    rows: pa.Table


@dataclasses.dataclass(frozen=True)
class _Source:
    path: str  # absolute on the lake's filesystem
    delta: int  # added to every batch's base offset
    base: int  # first offset after rebasing
    next: int
    size: int
    min_timestamp: int  # -1: no record
    tail_minima: list[dict] | None  # offsets before rebasing


@dataclasses.dataclass
class BatchCommit:
    """What :func:`commit_pieces` did."""

    run_id: str
    result: CommitResult | None  # None: the batch had no records
    rows: pa.Table
    tails: list[tuple[str, int, int]]

    @property
    def already_committed(self) -> bool:
        return self.result is not None and self.result.already_committed


def stream_run_id(query_id: str, batch_id: int) -> str:
    """The run id of a streaming query's micro-batch (unique per (query id, batch id), so a
    replay of the batch is the idempotent case)."""
    if not query_id or "/" in query_id:
        raise SeglakeError(f"invalid streaming query id {query_id!r}")
    return f"stream-{query_id}-{int(batch_id)}"


def rebase(buf: bytes, delta: int) -> bytes:
    """``buf`` (whole RecordBatches) with ``delta`` added to each batch's baseOffset.

    RecordBatch v2: ``baseOffset int64 | batchLength int32 | ... | crc uint32 | attributes
    ...``; the CRC-32C covers ``attributes`` to the end, so the offsets move without
    re-encoding or a new CRC."""
    if delta == 0 or not buf:
        return buf
    scan = scan_batches(buf, verify_crc=False)
    if scan.valid_bytes != len(buf):
        raise SeglakeError(f"staged batches end in {len(buf) - scan.valid_bytes} bad bytes")
    out = np.frombuffer(bytearray(buf), dtype=np.uint8)
    pos = np.asarray(scan.position, dtype=np.int64)
    bases = np.asarray(scan.base_offset, dtype=np.int64) + delta
    out[(pos[:, None] + np.arange(8)).ravel()] = bases.astype(">i8").view(np.uint8)
    return out.tobytes()


def commit_pieces(
    root: str,
    run_id: str,
    pieces: Sequence[Piece],
    *,
    config: LogConfig,
    assigned: bool,
    append_to_newest: bool = True,
) -> BatchCommit:
    """Rebase, join and commit the pieces of one micro-batch (see the module docstring).

    Args:
        root: the lake.
        run_id: the batch's run id (:func:`stream_run_id`).
        pieces: every task's staged piece (order: input order of the tasks).
        config: ``log.segment.bytes`` and ``log.index.interval.bytes``.
        assigned: offsets were assigned by the tasks (relative, from 0 per piece and
            partition); else they are the input's and are kept.
        append_to_newest: grow a partition's newest segment while under
            ``log.segment.bytes``.
    """
    fs, base = lakefs.resolve(root)
    stages = [lakefs.join(base, STAGING, p.stage) for p in pieces]
    catalog = Catalog(root)
    empty = BatchCommit(run_id, None, rows_table([]), [])
    if catalog.exists() and catalog.run_committed(run_id):
        publish_pending(root, run_id)
        _drop(fs, stages)
        return dataclasses.replace(empty, result=_already(catalog, run_id))
    out_dir = lakefs.join(base, STAGING, run_id)
    lakefs.delete_dir(fs, out_dir)  # an earlier attempt of this batch
    current = catalog.segments() if catalog.exists() else rows_table([])
    newest = _newest(current)
    rows: list[dict] = []
    tails: list[tuple[str, int, int]] = []
    try:
        for key, sources in _plan(base, pieces, stages, newest, assigned).items():
            tail = newest.get(key)
            if append_to_newest and tail is not None and tail["size_bytes"] < config.segment_bytes:
                publish_pending(root, tail["run_id"])  # its files, if still staged
                sources.insert(0, _source(lakefs.safe_join(base, tail["path"]), 0, tail))
                tails.append((*key, tail["base_offset"]))
            for group in _roll(sources, config.segment_bytes):
                rows.append(_write(fs, out_dir, key, group, config.index_interval_bytes))
        if not rows:
            lakefs.delete_dir(fs, out_dir)
            _drop(fs, stages)
            return empty
        table = rows_table(rows)
        if tails:  # publishing moves the old files to _retired/ (readers of older versions)
            grown = [newest[(t, p)] for t, p, _ in tails]
            stage_replaced(root, run_id, pa.Table.from_pylist(grown).select(["path", "run_id"]))
        result = catalog.commit(table, run_id, contiguous=assigned, tails=tails)
    except BaseException:
        lakefs.delete_dir(fs, out_dir)
        raise
    publish_pending(root, run_id, table)
    _drop(fs, stages)
    return BatchCommit(run_id, result, table, tails)


def _already(catalog: Catalog, run_id: str) -> CommitResult:
    return CommitResult(False, True, catalog.version(), run_id)


def _drop(fs, stages: list[str]) -> None:
    for s in stages:
        lakefs.delete_dir(fs, s)


def _newest(current: pa.Table) -> dict[tuple[str, int], dict]:
    """Each partition's newest catalog row."""
    out: dict[tuple[str, int], dict] = {}
    if current.num_rows == 0:
        return out
    for r in current.select(
        ["topic", "partition", "base_offset", *PIECE_COLUMNS[3:], "run_id"]
    ).to_pylist():
        key = (r["topic"], r["partition"])
        if key not in out or r["base_offset"] > out[key]["base_offset"]:
            out[key] = r
    return out


def _plan(
    base: str,
    pieces: Sequence[Piece],
    stages: list[str],
    newest: dict[tuple[str, int], dict],
    assigned: bool,
) -> dict[tuple[str, int], list[_Source]]:
    """Per partition, the staged segments in log order with their final offsets."""
    found: dict[tuple[str, int], list[tuple[int, int, dict]]] = {}
    for i, (piece, stage) in enumerate(zip(pieces, stages, strict=True)):
        for r in piece.rows.to_pylist():
            r["path"] = lakefs.join(stage, r["path"])
            found.setdefault((r["topic"], r["partition"]), []).append((piece.order, i, r))
    plan: dict[tuple[str, int], list[_Source]] = {}
    for key in sorted(found):
        leo = newest[key]["next_offset"] if key in newest else 0
        segs = sorted(found[key], key=lambda s: (s[:2], s[2]["base_offset"]))
        if not assigned:
            segs.sort(key=lambda s: s[2]["base_offset"])
        out: list[_Source] = []
        nxt = leo
        for _, _, r in segs:
            n = r["next_offset"] - r["base_offset"]
            first = nxt if assigned else r["base_offset"]
            if first < nxt:
                raise OffsetOrderError(
                    f"{key[0]}-{key[1]}: input offsets {r['base_offset']}..{r['next_offset'] - 1}"
                    f" are below {nxt} (the log end offset, or another task's records of this "
                    "batch): offsets must increase and continue the lake's"
                )
            out.append(_source(r["path"], first - r["base_offset"], r))
            nxt = first + n
        plan[key] = out
    return plan


def _roll(sources: list[_Source], segment_bytes: int) -> list[list[_Source]]:
    """Sources joined into segments of at most ``segment_bytes`` (a source larger than
    that alone) whose offsets fit the indexes' int32 relative offsets."""
    groups: list[list[_Source]] = []
    size = 0
    for s in sources:
        g = groups[-1] if groups else None
        if g is None or size + s.size > segment_bytes or s.next - 1 - g[0].base > MAX_RELATIVE:
            groups.append([s])
            size = s.size
        else:
            g.append(s)
            size += s.size
    return groups


def _source(path: str, delta: int, r: dict) -> _Source:
    first = r["base_offset"] + delta
    return _Source(
        path,
        delta,
        first,
        first + r["next_offset"] - r["base_offset"],
        r["size_bytes"],
        r["min_timestamp"],
        r["tail_min_timestamps"],
    )


def _write(fs, out_dir: str, key: tuple[str, int], group: list[_Source], interval: int) -> dict:
    """One segment from its sources: the rebased bytes, indexes rebuilt over all of them
    by the index interval rule (Kafka's LogSegment.recover), its row from the batch
    headers and the sources' rows (no record is decoded)."""
    pdir = partition_dir_name(*key)
    stem = lakefs.join(out_dir, pdir, segment_file_name(group[0].base))[: -len(LOG_SUFFIX)]
    fs.create_dir(lakefs.join(out_dir, pdir), recursive=True)
    data = b"".join(rebase(lakefs.read_all(fs, s.path), s.delta) for s in group)
    scan = scan_batches(data)
    if (
        scan.error
        or scan.valid_bytes != len(data)
        or int(scan.last_offset[-1]) + 1 != group[-1].next
    ):
        raise SeglakeError(
            f"{stem}{LOG_SUFFIX}: joined segment does not read back whole: {scan.error}, "
            f"{scan.valid_bytes} of {len(data)} bytes, expected offsets up to {group[-1].next - 1}"
        )
    oi, ti = rebuild_indexes(scan, group[0].base, interval)
    lakefs.write_bytes(fs, stem + LOG_SUFFIX, data)
    lakefs.write_bytes(fs, stem + INDEX_SUFFIX, oi.to_bytes())
    lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, ti.to_bytes())
    mins = [s.min_timestamp for s in group if s.min_timestamp >= 0]
    stats = types.SimpleNamespace(
        base_offset=group[0].base,
        next_offset=group[-1].next,
        record_count=int(scan.records_count.sum()),
        min_timestamp=min(mins) if mins else -1,
        max_timestamp=int(scan.max_timestamp.max()),
        size_bytes=len(data),
        index_entries=len(oi),
        time_index_entries=len(ti),
        codec=codec_name(scan),
        tail_min_timestamps=join_minima(group),
        index_interval_bytes=interval,
    )
    return segment_row(*key, stats, f"{pdir}/{segment_file_name(group[0].base)}")


def join_minima(group: list[_Source]) -> list[dict] | None:
    """Tail minima of joined segments: each source's checkpoints (offsets rebased) lowered
    to the minimum of every later source, equal minima collapsed, thinned evenly to
    :data:`TAIL_POINTS` (dropping checkpoints is safe: a filter reads further); None if a
    source's are unknown."""
    out: list[dict] = []
    later = np.iinfo(np.int64).max
    for s in reversed(group):
        if s.tail_minima is None:
            return None
        out[:0] = [
            {"offset": p["offset"] + s.delta, "min_timestamp": min(p["min_timestamp"], later)}
            for p in s.tail_minima
        ]
        if s.min_timestamp >= 0:
            later = min(later, s.min_timestamp)
    kept = [
        p for i, p in enumerate(out) if i == 0 or p["min_timestamp"] != out[i - 1]["min_timestamp"]
    ]
    if len(kept) > TAIL_POINTS:
        pick = np.unique(np.linspace(0, len(kept) - 1, TAIL_POINTS).round().astype(int))
        kept = [kept[i] for i in pick]
    return kept
