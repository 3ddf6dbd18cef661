"""A transactional partition log built batch by batch, with its ground truth.

Producers 1..3 run transactions that interleave with each other and with
non-transactional batches; each transaction ends with a COMMIT or ABORT control batch.
Only ``.log`` files are written (rolled by size, Kafka's 20-digit names): indexes and the
``.txnindex`` are for seglake to rebuild. The truth says, per data record, which producer
wrote it and whether its transaction aborted, so a reader's read_committed answer can be
checked without trusting any index.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from seglake.record.control import ControlType
from seglake.record.encode import encode_batches
from seglake.storage.naming import LOG_SUFFIX, segment_file_name
from tests.unit.test_decode import control_batch


def _data_batch(
    offset: int, ts: np.ndarray, rng: np.random.Generator, *, codec: int, pid: int, seq: int
) -> tuple[bytes, pa.Table]:
    n = len(ts)
    keys = [None if rng.random() < 0.2 else f"k{rng.integers(0, 50)}".encode() for _ in range(n)]
    values = [f"o{offset + i}-".encode() * int(rng.integers(1, 12)) for i in range(n)]
    recs = pa.table(
        {
            "offset": pa.array(np.arange(offset, offset + n), pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    enc = encode_batches(
        recs,
        batch_starts=np.array([0]),
        codec=codec,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1,
        transactional=pid >= 0,
    )
    return bytes(memoryview(enc.data)[: int(enc.size[0])]), recs


def write_transactional_log(
    directory: Path,
    *,
    seed: int,
    steps: int = 300,
    codec: int = 0,
    segment_bytes: int = 8000,
    start_ms: int = 1_700_000_000_000,
) -> tuple[pd.DataFrame, list[tuple[int, int, int]]]:
    """Write ``directory/<base>.log`` files; returns the data records' truth
    (offset, timestamp, key, value, producer_id, aborted) in offset order and the aborted
    transactions as (producer id, first offset, ABORT marker offset)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    batches: list[tuple[int, bytes]] = []
    truth: list[pd.DataFrame] = []
    open_txn: dict[int, list[int]] = {}  # pid -> indexes into truth of its records
    aborted: list[tuple[int, int, int]] = []
    seqs = {1: 0, 2: 0, 3: 0}
    offset = 0

    def end_txn(pid: int, kind: ControlType) -> None:
        nonlocal offset
        parts = open_txn.pop(pid)
        for i in parts:
            truth[i]["aborted"] = kind == ControlType.ABORT
        if kind == ControlType.ABORT:
            aborted.append((pid, int(truth[parts[0]]["offset"].iloc[0]), offset))
        ts = start_ms + offset * 10 + int(rng.integers(-300, 300))
        batches.append(
            (offset, control_batch(kind, base_offset=offset, producer_id=pid, epoch=0, ts=ts))
        )
        offset += 1

    for _ in range(steps):
        r = rng.random()
        if r < 0.75 or not open_txn:
            pid = -1 if r < 0.3 else int(rng.integers(1, 4))
            n = int(rng.integers(1, 8))
            ts = start_ms + (offset + np.arange(n)) * 10 + rng.integers(-300, 300, size=n)
            data, recs = _data_batch(offset, ts, rng, codec=codec, pid=pid, seq=seqs.get(pid, 0))
            batches.append((offset, data))
            df = recs.to_pandas()
            df["producer_id"], df["aborted"] = pid, False
            truth.append(df)
            if pid >= 0:
                seqs[pid] += n
                open_txn.setdefault(pid, []).append(len(truth) - 1)
            offset += n
        else:
            pid = int(rng.choice(sorted(open_txn)))
            end_txn(pid, ControlType.ABORT if rng.random() < 0.4 else ControlType.COMMIT)
    for pid in sorted(open_txn):
        end_txn(pid, ControlType.COMMIT)
    _write_segments(directory, batches, segment_bytes)
    return pd.concat(truth, ignore_index=True), aborted


def _write_segments(directory: Path, batches: list[tuple[int, bytes]], segment_bytes: int) -> None:
    base, buf = None, bytearray()
    for off, data in batches:
        if base is not None and len(buf) + len(data) > segment_bytes:
            (directory / segment_file_name(base, LOG_SUFFIX)).write_bytes(buf)
            base, buf = None, bytearray()
        if base is None:
            base = off
        buf += data
    if base is not None:
        (directory / segment_file_name(base, LOG_SUFFIX)).write_bytes(buf)


def offset_for_time(truth: pd.DataFrame, ts: int, log_end: int) -> int:
    """Brute force offsetsForTimes over data records (seglake skips control records)."""
    hit = truth.loc[truth["timestamp"] >= ts, "offset"]
    return int(hit.iloc[0]) if len(hit) else log_end
