"""``seglake dump`` of ``.index``, ``.timeindex`` and ``.txnindex`` files: Kafka's ``dumpIndex``,
``dumpTimeIndex`` and ``dumpTxnIndex`` (every entry, read in windows), the sanity check, and
the entries checked against the ``.log`` beside them (Kafka's stderr report)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

import numpy as np
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptIndexError
from seglake.format import NO_TIMESTAMP
from seglake.record.batch import (
    BatchScan,
    scan_batches,
)
from seglake.record.reader import record_times
from seglake.storage.index_buffer import entry_windows
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import TransactionIndex


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
    status, before = 0, b""
    for pos, chunk in entry_windows(fs, p, TransactionIndex.ENTRY_SIZE, size):
        if sanity and not status:  # Kafka lists the entries whatever the check says
            try:
                TransactionIndex.from_bytes(before + chunk, path=p).sanity_check(
                    first_slot=(pos - len(before)) // TransactionIndex.ENTRY_SIZE,
                    file_size=size,
                )
            except CorruptIndexError as exc:
                err.write(f"{path} failed sanity check: {exc}\n")
                status = 1
        idx = TransactionIndex.from_bytes(chunk, path=p)
        if as_json:
            for e in idx.all_aborted():
                out.write(json.dumps({"version": 0, **e._asdict()}) + "\n")
        else:  # a window's lines at once, from its columns (a sparse file: millions)
            cols = (idx.producer_ids, idx.first_offsets, idx.last_offsets, idx.last_stable_offsets)
            out.write(
                "".join(
                    f"version: 0 producerId: {pid} firstOffset: {first} "
                    f"lastOffset: {last} lastStableOffset: {lso}\n"
                    for pid, first, last, lso in zip(*(c.tolist() for c in cols), strict=True)
                )
            )
        before = chunk[-TransactionIndex.ENTRY_SIZE :]  # windows hold whole entries
    return status


def _index_entries_read(
    fs: pafs.FileSystem, p: str, cls: type[OffsetIndex | TimeIndex]
) -> tuple[bytes, int]:
    """An index file's bytes up to the window holding the first zero entry after slot 0
    (where Kafka's dump stops: :func:`_file_entries`), read in windows, and the file's
    length: a sparse or preallocated multi-GiB file is never read whole."""
    length = lakefs.file_size(fs, p)
    parts = []
    for pos, chunk in entry_windows(fs, p, cls.ENTRY_SIZE, length):
        raw = np.frombuffer(chunk, dtype=cls.DTYPE, count=len(chunk) // cls.ENTRY_SIZE)
        parts.append(chunk)
        if (raw["relative_offset"][1 if pos == 0 else 0 :] == 0).any():
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
