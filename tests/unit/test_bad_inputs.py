"""Issue 16 items 6-9 on the Spark-free side: bad inputs and edge values get one error
line and exit 2 (or a message where Kafka answers "nothing"), never a traceback, an
overflow or a silently partial answer."""

from __future__ import annotations

import errno
import json
import os
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import seglake
from seglake import fs as lakefs
from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.errors import FileSystemError, InputSchemaError, InvalidTopicError, NoSpaceError
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.record.schema import MAX_TIMESTAMP_MS
from seglake.render import iso
from seglake.spark.ingest_plan import plan_ingest
from seglake.storage.log import PartitionLog
from seglake.storage.naming import partition_dir_name
from seglake.storage.writer import SegmentWriter
from tests.unit.test_cli import one_error_line


def _log(
    tmp_path: Path, n: int = 30, name: str = "t-0", ts0: int = 1_000_000, first: int = 0
) -> Path:
    d = tmp_path / name
    d.mkdir()
    recs = pa.table(
        {
            "offset": pa.array(first + np.arange(n), pa.int64()),
            "timestamp": pa.array(ts0 + np.arange(n) * 10, pa.int64()),
            "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        }
    )
    PartitionLog.open(str(d)).append(recs, config=LogConfig(batch_size=100))
    return d


# -- item 9: dump of an index lists every entry and flags the bad ones -------------------
@pytest.mark.parametrize("as_json", [False, True])
def test_dump_time_index_with_decreasing_timestamps_lists_all(capsys, tmp_path, as_json) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    entries = [(1_000 + 10 * i, i) for i in range(68)]
    entries[1] = (5, 1)  # goes back: entry 1 and entry 2 break the order
    path.write_bytes(b"".join(struct.pack(">qi", t, o) for t, o in entries) + bytes(12 * 5))
    assert main(["dump", *(["--json"] if as_json else []), str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    listed = (
        [json.loads(x) for x in out] if as_json else [x for x in out if x.startswith("timestamp")]
    )
    assert len(listed) == 68
    if as_json:
        assert [(e["timestamp"], e["offset"] - 100) for e in listed] == entries
        assert [i for i, e in enumerate(listed) if "error" in e] == [1]
    else:
        assert listed[0] == "timestamp: 1000 offset: 100"
        assert [i for i, x in enumerate(listed) if "INVALID" in x] == [1]
        assert out[-1].startswith("Found 1 invalid entry of 68")


def test_dump_offset_index_out_of_order_entry_flagged(capsys, tmp_path) -> None:
    path = tmp_path / "00000000000000000000.index"
    entries = [(1, 0), (5, 300), (3, 100), (9, 900)]
    path.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries))
    assert main(["dump", "--json", str(path)]) == 1
    listed = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(e["offset"], e["position"]) for e in listed] == entries
    assert [i for i, e in enumerate(listed) if "error" in e] == [2]


def test_dump_good_indexes_unchanged(capsys, tmp_path) -> None:
    d = _log(tmp_path)
    for f in sorted(d.glob("*index")):
        assert main(["dump", str(f)]) == 0
    out = capsys.readouterr().out
    assert "INVALID" not in out and "offset: " in out and "timestamp: " in out


# -- item 7: the CLI's reads never answer "nothing" for a directory that is not a log ----
@pytest.mark.parametrize("files", [[], ["0.log", "orders.log", "00000000000000000000.lg"]])
@pytest.mark.parametrize("command", [["read", "--offset", "0"], ["offset-for-time", "DIR", "0"]])
def test_reads_of_a_directory_without_segments_are_an_error(capsys, tmp_path, files, command):
    d = tmp_path / "t-0"
    d.mkdir()
    for f in files:
        (d / f).write_bytes(b"x")
    argv = [command[0], str(d), *command[1:]] if command[0] == "read" else [command[0], str(d), "0"]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert str(d) in line and "no segment" in line
    assert all(f in line for f in files)


def test_read_at_and_past_the_log_end(capsys, tmp_path) -> None:
    d = _log(tmp_path, n=30)
    assert main(["read", str(d), "--offset", "31"]) == 2
    line = one_error_line(capsys)
    assert "offset 31 is out of range" in line and "0..29" in line
    assert main(["read", str(d), "--offset", "30"]) == 0
    got = capsys.readouterr()
    assert got.out == "" and "offset 30 is the log end offset" in got.err
    assert main(["read", str(d), "--offset", "29", "--json"]) == 0
    assert [json.loads(x)["offset"] for x in capsys.readouterr().out.splitlines()] == [29]


def test_read_below_the_log_start_says_where_it_starts(capsys, tmp_path) -> None:
    d = _log(tmp_path, n=30, first=100)
    assert main(["read", str(d), "--offset", "7", "--max-records", "2", "--json"]) == 0
    got = capsys.readouterr()
    assert [json.loads(x)["offset"] for x in got.out.splitlines()] == [100, 101]
    assert "offset 7 is below the log start offset 100" in got.err


def test_offset_for_time_takes_iso_times(capsys, tmp_path) -> None:
    d = _log(tmp_path, n=30, ts0=1_767_225_600_000)
    assert main(["offset-for-time", str(d), "2026-01-01T00:00:00.015Z"]) == 0
    assert json.loads(capsys.readouterr().out) == {"offset": 2, "timestamp": 1_767_225_600_020}
    assert main(["offset-for-time", str(d), "yesterday"]) == 2
    assert "yesterday" in one_error_line(capsys)


def test_cleanup_of_a_path_that_is_not_a_lake(capsys, tmp_path) -> None:
    _log(tmp_path)
    for path in (tmp_path, tmp_path / "missing"):
        assert main(["cleanup", str(path)]) == 2
        assert "not a lake" in one_error_line(capsys)
    (tmp_path / "_staging").mkdir()  # a first run that died before its commit
    assert main(["cleanup", str(tmp_path)]) == 0


# -- item 6: a full disk and over-long directory names -----------------------------------
class _FullDisk:
    """A local file system whose disk fills after ``budget`` written bytes (or whose
    writes past it fail with another ``errno``: EFBIG, a file-size limit)."""

    def __init__(self, budget: int, code: int = errno.ENOSPC) -> None:
        self.local, self.budget, self.opened = pafs.LocalFileSystem(), budget, []
        self.code = code

    def __getattr__(self, name):
        return getattr(self.local, name)

    def open_output_stream(self, path, *args, **kwargs):
        self.opened.append(path)
        stream, disk = self.local.open_output_stream(path, *args, **kwargs), self

        class Stream:
            def write(self, data) -> int:
                if len(data) > disk.budget:
                    raise OSError(
                        disk.code, f"Error writing bytes to file: {os.strerror(disk.code)}"
                    )
                disk.budget -= len(data)
                return stream.write(data)

            def close(self) -> None:
                stream.close()

            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                stream.close()

        return Stream()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
@pytest.mark.parametrize("budget", [0, 3000, 5000])
def test_writer_on_a_full_disk_names_the_file(tmp_path, budget, code) -> None:
    """EFBIG (issue 25.6; old code: a bare OSError, the stream left open)."""
    disk = _FullDisk(budget, code)
    w = SegmentWriter(disk, str(tmp_path / "t-0"), config=LogConfig(segment_bytes=2000))
    recs = pa.table(
        {
            "offset": pa.array(np.arange(200), pa.int64()),
            "timestamp": pa.array(np.arange(200), pa.int64()),
            "value": pa.array([bytes(40)] * 200, pa.binary()),
        }
    )
    with pytest.raises(FileSystemError) as err:
        w.append(recs)
        w.close()
    msg = str(err.value)
    assert isinstance(err.value, NoSpaceError) == (code == errno.ENOSPC)
    assert ("no space left" if code == errno.ENOSPC else "(EFBIG)") in msg and "\n" not in msg
    assert w._open is None  # the stream was closed
    assert msg.split(":")[0] in [p.rsplit(".tmp", 1)[0] for p in disk.opened]


def test_write_bytes_on_a_full_disk(tmp_path) -> None:
    with pytest.raises(NoSpaceError, match=r"x\.bin: no space left"):
        lakefs.write_bytes(_FullDisk(3), str(tmp_path / "x.bin"), b"abcdef")
    assert [p.name for p in tmp_path.iterdir()] == []  # the temporary file is gone


def test_partition_directory_must_fit_name_max() -> None:
    topic = "a" * 249
    assert partition_dir_name(topic, 99999) == f"{topic}-99999"  # 255 characters
    with pytest.raises(InvalidTopicError, match=r"256 characters.*partitions up to 99999"):
        partition_dir_name(topic, 100000)
    with pytest.raises(InvalidTopicError, match="more than the 255"):
        plan_ingest(
            [
                {
                    "task": 0,
                    "topic": "b" * 245,
                    "partition": 2**31 - 1,
                    "count": 1,
                    "lo": None,
                    "hi": None,
                }
            ],
            {},
            LogConfig(),
            has_offset=False,
        )


# -- item 8: edge timestamps ------------------------------------------------------------
Y2300, Y10000, FAR = 10_413_792_000_000, 253_402_300_800_000, 2**62


@pytest.mark.parametrize("bad", [-1, -7, MAX_TIMESTAMP_MS + 1, 2**63 - 1])
def test_writer_refuses_what_kafka_refuses(tmp_path, bad) -> None:
    recs = pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "timestamp": pa.array([5, bad], pa.int64()),
            "value": pa.array([b"a", b"b"]),
        }
    )
    (tmp_path / "t-0").mkdir()
    with pytest.raises(InputSchemaError, match=rf"t-0: row 1: timestamp {bad} is out of range"):
        PartitionLog.open(str(tmp_path / "t-0")).append(recs, config=LogConfig())
    assert not list((tmp_path / "t-0").glob("*.log"))


@pytest.fixture
def far_lake(tmp_path, monkeypatch) -> str:
    """A lake registered from a broker directory whose records are in 1970, 2300, 10000
    and (as a broker may write, past what a microsecond timestamp holds) 146140482."""
    monkeypatch.setattr(SegmentWriter, "_check_timestamps", lambda self, records: None)
    d = tmp_path / "broker" / "far-0"
    d.mkdir(parents=True)
    recs = pa.table(
        {
            "offset": pa.array(range(4), pa.int64()),
            "timestamp": pa.array([1_000, Y2300, Y10000, FAR], pa.int64()),
            "value": pa.array([b"a"] * 4),
        }
    )
    # one batch per record, one index entry per batch: each record is a chunk of its own
    PartitionLog.open(str(d)).append(recs, config=LogConfig(batch_size=1, index_interval_bytes=1))
    register(LakeHandle.open(str(tmp_path / "lake")), str(tmp_path / "broker"))
    return str(tmp_path / "lake")


def test_far_future_timestamps_are_shown_without_overflow(far_lake) -> None:
    lake = seglake.open(far_lake)
    d = lake.describe()
    assert d.max_timestamp_utc.dtype.unit == "ms"
    assert int(d.max_timestamp_utc[0].asm8.view("i8")) == FAR  # ms, exactly
    html = lake._repr_html_() + lake.partition("far", 0)._repr_html_()
    assert "146140482-04-24 15:36:27.904" in html and "1970-01-01 00:00:01.000" in html
    assert [iso(t) for t in (Y2300, Y10000)] == [
        "2300-01-01 00:00:00.000",
        "10000-01-01 00:00:00.000",
    ]
    p = lake.partition("far", 0)
    got = p.read(0, 3, as_="arrow").column("timestamp").cast(pa.int64()).to_pylist()
    assert got == [1_000_000, Y2300 * 1000, Y10000 * 1000]  # microseconds, Kafka source
    frame = p.read(0, 3)
    assert str(frame.timestamp[2]) == "10000-01-01 00:00:00+00:00"
    assert p.range(Y2300, Y10000 + 1).offset.tolist() == [1, 2]
    # past year 294247 no microsecond timestamp holds it: a clear error, never a
    # wrapped-around 1970 time (the lake's ingest refuses such records)
    with pytest.raises(InputSchemaError, match=r"far-0 offset 3: timestamp 4611686018427387904"):
        p.read(3, 1)
