"""Batch-header chains of many point-read requests followed at once (no Spark).

:func:`locate` reads each request's byte ranges (:func:`~seglake.storage.point_requests.
byte_ranges`; ranges within ``READ_GAP`` share one read) into one buffer (:class:`Chains`),
then follows every target's chain of 61-byte batch headers from its index floor, all
targets of all segments one numpy step at a time, and adds the answer batches (CRC-32C
checked) to a :class:`~seglake.storage.point_gather.Gather`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.errors import SeglakeError
from seglake.format import LOG_OVERHEAD
from seglake.record.batch import CONTROL_BIT, HEADER_DTYPE, HEADER_SIZE, MAGIC
from seglake.record.header_scan import header_bytes, headers_at
from seglake.storage.point_gather import Gather
from seglake.storage.point_requests import (
    LOCAL_READ_GAP,
    READ_GAP,
    Request,
    batch_hits,
    byte_ranges,
    read_groups,
)
from seglake.storage.segment import LogSegment
from seglake.storage.segment_window import Window

__all__ = ["Chains", "locate"]

_MAX_STEPS = 64  # batches a request's chain may follow before the careful path takes it
_NEXT_BYTES = 16 * 1024  # read past a chain's end when its next header was not read


class Chains:
    """Bytes of many segments' .log files in one buffer (:attr:`data`), read by rounds:
    :meth:`add` the ranges, :meth:`fetch` reads them straight into the buffer, each
    segment's file opened once per round; batch-header chains followed in it for all
    targets at once."""

    def __init__(self) -> None:
        self.data = np.zeros(0, dtype=np.uint8)
        self.file_at = np.zeros(0, dtype=np.int64)  # file position of each buffer
        self.data_at = np.zeros(0, dtype=np.int64)  # its position in ``data``
        self.got = np.zeros(0, dtype=np.int64)  # the bytes its read got
        # id(segment) -> (segment, [(starts, lengths)]) of the ranges added, and the
        # id(segment) of each range added, in order
        self._pending: dict[int, tuple[LogSegment, list[tuple[np.ndarray, np.ndarray]]]] = {}
        self._order: list[np.ndarray] = []
        self._added = 0

    def add(self, seg: LogSegment, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Plan reads of ``[start[i], end[i])`` of ``seg``'s ``.log``; returns their
        buffers' numbers (their bytes are there after the next :meth:`fetch`)."""
        start = np.asarray(start, dtype=np.int64)
        length = np.maximum(0, np.asarray(end, dtype=np.int64) - start)
        self._pending.setdefault(id(seg), (seg, []))[1].append((start, length))
        self._order.append(np.full(len(start), id(seg), dtype=np.int64))
        first = len(self.file_at) + self._added
        self._added += len(start)
        return np.arange(first, first + len(start))

    def fetch(self) -> dict[int, Exception]:
        """Read the ranges added since the last fetch straight into ``data`` (appended),
        through each segment (its staged or retired copy when the catalog's path is not
        there yet or any more), each file opened once; returns the errors by
        ``id(segment)`` (their buffers hold nothing)."""
        pending, order = self._pending, self._order
        self._pending, self._order, self._added = {}, [], 0
        if not pending:
            return {}
        # buffers numbered as added; laid out segment by segment (one open each)
        group = {k: j for j, k in enumerate(pending)}
        ids = np.concatenate(order)
        rank = np.argsort(np.array([group[k] for k in ids.tolist()], np.int64), kind="stable")
        per_seg = [
            (np.concatenate([a for a, _ in rs]), np.concatenate([n for _, n in rs]))
            for _, rs in pending.values()
        ]
        starts = np.concatenate([a for a, _ in per_seg])
        lengths = np.concatenate([n for _, n in per_seg])
        at = len(self.data) + np.cumsum(lengths) - lengths
        # from Arrow's memory pool (reused memory: no page faults); appended after the old
        data = np.frombuffer(pa.allocate_buffer(len(self.data) + int(lengths.sum())), np.uint8)
        data[: len(self.data)] = self.data
        view = memoryview(data)  # type: ignore[arg-type]
        got, i = np.zeros(len(starts), np.int64), 0
        errors: dict[int, Exception] = {}
        for (k, (seg, _)), (a, n) in zip(pending.items(), per_seg, strict=True):
            try:
                ranges = list(zip(a.tolist(), n.tolist(), strict=True))
                got[i : i + len(a)] = seg.files.read_ranges_into(ranges, view[int(at[i]) :])
            except (SeglakeError, OSError) as exc:
                errors[k] = exc
            i += len(a)
        place = np.empty(len(rank), dtype=np.int64)
        place[rank] = np.arange(len(rank))  # layout slot of each buffer added
        self.data = data
        self.file_at = np.concatenate([self.file_at, starts[place]])
        self.data_at = np.concatenate([self.data_at, at[place]])
        self.got = np.concatenate([self.got, got[place]])
        return errors

    def headers(
        self, buf: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(at, room, header)``: where file position ``pos`` of buffer ``buf`` is in
        the joined data, the bytes read from there on, and the batch header there
        (garbage where ``room`` < a header)."""
        at = self.data_at[buf] + pos - self.file_at[buf]
        room = self.data_at[buf] + self.got[buf] - at
        if not len(self.data):
            return at, room, np.zeros(len(at), dtype=HEADER_DTYPE)
        if len(self.data) < HEADER_SIZE:  # garbage, in bounds
            idx = np.minimum(at, 0)[:, None] + np.arange(HEADER_SIZE)
            raw = np.ascontiguousarray(self.data[np.minimum(idx, len(self.data) - 1)])
        else:
            raw = header_bytes(self.data, np.minimum(at, len(self.data) - HEADER_SIZE))
        return at, room, raw.view(HEADER_DTYPE).ravel()


def locate(reqs: list[Request], gather: Gather) -> None:
    """``ids`` of all requests' targets at once (-2: the index and the log disagree: the
    careful path takes those).

    Reads are those of :meth:`LogSegment._span`, one entry longer: from the offset
    index floor of ``lo`` to the second entry after ``hi`` plus a header (the batch at
    the first read whole: :func:`byte_ranges` ``whole``; targets whose ranges lie within
    :data:`READ_GAP` (:data:`LOCAL_READ_GAP` on a local file) share one read, through the
    segment), and the batch there only
    when it holds an answer. Then every target's chain of batch headers is followed from
    its floor, all targets of all segments one numpy step at a time. Answer batches'
    CRCs are checked.
    """
    chains = Chains()
    spans, c = _first_reads(reqs, chains)
    if not spans:
        return
    failed = chains.fetch()
    for j in spans:
        reqs[j].error = failed.get(id(reqs[j].seg), reqs[j].error)
    # state: 0 on the way, 1 found, -1 none in this segment (or its read failed), -2
    # careful path
    state = np.zeros(len(c["buf"]), dtype=np.int8)
    if failed:
        state[np.isin(c["req"], [j for j in spans if reqs[j].error is not None])] = -1
    found_at, after = _follow_chains(reqs, chains, c, state)
    found = np.flatnonzero(state == 1)
    ids = np.where(state == -1, -1, -2)
    if len(found):
        ids[found] = _gather_answers(reqs, chains, gather, c["req"][found], found_at[found])
    after[state != 1] = -1
    for j, (a, b) in spans.items():
        reqs[j].ids, reqs[j].after = ids[a:b], after[a:b]


def _follow_chains(
    reqs: list[Request], chains: Chains, c: dict[str, np.ndarray], state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every target's chain of batch headers followed from its floor, all targets one
    numpy step at a time, reading more where a header or answer batch is not read yet;
    ``state`` set per target (see :func:`locate`). Returns ``(found_at, after)``: the
    answer batch's position in :attr:`Chains.data` and the marker that answered a
    timestamp (then ``lo``/``is_ts`` of ``c`` go on from it as an offset)."""
    buf, size = c["buf"], c["size"]
    after = np.full(len(buf), -1, dtype=np.int64)  # the marker that answered a timestamp
    pos = c["start"].copy()
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
        lo, is_ts = c["lo"][run], c["is_ts"][run]
        control = (h["attributes"] & CONTROL_BIT) != 0
        hit, marker = batch_hits(base, last, h["max_timestamp"], control, lo, c["ts"][run], is_ts)
        # a marker answered a timestamp: on from it as an offset (a fetch from there);
        # one inside a control batch of many records (lo past its base): the scan decides
        turn = good & marker & (base >= lo)
        done = hit | (marker & ~turn) | (is_ts & ~marker & (base > c["hi"][run]))
        after[run[turn]] = c["lo"][run[turn]] = base[turn]
        c["is_ts"][run[turn]] = False
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
            _read_more(reqs, chains, c["file"], more, pos, length, buf, state)
    return found_at, after


def _gather_answers(
    reqs: list[Request], chains: Chains, gather: Gather, owner: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """The answer batches at ``at`` of :attr:`Chains.data` (request ``owner`` of each)
    CRC-checked and added to ``gather``, one part per segment: each one's id there (-2:
    its CRC failed, the careful path takes it)."""
    batches, which = np.unique(at, return_inverse=True)
    scan, crc_ok = headers_at(chains.data, batches, verify_crc=True)
    w = Window(0, chains.data, scan)  # type: ignore[arg-type]  # ndarray: a buffer
    ids_of = np.full(len(batches), -2, dtype=np.int64)
    for j in np.unique(owner).tolist():  # one gather part per segment (names its file)
        mine = np.unique(which[owner == j])
        mine = mine[crc_ok[mine]]
        if len(mine):
            ids_of[mine] = gather.add(w, mine, reqs[j].seg.log_path)
    return ids_of[which]


def _first_reads(
    reqs: list[Request], chains: Chains
) -> tuple[dict[int, tuple[int, int]], dict[str, np.ndarray]]:
    """Each request's first reads added to ``chains`` (from the offset index floor of
    its targets' ``lo`` to the second entry after ``hi`` plus a header; a request whose index
    cannot be read gets its ``error``): ``(spans, columns)``, each request's slice of
    the per-target columns (``lo``, ``hi``, ``ts``, ``is_ts``, ``start``, ``floor``,
    ``buf``, ``req``, ``size``, ``file``)."""
    cols: dict[str, list[np.ndarray]] = {}
    spans = {}  # request -> its targets' slice of the columns
    total = 0
    for j, r in enumerate(reqs):
        n = len(r.lo)
        r.ids = np.full(n, -2, dtype=np.int64)
        r.after = np.full(n, -1, dtype=np.int64)
        try:
            floor, start, end = byte_ranges(r.seg, r.lo, r.hi, whole=True)
            gap = LOCAL_READ_GAP if lakefs.is_local(r.seg.fs) else READ_GAP
            group, first, last = read_groups(start, end, gap)
            buf = chains.add(r.seg, first, np.minimum(r.seg.size, last + HEADER_SIZE))[group]
        except (SeglakeError, OSError) as exc:
            r.error = exc
            continue
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
            ("file", np.full(n, j)),
        ):
            cols.setdefault(key, []).append(v)
    return spans, {k: np.concatenate(v) for k, v in cols.items()}


def _read_more(
    reqs: list[Request],
    chains: Chains,
    file: np.ndarray,
    more: np.ndarray,
    pos: np.ndarray,
    length: np.ndarray,
    buf: np.ndarray,
    state: np.ndarray,
) -> None:
    """The bytes targets ``more`` still need (``length`` from ``pos`` of their file):
    one read a distinct (file, position, length), fetched at once; ``buf`` of each
    target set to its read, a target whose read failed to the careful path (-2)."""
    added = []
    uniq, which = np.unique(np.stack([file[more], pos[more], length]), axis=1, return_inverse=True)
    which = which.ravel()  # the distinct read of each target, sorted by file
    read_id = np.empty(uniq.shape[1], dtype=np.int64)
    for fi, k in _split(uniq[0], np.arange(uniq.shape[1])):
        seg = reqs[fi].seg
        at_, len_ = uniq[1, k], uniq[2, k]
        read_id[k] = chains.add(seg, at_, np.minimum(seg.size, at_ + len_))
        added.append((id(seg), more[np.isin(which, k)]))
    buf[more] = read_id[which]
    failed = chains.fetch()
    for seg_id, mine in added:
        if seg_id in failed:
            state[mine] = -2


def _split(keys: np.ndarray, items: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``items`` grouped by ``keys`` (sorted), keys ascending."""
    uniq, first = np.unique(keys, return_index=True)
    return list(zip(uniq.tolist(), np.split(items, first[1:]), strict=True))
