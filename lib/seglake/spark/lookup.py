"""Job 2, lookup: answer millions of ``(topic, partition, offset | timestamp)`` queries.

    driver:    read the catalog once (pinned version) -> per (topic, partition) sorted
               numpy arrays (base_offset, next_offset, max_timestamp, path, size, run_id),
               broadcast
    executors: mapInArrow over the queries as they are partitioned (no shuffle; with
               ``num_tasks``, first a pass that keys each query by its segment and a
               repartition that puts a segment's queries together): per task, up to
               ``chunk_rows`` queries at a time,
               - numpy.searchsorted maps each query to its segment (offset: floor on
                 base_offset; timestamp: first segment whose running-max max_timestamp
                 >= target), queries grouped by segment;
               - each segment is opened through the per-worker index cache (bounded by
                 ``seglake.index.cache.bytes``); all its targets are searched in its
                 offset/time index at once; targets whose index intervals touch (or lie
                 within ``READ_GAP``) share one ranged read of those intervals (plus the
                 batch after them only when it holds an answer), the file opened once;
                 batch headers are followed from each target's index floor for all
                 targets together (numpy); where the index and the log disagree, the
                 careful path (``LogSegment._span``, which rebuilds the index);
               - the batches holding answers, of all segments, are walked together to
                 find the answer records (timestamps and offsets only), and just those
                 records are decoded, in one call.

Every query gets exactly one output row: the Kafka source columns of the record found
(for a timestamp, the first record with timestamp >= it, as ``offsetsForTimes``), plus
``query_offset``, ``query_timestamp`` and ``status``:

    ok                       record returned
    offset_out_of_range      offset < log start offset or >= log end offset
    no_record_at_offset      inside the log, but no data record there (control/compacted)
    no_record_for_timestamp  no record with timestamp >= target
    log_end_offset           timestamp -1 (latest): ``offset`` is the log end offset
    unknown_partition        no committed segment for (topic, partition)
    invalid_query            neither/both of offset and timestamp, or a timestamp < -3
    read_error               the segment could not be read (logged on the executor)

The pure functions :func:`read_offsets`, :func:`resolve_timestamps` and
:func:`answer_queries` are what the executors run; they need no Spark (tests count their
bytes in the driver process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.errors import CorruptRecordError, SeglakeError
from seglake.record.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    HEADER_DTYPE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchScan,
)
from seglake.record.crc import crc32c
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, RECORD_SCHEMA, empty_records
from seglake.storage.index_cache import IndexCache, get_cache
from seglake.storage.segment import LogSegment, Window
from seglake.storage.window_records import RecordWalk, walk_batches

log = logging.getLogger(__name__)

EARLIEST, LATEST, MAX_TS = -2, -1, -3
DEFAULT_CHUNK_ROWS = 200_000  # queries answered together (one decode) by a task
_NO_OFFSET = 2**62  # an offset past any segment's end
READ_GAP = 32 * 1024  # reads of one segment closer than this are merged
_MAX_STEPS = 64  # batches a request's chain may follow before the careful path takes it
_NEXT_BYTES = 16 * 1024  # read past a chain's end when its next header was not read

LOOKUP_SCHEMA = pa.schema([
    *KAFKA_SOURCE_SCHEMA,
    pa.field("query_offset", pa.int64()),
    pa.field("query_timestamp", pa.int64()),
    pa.field("status", pa.string()),
])
QUERY_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("query_offset", pa.int64()), pa.field("query_timestamp", pa.int64()),
])
_KEYED_SCHEMA = pa.schema([*QUERY_SCHEMA, pa.field("_seg", pa.int32())])

__all__ = ["LOOKUP_SCHEMA", "QUERY_SCHEMA", "answer_queries", "lookup", "partition_arrays",
           "read_offsets", "resolve_timestamps"]


# --------------------------------------------------------------------- pure read functions
class _Gather:
    """Batches holding answers, picked from windows of many segments.

    :meth:`add` returns global ids of the batches it added. :meth:`walk` then finds the
    records of all of them at once (offsets and timestamps only, :func:`walk_batches`),
    queries pick their record (:meth:`offset_records`, :meth:`timestamp_records`), and
    :meth:`decode` decodes just the picked records, in one call.
    """

    def __init__(self) -> None:
        self.parts: list[tuple[Window, np.ndarray, str]] = []
        self.first: list[int] = [0]  # global id of each part's first batch
        self.records: RecordWalk | None = None

    def add(self, w: Window, sel: np.ndarray, path: str) -> np.ndarray:
        self.parts.append((w, sel, path))
        self.first.append(self.first[-1] + len(sel))
        return np.arange(self.first[-2], self.first[-1])

    def walk(self) -> np.ndarray:
        """Walk the batches' records; returns which batches do not walk (corrupt)."""
        self.records = walk_batches([(w, sel) for w, sel, _ in self.parts])
        return ~self.records.ok

    def offset_records(self, ids: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """The record at each target offset (in batch ``ids``), or -1."""
        walk, out = self.records, np.full(len(ids), -1, dtype=np.int64)
        ok = np.flatnonzero(ids >= 0)
        if walk is None or not len(ok) or not len(walk.offset):
            return out
        # offsets increase within a batch: one search on (batch, offset - base) keys
        base = walk.scan.base_offset
        batch = walk.batch
        keys = (batch << 32) | np.clip(walk.offset - base[batch], 0, 2**32 - 1)
        g = ids[ok]
        at = np.minimum(np.searchsorted(keys, (g << 32) | np.clip(targets[ok] - base[g], 0,
                                                                   2**32 - 1)), len(keys) - 1)
        hit = (batch[at] == g) & (walk.offset[at] == targets[ok])
        out[ok[hit]] = at[hit]
        return out

    def timestamp_records(self, ids: np.ndarray, targets: np.ndarray, lo: int) -> np.ndarray:
        """The first record with timestamp >= target and offset >= ``lo`` in each target's
        batch (``ids``), or -1."""
        walk, out = self.records, np.full(len(ids), -1, dtype=np.int64)
        ok = np.flatnonzero(ids >= 0)
        if walk is None or not len(ok):
            return out
        first = walk.first[ids[ok]]
        count = walk.first[ids[ok] + 1] - first
        owner = np.repeat(np.arange(len(ok)), count)
        rec = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        good = (walk.timestamp[rec] >= targets[ok][owner]) & (walk.offset[rec] >= lo)
        owners, at = np.unique(owner[good], return_index=True)
        out[ok[owners]] = rec[good][at]
        return out

    def decode(self, records: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """``(table, row)``: the records ``records`` (-1: none) decoded, ``row[i]`` the
        row of ``records[i]`` (-1: none, or it did not decode: logged)."""
        row = np.full(len(records), -1, dtype=np.int64)
        want = records >= 0
        if self.records is None or not want.any():
            return empty_records(), row
        uniq, which = np.unique(records[want], return_inverse=True)
        try:
            table = self.records.decode(uniq)
            row[want] = which
            return table, row
        except CorruptRecordError:  # decode each window's records alone: keep the good
            part = np.searchsorted(self.first, self.records.batch[uniq], side="right") - 1
            tables, n, got = [], 0, np.full(len(uniq), -1, dtype=np.int64)
            for p in np.unique(part).tolist():
                mine = np.flatnonzero(part == p)
                try:
                    tables.append(self.records.decode(uniq[mine], path=self.parts[p][2]))
                except CorruptRecordError as exc:
                    log.warning("lookup: %s", exc)
                    continue
                got[mine] = n + np.arange(len(mine))
                n += len(mine)
            row[want] = got[which]
            return (pa.concat_tables(tables) if tables else empty_records()), row


def _touching(start: np.ndarray, end: np.ndarray) -> list[np.ndarray]:
    """Groups of requests whose byte ranges ``[start, end)`` overlap or lie less than
    :data:`READ_GAP` apart (one read of the gap costs less than another read)."""
    if not len(start):
        return []
    order = np.argsort(start, kind="stable")
    reach = np.maximum.accumulate(end[order])
    cut = np.flatnonzero(start[order][1:] > reach[:-1] + READ_GAP) + 1
    bounds = [0, *cut.tolist(), len(order)]
    return [order[a:b] for a, b in itertools.pairwise(bounds)]


def _byte_ranges(seg: LogSegment, lo: np.ndarray, hi: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :meth:`LogSegment._span` reads for offsets ``[lo, hi]``: ``(floor, start,
    end)``, the offset index floor of ``lo`` (its offset, and its position: 0 when
    there is none) to the first entry after ``hi``."""
    oi = seg.offset_index
    floor, start = oi.lookup_many(lo)
    start = np.where(lo > seg.base_offset, start, 0)
    if not len(oi):
        return floor, start, np.full(len(hi), seg.size, dtype=np.int64)
    nxt = np.searchsorted(oi.offsets, hi, side="right")
    end = np.where(nxt < len(oi), oi.positions[np.minimum(nxt, len(oi) - 1)], seg.size)
    return floor, start, end


@dataclasses.dataclass
class _Request:
    """Targets in one segment. Offsets (``ts`` None): the data batch holding ``lo``
    (= ``hi``). Timestamps: the first data batch holding offsets >= ``lo`` (and starting
    at or before ``hi``) whose largest timestamp is >= ``ts``. :func:`_plan` sets ``ids``
    (batch ids in the gather, -1: none in this segment) or ``error``."""

    seg: LogSegment
    lo: np.ndarray
    hi: np.ndarray
    ts: np.ndarray | None = None
    ids: np.ndarray | None = None
    error: Exception | None = None


def _offset_request(seg: LogSegment, targets: np.ndarray) -> _Request:
    return _Request(seg, targets, targets)


def _time_request(seg: LogSegment, targets: np.ndarray, lo: int) -> _Request:
    """The time index bounds every answer at once: after the strict floor's offset (each
    entry holds the largest timestamp so far, so no record up to it is >= the target)
    and at or before the next entry's offset (which holds a timestamp >= it)."""
    ti = seg.time_index
    n = len(ti)
    slot = np.searchsorted(ti.timestamps, targets, side="left") - 1
    first = np.where(slot >= 0, ti.offsets[np.maximum(slot, 0)] + 1 if n else 0,
                     seg.base_offset)
    first = np.maximum(first, max(lo, seg.base_offset))
    # no entry >= the target (an active segment's last batches): up to the end
    last = (np.where(slot + 1 < n, ti.offsets[np.minimum(slot + 1, n - 1)], _NO_OFFSET)
            if n else np.full(len(targets), _NO_OFFSET))
    return _Request(seg, first, np.maximum(last, first), np.asarray(targets, np.int64))


class _Chains:
    """Bytes of many segments' .log files, read once per group of targets whose ranges
    touch, in one buffer; batch-header chains followed in it for all targets at once."""

    def __init__(self) -> None:
        self.bufs: list[bytes] = []
        self.file_at: list[int] = []  # file position of each buffer's first byte
        self.data_at: list[int] = [0]  # its position in the joined data
        self.joined = b""
        self.data = np.zeros(0, dtype=np.uint8)

    def read(self, f, start: int, end: int, *, first: bool = False) -> int:
        """Read ``[start, end)`` of the open file ``f`` (``first``: its first read);
        returns the buffer's number."""
        buf = f.read_at(max(0, end - start), start)
        lakefs.IO_STATS.record(len(buf), opened=int(first))
        self.bufs.append(bytes(buf))
        self.file_at.append(start)
        self.data_at.append(self.data_at[-1] + len(buf))
        return len(self.bufs) - 1

    def join(self) -> None:
        self.joined = b"".join(self.bufs)
        self.data = np.frombuffer(self.joined, dtype=np.uint8)

    def headers(self, buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
        """``(at, room, header)``: where file position ``pos`` of buffer ``buf`` is in
        the joined data, the bytes from there to the buffer's end, and the batch header
        there (garbage where ``room`` < a header)."""
        at = np.asarray(self.data_at)[buf] + pos - np.asarray(self.file_at)[buf]
        room = np.asarray(self.data_at)[buf + 1] - at
        if not len(self.data):
            return at, room, np.zeros(len(at), dtype=HEADER_DTYPE)
        idx = np.minimum(at, max(len(self.data) - HEADER_SIZE, 0))[:, None] + np.arange(
            HEADER_SIZE)
        raw = self.data[np.minimum(idx, len(self.data) - 1)]
        return at, room, np.ascontiguousarray(raw).view(HEADER_DTYPE).ravel()


def _plan(reqs: list[_Request], gather: _Gather) -> None:
    """Set every request's ``ids`` (or ``error``): :func:`_locate`, then the careful
    path (:meth:`LogSegment._span`, which rebuilds a bad index) where the index and the
    log disagree."""
    with contextlib.ExitStack() as files:
        _locate(reqs, gather, files)
    for r in reqs:
        careful = np.flatnonzero(r.ids == -2) if r.error is None else []
        if not len(careful):
            continue
        try:
            r.ids[careful] = (
                _careful_offsets(r.seg, r.lo[careful], gather) if r.ts is None else
                _careful_timestamps(r.seg, r.ts[careful], r.lo[careful], r.hi[careful],
                                    gather))
        except (SeglakeError, OSError) as exc:
            r.error = exc


def _locate(reqs: list[_Request], gather: _Gather, files: contextlib.ExitStack) -> None:
    """``ids`` of all requests' targets at once (-2: the index and the log disagree, or
    the file is not where the catalog says: the careful path takes those).

    Reads are those of :meth:`LogSegment._span`: from the offset index floor of ``lo``
    to the entry after ``hi`` plus a header (targets whose ranges lie within
    :data:`READ_GAP` share one read; each file opened once), and the batch there only
    when it holds an answer. Then every target's chain of batch headers is followed from
    its floor, all targets of all segments one numpy step at a time. Answer batches'
    CRCs are checked.
    """
    chains = _Chains()
    cols: dict[str, list[np.ndarray]] = {}
    handles, spans = [], {}  # open files; request -> its targets' slice of the columns
    total = 0
    for j, r in enumerate(reqs):
        n = len(r.lo)
        r.ids = np.full(n, -2, dtype=np.int64)
        try:
            floor, start, end = _byte_ranges(r.seg, r.lo, r.hi)
            try:
                f = files.enter_context(r.seg.fs.open_input_file(r.seg.log_path))
            except OSError:  # not where the catalog says (staged): the careful path
                continue
            buf = np.zeros(n, dtype=np.int64)
            for k, g in enumerate(_touching(start, end)):
                buf[g] = chains.read(f, int(start[g].min()),
                                     min(r.seg.size, int(end[g].max()) + HEADER_SIZE),
                                     first=k == 0)
        except (SeglakeError, OSError) as exc:
            r.error = exc
            continue
        handles.append(f)
        spans[j] = (total, total + n)
        total += n
        for k, v in (("lo", r.lo), ("hi", r.hi), ("ts", r.ts if r.ts is not None else r.lo),
                     ("is_ts", np.full(n, r.ts is not None)), ("start", start),
                     ("floor", floor), ("buf", buf), ("req", np.full(n, j)),
                     ("size", np.full(n, r.seg.size)), ("file", np.full(n, len(handles) - 1))):
            cols.setdefault(k, []).append(v)
    if not spans:
        return
    c = {k: np.concatenate(v) for k, v in cols.items()}
    chains.join()
    buf, size = c["buf"], c["size"]
    # state: 0 on the way, 1 found, -1 none in this segment, -2 careful path
    pos, state = c["start"].copy(), np.zeros(len(buf), dtype=np.int8)
    found_at = np.zeros(len(buf), dtype=np.int64)
    for step in range(_MAX_STEPS):
        run = np.flatnonzero(state == 0)
        if not len(run):
            break
        at, room, h = chains.headers(buf[run], pos[run])
        base = h["base_offset"].astype(np.int64)
        last = base + h["last_offset_delta"]
        bsize = h["batch_length"].astype(np.int64) + LOG_OVERHEAD
        whole, eof = room >= HEADER_SIZE, pos[run] >= size[run]
        bad = whole & ((h["magic"] != MAGIC) | (bsize < HEADER_SIZE))
        if step == 0:  # the index says the batch at its position ends at its offset
            bad |= whole & (c["start"][run] > 0) & (last != c["floor"][run])
        good = whole & ~bad
        data = (h["attributes"] & CONTROL_BIT) == 0
        lo, is_ts = c["lo"][run], c["is_ts"][run]
        hit = (last >= lo) & data & np.where(is_ts, h["max_timestamp"] >= c["ts"][run],
                                             base <= lo)
        done = np.where(is_ts, hit | (base > c["hi"][run]), last >= lo)
        fits = room >= bsize
        state[run[bad]] = -2
        state[run[good & hit & fits]] = 1
        found_at[run[good & hit & fits]] = at[good & hit & fits]
        state[run[(good & done & ~hit) | (~whole & eof)]] = -1
        onward = good & ~done
        pos[run[onward]] += bsize[onward]
        need = (good & hit & ~fits) | (~whole & ~eof)  # bytes not read yet: read them
        if need.any():
            more = run[need]
            length = np.where(whole, bsize, HEADER_SIZE + _NEXT_BYTES)[need]
            for fi, p, w in np.unique(np.stack([c["file"][more], pos[more], length]),
                                      axis=1).T.tolist():
                mine = more[(c["file"][more] == fi) & (pos[more] == p) & (length == w)]
                try:
                    buf[mine] = chains.read(handles[fi], p, min(int(size[mine[0]]), p + w))
                except OSError:
                    state[mine] = -2
            chains.join()
    found = np.flatnonzero(state == 1)
    ids = np.where(state == -1, -1, -2)
    if len(found):
        batches, which = np.unique(found_at[found], return_inverse=True)
        scan, crc_ok = _scan_at(chains.data, batches)
        w = Window(0, chains.joined, scan)
        owner = c["req"][found]
        ids_of = np.full(len(batches), -2, dtype=np.int64)
        for j in np.unique(owner).tolist():  # one gather part per segment (names its file)
            mine = np.unique(which[owner == j])
            mine = mine[crc_ok[mine]]
            if len(mine):
                ids_of[mine] = gather.add(w, mine, reqs[j].seg.log_path)
        ids[found] = ids_of[which]
    for j, (a, b) in spans.items():
        reqs[j].ids = ids[a:b]


def _scan_at(data: np.ndarray, at: np.ndarray) -> tuple[BatchScan, np.ndarray]:
    """The batches starting at ``at`` in ``data`` (whole, checked by the caller) as a
    scan, and whether each one's CRC-32C matches."""
    h = np.ascontiguousarray(data[at[:, None] + np.arange(HEADER_SIZE)]).view(
        HEADER_DTYPE).ravel()
    size = h["batch_length"].astype(np.int64) + LOG_OVERHEAD
    view = memoryview(data)
    crc_ok = np.array([crc32c(view[a + ATTRIBUTES_OFFSET:a + z]) == c for a, z, c in zip(
        at.tolist(), size.tolist(), h["crc"].tolist(), strict=True)], dtype=bool)
    base = h["base_offset"].astype(np.int64)
    i64 = {f: h[f].astype(np.int64) for f in ("records_count", "base_timestamp",
                                               "max_timestamp", "attributes", "producer_id",
                                               "producer_epoch", "base_sequence",
                                               "leader_epoch")}
    scan = BatchScan(position=at.astype(np.int64), size=size, base_offset=base,
                     last_offset=base + h["last_offset_delta"], crc_valid=crc_ok,
                     valid_bytes=len(data), **i64)
    return scan, crc_ok


def _careful_offsets(seg: LogSegment, targets: np.ndarray, gather: _Gather) -> np.ndarray:
    out = np.full(len(targets), -1, dtype=np.int64)
    for qi in _touching(*_byte_ranges(seg, targets, targets)[1:]):
        sel = targets[qi]
        w = seg._span(int(sel.min()), int(sel.max()))
        b = np.searchsorted(w.scan.last_offset, sel, side="left")
        inside = b < len(w.scan)
        inside[inside] &= (w.scan.base_offset[b[inside]] <= sel[inside]) & ~(
            w.scan.is_control[b[inside]])
        if inside.any():
            batches, which = np.unique(b[inside], return_inverse=True)
            out[qi[inside]] = gather.add(w, batches, seg.log_path)[which]
    return out


def _careful_timestamps(seg: LogSegment, targets: np.ndarray, first: np.ndarray,
                        last: np.ndarray, gather: _Gather) -> np.ndarray:
    out = np.full(len(targets), -1, dtype=np.int64)
    for qi in _touching(*_byte_ranges(seg, first, last)[1:]):
        w = seg._span(int(first[qi].min()), int(last[qi].max()))
        s, t = w.scan, targets[qi]
        b = np.searchsorted(s.last_offset, first[qi], side="left")
        hit = np.full(len(qi), -1, dtype=np.int64)
        while True:  # from each target's first batch on: usually one or two steps
            open_ = np.flatnonzero((hit < 0) & (b < len(s)))
            if not len(open_):
                break
            bb = b[open_]
            ok = (s.max_timestamp[bb] >= t[open_]) & ~s.is_control[bb]
            hit[open_[ok]] = bb[ok]
            b[open_] += 1
        found = hit >= 0
        if found.any():
            batches, which = np.unique(hit[found], return_inverse=True)
            out[qi[found]] = gather.add(w, batches, seg.log_path)[which]
    return out


def _scan_time(seg: LogSegment, target: int, lo: int) -> pa.Table:
    """The first record of ``seg`` (offset >= ``lo``) with timestamp >= ``target`` by a
    forward scan (empty if none): for the rare targets the time index cannot place,
    e.g. when the batch carrying the index's timestamp is a control batch."""
    found = seg.find_offset_by_timestamp(target, lo)
    if found is None:
        return empty_records()
    return seg.read_records(found.offset, found.offset + 1)


def read_offsets(seg: LogSegment, targets: np.ndarray) -> pa.Table:
    """Records at ``targets`` (offsets of ``seg``); missing ones left out.

    Targets whose index intervals touch share one ranged read of
    ``[floor(lo), next_entry(hi)) + header`` and, only if needed, the batch after it.
    Only the batches holding targets are decoded, all in one call.
    """
    targets = np.unique(np.asarray(targets, dtype=np.int64))
    if not len(targets):
        return empty_records()
    gather, req = _Gather(), _offset_request(seg, targets)
    _plan([req], gather)
    if req.error is not None:
        raise req.error
    gather.walk()
    table, row = gather.decode(gather.offset_records(req.ids, targets))
    return table.take(pa.array(row[row >= 0]))


def resolve_timestamps(seg: LogSegment, targets: np.ndarray, *, min_offset: int | None = None
                       ) -> tuple[np.ndarray, pa.Table]:
    """For each target timestamp (>= 0), the first record of ``seg`` with timestamp >= it.

    Returns ``(row, records)``: ``records`` holds the answers, ``row[i]`` the row of
    target ``i``'s answer in it, -1 when ``seg`` has none (look in the next segment).
    All targets are placed by the time index at once; targets whose ranges touch share
    the reads; the batches holding answers are decoded in one call.
    """
    targets = np.asarray(targets, dtype=np.int64)
    lo = seg.base_offset if min_offset is None else max(min_offset, seg.base_offset)
    gather, req = _Gather(), _time_request(seg, targets, lo)
    _plan([req], gather)
    if req.error is not None:
        raise req.error
    gather.walk()
    table, answer = gather.decode(gather.timestamp_records(req.ids, targets, lo))
    tables, n = [table], table.num_rows
    for k in np.flatnonzero(answer < 0).tolist():  # the index could not place it: scan
        t = _scan_time(seg, int(targets[k]), lo)
        if t.num_rows:
            tables.append(t)
            answer[k] = n
            n += 1
    return answer, pa.concat_tables(tables)


# ------------------------------------------------------------------------- driver side
def partition_arrays(segments: pa.Table) -> dict[tuple[str, int], dict[str, np.ndarray]]:
    """Catalog rows -> per (topic, partition) sorted numpy arrays (what is broadcast)."""
    out: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    if not segments.num_rows:
        return out
    cols = {c: segments.column(c).to_numpy(zero_copy_only=False)
            for c in ("base_offset", "next_offset", "max_timestamp", "min_timestamp", "path",
                      "size_bytes", "run_id")}
    for k, ix in _groups(segments.column("topic"), segments.column("partition")):
        ix = ix[np.argsort(cols["base_offset"][ix], kind="stable")]
        a = {
            "base_offset": cols["base_offset"][ix].astype(np.int64),
            "next_offset": cols["next_offset"][ix].astype(np.int64),
            "max_timestamp": cols["max_timestamp"][ix].astype(np.int64),
            "min_timestamp": cols["min_timestamp"][ix].astype(np.int64),
            "path": cols["path"][ix].astype(object),
            "size": cols["size_bytes"][ix].astype(np.int64),
            "run_id": cols["run_id"][ix].astype(object),
        }
        a["running_max"] = np.maximum.accumulate(a["max_timestamp"])
        out[k] = a
    return out


def _segment_for(a: dict[str, np.ndarray], off: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Segment index of each query (-1: answered without a segment / no segment)."""
    n = len(a["base_offset"])
    seg = np.full(len(off), -1, dtype=np.int64)
    is_off = off >= 0
    if is_off.any():
        seg[is_off] = np.searchsorted(a["base_offset"], off[is_off], side="right") - 1
    is_ts = ~is_off & (ts >= 0)
    if is_ts.any():
        s = np.searchsorted(a["running_max"], ts[is_ts], side="left")
        seg[is_ts] = np.where(s < n, s, -1)
    seg[~is_off & (ts == EARLIEST)] = 0
    seg[~is_off & (ts == MAX_TS)] = int(np.argmax(a["max_timestamp"])) if n else -1
    return seg


def _normalize_queries(df):
    """topic, partition, query_offset, query_timestamp (ms) from the query DataFrame."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    cols = set(df.columns)
    off = F.col("offset").cast("bigint") if "offset" in cols else F.lit(None).cast("bigint")
    if "timestamp" in cols:
        dt = df.schema["timestamp"].dataType
        if isinstance(dt, (TimestampType, TimestampNTZType)):
            ts = (F.unix_micros(F.col("timestamp").cast("timestamp")) / 1000).cast("bigint")
        else:
            ts = F.col("timestamp").cast("bigint")
    else:
        ts = F.lit(None).cast("bigint")
    return df.select(F.col("topic").cast("string").alias("topic"),
                     F.col("partition").cast("int").alias("partition"),
                     off.alias("query_offset"), ts.alias("query_timestamp"))


def lookup(spark, root: str, queries_df, *, version: int | None = None,
           cache_bytes: int | None = None, num_tasks: int | None = None,
           chunk_rows: int = DEFAULT_CHUNK_ROWS, io_accumulators: tuple | None = None):
    """Answer point queries; one output row (schema :data:`LOOKUP_SCHEMA`) per query.

    Args:
        spark: the session.
        root: lake root.
        queries_df: columns ``topic``, ``partition`` and ``offset`` and/or ``timestamp``
            (epoch ms, or a Spark timestamp; -2 earliest, -1 latest, -3 max timestamp).
            Per row exactly one of offset/timestamp is non-null.
        version: catalog version to read (default: the current one, pinned).
        cache_bytes: ``seglake.index.cache.bytes`` for the executors' index cache.
        num_tasks: ``None`` (default): answer the queries where they are, one pass, no
            shuffle. A number: first repartition them into that many tasks by segment, so
            that each segment's queries meet in one task (worth it when many queries
            share batches).
        chunk_rows: queries a task answers together (one decode call).
        io_accumulators: two Spark accumulators that receive the bytes the tasks read
            (index and log files) and the files they opened.
    """
    from seglake.config import LogConfig
    from seglake.spark.extract import spark_schema

    catalog = Catalog(root)
    version = catalog.version() if version is None else version
    bc = spark.sparkContext.broadcast(partition_arrays(catalog.segments(version=version)))
    cache_bytes = LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes
    accs = io_accumulators or (None, None)

    def answer(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts, cache = bc.value, get_cache(cache_bytes)
        pending: list[pa.RecordBatch] = []
        for b in itertools.chain(batches, [None]):
            if b is not None and b.num_rows:
                pending.append(b.select(QUERY_SCHEMA.names))
            if pending and (b is None or sum(x.num_rows for x in pending) >= chunk_rows):
                with lakefs.IO_STATS.counting(*accs, keys=("bytes_read", "files_opened")):
                    out = answer_queries(root, parts, cache, pa.Table.from_batches(
                        pending, QUERY_SCHEMA))
                yield from out.to_batches()
                pending = []

    q = _normalize_queries(queries_df)
    if num_tasks:
        def key(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            parts = bc.value
            for b in batches:
                seg = np.full(b.num_rows, -1, dtype=np.int32)
                off = b.column(2).fill_null(-1).to_numpy(zero_copy_only=False)
                ts = b.column(3).fill_null(-9).to_numpy(zero_copy_only=False)
                for k, idx in _groups(b.column(0), b.column(1)):
                    if k in parts:
                        seg[idx] = _segment_for(parts[k], off[idx], ts[idx])
                yield pa.RecordBatch.from_arrays(
                    [*b.columns, pa.array(seg, pa.int32())], schema=_KEYED_SCHEMA)

        q = (q.mapInArrow(key, spark_schema(_KEYED_SCHEMA))
             .repartition(num_tasks, "topic", "partition", "_seg")
             .sortWithinPartitions("topic", "partition", "_seg"))
    return q.mapInArrow(answer, spark_schema(LOOKUP_SCHEMA))


def _groups(topics: pa.Array | pa.ChunkedArray, parts: pa.Array | pa.ChunkedArray
            ) -> list[tuple[tuple[str | None, int | None], np.ndarray]]:
    """Row indices per (topic, partition) (``None`` for nulls), without a loop over rows."""
    codes = pc.dictionary_encode(topics)
    if isinstance(codes, pa.ChunkedArray):
        codes = codes.combine_chunks()
    names = [*codes.dictionary.to_pylist(), None]
    code = codes.indices.fill_null(len(names) - 1).to_numpy().astype(np.int64)
    part = pc.fill_null(parts, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    null_part = pc.is_null(parts).to_numpy(zero_copy_only=False).astype(np.int64)
    key = (code << 33) | (null_part << 32) | (part & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    uniq, first = np.unique(key[order], return_index=True)
    out = []
    for u, idx in zip(uniq.tolist(), np.split(order, first[1:]), strict=True):
        p = None if (u >> 32) & 1 else int(np.uint32(u & 0xFFFFFFFF).view(np.int32))
        out.append(((names[u >> 33], p), idx))
    return out


def _split_by(keys: np.ndarray, items: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``items`` grouped by ``keys`` (same length), keys ascending."""
    if not len(keys):
        return []
    order = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[order], return_index=True)
    return list(zip(uniq.tolist(), np.split(items[order], first[1:]), strict=True))


class _Answers:
    """Per query: status, the record found (a row of the gathered or scanned records)."""

    def __init__(self, n: int) -> None:
        self.status = np.full(n, "ok", dtype=object)
        self.resolved = np.full(n, -1, dtype=np.int64)  # offsets of log_end_offset answers
        self.batch = np.full(n, -1, dtype=np.int64)  # batch (in gather) with the answer
        self.row = np.full(n, -1, dtype=np.int64)
        self.tables: list[pa.Table] = []
        self.rows = 0

    def add(self, qi: int, table: pa.Table) -> None:
        self.row[qi] = self.rows
        self.tables.append(table)
        self.rows += table.num_rows

    def request(self, cache: IndexCache, root: str, where: tuple, make) -> _Request | None:
        """``make(segment)``, or None when the segment cannot be opened: ``read_error``."""
        _, a, s, _ = where
        try:
            return make(_open(cache, root, a, s))
        except (SeglakeError, OSError) as exc:  # never fail the job on one segment
            self.fail(where, exc)
            return None

    def fail(self, where: tuple, exc: Exception) -> None:
        (topic, partition), a, s, qi = where
        log.warning("lookup %s-%s segment %s: %s", topic, partition, a["path"][s], exc)
        self.status[qi] = "read_error"


def answer_queries(root: str, parts: dict, cache: IndexCache, q: pa.Table) -> pa.Table:
    """One :data:`LOOKUP_SCHEMA` row per query of ``q`` (:data:`QUERY_SCHEMA`), in order;
    ``parts`` is the broadcast of :func:`partition_arrays`. What the executors run."""
    q_off, q_ts = q.column("query_offset"), q.column("query_timestamp")
    off = q_off.fill_null(-1).to_numpy().astype(np.int64)
    has_off = q_off.is_valid().to_numpy(zero_copy_only=False)
    ts = q_ts.fill_null(-9).to_numpy().astype(np.int64)
    has_ts = q_ts.is_valid().to_numpy(zero_copy_only=False)
    ans, gather = _Answers(q.num_rows), _Gather()
    by_off: list[np.ndarray] = []  # queries answered by an offset: (query, target) pairs
    by_ts: list[tuple[np.ndarray, tuple]] = []  # (queries, where) per segment
    reqs: list[tuple[_Request, np.ndarray | None, tuple]] = []  # (request, which, where)
    target = np.where(has_off, off, ts)
    invalid = (has_off == has_ts) | (has_off & (off < 0)) | (has_ts & (ts < MAX_TS))
    ans.status[invalid] = "invalid_query"
    for k, idx in _groups(q.column("topic"), q.column("partition")):
        idx = idx[~invalid[idx]]
        a = parts.get(k)
        if a is None:
            ans.status[idx] = "unknown_partition"
            continue
        log_start, leo = int(a["base_offset"][0]), int(a["next_offset"][-1])
        ts_q = idx[has_ts[idx]]
        latest = ts_q[ts[ts_q] == LATEST]
        ans.status[latest], ans.resolved[latest] = "log_end_offset", leo
        early = ts_q[ts[ts_q] == EARLIEST]  # -2: the record at the log start offset
        target[early] = log_start
        o_q = np.concatenate([idx[has_off[idx]], early])
        out = (target[o_q] < log_start) | (target[o_q] >= leo)
        ans.status[o_q[out]] = np.where(has_off[o_q[out]], "offset_out_of_range",
                                        "no_record_at_offset")
        o_q = o_q[~out]
        for s, qi in _split_by(np.searchsorted(a["base_offset"], target[o_q], "right") - 1,
                               o_q):
            uniq, which = np.unique(target[qi], return_inverse=True)
            req = ans.request(cache, root, (k, a, s, qi),
                              lambda seg, u=uniq: _offset_request(seg, u))
            if req is not None:
                reqs.append((req, which, (k, a, s, qi)))
                by_off.append(qi)
        # timestamps (-3: the largest one): the first segment whose running max reaches it
        t_q = ts_q[(ts[ts_q] >= 0) | (ts[ts_q] == MAX_TS)]
        top = int(np.argmax(a["max_timestamp"]))
        target[t_q[ts[t_q] == MAX_TS]] = int(a["max_timestamp"][top])
        s_of = np.where(ts[t_q] == MAX_TS, top,
                        np.searchsorted(a["running_max"], target[t_q], side="left"))
        none = (s_of >= len(a["base_offset"])) | (target[t_q] < 0)
        ans.status[t_q[none]] = "no_record_for_timestamp"
        for s, qi in _split_by(s_of[~none], t_q[~none]):
            req = ans.request(cache, root, (k, a, s, qi), lambda seg, t=target[qi],
                              lo=log_start: _time_request(seg, t, lo))
            if req is not None:
                reqs.append((req, None, (k, a, s, qi)))
                by_ts.append((qi, (k, a, s, log_start)))
    _plan([r for r, _, _ in reqs], gather)  # all segments' reads and chains at once
    for r, which, where in reqs:
        if r.error is not None:
            ans.fail(where, r.error)
        else:
            ans.batch[where[3]] = r.ids if which is None else r.ids[which]
    bad, placed = gather.walk(), np.flatnonzero(ans.batch >= 0)
    failed = placed[bad[ans.batch[placed]]]  # records that do not walk (corrupt)
    ans.status[failed], ans.batch[failed] = "read_error", -1
    record = np.full(q.num_rows, -1, dtype=np.int64)
    if by_off:
        qi = np.concatenate(by_off)
        record[qi] = gather.offset_records(ans.batch[qi], target[qi])
    for qi, (_, _, _, log_start) in by_ts:
        record[qi] = gather.timestamp_records(ans.batch[qi], target[qi], log_start)
    table, ans.row = gather.decode(record)
    ans.tables, ans.rows = [table], table.num_rows
    ans.status[(record >= 0) & (ans.row < 0)] = "read_error"  # did not decode (logged)
    if by_off:
        qi = np.concatenate(by_off)
        qi = qi[ans.status[qi] != "read_error"]
        ans.status[qi] = np.where(ans.row[qi] >= 0, "ok", "no_record_at_offset")
    for qi, where in by_ts:  # timestamps the index could not place: scan (rare)
        for i in qi[(ans.row[qi] < 0) & (ans.status[qi] != "read_error")].tolist():
            _scan_on(cache, root, ans, i, int(target[i]), where)
    return _assemble(q, ans)


def _scan_on(cache: IndexCache, root: str, ans: _Answers, i: int, t: int, where: tuple
             ) -> None:
    """Query ``i``'s answer by scanning from segment ``s`` on (rare: see _scan_time)."""
    (topic, partition), a, s, log_start = where
    for j in range(s, len(a["base_offset"])):
        try:
            found = _scan_time(_open(cache, root, a, j), t, log_start)
        except (SeglakeError, OSError) as exc:
            log.warning("lookup %s-%s segment %s: %s", topic, partition, a["path"][j], exc)
            ans.status[i] = "read_error"
            return
        if found.num_rows:
            ans.add(i, found.slice(0, 1))
            return
    ans.status[i] = "no_record_for_timestamp"


def _open(cache: IndexCache, root: str, a: dict[str, np.ndarray], s: int) -> LogSegment:
    return cache.segment(root, str(a["path"][s]), size=int(a["size"][s]),
                         next_offset=int(a["next_offset"][s]),
                         max_timestamp=int(a["max_timestamp"][s]),
                         run_id=a["run_id"][s] or None)


def _assemble(q: pa.Table, ans: _Answers) -> pa.Table:
    recs = pa.concat_tables(ans.tables) if ans.tables else empty_records()
    t = recs.select(RECORD_SCHEMA.names).take(pa.array(ans.row, mask=ans.row < 0))
    ts_us = pc.multiply(t.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
    offset = np.where(ans.row >= 0, t.column("offset").fill_null(-1).to_numpy(), ans.resolved)
    headers = t.column("headers").cast(KAFKA_SOURCE_SCHEMA.field("headers").type)
    return pa.Table.from_arrays([
        t.column("key"), t.column("value"), q.column("topic"), q.column("partition"),
        pa.array(offset, mask=offset < 0), ts_us, t.column("timestamp_type"), headers,
        q.column("query_offset"), q.column("query_timestamp"),
        pa.array(ans.status.tolist(), pa.string()),
    ], schema=LOOKUP_SCHEMA)
