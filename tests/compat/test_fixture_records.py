"""Every batch of the broker-written fixture partitions decodes as expected.json says."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pyarrow as pa
import pytest

from seglake.record.batch import scan_batches
from seglake.record.control import ControlType, parse_control_record
from seglake.record.reader import decode_batches, read_log
from seglake.record.schema import RECORD_SCHEMA
from tests.conftest import FIXTURE_PARTITIONS, FIXTURES, load_expected

NULL = b"\x00NULL"


def records_sha256(records: pa.Table) -> str:
    """sha256 as the fixture README defines it, over the rows of ``records``."""
    h = hashlib.sha256()
    for r in records.to_pylist():
        h.update(struct.pack(">qq", r["offset"], r["timestamp"]))
        h.update(NULL if r["key"] is None else r["key"])
        h.update(NULL if r["value"] is None else r["value"])
        for header in r["headers"]:
            h.update(header["key"].encode())
            h.update(NULL if header["value"] is None else header["value"])
    return h.hexdigest()


def segments(partition: str):
    for name, segment in load_expected(partition).items():
        yield name, segment, (FIXTURES / partition / f"{name}.log").read_bytes()


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_every_batch_matches_expected(fixtures_dir, partition: str) -> None:
    for name, segment, buf in segments(partition):
        records, scan = read_log(buf, path=name, skip_control=False)
        assert records.schema == RECORD_SCHEMA
        assert len(buf) == segment["file_bytes"]
        assert scan.valid_bytes == segment["valid_bytes"]
        assert scan.error is None
        batches = segment["batches"]
        assert len(scan) == len(batches)
        assert records.num_rows == int(scan.records_count.sum())
        starts = np.concatenate(([0], np.cumsum(scan.records_count)))
        for i, want in enumerate(batches):
            got = {
                "position": int(scan.position[i]),
                "size": int(scan.size[i]),
                "base_offset": int(scan.base_offset[i]),
                "last_offset": int(scan.last_offset[i]),
                "count": int(scan.records_count[i]),
                "max_timestamp": int(scan.max_timestamp[i]),
                "first_timestamp": int(scan.base_timestamp[i]),
                "compression": int(scan.codec[i]),
                "crc_valid": bool(scan.crc_valid[i]),
                "transactional": bool(scan.is_transactional[i]),
                "control": bool(scan.is_control[i]),
                "producer_id": int(scan.producer_id[i]),
            }
            assert got == {k: want[k] for k in got}, f"{partition} batch {i}"
            rows = records.slice(starts[i], starts[i + 1] - starts[i])
            assert records_sha256(rows) == want["records_sha256"], f"{partition} batch {i}"
            if i % 29 == 0 or got["control"]:  # a batch alone decodes to the same rows
                alone = decode_batches(buf, scan.take(slice(i, i + 1)), skip_control=False)
                assert alone.equals(rows)


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_skip_control_drops_only_control_batches(fixtures_dir, partition: str) -> None:
    for _, _, buf in segments(partition):
        scan = scan_batches(buf)
        everything = decode_batches(buf, scan, skip_control=False)
        data = decode_batches(buf, scan)
        control_records = int(scan.records_count[scan.is_control].sum())
        assert data.num_rows == everything.num_rows - control_records
        assert data.equals(decode_batches(buf, scan.take(~scan.is_control), skip_control=False))


def test_cluster_metadata_control_record(fixtures_dir) -> None:
    buf = (FIXTURES / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    scan = scan_batches(buf)
    control = scan.take(scan.is_control)
    assert len(control) == 1
    (row,) = decode_batches(buf, control, skip_control=False).to_pylist()
    parsed = parse_control_record(row["key"], row["value"])
    assert parsed.type is ControlType.LEADER_CHANGE
    assert parsed.version == 0
    assert parsed.coordinator_epoch is None
    assert parsed.value == row["value"]
