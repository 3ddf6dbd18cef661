"""The bytes ``seglake dump`` reads besides segments: producer ``.snapshot`` files and
KRaft leader-change control records; bad bytes are one clear line (exit 2), never a
traceback. (What they print is diffed against Kafka's own tool in
tests/compat/test_kafka_dump.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from seglake.cli.main import main
from seglake.errors import CorruptRecordError
from seglake.record.batch import decrement_sequence, increment_sequence
from seglake.record.control import ControlType, parse_kraft_control
from seglake.record.crc import crc32c
from seglake.storage.producer_snapshot import ProducerEntry, read_producer_snapshot
from tests.conftest import FIXTURES

ENTRY = struct.Struct(">qhiqiqiq")


def _snapshot(entries: list[tuple], version: int = 1) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", version, crc32c(body)) + body


def test_snapshot_entries_and_wrapping_sequences() -> None:
    e = (5, 1, 3, 40, 7, 1_700_000_000_000, 2, 33)
    [got] = read_producer_snapshot(_snapshot([e]))
    assert got == ProducerEntry(*e)
    assert got.first_sequence == 2**31 - 1 - 3  # 3 - 7 wraps past int32 max, as Kafka's
    assert decrement_sequence(3, 7) == got.first_sequence
    assert increment_sequence(got.first_sequence, 7) == 3
    assert increment_sequence(2**31 - 1, 1) == 0
    fixture = FIXTURES / "sensor-data-0" / "00000000000000000010.snapshot"
    assert [x.producer_id for x in read_producer_snapshot(fixture.read_bytes())] == [0, 1]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda b: b[:5], "header"),
        (lambda b: struct.pack(">h", 2) + b[2:], "version 2"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC-32C mismatch"),
        (lambda b: b[:-4], "CRC-32C mismatch"),
    ],
)
def test_damaged_snapshot_is_one_line(capsys, tmp_path: Path, damage, words: str) -> None:
    path = tmp_path / "00000000000000000040.snapshot"
    path.write_bytes(damage(_snapshot([(5, 1, 3, 40, 0, 1, -1, -1)])))
    assert main(["dump", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and words in err[0], err


def test_leader_change_values() -> None:
    value = bytes.fromhex("00000000000102000000010002000000010000")
    assert parse_kraft_control(ControlType.LEADER_CHANGE, value) == {
        "version": 0,
        "leaderId": 1,
        "voters": [{"voterId": 1}],
        "grantingVoters": [{"voterId": 1}],
    }
    for bad in (None, value[:5], value[:-1], value[:8] + b"\x7f"):
        with pytest.raises(CorruptRecordError, match="leader change value"):
            parse_kraft_control(ControlType.LEADER_CHANGE, bad)


@pytest.mark.parametrize("as_json", [False, True])
def test_zeros_after_the_last_batch_are_one_line_and_status_1(capsys, tmp_path, as_json) -> None:
    """Bytes that are there and wrong (not a torn tail): no "invalid bytes" line, one
    stderr line naming the file and position, status 1 (Kafka's dump stops there too)."""
    src = FIXTURES / "first-0" / "00000000000000000000.log"
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes() + bytes(100))
    assert main(["dump", *(["--json"] if as_json else []), str(path)]) == 1
    got = capsys.readouterr()
    err = got.err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "position 572" in err[0], err
    assert "invalid bytes" not in got.out
    if as_json:
        last = json.loads(got.out.splitlines()[-1])
        assert last["valid_bytes"] == 572 and str(path) in last["error"]
