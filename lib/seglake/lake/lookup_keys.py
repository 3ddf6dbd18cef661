"""Key queries of the lookup (no Spark; what the lookup job's executors and
``Lake.lookup`` run): :func:`answer_chunk` answers a chunk of mixed queries
(:data:`~seglake.lake.lookup_answer.KEY_QUERY_SCHEMA`): offset and time queries by
:func:`~seglake.lake.lookup_answer.answer_queries` (one row each), key queries here.

A key query (``query_key`` set, no offset nor timestamp) asks ``topic`` and its
``partition``, or every partition of the topic when ``partition`` is null. Its answer is
one row per record whose key bytes equal it, in partition then offset order (with
``latest_per_key``: only the last such record of each partition, the compacted view),
status ``ok``; or one row ``no_record_for_key`` (``unknown_partition`` when the topic or
partition has no segment). Every segment of the partition is asked through its
``.keyindex`` (:func:`~seglake.storage.key_lookup.find_keys`: the filter read on the
host that answers, then the exact level, then the key bytes compared); a segment without
a usable key index is scanned, and logged so. Null keys never match; transaction
markers never are answered. Aborted transactional records are answered under
``read_uncommitted`` (the default, as the offset and time lookups answer them); under
``read_committed`` they are not (the latest per key is then the latest committed one):
when a partition's matches hold transactional records, its ``.txnindex`` files are read
from the segment of the first one on (:func:`~seglake.lake.scan.aborted_in`, Kafka's
collectAbortedTxns, as every read_committed read) and
:func:`~seglake.storage.txn_index.aborted_records` drops them. A segment that cannot be
read gives the query one ``read_error`` row for its partition (logged), as for offsets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import CorruptRecordError, SeglakeError, VersionSupersededError
from seglake.lake.lookup_answer import (
    KEY_LOOKUP_SCHEMA,
    answer_queries,
    log,
    open_segment,
)
from seglake.lake.lookup_plan import groups
from seglake.lake.pinned import PinnedVersion
from seglake.lake.scan import aborted_in, check_isolation_level
from seglake.location import Root
from seglake.record.schema import KAFKA_SOURCE_SCHEMA, to_kafka_source
from seglake.storage.index_cache import IndexCache
from seglake.storage.key_lookup import find_keys_many
from seglake.storage.segment import LogSegment
from seglake.storage.txn_index import aborted_records

__all__ = ["NO_RECORD_FOR_KEY", "answer_chunk", "answer_keys"]

NO_RECORD_FOR_KEY = "no_record_for_key"


def answer_chunk(
    root: Root,
    parts: dict[Any, dict[str, Any]],
    cache: IndexCache,
    q: pa.Table,
    *,
    latest_per_key: bool = False,
    on_corrupt: str = "raise",
    skipped: list[str] | None = None,
    version: int | None = None,
    isolation_level: str = "read_uncommitted",
) -> pa.Table:
    """The answers of a chunk of queries, in query order: without a ``query_key`` column,
    :func:`answer_queries`'s :data:`LOOKUP_SCHEMA` rows (one per query); with one,
    :data:`KEY_LOOKUP_SCHEMA` rows: one per offset/time query, and a key query's rows
    (:func:`answer_keys`, read at ``isolation_level``)."""
    check_isolation_level(isolation_level)
    kw: dict[str, Any] = {"on_corrupt": on_corrupt, "version": version}
    if "query_key" not in q.column_names:
        return answer_queries(root, parts, cache, q, skipped=skipped, **kw)
    is_key = _set(q, "query_key") & ~_set(q, "query_offset") & ~_set(q, "query_timestamp")
    other, keyed = np.flatnonzero(~is_key), np.flatnonzero(is_key)
    oq = q.take(pa.array(other, pa.int64()))
    out = answer_queries(root, parts, cache, oq, skipped=skipped, **kw)
    out = out.add_column(out.schema.get_field_index("status"), "query_key", oq["query_key"])
    kq = q.take(pa.array(keyed, pa.int64()))
    ans, pos = answer_keys(
        root,
        parts,
        cache,
        kq,
        latest_per_key,
        isolation_level=isolation_level,
        skipped=skipped,
        **kw,
    )
    both = pa.concat_tables([out.cast(KEY_LOOKUP_SCHEMA), ans])
    order = np.argsort(np.concatenate([other, keyed[pos]]), kind="stable")
    return both.take(pa.array(order, pa.int64()))


def _set(q: pa.Table, name: str) -> np.ndarray:
    return np.asarray(q.column(name).is_valid().to_numpy(zero_copy_only=False), bool)


def answer_keys(
    root: Root,
    parts: dict[Any, dict[str, Any]],
    cache: IndexCache,
    q: pa.Table,
    latest_per_key: bool = False,
    *,
    on_corrupt: str = "raise",
    version: int | None = None,
    isolation_level: str = "read_uncommitted",
    skipped: list[str] | None = None,
) -> tuple[pa.Table, np.ndarray]:
    """The :data:`KEY_LOOKUP_SCHEMA` rows of key queries ``q`` (each has ``query_key``),
    and for each row the position of its query in ``q``; a query's rows in partition
    then offset order (``read_committed``: aborted transactions' records left out). With
    ``on_corrupt="skip"`` a damaged batch's records are left out, ``skipped`` one line
    per batch, as for offset queries."""
    pin = None if version is None else PinnedVersion(root, version)
    of_topic: dict[Any, list[int]] = {}
    for topic, p in parts:
        of_topic.setdefault(topic, []).append(p)
    keys = q.column("query_key").combine_chunks()
    rows: list[tuple[np.ndarray, int, pa.Table]] = []  # (query, partition, records)
    lone: list[tuple[int, str, int | None]] = []  # one row: (query, status, partition)
    of_part: dict[tuple[Any, int], list[np.ndarray]] = {}  # the queries of each partition
    for (topic, part), idx in groups(q.column("topic"), q.column("partition")):
        asked = sorted(of_topic.get(topic, [])) if part is None else [part]
        asked = [p for p in asked if (topic, p) in parts]
        if not asked:
            lone += [(int(i), "unknown_partition", part) for i in idx]
        for p in asked:
            of_part.setdefault((topic, p), []).append(idx)
    found = np.zeros(q.num_rows, bool)  # a row (records or read_error) given
    for (topic, p), idxs in sorted(of_part.items()):  # each partition's segments read once
        idx = np.concatenate(idxs)
        a = parts[(topic, p)]
        got = _partition_keys(
            cache,
            root,
            a,
            keys.take(idx),
            latest_per_key,
            on_corrupt,
            pin,
            committed=isolation_level == "read_committed",
            skipped=skipped,
        )
        if got is None:
            lone += [(int(i), "read_error", p) for i in idx]
            found[idx] = True
            continue
        at, recs = got
        found[idx[at]] = True
        rows.append((idx[at], p, to_kafka_source(recs, str(topic), p)))
    asked_somewhere = np.zeros(q.num_rows, bool)
    for idxs in of_part.values():
        for idx in idxs:
            asked_somewhere[idx] = True
    part_of = q.column("partition").to_pylist()
    lone += [
        (int(i), NO_RECORD_FOR_KEY, part_of[i]) for i in np.flatnonzero(asked_somewhere & ~found)
    ]
    return _assemble(q, rows, lone)


def _partition_keys(
    cache: IndexCache,
    root: Root,
    a: dict[str, Any],
    keys: pa.Array,
    latest: bool,
    on_corrupt: str,
    pin: PinnedVersion | None,
    *,
    committed: bool = False,
    skipped: list[str] | None = None,
) -> tuple[np.ndarray, pa.Table] | None:
    """The records of one partition (arrays ``a``) matching ``keys`` (one per query,
    duplicates allowed): (the query of each record, the records), by query then offset
    (only each query's last with ``latest``; with ``committed``, of the records not in
    aborted transactions); ``None`` when a segment cannot be read."""
    uniq = pc.unique(keys)
    which = pc.index_in(keys, value_set=uniq).to_numpy(zero_copy_only=False)
    tables, hit, scanned = [], [], []
    segs: list[LogSegment] = []
    s = 0
    try:
        for s in range(len(a["base_offset"])):  # ascending offsets
            segs.append(open_segment(cache, root, a, s, on_corrupt, pin, key_index=True))
        matches = find_keys_many(segs, uniq)  # the partition's point reads at once
    except CorruptRecordError:
        raise
    except (SeglakeError, OSError) as exc:  # never fail the job on one segment
        if isinstance(exc, VersionSupersededError):
            raise
        where = a["path"][s] if len(segs) <= s else str(a["path"][0]).rsplit("/", 1)[0]
        log.warning("lookup key segment %s: %s", where, exc)  # (the error names the file)
        return None
    for seg, m in zip(segs, matches, strict=True):
        if m.scanned:
            scanned.append(m.status)
        if skipped is not None:  # damaged batches skipped (on_corrupt="skip")
            skipped += [b.describe(seg.log_path) for _, b in sorted(seg.skipped.items())]
        tables.append(m.records.drop_columns(["query"]))
        hit.append(m.records.column("query").to_numpy(zero_copy_only=False))
    if scanned:
        log.warning(
            "lookup: %d segment(s) scanned without a key index, e.g. %s", len(scanned), scanned[0]
        )
    recs = pa.concat_tables(tables, promote_options="default")
    u = np.concatenate(hit).astype(np.int64)  # the unique key of each record
    if committed:
        keep = ~_aborted(segs, recs)
        recs, u = recs.filter(pa.array(keep)), u[keep]
    by_u = np.argsort(u, kind="stable")  # offset order kept within a key
    lo = np.searchsorted(u[by_u], which, "left")
    hi = np.searchsorted(u[by_u], which, "right")
    if latest:
        lo = np.maximum(lo, hi - 1)
    n = hi - lo
    query = np.repeat(np.arange(len(which)), n)
    # lo[q] .. hi[q] of each query, back to back
    pick = by_u[np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))]
    return query, recs.take(pa.array(pick, pa.int64()))


def _aborted(segs: list[LogSegment], recs: pa.Table) -> np.ndarray:
    """Which of ``recs`` (a partition's records, from ``segs``, ascending base offsets)
    belong to aborted transactions; the ``.txnindex`` files are read only when a
    transactional record is among them, from the segment of the first one on."""
    tx = np.asarray(recs.column("transactional").to_numpy(zero_copy_only=False), bool)
    if not tx.any():
        return np.zeros(recs.num_rows, bool)
    off = recs.column("offset").to_numpy()
    lo, hi = int(off[tx].min()), int(off[tx].max()) + 1
    first = int(np.searchsorted([s.base_offset for s in segs], lo, "right")) - 1
    txns = aborted_in(segs[max(first, 0) :], lo, hi)
    pid = recs.column("producer_id").to_numpy()
    return np.asarray(aborted_records(txns, off, pid, tx), bool)


def _assemble(
    q: pa.Table,
    rows: list[tuple[np.ndarray, int, pa.Table]],
    lone: list[tuple[int, str, int | None]],
) -> tuple[pa.Table, np.ndarray]:
    """The rows of records found and of statuses alone, ordered by query, partition."""
    src = KAFKA_SOURCE_SCHEMA
    parts, pos, part_of = [], [], []
    for qi, p, t in rows:
        if "headers" not in t.column_names:
            t = t.append_column(
                src.field("headers"), pa.nulls(t.num_rows, src.field("headers").type)
            )
        parts.append(t.select(src.names).cast(src))
        pos.append(qi)
        part_of.append(np.full(len(qi), p))
    n_found = sum(len(x) for x in pos)
    if lone:
        li = np.array([i for i, _, _ in lone], np.int64)
        pos.append(li)
        part_of.append(np.array([-1 if p is None else p for _, _, p in lone], np.int64))
        blank = src.empty_table().to_pydict()
        blank = {k: [None] * len(lone) for k in blank}
        blank["topic"] = q.column("topic").take(pa.array(li)).to_pylist()
        blank["partition"] = [p for _, _, p in lone]
        parts.append(pa.table(blank, schema=src))
    where = np.concatenate(pos) if pos else np.zeros(0, np.int64)
    recs = pa.concat_tables(parts) if parts else src.empty_table()
    status = ["ok"] * n_found + [s for _, s, _ in lone]
    w = pa.array(where, pa.int64())
    out = pa.Table.from_arrays(
        [
            *recs.columns,
            q.column("query_offset").take(w),
            q.column("query_timestamp").take(w),
            q.column("query_key").take(w),
            pa.array(status, pa.string()),
        ],
        schema=KEY_LOOKUP_SCHEMA,
    )
    order = np.lexsort((np.concatenate(part_of) if part_of else where, where))
    return out.take(pa.array(order, pa.int64())), where[order]
