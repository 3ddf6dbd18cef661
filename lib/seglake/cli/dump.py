"""``seglake dump``: kafka-dump-log.sh for .log, .index, .timeindex and .txnindex files.

Text output follows kafka-dump-log's lines; ``--json`` prints one object per line: per
batch for a ``.log`` (with ``records`` under ``--deep-iteration``), per entry for an index.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from seglake import fs as lakefs
from seglake.errors import CorruptIndexError
from seglake.record.batch import BatchScan, scan_batches
from seglake.record.codecs import NAMES
from seglake.record.control import parse_control_record
from seglake.record.decode import decode_batches
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import TransactionIndex


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _text(b: bytes | None) -> str:
    return "null" if b is None else b.decode("utf-8", errors="replace")


_DECODE_CHUNK = 256


def batch_objects(data: bytes, scan: BatchScan, *, deep: bool) -> Iterator[dict[str, Any]]:
    """One JSON-able dict per batch (and its records when ``deep``)."""
    chunk: list[dict[str, Any]] = []
    chunk_start = 0
    for i in range(len(scan)):
        if deep and i % _DECODE_CHUNK == 0:
            # decode a run of batches at once (one call per batch is slow), in chunks
            # so output still streams
            stop = min(i + _DECODE_CHUNK, len(scan))
            chunk = decode_batches(data, scan.take(slice(i, stop)), skip_control=False).to_pylist()
            counts = scan.records_count[i:stop]
            firsts = np.concatenate(([0], np.cumsum(counts)))
            chunk_start = i
        h = scan.header(i)
        obj: dict[str, Any] = {
            "position": h.position,
            "size": h.size,
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "count": h.records_count,
            "max_timestamp": h.max_timestamp,
            "first_timestamp": h.base_timestamp,
            "compression": h.codec,
            "crc_valid": bool(scan.crc_valid[i]),
            "transactional": h.is_transactional,
            "control": h.is_control,
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
            "base_sequence": h.base_sequence,
            "partition_leader_epoch": h.leader_epoch,
            "timestamp_type": "LogAppendTime" if h.is_log_append_time else "CreateTime",
        }
        if deep:
            k = i - chunk_start
            rows = chunk[int(firsts[k]) : int(firsts[k + 1])]
            obj["records"] = [
                {
                    "offset": r["offset"],
                    "timestamp": r["timestamp"],
                    "key": _b64(r["key"]),
                    "value": _b64(r["value"]),
                    "headers": [{"key": x["key"], "value": _b64(x["value"])} for x in r["headers"]],
                    **({"control": _control(r)} if h.is_control else {}),
                }
                for r in rows
            ]
        yield obj


def _control(r: dict) -> dict[str, Any] | None:
    try:
        c = parse_control_record(r["key"], r["value"])
    except Exception as exc:  # dump shows what it can
        return {"error": str(exc)}
    return {"type": c.type.name, "coordinator_epoch": c.coordinator_epoch}


def dump_log(
    path: str, out: IO[str], *, deep: bool, print_data: bool, as_json: bool, max_bytes: int | None
) -> int:
    fs, p = lakefs.resolve(path)
    size = lakefs.file_size(fs, p)
    data = lakefs.read_range(fs, p, 0, min(size, max_bytes) if max_bytes else size)
    scan = scan_batches(data, stop_on_crc_error=False)
    deep = deep or print_data
    if not as_json:
        out.write(f"Dumping {path}\n")
        parsed = parse_segment_file_name(p.rsplit("/", 1)[-1])
        out.write(f"Log starting offset: {parsed[0] if parsed else 0}\n")
    for obj in batch_objects(data, scan, deep=deep):
        if as_json:
            out.write(json.dumps(obj) + "\n")
            continue
        out.write(
            f"baseOffset: {obj['base_offset']} lastOffset: {obj['last_offset']} count: "
            f"{obj['count']} baseSequence: {obj['base_sequence']} producerId: "
            f"{obj['producer_id']} producerEpoch: {obj['producer_epoch']} "
            f"partitionLeaderEpoch: {obj['partition_leader_epoch']} isTransactional: "
            f"{str(obj['transactional']).lower()} isControl: {str(obj['control']).lower()} "
            f"position: {obj['position']} {obj['timestamp_type']}: {obj['max_timestamp']} "
            f"size: {obj['size']} magic: 2 compresscodec: {NAMES[obj['compression']]} "
            f"isvalid: {str(obj['crc_valid']).lower()}\n"
        )
        for r in obj.get("records", []):
            key = base64.b64decode(r["key"]) if r["key"] is not None else None
            value = base64.b64decode(r["value"]) if r["value"] is not None else None
            line = (
                f"| offset: {r['offset']} {obj['timestamp_type']}: {r['timestamp']} "
                f"keySize: {len(key) if key is not None else -1} valueSize: "
                f"{len(value) if value is not None else -1} headerKeys: "
                f"[{','.join(h['key'] for h in r['headers'])}]"
            )
            if r.get("control"):
                line += f" endTxnMarker: {r['control'].get('type')}"
            if print_data:
                line += f" key: {_text(key)} payload: {_text(value)}"
            out.write(line + "\n")
    if scan.truncated and len(data) < size:
        if not as_json:  # the byte limit cut a batch: not corruption
            out.write(f"(first {len(data)} of {size} bytes)\n")
        return 0
    bad = 0 if scan.error is None else 1
    if scan.error is not None:
        msg = f"{path}: stopped at {scan.error}; valid bytes {scan.valid_bytes} of {len(data)}"
        out.write(
            json.dumps({"error": msg, "valid_bytes": scan.valid_bytes}) + "\n"
            if as_json
            else f"Found a truncated or corrupt tail: {msg}\n"
        )
    return bad


def _log_scan_for(path: str) -> tuple[bytes, BatchScan] | None:
    log_path = path.rsplit(".", 1)[0] + LOG_SUFFIX
    fs, p = lakefs.resolve(log_path)
    if not lakefs.exists(fs, p):
        return None
    data = lakefs.read_all(fs, p)
    return data, scan_batches(data)


def verify_index(path: str, index: OffsetIndex | TimeIndex) -> list[str]:
    """Entries that disagree with the ``.log`` next to the index (history-independent
    checks: an offset entry points at the start of the batch whose last offset it names;
    a time entry's timestamp is the largest up to the batch holding its offset)."""
    found = _log_scan_for(path)
    if found is None:
        return [f"{path}: no .log beside it to verify against"]
    _, scan = found
    problems = []
    if isinstance(index, OffsetIndex):
        by_pos = dict(zip(scan.position.tolist(), scan.last_offset.tolist(), strict=True))
        for off, pos in zip(index.offsets.tolist(), index.positions.tolist(), strict=True):
            if by_pos.get(pos) != off:
                problems.append(
                    f"entry (offset {off}, position {pos}): the batch at position "
                    f"{pos} has last offset {by_pos.get(pos)}"
                )
    else:
        running = np.maximum.accumulate(scan.max_timestamp) if len(scan) else scan.max_timestamp
        for ts, off in zip(index.timestamps.tolist(), index.offsets.tolist(), strict=True):
            i = int(np.searchsorted(scan.last_offset, off, side="left"))
            if i >= len(scan) or scan.base_offset[i] > off:
                problems.append(
                    f"entry (timestamp {ts}, offset {off}): no batch holds offset {off}"
                )
            elif int(running[i]) != ts:
                problems.append(
                    f"entry (timestamp {ts}, offset {off}): the largest timestamp "
                    f"up to that batch is {int(running[i])}"
                )
    return problems


def dump_index(
    path: str, suffix: str, out: IO[str], *, as_json: bool, sanity: bool, verify_only: bool
) -> int:
    fs, p = lakefs.resolve(path)
    data = lakefs.read_all(fs, p)
    parsed = parse_segment_file_name(p.rsplit("/", 1)[-1])
    base = parsed[0] if parsed else 0
    if suffix == TXN_INDEX_SUFFIX:
        txn = TransactionIndex.from_bytes(data, path=p)
        if sanity:
            txn.sanity_check()
            out.write(f"{path} passed sanity check.\n")
            return 0
        for e in txn.all_aborted():
            obj = {"version": 0, **e._asdict()}
            out.write(
                json.dumps(obj) + "\n"
                if as_json
                else " ".join(f"{k}: {v}" for k, v in obj.items()) + "\n"
            )
        return 0
    cls = OffsetIndex if suffix == INDEX_SUFFIX else TimeIndex
    index = cls.from_bytes(data, base, path=p)
    if sanity:
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            out.write(f"{path} failed sanity check: {exc}\n")
            return 1
        out.write(f"{path} passed sanity check.\n")
        return 0
    if verify_only:
        problems = verify_index(p, index)
        for msg in problems:
            out.write(f"{path}: {msg}\n")
        if not problems:
            out.write(f"{path}: all {len(index)} entries agree with the log.\n")
        return 1 if problems else 0
    return _list_entries(path, cls, data, base, out, as_json=as_json)


def _file_entries(cls: type[OffsetIndex | TimeIndex], buf: bytes) -> np.ndarray:
    """Every entry of a whole index file, valid or not, up to the last slot that is not
    all zero (the preallocated rest), as ``kafka-dump-log`` lists them."""
    total = len(buf) // cls.ENTRY_SIZE
    raw = np.frombuffer(buf, dtype=cls.DTYPE, count=total)
    used = np.flatnonzero(raw.view(np.uint8).reshape(total, cls.ENTRY_SIZE).any(axis=1))
    return raw[: int(used[-1]) + 1 if len(used) else 0]


def _list_entries(
    path: str,
    cls: type[OffsetIndex | TimeIndex],
    data: bytes,
    base: int,
    out: IO[str],
    *,
    as_json: bool,
) -> int:
    """Every entry of the file, as kafka-dump-log lists them (not only the valid prefix a
    reader uses), the ones breaking the order rules flagged; 1 if any is."""
    raw = _file_entries(cls, data)
    ok = cls.entries_ok(raw)
    rel = raw["relative_offset"].astype(np.int64) + base
    if cls is OffsetIndex:
        names, columns = ("offset", "position"), (rel, raw["position"].astype(np.int64))
    else:
        names, columns = ("timestamp", "offset"), (raw["timestamp"].astype(np.int64), rel)
    first, second = columns
    for i, (a, b) in enumerate(zip(first.tolist(), second.tolist(), strict=True)):
        obj: dict[str, Any] = {names[0]: a, names[1]: b}
        if not ok[i]:
            obj["error"] = cls.entry_problem(raw, i)
        if as_json:
            out.write(json.dumps(obj) + "\n")
        else:
            flag = f" INVALID: {obj['error']}" if "error" in obj else ""
            out.write(f"{names[0]}: {a} {names[1]}: {b}{flag}\n")
    bad = int((~ok).sum())
    if bad and not as_json:
        out.write(
            f"Found {bad} invalid entr{'y' if bad == 1 else 'ies'} of {len(raw)} in {path} "
            f"(readers use the first {int(np.argmin(ok))})\n"
        )
    return 1 if bad else 0


def dump(
    files: list[str],
    *,
    deep: bool = False,
    print_data: bool = False,
    as_json: bool = False,
    sanity: bool = False,
    verify_only: bool = False,
    max_bytes: int | None = None,
    out: IO[str] | None = None,
) -> int:
    """Dump each file; returns 0, or 1 if any file had problems."""
    out = sys.stdout if out is None else out  # the current one, not the one at import time
    status = 0
    for path in files:
        name = path.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        if suffix == LOG_SUFFIX:
            if sanity or verify_only:
                out.write(
                    f"{path}: --index-sanity-check/--verify-index-only apply to index "
                    "files; skipped\n"
                )
                continue
            status |= dump_log(
                path, out, deep=deep, print_data=print_data, as_json=as_json, max_bytes=max_bytes
            )
        elif suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            if not as_json:
                out.write(f"Dumping {path}\n")
            status |= dump_index(
                path, suffix, out, as_json=as_json, sanity=sanity, verify_only=verify_only
            )
        else:
            raise ValueError(f"{path}: not a .log, .index, .timeindex or .txnindex file")
    return status
