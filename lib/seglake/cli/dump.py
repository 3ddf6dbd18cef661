"""``seglake dump``: kafka-dump-log.sh (Kafka's ``DumpLogSegments``) for .log, .index,
.timeindex, .txnindex and producer .snapshot files.

Text output is Kafka's, line for line (tests diff it against Kafka 4.1's tool); what Kafka
reports on stderr (non-consecutive offsets, index entries that disagree with the log) goes
to stderr. ``--json`` prints one object per line: per batch for a ``.log`` (with
``records`` under ``--deep-iteration``), per entry for an index or snapshot.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.cli.jobargs import Parser, non_negative
from seglake.errors import CorruptIndexError, CorruptRecordError
from seglake.format import NO_TIMESTAMP
from seglake.record.batch import (
    CRC_OFFSET,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    BatchScan,
    increment_sequence,
    scan_batches,
)
from seglake.record.codecs import NAMES
from seglake.record.control import ControlType, parse_control_record, parse_kraft_control
from seglake.record.group_records import decode_offsets_record
from seglake.record.messages import to_json
from seglake.record.metadata_records import decode_metadata_record
from seglake.record.reader import decode_batches, record_times
from seglake.record.transaction_records import decode_transaction_record
from seglake.storage.naming import (
    BOOTSTRAP_CHECKPOINT,
    CHECKPOINT_SUFFIX,
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_checkpoint_file_name,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.producer_snapshot import read_producer_snapshot
from seglake.storage.segment_files import SegmentFiles
from seglake.storage.segment_window import data_end
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import TransactionIndex


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _text(b: bytes) -> str:
    """A key or value as Kafka's ``StringDecoder`` prints it (UTF-8, bad bytes replaced)."""
    return b.decode("utf-8", errors="replace")


def _bool(v: object) -> str:
    return "true" if v else "false"


def _optional_long(v: int | None) -> str:
    """Java's ``OptionalLong.toString``."""
    return "OptionalLong.empty" if v is None else f"OptionalLong[{v}]"


_DECODE_CHUNK = 256
_CRC = struct.Struct(">I")
NO_SEQUENCE = -1
DUMPED_SUFFIXES = (
    LOG_SUFFIX,
    CHECKPOINT_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SNAPSHOT_SUFFIX,
)


class _Batch(NamedTuple):
    """One batch of a scan with what Kafka's dump shows of it, and its decoded records."""

    header: BatchHeader
    crc: int  # as stored
    crc_valid: bool
    records: list[dict[str, Any]]  # [] unless deep

    @property
    def last_sequence(self) -> int:
        """Kafka's ``lastSequence``: -1 without a producer sequence."""
        h = self.header
        if h.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(h.base_sequence, h.last_offset_delta)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The batch's delete horizon (its base timestamp when attributes bit 6 is set)."""
        h = self.header
        return h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None

    def sequence(self, offset: int) -> int:
        """The producer sequence of the record at ``offset`` (Kafka's ``Record.sequence``)."""
        h = self.header
        if h.base_sequence < 0:
            return NO_SEQUENCE
        return increment_sequence(h.base_sequence, offset - h.base_offset)


def _batches(data: bytes, scan: BatchScan, *, deep: bool) -> Iterator[_Batch]:
    """The batches of ``scan`` (their records decoded when ``deep``), in file order."""
    rows: list[dict[str, Any]] = []
    firsts = np.zeros(1, np.int64)
    chunk_start = 0
    for i in range(len(scan)):
        if deep and i % _DECODE_CHUNK == 0:
            # decode a run of batches at once (one call per batch is slow), in chunks
            # so output still streams
            stop = min(i + _DECODE_CHUNK, len(scan))
            rows = decode_batches(data, scan.take(slice(i, stop)), skip_control=False).to_pylist()
            firsts = np.concatenate(([0], np.cumsum(scan.records_count[i:stop])))
            chunk_start = i
        h = scan.header(i)
        (crc,) = _CRC.unpack_from(data, h.position + CRC_OFFSET)
        k = i - chunk_start
        records = rows[int(firsts[k]) : int(firsts[k + 1])] if deep else []
        yield _Batch(h, crc, bool(scan.crc_valid[i]), records)


def _batch_object(b: _Batch) -> dict[str, Any]:
    """One JSON-able dict per batch (and its records when decoded)."""
    h = b.header
    obj: dict[str, Any] = {
        "position": h.position,
        "size": h.size,
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "max_timestamp": h.max_timestamp,
        "first_timestamp": h.base_timestamp,
        "compression": h.codec,
        "crc": b.crc,
        "crc_valid": b.crc_valid,
        "transactional": h.is_transactional,
        "control": h.is_control,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "last_sequence": b.last_sequence,
        "partition_leader_epoch": h.leader_epoch,
        "delete_horizon_ms": b.delete_horizon_ms,
        "timestamp_type": _timestamp_type(h),
    }
    if b.records:
        obj["records"] = [
            {
                "offset": r["offset"],
                "timestamp": r["timestamp"],
                "key": _b64(r["key"]),
                "value": _b64(r["value"]),
                "headers": [{"key": x["key"], "value": _b64(x["value"])} for x in r["headers"]],
                **({"control": _control(r)} if h.is_control else {}),
            }
            for r in b.records
        ]
    return obj


def batch_objects(data: bytes, scan: BatchScan, *, deep: bool) -> Iterator[dict[str, Any]]:
    """One JSON-able dict per batch (and its records when ``deep``)."""
    for b in _batches(data, scan, deep=deep):
        yield _batch_object(b)


def _timestamp_type(h: BatchHeader) -> str:
    return "LogAppendTime" if h.is_log_append_time else "CreateTime"


def _control(r: dict[str, Any]) -> dict[str, Any] | None:
    try:
        c = parse_control_record(r["key"], r["value"])
    except Exception as exc:  # dump shows what it can
        return {"error": str(exc)}
    return {"type": c.type.name, "coordinator_epoch": c.coordinator_epoch}


def batch_line(b: _Batch) -> str:
    """Kafka's ``DumpLogSegments.printBatchLevel`` line of a v2 batch."""
    h = b.header
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {b.last_sequence} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.leader_epoch} isTransactional: {_bool(h.is_transactional)} "
        f"isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {_optional_long(b.delete_horizon_ms)} position: {h.position} "
        f"{_timestamp_type(h)}: {h.max_timestamp} size: {h.size} magic: {MAGIC} "
        f"compresscodec: {NAMES.get(h.codec, f'unknown({h.codec})')} crc: {b.crc} "
        f"isvalid: {_bool(b.crc_valid)}"
    )


# how Kafka's dump introduces each KRaft control record's JSON
_KRAFT_LABELS = {
    ControlType.LEADER_CHANGE: "LeaderChange:",
    ControlType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlType.KRAFT_VERSION: "KRaftVersion",
    ControlType.KRAFT_VOTERS: "KRaftVoters",
}


def _control_text(r: dict[str, Any]) -> str:
    """What Kafka's dump adds to a control record's line."""
    try:
        c = parse_control_record(r["key"], r["value"])
        if c.is_transaction_marker:
            return f" endTxnMarker: {c.type.name} coordinatorEpoch: {c.coordinator_epoch}"
        if c.type in _KRAFT_LABELS:
            data = parse_kraft_control(c.type, r["value"])
            return f" {_KRAFT_LABELS[c.type]} {to_json(data)}"
    except CorruptRecordError as exc:  # dump shows what it can
        return f" controlType: unreadable ({exc})"
    return f" controlType: {c.type.name}({c.type_id})"


Decoder = Callable[[bytes | None, bytes | None, int], tuple[str | None, str | None]]


def string_decoder(
    key: bytes | None, value: bytes | None, offset: int
) -> tuple[str | None, str | None]:
    """Kafka's default ``StringDecoder`` for key and value (null stays null)."""
    return (None if key is None else _text(key)), (None if value is None else _text(value))


DECODERS: dict[str, Decoder] = {
    "string": string_decoder,
    "offsets": decode_offsets_record,
    "cluster-metadata": decode_metadata_record,
    "transaction-log": decode_transaction_record,
}


def record_line(
    b: _Batch,
    r: dict[str, Any],
    *,
    print_data: bool,
    decoder: Decoder = string_decoder,
    skip_metadata: bool = False,
) -> str:
    """Kafka's deep-iteration line of one record (``| offset: ...``); with
    ``skip_metadata`` only its key and payload, spaced as Kafka spaces them."""
    h = b.header
    key, value = r["key"], r["value"]
    line, prefix = "", "| "
    if not skip_metadata:
        line = (
            f"| offset: {r['offset']} {_timestamp_type(h)}: {r['timestamp']} "
            f"keySize: {-1 if key is None else len(key)} "
            f"valueSize: {-1 if value is None else len(value)} "
            f"sequence: {b.sequence(r['offset'])} "
            f"headerKeys: [{','.join(x['key'] for x in r['headers'])}]"
        )
        prefix = " "
        if h.is_control:
            line += _control_text(r)
    if print_data and not h.is_control:
        key_text, payload = decoder(key, value, r["offset"])
        if key_text is not None:
            line += f"{prefix}key: {key_text}"
        if payload is not None:
            line += f" payload: {payload}"
    return line


def _log_heading(name: str) -> str:
    """Kafka's first line for a ``.log`` or a KRaft snapshot (``.checkpoint``)."""
    if name == BOOTSTRAP_CHECKPOINT:
        return "KRaft bootstrap snapshot"
    snapshot = parse_checkpoint_file_name(name)
    if snapshot is not None:
        return f"Snapshot end offset: {snapshot[0]}, epoch: {snapshot[1]}"
    parsed = parse_segment_file_name(name)
    return f"Log starting offset: {parsed[0] if parsed else 0}"


def dump_log(
    path: str,
    out: IO[str],
    *,
    deep: bool,
    print_data: bool,
    as_json: bool,
    max_bytes: int | None,
    err: IO[str] | None = None,
    decoder: Decoder = string_decoder,
    skip_metadata: bool = False,
) -> int:
    """Kafka's ``dumpLog`` of one ``.log``: 0, or 1 when the scan stopped at bytes that
    are there and wrong (a torn tail is Kafka's "invalid bytes at the end", status 0)."""
    err = sys.stderr if err is None else err
    fs, p = lakefs.resolve(path)
    size = lakefs.file_size(fs, p)
    if max_bytes:
        data = lakefs.read_range(fs, p, 0, min(size, max_bytes))
    else:  # zeros after the last batch (a preallocated segment) are not read whole: the
        # scan meets the same zeros in the first bytes of them
        end = data_end(SegmentFiles(fs, p, 0), size)
        data = lakefs.read_range(fs, p, 0, end) + bytes(min(size - end, HEADER_SIZE))
    scan = scan_batches(data, stop_on_crc_error=False)
    deep = deep or print_data
    name = p.rsplit("/", 1)[-1]
    if not as_json:
        out.write(_log_heading(name) + "\n")
    gaps: list[tuple[int, int]] = []
    last = -1
    for b in _batches(data, scan, deep=deep):
        for r in b.records:
            if last != -1 and r["offset"] != last + 1:
                gaps.append((last, r["offset"]))
            last = r["offset"]
        if as_json:
            out.write(json.dumps(_batch_object(b)) + "\n")
            continue
        out.write(batch_line(b) + "\n")
        for r in b.records:
            line = record_line(
                b, r, print_data=print_data, decoder=decoder, skip_metadata=skip_metadata
            )
            out.write(line + "\n")
    if gaps:  # Kafka's note for compacted or gapped logs, on stderr as Kafka prints it
        err.write(f"Non-consecutive offsets in {p}\n")
        err.writelines(f"  {a} is followed by {b}\n" for a, b in reversed(gaps))
    if max_bytes and len(data) < size:
        return 0  # the byte limit cut the file: as Kafka, nothing to report
    if scan.error is not None and not scan.truncated:
        # bytes that are there and wrong (a length below the minimum, zeros, bad magic):
        # Kafka's dump stops there with an exception; seglake with one line, status 1
        if as_json:
            problem = {"error": f"{path}: {scan.error}", "valid_bytes": scan.valid_bytes}
            out.write(json.dumps(problem) + "\n")
        err.write(f"{path}: stopped at {scan.error}; valid bytes {scan.valid_bytes}\n")
        return 1
    trailing = len(data) - scan.valid_bytes
    if trailing > 0:  # a torn tail: a batch running past the end of the file
        if as_json:
            out.write(json.dumps({"invalid_bytes": trailing, "valid_bytes": scan.valid_bytes}))
            out.write("\n")
        else:
            out.write(f"Found {trailing} invalid bytes at the end of {name}\n")
    return 0


def dump_snapshot(path: str, out: IO[str], *, as_json: bool) -> int:
    """Kafka's ``dumpProducerIdSnapshot`` of a ``.snapshot`` file."""
    fs, p = lakefs.resolve(path)
    for e in read_producer_snapshot(lakefs.read_all(fs, p), path=path):
        txn = None if e.current_txn_first_offset < 0 else e.current_txn_first_offset
        if as_json:
            out.write(json.dumps({**e._asdict(), "first_sequence": e.first_sequence}) + "\n")
            continue
        out.write(
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(txn)} lastTimestamp: {e.timestamp} "
            f"firstSequence: {e.first_sequence} lastSequence: {e.last_sequence} "
            f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
            f"timestamp: {e.timestamp}\n"
        )
    return 0


def _log_scan_for(path: str) -> tuple[bytes, BatchScan] | None:
    log_path = path.rsplit(".", 1)[0] + LOG_SUFFIX
    fs, p = lakefs.resolve(log_path)
    if not lakefs.exists(fs, p):
        return None
    data = lakefs.read_all(fs, p)
    return data, scan_batches(data)


def _largest_record_timestamps(log: bytes, scan: BatchScan, batches: np.ndarray) -> dict[int, int]:
    """The largest record timestamp of each of ``batches`` (indexes into ``scan``; -1 for
    a batch without records), from the records themselves, decoded in one call."""
    sel = np.unique(batches)
    _, times = record_times(log, scan.take(sel), skip_control=False)
    counts = scan.records_count[sel]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    out = np.full(len(sel), NO_TIMESTAMP, np.int64)
    full = counts > 0
    if full.any():
        out[full] = np.maximum.reduceat(times, starts[full])
    return dict(zip(sel.tolist(), out.tolist(), strict=True))


def index_report(path: str, suffix: str, data: bytes, base: int) -> list[str] | None:
    """Kafka's ``DumpLogSegments`` report (its stderr lines) on the entries of an index
    file checked against the ``.log`` beside it; ``[]`` when they agree, ``None`` without
    a ``.log``. An offset entry must name the last offset of the batch at its position; a
    time entry the last offset of a batch whose records' largest timestamp is the entry's,
    each above the one before."""
    found = _log_scan_for(path)
    if found is None:
        return None
    log, scan = found
    cls = OffsetIndex if suffix == INDEX_SUFFIX else TimeIndex
    raw = _file_entries(cls, data)
    offsets = raw["relative_offset"].astype(np.int64) + base
    name = lakefs.resolve(path)[1]
    if cls is OffsetIndex:
        by_pos = dict(zip(scan.position.tolist(), scan.last_offset.tolist(), strict=True))
        bad = [
            (o, by_pos.get(p, -1))
            for o, p in zip(offsets.tolist(), raw["position"].tolist(), strict=True)
            if by_pos.get(p) != o
        ]
        lines = [f"  Index offset: {o}, log offset: {last}" for o, last in reversed(bad)]
        return [f"Mismatches in :{name}", *lines] if bad else []
    at = np.searchsorted(scan.last_offset, offsets, side="left")
    largest = _largest_record_timestamps(log, scan, at[at < len(scan)])
    mismatch, disorder, missing = [], [], []
    prev = NO_TIMESTAMP
    for ts, off, i in zip(raw["timestamp"].tolist(), offsets.tolist(), at.tolist(), strict=True):
        if i >= len(scan) or scan.last_offset[i] != off:
            missing.append((off, -1 if i >= len(scan) else int(scan.last_offset[i])))
        else:
            if largest[i] != ts:
                mismatch.append((ts, largest[i]))
            if prev >= ts:
                disorder.append((ts, prev))
        prev = ts
    lines = []
    if mismatch:
        lines.append(f"Found timestamp mismatch in :{name}")
        lines += [f"  Index timestamp: {a}, log timestamp: {b}" for a, b in mismatch]
    if disorder:
        lines.append(f"Found out of order timestamp in :{name}")
        lines += [f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in disorder]
    if missing:
        lines.append("The following indexed offsets are not found in the log.")
        lines += [f"Indexed offset: {a}, found log offset: {b}" for a, b in missing]
    return lines


def dump_index(
    path: str,
    suffix: str,
    out: IO[str],
    *,
    as_json: bool,
    sanity: bool,
    verify_only: bool,
    err: IO[str] | None = None,
) -> int:
    """Kafka's ``dumpIndex`` / ``dumpTimeIndex`` / ``dumpTxnIndex`` of one index file;
    what disagrees with the ``.log`` goes to ``err``, as Kafka prints it."""
    err = sys.stderr if err is None else err
    fs, p = lakefs.resolve(path)
    parsed = parse_segment_file_name(p.rsplit("/", 1)[-1])
    base = parsed[0] if parsed else 0
    if suffix == TXN_INDEX_SUFFIX:
        return _dump_txn_index(fs, p, path, out, err, as_json=as_json, sanity=sanity)
    cls = OffsetIndex if suffix == INDEX_SUFFIX else TimeIndex
    data, length = _index_entries_read(fs, p, cls)
    if cls is OffsetIndex and length < cls.ENTRY_SIZE and not as_json:
        out.write(f"{path} is empty.\n")  # Kafka says so before any check
        return 0
    index = cls.from_bytes(data, base, path=p, length=length)
    if sanity:
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            out.write(f"{path} failed sanity check: {exc}\n")
            return 1
        out.write(f"{path} passed sanity check.\n")
        return 0
    status = 0 if verify_only else _list_entries(path, cls, data, base, out, as_json=as_json)
    report = index_report(path, suffix, data, base)
    if report is None and verify_only:
        report = [f"{path}: no .log beside it to verify against"]
    err.writelines(f"{line}\n" for line in report or ())
    return 1 if report else status


def _dump_txn_index(
    fs: pafs.FileSystem,
    p: str,
    path: str,
    out: IO[str],
    err: IO[str],
    *,
    as_json: bool,
    sanity: bool,
) -> int:
    """Kafka's ``dumpTxnIndex``: every entry, read in windows of whole entries (a sparse
    or hostile multi-GiB file is never read whole); with ``sanity``, the first failure
    of the check (each window checked with the entry before it) goes to ``err``."""
    size = lakefs.file_size(fs, p)
    window = TransactionIndex.ENTRY_SIZE * (lakefs.WINDOW_BYTES // TransactionIndex.ENTRY_SIZE)
    status, pos, before = 0, 0, b""
    while pos < size:
        chunk = lakefs.read_range(fs, p, pos, min(window, size - pos))
        if not chunk:
            break
        if sanity and not status:  # Kafka lists the entries whatever the check says
            try:
                TransactionIndex.from_bytes(before + chunk, path=p).sanity_check(
                    first_slot=(pos - len(before)) // TransactionIndex.ENTRY_SIZE,
                    file_size=size,
                )
            except CorruptIndexError as exc:
                err.write(f"{path} failed sanity check: {exc}\n")
                status = 1
        for e in TransactionIndex.from_bytes(chunk, path=p).all_aborted():
            if as_json:
                out.write(json.dumps({"version": 0, **e._asdict()}) + "\n")
            else:
                out.write(
                    f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
                    f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}\n"
                )
        pos += len(chunk)
        before = chunk[-TransactionIndex.ENTRY_SIZE :]  # windows hold whole entries
    return status


def _index_entries_read(
    fs: pafs.FileSystem, p: str, cls: type[OffsetIndex | TimeIndex]
) -> tuple[bytes, int]:
    """An index file's bytes up to the window holding the first zero entry after slot 0
    (where Kafka's dump stops: :func:`_file_entries`), read in windows, and the file's
    length: a sparse or preallocated multi-GiB file is never read whole."""
    length = lakefs.file_size(fs, p)
    window = cls.ENTRY_SIZE * (lakefs.WINDOW_BYTES // cls.ENTRY_SIZE)
    parts, pos = [], 0
    while pos < length:
        chunk = lakefs.read_range(fs, p, pos, min(window, length - pos))
        if not chunk:
            break
        raw = np.frombuffer(chunk, dtype=cls.DTYPE, count=len(chunk) // cls.ENTRY_SIZE)
        zero = raw["relative_offset"][1 if pos == 0 else 0 :] == 0
        parts.append(chunk)
        pos += len(chunk)
        if zero.any():
            break
    return b"".join(parts), length


def _file_entries(cls: type[OffsetIndex | TimeIndex], buf: bytes) -> np.ndarray:
    """The entries of a whole index file as ``kafka-dump-log`` walks them, valid or not:
    from the first up to an entry after it whose relative offset is 0 (the zero-filled,
    preallocated rest a crash leaves), the first always, even when all zero."""
    raw = np.frombuffer(buf, dtype=cls.DTYPE, count=len(buf) // cls.ENTRY_SIZE)
    zero = np.flatnonzero(raw["relative_offset"][1:] == 0)
    return raw[: int(zero[0]) + 1 if len(zero) else len(raw)]


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
    err: IO[str] | None = None,
    decoder: str = "string",
    skip_metadata: bool = False,
) -> int:
    """Dump each file as Kafka's ``DumpLogSegments`` does; returns 0, or 1 if any file had
    problems. ``decoder`` (a :data:`DECODERS` name) prints keys and payloads under
    ``print_data``; any other than ``string`` implies it, as in Kafka."""
    out = sys.stdout if out is None else out  # the current one, not the one at import time
    err = sys.stderr if err is None else err
    status = 0
    print_data = print_data or decoder != "string"
    for path in files:
        name = path.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        if suffix == KEY_INDEX_SUFFIX:  # seglake's own file beside a segment (`dump dir/*`):
            if not as_json:  # Kafka's DumpLogSegments lines for a file it does not know
                out.write(f"Dumping {path}\n")
                err.write(f"Ignoring unknown file {path}\n")
            continue
        if suffix not in DUMPED_SUFFIXES:
            raise ValueError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")
        if not as_json:
            out.write(f"Dumping {path}\n")
        if suffix in (LOG_SUFFIX, CHECKPOINT_SUFFIX):
            status |= dump_log(
                path,
                out,
                deep=deep,
                print_data=print_data,
                as_json=as_json,
                max_bytes=max_bytes,
                err=err,
                decoder=DECODERS[decoder],
                skip_metadata=skip_metadata,
            )
        elif suffix == SNAPSHOT_SUFFIX:
            status |= dump_snapshot(path, out, as_json=as_json)
        else:
            status |= dump_index(
                path,
                suffix,
                out,
                as_json=as_json,
                sanity=sanity,
                verify_only=verify_only,
                err=err,
            )
    return status


def add_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """``seglake dump``: kafka-dump-log.sh's options."""
    d = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.txnindex/.snapshot files (as kafka-dump-log.sh)",
    )
    d.add_argument("files", nargs="*", metavar="FILE")
    d.add_argument(
        "--files",
        dest="file_list",
        action="append",
        default=[],
        metavar="FILE1,FILE2,...",
        help="comma-separated files, as kafka-dump-log.sh takes them",
    )
    d.add_argument("--print-data-log", action="store_true", help="print keys and values")
    d.add_argument("--deep-iteration", action="store_true", help="print every record")
    d.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="check index files for sanity (Kafka's checks)",
    )
    d.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the .log beside them",
    )
    d.add_argument(
        "--max-bytes",
        type=non_negative,
        default=None,
        help="read at most this many bytes of each .log",
    )
    d.add_argument("--json", action="store_true", help="one JSON object per line")
    for name, topic in (
        ("offsets", "__consumer_offsets"),
        ("transaction-log", "__transaction_state"),
        ("cluster-metadata", "__cluster_metadata"),
    ):
        d.add_argument(
            f"--{name}-decoder", dest="decoder", action="store_const", const=name,
            help=f"decode {topic} records as Kafka does (implies --print-data-log)",
        )  # fmt: skip
    d.set_defaults(decoder="string")
    d.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="print only the records' keys and payloads, not their offsets and sizes",
    )


def run(args: argparse.Namespace) -> int:
    """``seglake dump``: ``kafka-dump-log.sh`` over the files given."""
    files = [*args.files, *(f for arg in args.file_list for f in arg.split(",") if f)]
    if not files:
        raise ValueError("dump: no file given (FILE... or --files a,b,c)")
    return dump(
        files,
        deep=args.deep_iteration,
        print_data=args.print_data_log,
        as_json=args.json,
        sanity=args.index_sanity_check,
        verify_only=args.verify_index_only,
        max_bytes=args.max_bytes,
        decoder=args.decoder,
        skip_metadata=args.skip_record_metadata,
    )
