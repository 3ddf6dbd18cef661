"""Answering point lookups (no Spark; what the lookup job's executors run):
:func:`answer_queries` answers a chunk of queries (:data:`QUERY_SCHEMA`) against a
snapshot's per-partition arrays (:func:`~seglake.lake.lookup_plan.partition_arrays`,
broadcast by :func:`seglake.spark.lookup.lookup`), one :data:`LOOKUP_SCHEMA` row per
query; the segment reads are :mod:`seglake.storage.point_reads`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import CorruptRecordError, SeglakeError, VersionSupersededError
from seglake.format import NO_TIMESTAMP
from seglake.lake.lookup_plan import EARLIEST, LATEST, MAX_TS, groups, segment_for
from seglake.lake.pinned import PinnedVersion
from seglake.location import Root
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, RECORD_SCHEMA, empty_records
from seglake.storage.index_cache import IndexCache
from seglake.storage.log_segments import NONE
from seglake.storage.point_reads import (
    Gather,
    Request,
    offset_request,
    plan_requests,
    scan_times,
    time_request,
)
from seglake.storage.segment import LogSegment
from seglake.storage.segment_ref import SegmentRef

__all__ = [
    "KEY_LOOKUP_SCHEMA",
    "KEY_QUERY_SCHEMA",
    "LOOKUP_SCHEMA",
    "QUERY_SCHEMA",
    "answer_queries",
    "open_segment",
]

log = logging.getLogger("seglake.spark.lookup")  # the lookup job's log, as before


ANY_TIME = NO_TIMESTAMP  # every record's timestamp is >= -1: "the next record"

LOOKUP_SCHEMA = pa.schema(
    [
        *KAFKA_SOURCE_SCHEMA,
        pa.field("query_offset", pa.int64()),
        pa.field("query_timestamp", pa.int64()),
        pa.field("status", pa.string()),
    ]
)
QUERY_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("query_offset", pa.int64()),
        pa.field("query_timestamp", pa.int64()),
    ]
)
# with key queries (:mod:`seglake.lake.lookup_keys`): the key asked, echoed in the answers
KEY_QUERY_SCHEMA = QUERY_SCHEMA.append(pa.field("query_key", pa.binary()))
KEY_LOOKUP_SCHEMA = LOOKUP_SCHEMA.insert(
    LOOKUP_SCHEMA.get_field_index("status"), pa.field("query_key", pa.binary())
)


def _split_by(keys: np.ndarray, items: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``items`` grouped by ``keys`` (same length), keys ascending."""
    if not len(keys):
        return []
    order = np.argsort(keys, kind="stable")
    uniq, first = np.unique(keys[order], return_index=True)
    return list(zip(uniq.tolist(), np.split(items[order], first[1:]), strict=True))


class _Answers:
    """Per query: status, the record found (a row of the gathered or scanned records)."""

    def __init__(self, n: int, on_corrupt: str = "raise", pin: PinnedVersion | None = None) -> None:
        self.on_corrupt = on_corrupt
        self.pin = pin  # the catalog version read, set on every segment opened
        self.status = np.full(n, "ok", dtype=object)
        self.resolved = np.full(n, -1, dtype=np.int64)  # offsets of log_end_offset answers
        self.batch = np.full(n, -1, dtype=np.int64)  # batch (in gather) with the answer
        self.row = np.full(n, -1, dtype=np.int64)
        self.tables: list[pa.Table] = []
        self.rows = 0

    def add(self, qi: np.ndarray, table: pa.Table, rows: np.ndarray) -> None:
        """Queries ``qi`` answered by rows ``rows`` of ``table``."""
        self.row[qi] = self.rows + rows
        self.tables.append(table)
        self.rows += table.num_rows

    def request(
        self,
        cache: IndexCache,
        root: Root,
        where: tuple[Any, ...],
        make: Callable[..., Request],
    ) -> Request | None:
        """``make(segment)``, or None when the segment cannot be opened: ``read_error``."""
        _, a, s, _ = where
        try:
            return make(open_segment(cache, root, a, s, self.on_corrupt, self.pin))
        except (SeglakeError, OSError) as exc:  # never fail the job on one segment
            self.fail(where, exc)
            return None

    def superseded(self, exc: Exception) -> None:
        """A file of the version read is gone because a later version removed or
        replaced its segment (the segment's pin said so): the whole answer is stale, one
        VersionSupersededError."""
        if isinstance(exc, VersionSupersededError):
            raise exc

    def fail(self, where: tuple[Any, ...], exc: Exception) -> None:
        """``read_error`` for the queries of ``where``; a damaged batch raises (unless
        skipped: the reads did not raise then)."""
        if isinstance(exc, CorruptRecordError):
            raise exc
        self.superseded(exc)
        (topic, partition), a, s, qi = where
        log.warning("lookup %s-%s segment %s: %s", topic, partition, a["path"][s], exc)
        self.status[qi] = "read_error"


def answer_queries(
    root: Root,
    parts: dict[Any, dict[str, Any]],
    cache: IndexCache,
    q: pa.Table,
    *,
    on_corrupt: str = "raise",
    skipped: list[str] | None = None,
    version: int | None = None,
) -> pa.Table:
    """One :data:`LOOKUP_SCHEMA` row per query of ``q`` (:data:`QUERY_SCHEMA`), in order;
    ``parts`` is the broadcast of :func:`partition_arrays`. What the executors run.

    A damaged batch raises :class:`CorruptRecordError`; with ``on_corrupt="skip"`` it is
    skipped: offsets in it get ``corrupt_batch``, and ``skipped`` one line per batch. A
    segment that cannot be read answers ``read_error``, unless catalog ``version`` (the
    one ``parts`` holds) was superseded and the file deleted since: then one
    :class:`~seglake.errors.VersionSupersededError`."""
    qs = _Queries.of(q)
    pin = None if version is None else PinnedVersion(root, version)
    ans, gather, plan = _Answers(q.num_rows, on_corrupt, pin), Gather(), _Requests()
    ans.status[qs.invalid] = "invalid_query"
    for k, idx in groups(q.column("topic"), q.column("partition")):
        idx = idx[~qs.invalid[idx]]
        a = parts.get(k)
        if a is None:
            ans.status[idx] = "unknown_partition"
            continue
        plan.partition(cache, root, ans, qs, k, a, idx)
    plan_requests([r for r, _, _ in plan.reqs], gather)  # all segments' reads and chains at once
    _pick_answers(ans, gather, plan, qs, on_corrupt)
    if on_corrupt == "skip":
        reqs = plan.reqs
        _mark_skipped(ans, [(r, where) for r, which, where in reqs if which is not None], qs.target)
        for r, _, _ in reqs:
            if skipped is not None:
                skipped += [b.describe(r.seg.log_path) for b in r.seg.skipped.values()]
    scans: list[tuple[np.ndarray, tuple[Any, ...], np.ndarray, np.ndarray]] = []
    for qi, where in plan.by_ts:  # timestamps the index could not place: scan
        qi = qi[(ans.row[qi] < 0) & (ans.status[qi] != "read_error")]
        scans.append((qi, where, qs.target[qi], np.full(len(qi), where[3])))
    for qi, where in plan.by_off:  # nothing kept from there to its segment's end: on
        qi = qi[ans.status[qi] == "no_record_at_offset"]
        scans.append((qi, where, np.full(len(qi), ANY_TIME), qs.target[qi]))
    _scan_on(cache, root, ans, scans)
    return _assemble(q, ans)


@dataclasses.dataclass
class _Queries:
    """A chunk's queries as arrays: offsets, timestamps, which are set, each one's target
    (its offset or timestamp; -2 becomes the log start offset) and which are invalid."""

    off: np.ndarray
    has_off: np.ndarray
    ts: np.ndarray
    has_ts: np.ndarray
    target: np.ndarray
    invalid: np.ndarray

    @classmethod
    def of(cls, q: pa.Table) -> _Queries:
        q_off, q_ts = q.column("query_offset"), q.column("query_timestamp")
        off = q_off.fill_null(-1).to_numpy().astype(np.int64)
        has_off = q_off.is_valid().to_numpy(zero_copy_only=False)
        ts = q_ts.fill_null(-9).to_numpy().astype(np.int64)
        has_ts = q_ts.is_valid().to_numpy(zero_copy_only=False)
        invalid = (has_off == has_ts) | (has_off & (off < 0)) | (has_ts & (ts < MAX_TS))
        if "query_key" in q.column_names:  # a key beside an offset or time: which one?
            invalid |= q.column("query_key").is_valid().to_numpy(zero_copy_only=False)
        return cls(off, has_off, ts, has_ts, np.where(has_off, off, ts), invalid)


@dataclasses.dataclass
class _Requests:
    """The segment reads of a chunk: ``reqs`` (request, which of its unique offsets each
    query picks (``None``: timestamps), where), and the queries of each segment by
    offset / by timestamp with their ``where`` (key, arrays, segment, log start)."""

    reqs: list[tuple[Request, np.ndarray | None, tuple[Any, ...]]] = dataclasses.field(
        default_factory=list
    )
    by_off: list[tuple[np.ndarray, tuple[Any, ...]]] = dataclasses.field(default_factory=list)
    by_ts: list[tuple[np.ndarray, tuple[Any, ...]]] = dataclasses.field(default_factory=list)

    def partition(
        self,
        cache: IndexCache,
        root: Root,
        ans: _Answers,
        qs: _Queries,
        k: tuple[Any, ...],
        a: dict[str, Any],
        idx: np.ndarray,
    ) -> None:
        """The requests of one partition's valid queries ``idx`` (arrays ``a``): offsets
        (and -2) by the segment floor, timestamps (and -3) by the first segment whose
        running max reaches them; -1 answered here (the log end offset)."""
        ts, target, has_ts = qs.ts, qs.target, qs.has_ts
        log_start, leo = int(a["base_offset"][0]), int(a["next_offset"][-1])
        ts_q = idx[has_ts[idx]]
        latest = ts_q[ts[ts_q] == LATEST]
        ans.status[latest], ans.resolved[latest] = "log_end_offset", leo
        early = ts_q[ts[ts_q] == EARLIEST]  # -2: the record at the log start offset
        target[early] = log_start
        o_q = np.concatenate([idx[qs.has_off[idx]], early])
        out = (target[o_q] < log_start) | (target[o_q] >= leo)
        ans.status[o_q[out]] = np.where(
            qs.has_off[o_q[out]], "offset_out_of_range", "no_record_at_offset"
        )
        o_q = o_q[~out]
        for s, qi in _split_by(segment_for(a, target[o_q]), o_q):
            uniq, which = np.unique(target[qi], return_inverse=True)
            req = ans.request(
                cache, root, (k, a, s, qi), lambda seg, u=uniq: offset_request(seg, u)
            )
            if req is not None:
                self.reqs.append((req, which, (k, a, s, qi)))
                self.by_off.append((qi, (k, a, s, None)))
        # timestamps (-3: the largest one): the first segment whose running max reaches it
        t_q = ts_q[(ts[ts_q] >= 0) | (ts[ts_q] == MAX_TS)]
        s_of = segment_for(a, np.full(len(t_q), -1, np.int64), ts[t_q])
        is_max = ts[t_q] == MAX_TS
        target[t_q[is_max]] = a["max_timestamp"][s_of[is_max]]
        none = (s_of == NONE) | (target[t_q] < 0)
        ans.status[t_q[none]] = "no_record_for_timestamp"
        for s, qi in _split_by(s_of[~none], t_q[~none]):
            req = ans.request(
                cache,
                root,
                (k, a, s, qi),
                lambda seg, t=target[qi], lo=log_start: time_request(seg, t, lo),
            )
            if req is not None:
                self.reqs.append((req, None, (k, a, s, qi)))
                self.by_ts.append((qi, (k, a, s, log_start)))


def _pick_answers(
    ans: _Answers, gather: Gather, plan: _Requests, qs: _Queries, on_corrupt: str
) -> None:
    """The answer records of the read batches, picked and decoded (one call each), and
    the offset queries' statuses: what each query picks in its batch is an offset, a
    timestamp (from the log start), or after a transaction marker that answered a
    timestamp, the next record (a fetch from it)."""
    n = len(qs.target)
    picks, lo, is_ts = qs.target.copy(), np.zeros(n, np.int64), np.zeros(n, bool)
    for qi, (_, _, _, log_start) in plan.by_ts:
        lo[qi] = log_start
    for r, pick, where in plan.reqs:
        if r.error is not None:
            ans.fail(where, r.error)
        else:
            assert r.ids is not None  # set by plan_requests
            ans.batch[where[3]] = r.ids if pick is None else r.ids[pick]
            if pick is None:  # timestamps
                picks[where[3]], is_ts[where[3]] = r.picks()
    record, bad = gather.pick(ans.batch, picks, lo, is_ts)  # -1 where no batch
    placed = np.flatnonzero(ans.batch >= 0)
    failed = placed[bad[ans.batch[placed]]]  # records that do not walk (corrupt)
    if len(failed) and on_corrupt == "raise":
        gather.raise_error(int(ans.batch[failed[0]]))
    ans.status[failed], ans.batch[failed], record[failed] = "read_error", -1, -1
    table, ans.row = gather.decode(record)
    ans.tables, ans.rows = [table], table.num_rows
    ans.status[(record >= 0) & (ans.row < 0)] = "read_error"  # did not decode (logged)
    if plan.by_off:
        qi = np.concatenate([qi for qi, _ in plan.by_off])
        qi = qi[ans.status[qi] != "read_error"]
        ans.status[qi] = np.where(ans.row[qi] >= 0, "ok", "no_record_at_offset")


def _scan_on(
    cache: IndexCache,
    root: Root,
    ans: _Answers,
    scans: list[tuple[np.ndarray, tuple[Any, ...], np.ndarray, np.ndarray]],
) -> None:
    """The answers of queries ``qi`` of each ``(qi, where, t, lo)`` (``where`` = (key,
    arrays, s, _)): the record a fetch from offsetsForTimes(``t``) (offset >= ``lo``)
    returns, by scanning from segment ``s`` on (an offset query is ``t`` =
    :data:`ANY_TIME`). Each segment is read once for all the queries that reach it
    (:func:`~seglake.storage.point_reads.scan_times`); the unanswered go on to the next."""
    by_part: dict[Any, tuple[dict[str, Any], list[tuple[np.ndarray, ...]]]] = {}
    for qi, (k, a, s, _), t, lo in scans:
        if len(qi):
            by_part.setdefault(k, (a, []))[1].append((np.full(len(qi), s), qi, t, lo))
    for k, (a, got) in by_part.items():
        first, qi, t, lo = (np.concatenate(c) for c in zip(*got, strict=True))
        asked_ts, left = t != ANY_TIME, np.ones(len(qi), bool)
        for j in range(int(first.min()), len(a["base_offset"])):
            on = np.flatnonzero(left & (first <= j))
            if not len(on):
                continue  # the rest start further on
            try:
                seg = open_segment(cache, root, a, j, ans.on_corrupt, ans.pin)
                row, found, t[on] = scan_times(seg, t[on], lo[on])
            except (SeglakeError, OSError) as exc:  # a damaged batch raises
                ans.fail((k, a, j, qi[on]), exc)
                left[on] = False
                continue
            hit = row >= 0
            ans.add(qi[on[hit]], found, row[hit])
            ans.status[qi[on[hit]]], left[on[hit]] = "ok", False
        rest = np.flatnonzero(left)
        ans.status[qi[rest]] = np.where(
            asked_ts[rest], "no_record_for_timestamp", "no_record_at_offset"
        )


def _mark_skipped(
    ans: _Answers, reqs: list[tuple[Request, tuple[Any, ...]]], target: np.ndarray
) -> None:
    """``corrupt_batch`` (and no record) for offset queries whose offset lies in a batch
    their segment skipped."""
    for r, (_, _, _, qi) in reqs:
        for b in r.seg.skipped.values():
            hit = qi[(target[qi] >= b.base_offset) & (target[qi] <= b.last_offset)]
            ans.status[hit], ans.row[hit] = "corrupt_batch", -1


def open_segment(
    cache: IndexCache,
    root: Root,
    a: dict[str, np.ndarray],
    s: int,
    on_corrupt: str = "raise",
    pin: PinnedVersion | None = None,
    *,
    key_index: bool = False,
) -> LogSegment:
    """Segment ``s`` of a partition's arrays ``a`` through ``cache`` (with its
    ``.keyindex`` kept on it: ``key_index``)."""
    ref = SegmentRef(
        path=str(a["path"][s]),
        size_bytes=int(a["size"][s]),
        next_offset=int(a["next_offset"][s]),
        max_timestamp=int(a["max_timestamp"][s]),
        run_id=a["run_id"][s] or None,
        index_interval_bytes=int(a["index_interval_bytes"][s]) or None,
    )
    return cache.segment(root, ref, on_corrupt=on_corrupt, pin=pin, key_index=key_index)


def _assemble(q: pa.Table, ans: _Answers) -> pa.Table:
    recs = pa.concat_tables(ans.tables) if ans.tables else empty_records()
    t = recs.select(RECORD_SCHEMA.names).take(pa.array(ans.row, mask=ans.row < 0))
    ts_us = pc.multiply(t.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
    offset = np.where(ans.row >= 0, t.column("offset").fill_null(-1).to_numpy(), ans.resolved)
    headers = t.column("headers").cast(KAFKA_SOURCE_SCHEMA.field("headers").type)
    return pa.Table.from_arrays(
        [
            t.column("key"),
            t.column("value"),
            q.column("topic"),
            q.column("partition"),
            pa.array(offset, mask=offset < 0),
            ts_us,
            t.column("timestamp_type"),
            headers,
            q.column("query_offset"),
            q.column("query_timestamp"),
            pa.array(ans.status.tolist(), pa.string()),
        ],
        schema=LOOKUP_SCHEMA,
    )
