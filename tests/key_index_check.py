"""Checks the key index tests of every writing path share: a segment's ``.keyindex``
equals the index rebuilt from its ``.log`` by the record reader (brute force)."""

from __future__ import annotations

import os
from pathlib import Path

from seglake.record.reader import read_log
from seglake.storage.key_index import KeyIndex, key_index_of_log
from seglake.storage.naming import parse_segment_file_name


def check_key_index(log_path: str | Path) -> KeyIndex:
    """The ``.keyindex`` beside ``log_path``, asserted equal to a rebuild from the log."""
    log_path = str(log_path)
    parsed = parse_segment_file_name(os.path.basename(log_path))
    assert parsed is not None
    base = parsed[0]
    data = Path(log_path).read_bytes()
    records, scan = read_log(data)
    stem = log_path[: -len(".log")]
    assert os.path.exists(stem + ".keyindex"), f"{stem}.keyindex is missing"
    have = KeyIndex.from_bytes(Path(stem + ".keyindex").read_bytes(), base)
    nxt = int(scan.last_offset[-1]) + 1 if len(scan) else base
    want = key_index_of_log(data, scan, base, nxt)
    assert have.next_offset == want.next_offset, (have.next_offset, want.next_offset)
    assert have.hashes.tolist() == want.hashes.tolist()
    assert have.offsets.tolist() == want.offsets.tolist()
    assert have.entries == records.column("key").drop_null().__len__() if records.num_rows else True
    return have


def check_partition_dir(directory: str | Path) -> int:
    """Every ``.log`` of a partition directory has a right ``.keyindex``; how many."""
    logs = sorted(p for p in Path(directory).glob("*.log"))
    for p in logs:
        check_key_index(p)
    return len(logs)
