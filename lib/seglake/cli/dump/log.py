"""``seglake dump`` of a ``.log`` (and a KRaft ``.checkpoint``): Kafka's ``DumpLogSegments``
batch and record lines, ``--json`` objects, and the record decoders of the internal topics
(``--offsets-decoder``, ``--transaction-log-decoder``, ``--cluster-metadata-decoder``)."""

from __future__ import annotations

import base64
import json
import struct
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple

import numpy as np

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError
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
from seglake.record.reader import decode_batches
from seglake.record.transaction_records import decode_transaction_record
from seglake.storage.naming import (
    BOOTSTRAP_CHECKPOINT,
    parse_checkpoint_file_name,
    parse_segment_file_name,
)
from seglake.storage.segment_files import SegmentFiles
from seglake.storage.segment_window import data_end


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _text(b: bytes) -> str:
    """A key or value as Kafka's ``StringDecoder`` prints it (UTF-8, bad bytes replaced)."""
    return b.decode("utf-8", errors="replace")


def _bool(v: object) -> str:
    return "true" if v else "false"


def optional_long(v: int | None) -> str:
    """Java's ``OptionalLong.toString``."""
    return "OptionalLong.empty" if v is None else f"OptionalLong[{v}]"


_DECODE_CHUNK = 256
_CRC = struct.Struct(">I")
NO_SEQUENCE = -1


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
        f"deleteHorizonMs: {optional_long(b.delete_horizon_ms)} position: {h.position} "
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
