"""Kafka's log cleaner rules as pure functions over batch columns and record columns.

The prose version, with the Kafka classes each rule comes from, is
``docs/compaction.md``. In short, for one partition and one cleaning round at time
``now``:

* :func:`walk_partition` (``CleanedTransactionMetadata``, ``ProducerStateManager``): over
  every batch from the log start, which data batches belong to aborted transactions,
  which batches ``shouldDiscardBatch`` would let go, which ABORT markers keep an entry in
  the cleaned ``.txnindex``, the last stable offset, and the last batch of every active
  producer.
* :func:`build_offset_map` (``Cleaner.buildOffsetMap``): key -> latest offset over the
  dirty section (control batches and aborted batches left out).
* :func:`plan_batches` (``cleanInto``'s ``RecordFilter`` + ``MemoryRecords.filterTo``):
  per batch DELETE / RETAIN_EMPTY / DELETE_EMPTY and per record keep or drop, whether a
  kept batch is copied byte for byte or rewritten, and the delete horizon it gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.record.batch import (
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    TRANSACTIONAL_BIT,
)
from seglake.storage.txn_index import AbortedTxn

__all__ = [
    "BatchPlan",
    "PartitionWalk",
    "build_offset_map",
    "plan_batches",
    "walk_partition",
]

ABORT, COMMIT, OTHER, EMPTY = 0, 1, 2, 3  # control batch kinds
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


@dataclasses.dataclass
class PartitionWalk:
    """What the cleaner needs to know of a partition before a round (all batches, in
    offset order; arrays indexed like the inputs of :func:`walk_partition`)."""

    aborted: np.ndarray  # bool: a transactional data batch of an aborted transaction
    can_discard: np.ndarray  # bool: Kafka's shouldDiscardBatch
    txn_entries: dict[int, AbortedTxn]  # ABORT marker's base offset -> cleaned txnindex entry
    last_stable_offset: int
    last_records: dict[int, tuple[int | None, int]]  # pid -> (last data offset, epoch)

    def for_batches(self, base_offsets: np.ndarray, all_bases: np.ndarray) -> np.ndarray:
        """Indexes into the walk's batches of batches with these base offsets."""
        return np.searchsorted(all_bases, base_offsets)


def walk_partition(
    base_offset: np.ndarray,
    last_offset: np.ndarray,
    attributes: np.ndarray,
    producer_id: np.ndarray,
    producer_epoch: np.ndarray,
    max_timestamp: np.ndarray,
    control_kind: np.ndarray,
    aborted_txns: Sequence[AbortedTxn],
    *,
    log_end_offset: int,
    now_ms: int,
    producer_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
) -> PartitionWalk:
    """One pass over every batch of the partition (see the module docstring).

    ``control_kind``: per batch ABORT / COMMIT / OTHER / EMPTY for control batches (any
    value for data batches); ``aborted_txns``: the partition's aborted transactions
    (from the ABORT markers), any order.
    """
    is_control = (attributes & CONTROL_BIT) != 0
    is_txn = (attributes & TRANSACTIONAL_BIT) != 0
    aborted, discard, entries = _transactions(
        base_offset, last_offset, producer_id, is_control, is_txn, control_kind, aborted_txns
    )
    producers = _producers(
        base_offset,
        last_offset,
        producer_id,
        producer_epoch,
        max_timestamp,
        is_control,
        is_txn,
        control_kind,
    )
    opens = [st[3] for st in producers.values() if st[3] is not None]
    active = {
        pid: (st[1], st[0])
        for pid, st in producers.items()
        if st[3] is not None or now_ms - st[2] < producer_expiration_ms
    }
    return PartitionWalk(aborted, discard, entries, min(opens, default=log_end_offset), active)


def _transactions(
    base_offset: np.ndarray,
    last_offset: np.ndarray,
    producer_id: np.ndarray,
    is_control: np.ndarray,
    is_txn: np.ndarray,
    control_kind: np.ndarray,
    aborted_txns: Sequence[AbortedTxn],
) -> tuple[np.ndarray, np.ndarray, dict[int, AbortedTxn]]:
    """Kafka's ``CleanedTransactionMetadata`` over the batches in order
    (``onControlBatchRead``, ``onBatchRead``): ``(aborted, discard, entries)``, the data
    batches of aborted transactions, the batches the cleaner may discard (those and
    markers of transactions with no data left), and the ``.txnindex`` entry of each
    ABORT marker that stays, by its base offset."""
    n = len(base_offset)
    aborted = np.zeros(n, dtype=bool)
    discard = np.zeros(n, dtype=bool)
    entries: dict[int, AbortedTxn] = {}
    queue = sorted(aborted_txns, key=lambda t: (t.first_offset, t.last_offset))
    q = 0
    ongoing_aborted: dict[int, list[Any]] = {}  # pid -> [txn, traversed a data batch]
    ongoing_committed: set[int] = set()
    for i in range(n):
        pid, last = int(producer_id[i]), int(last_offset[i])
        while q < len(queue) and queue[q].first_offset <= last:
            ongoing_aborted.setdefault(queue[q].producer_id, [queue[q], False])
            q += 1
        if is_control[i]:
            kind = int(control_kind[i])
            if kind == ABORT:
                meta = ongoing_aborted.pop(pid, None)
                if meta is not None and meta[1]:
                    entries[int(base_offset[i])] = meta[0]
                else:
                    discard[i] = True
            elif kind == COMMIT:
                discard[i] = pid not in ongoing_committed
                ongoing_committed.discard(pid)
            elif kind == EMPTY:
                discard[i] = True
        elif is_txn[i]:
            meta = ongoing_aborted.get(pid)
            if meta is not None:
                meta[1] = True
                aborted[i] = discard[i] = True
            else:
                ongoing_committed.add(pid)
    return aborted, discard, entries


def _producers(
    base_offset: np.ndarray,
    last_offset: np.ndarray,
    producer_id: np.ndarray,
    producer_epoch: np.ndarray,
    max_timestamp: np.ndarray,
    is_control: np.ndarray,
    is_txn: np.ndarray,
    control_kind: np.ndarray,
) -> dict[int, list[Any]]:
    """Kafka's producer state after the batches in order (``ProducerStateManager``):
    per producer id ``[epoch, last data offset, last timestamp, first offset of its
    open transaction]`` (a newer epoch starts afresh)."""
    producers: dict[int, list[Any]] = {}
    for i in range(len(base_offset)):
        pid = int(producer_id[i])
        if pid < 0:
            continue
        epoch = int(producer_epoch[i])
        st = producers.get(pid)
        if st is None or epoch > st[0]:
            st = producers[pid] = [epoch, None, 0, None]
        if not is_control[i]:
            st[1] = int(last_offset[i])
            if is_txn[i] and st[3] is None:
                st[3] = int(base_offset[i])
        elif int(control_kind[i]) in (ABORT, COMMIT):
            st[3] = None
        st[2] = int(max_timestamp[i])
    return producers


def build_offset_map(
    keys: pa.Array | pa.ChunkedArray, offsets: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """Kafka's OffsetMap as two columns: each distinct non-null key and its latest
    offset. Records without a key are not mapped (Kafka's ``record.hasKey()``)."""
    t = pa.table({"key": keys, "offset": pa.array(np.asarray(offsets, dtype=np.int64))})
    t = t.filter(pc.is_valid(t["key"]))
    g = t.group_by("key").aggregate([("offset", "max")])
    return g["key"].combine_chunks(), g["offset_max"].to_numpy()


@dataclasses.dataclass
class BatchPlan:
    """Per batch of a group: ``action`` 0 drop, 1 copy bytes, 2 rewrite, 3 empty header;
    ``horizon`` to write when rewriting (-1 none); ``keep`` per record; stats."""

    action: np.ndarray
    horizon: np.ndarray
    keep: np.ndarray
    tombstones_removed: int


DROP, COPY, REWRITE, EMPTY_HEADER = 0, 1, 2, 3


def plan_batches(
    *,
    base_offset: np.ndarray,
    last_offset: np.ndarray,
    attributes: np.ndarray,
    base_timestamp: np.ndarray,
    producer_id: np.ndarray,
    producer_epoch: np.ndarray,
    records_count: np.ndarray,
    can_discard: np.ndarray,
    record_offset: np.ndarray,
    record_key: pa.Array | pa.ChunkedArray,
    record_has_value: np.ndarray,
    map_keys: pa.Array,
    map_offsets: np.ndarray,
    latest_offset: int,
    last_records: dict[int, tuple[int | None, int]],
    upper_bound: int,
    now_ms: int,
    delete_retention_ms: int,
) -> BatchPlan:
    """``cleanInto``'s filter over the batches of a group (records of every batch, control
    ones included, in file order: ``records_count[i]`` each)."""
    nb = len(base_offset)
    is_control = (attributes & CONTROL_BIT) != 0
    has_horizon = (attributes & DELETE_HORIZON_BIT) != 0
    horizon = np.where(has_horizon, base_timestamp, -1)
    discard_records = np.where(
        is_control, can_discard & has_horizon & (horizon <= now_ms), can_discard
    )
    last_of_producer = _last_of_producer(
        producer_id, producer_epoch, last_offset, is_control, last_records
    )
    retain_empty = last_of_producer | (last_offset + 1 == upper_bound)
    delete = ~retain_empty & discard_records

    rb = np.repeat(np.arange(nb), records_count)
    key_valid = pc.is_valid(record_key).to_numpy(zero_copy_only=False)
    data_keep = _retained_records(
        record_offset,
        record_key,
        record_has_value,
        key_valid,
        horizon[rb],
        map_keys,
        map_offsets,
        latest_offset=latest_offset,
        now_ms=now_ms,
    )
    keep = np.where(discard_records[rb], False, np.where(is_control[rb], True, data_keep))
    keep &= ~delete[rb]
    kept = np.bincount(rb, weights=keep, minlength=nb).astype(np.int64)
    tombstone = keep & ~record_has_value & ~is_control[rb]
    with_tombstones = np.bincount(rb, weights=tombstone, minlength=nb) > 0
    marker_for_empty = can_discard & is_control
    need_horizon = (with_tombstones | marker_for_empty) & ~has_horizon
    action = np.full(nb, DROP, dtype=np.int64)
    some = kept > 0
    action[some] = np.where(
        (kept[some] == records_count[some]) & ~need_horizon[some], COPY, REWRITE
    )
    action[~some & retain_empty] = EMPTY_HEADER
    new_horizon = np.where(need_horizon, now_ms + delete_retention_ms, horizon)
    removed_tombstones = ~keep & ~record_has_value & ~is_control[rb] & key_valid
    return BatchPlan(action, new_horizon, keep, int(removed_tombstones.sum()))


def _last_of_producer(
    producer_id: np.ndarray,
    producer_epoch: np.ndarray,
    last_offset: np.ndarray,
    is_control: np.ndarray,
    last_records: dict[int, tuple[int | None, int]],
) -> np.ndarray:
    """Kafka's ``isBatchLastRecordOfProducer`` per batch: it holds its producer's last data
    offset, or (a producer whose last record is a marker) it is a marker of that epoch.
    Such a batch is kept even when emptied, so the producer's state survives cleaning."""
    last_of_producer = np.zeros(len(producer_id), dtype=bool)
    for i in np.flatnonzero(producer_id >= 0).tolist():
        rec = last_records.get(int(producer_id[i]))
        if rec is None:
            continue
        data_offset, epoch = rec
        if data_offset is not None:
            last_of_producer[i] = int(last_offset[i]) == data_offset
        else:
            last_of_producer[i] = bool(is_control[i]) and int(producer_epoch[i]) == epoch
    return last_of_producer


def _retained_records(
    record_offset: np.ndarray,
    record_key: pa.Array | pa.ChunkedArray,
    record_has_value: np.ndarray,
    key_valid: np.ndarray,
    horizon: np.ndarray,
    map_keys: pa.Array,
    map_offsets: np.ndarray,
    *,
    latest_offset: int,
    now_ms: int,
) -> np.ndarray:
    """Kafka's ``shouldRetainRecord`` for data records (``horizon``: each record's
    batch's delete horizon, -1 none): past the offset map's reach, or the latest record
    of its key and not a tombstone past its horizon."""
    pos = pc.fill_null(pc.index_in(record_key, value_set=map_keys), -1).to_numpy()
    pos = pos.astype(np.int64)
    found = np.where(pos >= 0, map_offsets[np.maximum(pos, 0)] if len(map_offsets) else -1, -1)
    retain_deletes = (horizon < 0) | (now_ms < horizon)
    return (record_offset > latest_offset) | (
        key_valid & (record_offset >= found) & (record_has_value | retain_deletes)
    )
