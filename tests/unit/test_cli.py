"""The ``seglake`` command in-process (``main([...])``) and once as the console script."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.record.schema import HEADERS_TYPE
from seglake.storage.log import PartitionLog
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SEGLAKE = ROOT / ".venv" / "bin" / "seglake"


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    d = tmp_path / "orders-0"
    d.mkdir()
    n = 60
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_000_000 + np.arange(n) * 10, pa.int64()),
            "key": pa.array([None if i == 3 else f"k{i}".encode() for i in range(n)], pa.binary()),
            "value": pa.array([None if i == 4 else bytes([i, 255]) for i in range(n)], pa.binary()),
            "headers": pa.array([[{"key": "h", "value": b"\x01"}]] * n, HEADERS_TYPE),
        }
    )
    PartitionLog.open(str(d)).append(
        recs, config=LogConfig(batch_size=200, compression_type="gzip")
    )
    return d


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seglake: error: ")
    return err[0]


def test_missing_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    assert main(["dump", str(path)]) == 2
    assert str(path) in one_error_line(capsys)


def test_missing_index_and_partition_dir(capsys, tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    assert main(["dump", str(path)]) == 2
    assert str(path) in one_error_line(capsys)
    assert main(["offset-for-time", str(tmp_path / "nope-0"), "5"]) == 2
    assert "nope-0" in one_error_line(capsys)
    assert main(["read", str(tmp_path / "nope-0"), "--offset", "0"]) == 2
    assert "nope-0" in one_error_line(capsys)


def test_not_a_segment_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    assert main(["dump", str(path)]) == 2
    assert str(path) in one_error_line(capsys)


def test_corrupt_log_bit_flip(capsys, partition: Path, tmp_path: Path) -> None:
    log = sorted(partition.glob("*.log"))[0]
    data = bytearray(log.read_bytes())
    bad = tmp_path / log.name
    data[len(data) // 2] ^= 0x10
    bad.write_bytes(bytes(data))
    status = main(["dump", "--json", str(bad)])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert any(x.get("crc_valid") is False for x in lines), lines
    assert status in (0, 1)


def test_corrupt_log_truncated_tail(capsys, partition: Path, tmp_path: Path) -> None:
    """A torn tail is Kafka's "invalid bytes at the end" (status 0, as kafka-dump-log)."""
    log = sorted(partition.glob("*.log"))[0]
    data = log.read_bytes()
    bad = tmp_path / log.name
    bad.write_bytes(data[:-7])
    assert main(["dump", "--json", str(bad)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    batches, tail = lines[:-1], lines[-1]
    last = batches[-1]
    assert tail["valid_bytes"] == last["position"] + last["size"] < len(data) - 7
    assert tail["invalid_bytes"] == len(data) - 7 - tail["valid_bytes"]
    assert all(b["crc_valid"] for b in batches)
    # text mode says it too
    assert main(["dump", str(bad)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(f"Found {tail['invalid_bytes']} invalid bytes at the end of {bad.name}\n")


def test_dump_text_and_print_data(capsys, partition: Path) -> None:
    log = sorted(partition.glob("*.log"))[0]
    assert main(["dump", "--print-data-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Dumping {log}")
    assert "compresscodec: gzip" in out and "| offset: 0 " in out and "key: k0" in out
    assert "keySize: -1" in out  # the null key of offset 3


def test_offset_for_time(capsys, partition: Path) -> None:
    cases = {
        "1000005": {"offset": 1, "timestamp": 1000010},
        "1000000": {"offset": 0, "timestamp": 1000000},
        "9999999": {"offset": None},
        "-1": {"offset": 60, "timestamp": -1},
        "-2": {"offset": 0, "timestamp": -1},
        "-3": {"offset": 59, "timestamp": 1000590},
    }
    for ts, want in cases.items():
        assert main(["offset-for-time", str(partition), ts]) == 0
        assert json.loads(capsys.readouterr().out) == want, ts


def test_read_json(capsys, partition: Path) -> None:
    assert main(["read", str(partition), "--offset", "2", "--max-records", "3", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["offset"] for r in rows] == [2, 3, 4]
    assert rows[0]["key"] == base64.b64encode(b"k2").decode()
    assert rows[0]["value"] == base64.b64encode(bytes([2, 255])).decode()
    assert rows[1]["key"] is None and rows[2]["value"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": base64.b64encode(b"\x01").decode()}]
    assert rows[0]["timestamp"] == 1_000_020


def test_read_past_end_prints_nothing(capsys, partition: Path) -> None:
    assert main(["read", str(partition), "--offset", "60", "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_index_checks_on_written_segments(capsys, partition: Path) -> None:
    files = [
        str(p) for p in sorted(partition.glob("*.index")) + sorted(partition.glob("*.timeindex"))
    ]
    assert main(["dump", "--index-sanity-check", *files]) == 0
    assert main(["dump", "--verify-index-only", *files]) == 0
    capsys.readouterr()


def test_index_sanity_check_fails_on_garbage(capsys, partition: Path, tmp_path: Path) -> None:
    idx = tmp_path / "00000000000000000000.index"
    idx.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x10\x00\x00\x00\x02\x00\x00\x00\x08")
    assert main(["dump", "--index-sanity-check", str(idx)]) == 1
    assert "failed sanity check" in capsys.readouterr().out


def test_console_script(tmp_path: Path) -> None:
    src = FIXTURES / "first-0" / "00000000000000000000.log"
    out = subprocess.run(
        [str(SEGLAKE), "dump", "--json", str(src)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 7
    missing = tmp_path / "00000000000000000000.log"
    out = subprocess.run(
        [str(SEGLAKE), "dump", str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and str(missing) in out.stderr


def test_dump_byte_limit_is_not_reported_as_corruption(partition: Path) -> None:
    import io

    from seglake.cli.dump import dump
    from seglake.record.batch import scan_batches

    log = next(partition.glob("*.log"))
    data = log.read_bytes()
    scan = scan_batches(data)
    limit = int(scan.position[2] + scan.size[2] // 2)  # cuts the third batch
    buf = io.StringIO()
    assert dump([str(log)], max_bytes=limit, out=buf) == 0
    text = buf.getvalue()
    assert text.count("baseOffset:") == 2
    assert "invalid bytes" not in text  # as Kafka: a byte limit is not a torn tail
