"""Point reads of many targets in one segment, or in many (no Spark): the offset or
time index searched for all targets at once, one ranged read per group of targets whose
index intervals lie within :data:`READ_GAP`, every target's batch-header chain followed
from its index floor together (numpy), and the answer batches gathered so that their
records are walked and decoded in one call (:class:`Gather`). Where the index and the
log disagree, the careful path (``LogSegment._span``, which rebuilds the index).

:func:`read_offsets` and :func:`resolve_timestamps` answer one segment's targets; the
lookup job plans all segments' :class:`Request` s together (:func:`plan_requests`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
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
from seglake.record.schema import empty_records
from seglake.storage.segment import LogSegment, Window
from seglake.storage.window_records import RecordWalk, walk_batches

__all__ = [
    "READ_GAP",
    "Gather",
    "Request",
    "offset_request",
    "plan_requests",
    "read_offsets",
    "resolve_timestamps",
    "scan_time",
    "time_request",
]

log = logging.getLogger("seglake.spark.lookup")  # the lookup job's log, as before

_NO_OFFSET = 2**62  # an offset past any segment's end
READ_GAP = 32 * 1024  # reads of one segment closer than this are merged
_MAX_STEPS = 64  # batches a request's chain may follow before the careful path takes it
_NEXT_BYTES = 16 * 1024  # read past a chain's end when its next header was not read


class Gather:
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

    def raise_error(self, gid: int) -> None:
        """Raise the :class:`CorruptRecordError` of batch ``gid`` (one that does not walk):
        it is decoded the usual way, which names its file, position and the problem."""
        part = int(np.searchsorted(self.first, gid, side="right")) - 1
        w, sel, path = self.parts[part]
        k = gid - self.first[part]
        w.decode(sel[k : k + 1], path=path)
        raise CorruptRecordError("the records of this batch do not walk", path=path)

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
        at = np.minimum(
            np.searchsorted(keys, (g << 32) | np.clip(targets[ok] - base[g], 0, 2**32 - 1)),
            len(keys) - 1,
        )
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


def _byte_ranges(
    seg: LogSegment, lo: np.ndarray, hi: np.ndarray
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
class Request:
    """Targets in one segment. Offsets (``ts`` None): the data batch holding ``lo``
    (= ``hi``). Timestamps: the first data batch holding offsets >= ``lo`` (and starting
    at or before ``hi``) whose largest timestamp is >= ``ts``. :func:`plan_requests` sets ``ids``
    (batch ids in the gather, -1: none in this segment) or ``error``."""

    seg: LogSegment
    lo: np.ndarray
    hi: np.ndarray
    ts: np.ndarray | None = None
    ids: np.ndarray | None = None
    error: Exception | None = None


def offset_request(seg: LogSegment, targets: np.ndarray) -> Request:
    return Request(seg, targets, targets)


def time_request(seg: LogSegment, targets: np.ndarray, lo: int) -> Request:
    """The time index bounds every answer at once: after the strict floor's offset (each
    entry holds the largest timestamp so far, so no record up to it is >= the target)
    and at or before the next entry's offset (which holds a timestamp >= it)."""
    ti = seg.time_index
    n = len(ti)
    slot = np.searchsorted(ti.timestamps, targets, side="left") - 1
    first = np.where(slot >= 0, ti.offsets[np.maximum(slot, 0)] + 1 if n else 0, seg.base_offset)
    first = np.maximum(first, max(lo, seg.base_offset))
    # no entry >= the target (an active segment's last batches): up to the end
    last = (
        np.where(slot + 1 < n, ti.offsets[np.minimum(slot + 1, n - 1)], _NO_OFFSET)
        if n
        else np.full(len(targets), _NO_OFFSET)
    )
    return Request(seg, first, np.maximum(last, first), np.asarray(targets, np.int64))


class _Chains:
    """Bytes of many segments' .log files, read once per group of targets whose ranges
    touch, in one buffer; batch-header chains followed in it for all targets at once."""

    def __init__(self) -> None:
        self.bufs: list[bytes] = []
        self.file_at: list[int] = []  # file position of each buffer's first byte
        self.data_at: list[int] = [0]  # its position in the joined data
        self.data = np.zeros(0, dtype=np.uint8)  # the buffers joined so far
        self._store = self.data  # ``data`` and spare room (capacity doubles)
        self._joined = 0  # buffers already in ``data``

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
        """Append the buffers read since the last join to ``data``: each byte is copied
        O(1) times however many rounds a chain needs (the capacity doubles)."""
        n = self.data_at[-1]
        if n > len(self._store):
            store = np.empty(max(n, 2 * len(self._store)), dtype=np.uint8)
            store[: len(self.data)] = self.data
            self._store = store
        for i in range(self._joined, len(self.bufs)):
            at = self.data_at[i]
            self._store[at : self.data_at[i + 1]] = np.frombuffer(self.bufs[i], dtype=np.uint8)
            self.bufs[i] = b""  # its bytes live in ``data`` now
        self._joined = len(self.bufs)
        self.data = self._store[:n]

    def headers(
        self, buf: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(at, room, header)``: where file position ``pos`` of buffer ``buf`` is in
        the joined data, the bytes from there to the buffer's end, and the batch header
        there (garbage where ``room`` < a header)."""
        at = np.asarray(self.data_at)[buf] + pos - np.asarray(self.file_at)[buf]
        room = np.asarray(self.data_at)[buf + 1] - at
        if not len(self.data):
            return at, room, np.zeros(len(at), dtype=HEADER_DTYPE)
        idx = np.minimum(at, max(len(self.data) - HEADER_SIZE, 0))[:, None] + np.arange(HEADER_SIZE)
        raw = self.data[np.minimum(idx, len(self.data) - 1)]
        return at, room, np.ascontiguousarray(raw).view(HEADER_DTYPE).ravel()


def plan_requests(reqs: list[Request], gather: Gather) -> None:
    """Set every request's ``ids`` (or ``error``): :func:`_locate`, then the careful
    path (:meth:`LogSegment._span`, which rebuilds a bad index) where the index and the
    log disagree."""
    with contextlib.ExitStack() as files:
        _locate(reqs, gather, files)
    for r in reqs:
        if r.error is not None or r.ids is None:
            continue
        careful = np.flatnonzero(r.ids == -2)
        if not len(careful):
            continue
        try:
            r.ids[careful] = (
                _careful_offsets(r.seg, r.lo[careful], gather)
                if r.ts is None
                else _careful_timestamps(r.seg, r.ts[careful], r.lo[careful], r.hi[careful], gather)
            )
        except (SeglakeError, OSError) as exc:
            r.error = exc


def _locate(reqs: list[Request], gather: Gather, files: contextlib.ExitStack) -> None:
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
                buf[g] = chains.read(
                    f,
                    int(start[g].min()),
                    min(r.seg.size, int(end[g].max()) + HEADER_SIZE),
                    first=k == 0,
                )
        except (SeglakeError, OSError) as exc:
            r.error = exc
            continue
        handles.append(f)
        spans[j] = (total, total + n)
        total += n
        for key, v in (
            ("lo", r.lo),
            ("hi", r.hi),
            ("ts", r.ts if r.ts is not None else r.lo),
            ("is_ts", np.full(n, r.ts is not None)),
            ("start", start),
            ("floor", floor),
            ("buf", buf),
            ("req", np.full(n, j)),
            ("size", np.full(n, r.seg.size)),
            ("file", np.full(n, len(handles) - 1)),
        ):
            cols.setdefault(key, []).append(v)
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
        hit = (last >= lo) & data & np.where(is_ts, h["max_timestamp"] >= c["ts"][run], base <= lo)
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
            for fi, p, w in np.unique(
                np.stack([c["file"][more], pos[more], length]), axis=1
            ).T.tolist():
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
        w = Window(0, chains.data.tobytes(), scan)
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
    h = np.ascontiguousarray(data[at[:, None] + np.arange(HEADER_SIZE)]).view(HEADER_DTYPE).ravel()
    size = h["batch_length"].astype(np.int64) + LOG_OVERHEAD
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray
    crc_ok = np.array(
        [
            crc32c(view[a + ATTRIBUTES_OFFSET : a + z]) == c
            for a, z, c in zip(at.tolist(), size.tolist(), h["crc"].tolist(), strict=True)
        ],
        dtype=bool,
    )
    base = h["base_offset"].astype(np.int64)
    i64 = {
        f: h[f].astype(np.int64)
        for f in (
            "records_count",
            "base_timestamp",
            "max_timestamp",
            "attributes",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "leader_epoch",
        )
    }
    scan = BatchScan(
        position=at.astype(np.int64),
        size=size,
        base_offset=base,
        last_offset=base + h["last_offset_delta"],
        crc_valid=crc_ok,
        valid_bytes=len(data),
        **i64,  # type: ignore[arg-type]  # the int64 columns
    )
    return scan, crc_ok


def _careful_offsets(seg: LogSegment, targets: np.ndarray, gather: Gather) -> np.ndarray:
    out = np.full(len(targets), -1, dtype=np.int64)
    for qi in _touching(*_byte_ranges(seg, targets, targets)[1:]):
        sel = targets[qi]
        w = seg._span(int(sel.min()), int(sel.max()))
        b = np.searchsorted(w.scan.last_offset, sel, side="left")
        inside = b < len(w.scan)
        inside[inside] &= (w.scan.base_offset[b[inside]] <= sel[inside]) & ~(
            w.scan.is_control[b[inside]]
        )
        if inside.any():
            batches, which = np.unique(b[inside], return_inverse=True)
            out[qi[inside]] = gather.add(w, batches, seg.log_path)[which]
    return out


def _careful_timestamps(
    seg: LogSegment, targets: np.ndarray, first: np.ndarray, last: np.ndarray, gather: Gather
) -> np.ndarray:
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


def scan_time(seg: LogSegment, target: int, lo: int) -> pa.Table:
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
    gather, req = Gather(), offset_request(seg, targets)
    plan_requests([req], gather)
    if req.error is not None:
        raise req.error
    assert req.ids is not None  # set by plan_requests
    gather.walk()
    table, row = gather.decode(gather.offset_records(req.ids, targets))
    return table.take(pa.array(row[row >= 0]))


def resolve_timestamps(
    seg: LogSegment, targets: np.ndarray, *, min_offset: int | None = None
) -> tuple[np.ndarray, pa.Table]:
    """For each target timestamp (>= 0), the first record of ``seg`` with timestamp >= it.

    Returns ``(row, records)``: ``records`` holds the answers, ``row[i]`` the row of
    target ``i``'s answer in it, -1 when ``seg`` has none (look in the next segment).
    All targets are placed by the time index at once; targets whose ranges touch share
    the reads; the batches holding answers are decoded in one call.
    """
    targets = np.asarray(targets, dtype=np.int64)
    lo = seg.base_offset if min_offset is None else max(min_offset, seg.base_offset)
    gather, req = Gather(), time_request(seg, targets, lo)
    plan_requests([req], gather)
    if req.error is not None:
        raise req.error
    assert req.ids is not None  # set by plan_requests
    gather.walk()
    table, answer = gather.decode(gather.timestamp_records(req.ids, targets, lo))
    tables, n = [table], table.num_rows
    for k in np.flatnonzero(answer < 0).tolist():  # the index could not place it: scan
        t = scan_time(seg, int(targets[k]), lo)
        if t.num_rows:
            tables.append(t)
            answer[k] = n
            n += 1
    return answer, pa.concat_tables(tables)
