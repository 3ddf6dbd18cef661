"""``seglake consume``: kafka-console-consumer's output, byte for byte, from a broker's
partition directories (kafka-python decoding them is the oracle) and from a lake; its
offset/time bounds, read_committed, bad input, a closed pipe and bounded memory."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake.cli.consume import Formatter as SeglakeFormatter
from seglake.cli.consume import consume, partition_logs
from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.record.batch import scan_batches
from seglake.record.control import ControlType
from seglake.storage.log import PartitionLog
from seglake.storage.recovery import recover_partition
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_decode import control_batch, kafka_python_rows, raw_batch, raw_record
from tests.unit.test_recovery import make_lake, pristine  # noqa: F401

ALL = [
    "print.timestamp=true",
    "print.partition=true",
    "print.offset=true",
    "print.headers=true",
    "print.key=true",
]


def oracle(d: Path) -> list[dict]:
    """Every data record of the ``.log`` files of ``d``, decoded by kafka-python."""
    return [r for f in sorted(d.glob("*.log")) for r in kafka_python_rows(f.read_bytes())]


def kafka_line(r: dict, partition: int, props: dict[str, str]) -> bytes:
    """DefaultMessageFormatter.writeTo, written out from Kafka's source for the test."""

    def flag(name: str, default: str = "false") -> bool:  # trim().equalsIgnoreCase("true")
        return props.get(f"print.{name}", default).strip().lower() == "true"

    on = {k: flag(k) for k in ("timestamp", "partition", "offset", "headers", "key")}
    on["value"] = flag("value", "true")
    ksep = props.get("key.separator", "\t").encode()
    lsep = props.get("line.separator", "\n").encode()
    null = props.get("null.literal", "null").encode()
    fields = []
    if on["timestamp"]:
        fields.append(("CreateTime" if r["timestamp_type"] == 0 else "LogAppendTime").encode())
        fields[-1] += b":" + str(r["timestamp"]).encode()
    if on["partition"]:
        fields.append(b"Partition:" + str(partition).encode())
    if on["offset"]:
        fields.append(b"Offset:" + str(r["offset"]).encode())
    if on["headers"]:
        hs = [
            k.encode() + b":" + (null if v is None else v)
            for k, v in ((h["key"], h["value"]) for h in r["headers"])
        ]
        fields.append(b",".join(hs) if hs else b"NO_HEADERS")
    if on["key"]:
        fields.append(null if r["key"] is None else r["key"])
    if on["value"]:
        fields.append(null if r["value"] is None else r["value"])
    return ksep.join(fields) + lsep if fields else b""


def run_cli(capsysbinary, *argv: str) -> tuple[int, bytes, str]:
    rc = main(["consume", *argv])
    cap = capsysbinary.readouterr()
    return rc, cap.out, cap.err.decode()


@pytest.mark.parametrize(
    "props",
    [
        [],
        ALL,
        [*ALL, "key.separator=|", "line.separator=;\n", "print.value=false"],
        ["print.key=TRUE", "null.literal=<none>", "print.offset=true"],
    ],
)
@pytest.mark.parametrize("name", ["first-0", "sensor-data-0", "__consumer_offsets-0"])
def test_broker_partition_byte_exact(capsysbinary, name: str, props: list[str]) -> None:
    d = FIXTURES / name
    topic, part = name.rsplit("-", 1)
    want = oracle(d)
    p = dict(x.split("=", 1) for x in props)
    args = [str(d), "--topic", topic] + [a for x in props for a in ("--property", x)]
    rc, out, err = run_cli(capsysbinary, *args)
    assert rc == 0
    assert out == b"".join(kafka_line(r, int(part), p) for r in want)
    assert err == f"Processed a total of {len(want)} messages\n"


def test_lake_all_partitions_offsets_times_and_limits(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    capsysbinary,
) -> None:
    root = tmp_path / "lake"
    make_lake(root, pristine, "t", 1)
    make_lake(root, pristine, "t", 0)
    make_lake(root, pristine, "other", 0)
    want = oracle(root / "t-0")
    assert len(want) > 100
    line = lambda r, p: kafka_line(r, p, {"print.partition": "true", "print.offset": "true"})  # noqa: E731
    props = ["--property", "print.partition=true", "--property", "print.offset=true"]
    rc, out, err = run_cli(capsysbinary, str(root), "--topic", "t", *props)
    assert rc == 0
    assert out == b"".join(line(r, 0) for r in want) + b"".join(line(r, 1) for r in want)
    assert err == f"Processed a total of {2 * len(want)} messages\n"
    # --partition, --offset, --max-messages
    _, out, err = run_cli(
        capsysbinary, str(root), "--topic", "t", "--partition", "1", "--offset", "57",
        "--max-messages", "9", *props,
    )  # fmt: skip
    assert out == b"".join(line(r, 1) for r in want if r["offset"] >= 57)[: len(out)]
    assert out.count(b"\n") == 9 and err == "Processed a total of 9 messages\n"
    # --offset latest: nothing; --from-timestamp / --to-timestamp: offsetsForTimes of each
    assert run_cli(capsysbinary, str(root), "--topic", "t", "--offset", "latest")[1] == b""
    ts = sorted(r["timestamp"] for r in want)
    lo, hi = ts[40], ts[90]
    _, out, _ = run_cli(
        capsysbinary, str(root), "--topic", "t", "--partition", "0",
        "--from-timestamp", str(lo), "--to-timestamp", str(hi), *props,
    )  # fmt: skip
    first = min(r["offset"] for r in want if r["timestamp"] >= lo)
    end = min(r["offset"] for r in want if r["timestamp"] >= hi)
    assert out == b"".join(line(r, 0) for r in want if first <= r["offset"] < end)
    iso = np.datetime64(lo, "ms").astype(str) + "Z"
    _, out2, _ = run_cli(
        capsysbinary, str(root), "--topic", "t", "--partition", "0",
        "--from-timestamp", iso, "--to-timestamp", str(hi), *props,
    )  # fmt: skip
    assert out2 == out
    # json: one object per record, with topic and partition
    _, out, _ = run_cli(capsysbinary, str(root), "--topic", "other", "--formatter", "json")
    lines = out.splitlines()
    assert len(lines) == len(want) and b'"topic": "other", "partition": 0' in lines[0]


def test_read_committed_drops_aborted_transactions(tmp_path: Path, capsysbinary) -> None:
    d = tmp_path / "tx-0"
    d.mkdir()
    TXN = 0x10

    def rec(v: bytes) -> bytes:
        return raw_record(0, 0, b"k", v)

    buf = (
        raw_batch(rec(b"a0"), 1, base_offset=0, attributes=TXN, producer_id=7)
        + raw_batch(rec(b"c1"), 1, base_offset=1, attributes=TXN, producer_id=8)
        + raw_batch(rec(b"a2"), 1, base_offset=2, attributes=TXN, producer_id=7)
        + control_batch(ControlType.ABORT, base_offset=3, producer_id=7)
        + control_batch(ControlType.COMMIT, base_offset=4, producer_id=8)
        + raw_batch(rec(b"p5"), 1, base_offset=5)
    )
    (d / "00000000000000000000.log").write_bytes(buf)
    recover_partition(str(d))  # writes the .txnindex
    assert run_cli(capsysbinary, str(d), "--topic", "tx")[1] == b"a0\nc1\na2\np5\n"
    _, out, err = run_cli(
        capsysbinary, str(d), "--topic", "tx", "--isolation-level", "read_committed"
    )
    assert out == b"c1\np5\n" and err == "Processed a total of 2 messages\n"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--topic", "first", "--property", "print.key"], "NAME=VALUE"),
        (["--topic", "first", "--property", "print.colour=true"], "unknown"),
        (["--topic", "first", "--offset", "soon"], "soon"),
        (["--topic", "first", "--offset", "3"], "--partition"),
        (["--topic", "second"], "first-0"),
        (["--topic", "first", "--from-timestamp", "yesterday"], "yesterday"),
        (["--topic", "first", "--formatter", "xml"], "xml"),
        ([], "--topic"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv: list[str], words: str) -> None:
    try:
        rc = main(["consume", str(FIXTURES / "first-0"), *argv])
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_missing_lake_topic_and_partition(tmp_path: Path, pristine: Path, capsys) -> None:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    assert main(["consume", str(root), "--topic", "nope"]) == 2
    assert main(["consume", str(root), "--topic", "t", "--partition", "4"]) == 2
    assert main(["consume", str(tmp_path / "missing-0"), "--topic", "missing"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "nope" in err[0] and "partition 4" in err[1]


# ----------------------------------------------------------------- streaming


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """One partition of 60,000 records of 200 bytes (12 MB of values)."""
    d = tmp_path_factory.mktemp("big") / "big-0"
    d.mkdir()
    n = 60_000
    t = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array([b"%07d" % i + b"x" * 193 for i in range(n)], pa.binary()),
        }
    )
    PartitionLog.open(str(d)).append(t, config=LogConfig(segment_bytes=4 << 20))
    return d


class _Count:
    def __init__(self) -> None:
        self.bytes = 0
        self.lines = 0

    def write(self, b: bytes) -> int:
        self.bytes += len(b)
        self.lines += b.count(b"\n")
        return len(b)


def test_memory_stays_bounded(big: Path) -> None:
    """Peak traced memory of the whole read stays far below the partition's 12 MB (the
    chunks are bounded); a whole-partition read would hold all of it at once."""
    logs = partition_logs(str(big), "big", None)
    sink = _Count()
    tracemalloc.start()
    try:
        n = consume(str(big), logs, sink, SeglakeFormatter(), chunk_records=500)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == sink.lines == 60_000 and sink.bytes == 60_000 * 201
    assert peak < 3 << 20, peak


def test_closed_pipe_exits_quietly(big: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'lib'}{os.pathsep}{ROOT}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglake.cli.main", "consume", str(big), "--topic", "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=120)
    assert first == b"0000000" + b"x" * 193 + b"\n"
    assert rc == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_shell_head(big: Path, tmp_path: Path) -> None:
    """`seglake consume ... | head -1` in a shell: status 0 and no message."""
    shutil.which("sh") or pytest.skip("no sh")
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'lib'}{os.pathsep}{ROOT}")
    cmd = f"{sys.executable} -m seglake.cli.main consume {big} --topic big | head -1"
    res = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, env=env, timeout=120
    )
    assert res.returncode == 0 and res.stdout.startswith(b"0000000x") and res.stderr == b""


def test_damaged_batch_is_an_error_or_skipped_and_named(tmp_path: Path, capsysbinary) -> None:
    """A flipped bit in a middle batch: one line and exit 2, or with --skip-corrupt every
    other record and one warning naming the batch."""
    d = tmp_path / "first-0"
    shutil.copytree(FIXTURES / "first-0", d)
    log = next(d.glob("*.log"))
    buf = bytearray(log.read_bytes())
    scan = scan_batches(bytes(buf))
    k = len(scan) // 2
    buf[int(scan.position[k]) + int(scan.size[k]) - 1] ^= 0x01  # in its records: CRC
    log.write_bytes(bytes(buf))
    lo, hi = int(scan.base_offset[k]), int(scan.last_offset[k])
    want = [r for r in oracle(FIXTURES / "first-0") if not lo <= r["offset"] <= hi]
    rc, out, err = run_cli(capsysbinary, str(d), "--topic", "first")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "CRC" in err, err
    rc, out, err = run_cli(capsysbinary, str(d), "--topic", "first", "--skip-corrupt")
    assert rc == 0 and out == b"".join(kafka_line(r, 0, {}) for r in want)
    lines = err.splitlines()
    assert len(lines) == 2 and "skipped a damaged batch" in lines[0] and str(log) in lines[0]
    assert lines[1] == f"Processed a total of {len(want)} messages"


def _txn_partition(d: Path) -> None:
    """Three segments of one partition with transactions of four producers, two
    aborted across a segment boundary (producer 7: offsets 0..4, ABORT at 5)."""
    TXN = 0x10

    def b(values: list[bytes], base: int, pid: int = -1, txn: bool = False) -> bytes:
        block = b"".join(raw_record(0, i, b"k", v) for i, v in enumerate(values))
        return raw_batch(
            block, len(values), base_offset=base, attributes=TXN if txn else 0, producer_id=pid
        )

    def c(kind: ControlType, base: int, pid: int) -> bytes:
        return control_batch(kind, base_offset=base, producer_id=pid)

    abort, commit = ControlType.ABORT, ControlType.COMMIT
    segments = {
        0: [b([b"a0", b"a1"], 0, 7, True), b([b"c2"], 2, 8, True), b([b"p3"], 3)],
        5: [c(abort, 5, 7), b([b"c6"], 6, 8, True), c(commit, 7, 8), b([b"a8"], 8, 9, True)],
        9: [b([b"a9"], 9, 9, True), c(abort, 10, 9), b([b"p11"], 11)],
    }
    segments[0].append(b([b"a4"], 4, 7, True))
    segments[9] += [b([b"a12"], 12, 10, True), c(abort, 13, 10), b([b"p14"], 14)]
    d.mkdir(parents=True)
    for base, batches in segments.items():
        (d / f"{base:020d}.log").write_bytes(b"".join(batches))
    recover_partition(str(d))  # writes each segment's .txnindex


def test_read_committed_across_segments_and_limits(tmp_path: Path, capsysbinary) -> None:
    """Aborted transactions whose markers lie in a later segment than their records are
    dropped under read_committed, from any start offset and with any limit (the read's
    plan collects them from the segment holding the start on)."""
    d = tmp_path / "tx-0"
    _txn_partition(d)
    every = b"a0 a1 c2 p3 a4 c6 a8 a9 p11 a12 p14".split()
    committed = b"c2 p3 c6 p11 p14".split()
    assert run_cli(capsysbinary, str(d), "--topic", "tx")[1] == b"\n".join(every) + b"\n"
    rc_args = ["--topic", "tx", "--isolation-level", "read_committed"]
    _, out, err = run_cli(capsysbinary, str(d), *rc_args)
    assert out == b"\n".join(committed) + b"\n" and err.endswith(" 5 messages\n")
    _, out, _ = run_cli(capsysbinary, str(d), *rc_args, "--partition", "0", "--offset", "4")
    assert out == b"c6\np11\np14\n"
    _, out, _ = run_cli(capsysbinary, str(d), *rc_args, "--max-messages", "3")
    assert out == b"c2\np3\nc6\n"
    _, out, _ = run_cli(capsysbinary, str(d), "--topic", "tx", "--max-messages", "6")
    assert out == b"\n".join(every[:6]) + b"\n"
    assert main(["read", str(d), "--offset", "4", "--max-records", "4"]) == 0
    read = capsysbinary.readouterr().out.splitlines()
    assert [line.split(b" ")[1] for line in read] == [b"4", b"6", b"8", b"9"]


def test_key_filter_equals_a_filter_over_the_plain_output(tmp_path: Path, capsysbinary) -> None:
    """``--key K`` (repeatable): the plain output's records with those keys, through the
    key index (a segment whose ``.keyindex`` is gone is scanned, with a warning), under
    both isolation levels and with ``--max-messages``."""
    from tests.unit.test_api import append
    from tests.unit.test_api import records as api_records

    root = tmp_path / "lake"
    root.mkdir()
    recs = api_records(0, 400, 1)
    keys = [None if i % 9 == 0 else f"c{i // 40}".encode() for i in range(400)]
    append(root, "c", 0, recs.set_column(2, "key", pa.array(keys, pa.binary())), "r1")
    rc, plain, _ = run_cli(capsysbinary, str(root), "--topic", "c", "--formatter", "json")
    assert rc == 0
    rows = [json.loads(line) for line in plain.splitlines()]
    b64 = lambda k: base64.b64encode(k).decode()  # noqa: E731
    for asked in (["c3"], ["c1", "c7", "absent", "c1"], ["absent"]):
        want = {b64(k.encode()) for k in asked}
        expected = [r for r in rows if r["key"] in want]
        argv = [a for k in asked for a in ("--key", k)]
        rc, out, err = run_cli(
            capsysbinary, str(root), "--topic", "c", "--formatter", "json", *argv
        )
        assert rc == 0 and [json.loads(line) for line in out.splitlines()] == expected
        assert err == f"Processed a total of {len(expected)} messages\n", asked
    _, out, _ = run_cli(
        capsysbinary, str(root), "--topic", "c", "--key", "c5", "--max-messages", "3"
    )
    assert (
        out
        == b"".join(base64.b64decode(r["value"]) + b"\n" for r in rows if r["key"] == b64(b"c5"))[
            : len(out)
        ]
        and out.count(b"\n") == 3
    )
    sorted(root.glob("c-0/*.keyindex"))[1].unlink()  # scanned, still right, and said
    with pytest.warns(UserWarning, match="without a key index.*keyindex: missing"):
        _, out, _ = run_cli(
            capsysbinary, str(root), "--topic", "c", "--formatter", "json", "--key", "c4"
        )
    assert [json.loads(line) for line in out.splitlines()] == [
        r for r in rows if r["key"] == b64(b"c4")
    ]
    d = tmp_path / "tx-0"  # transactions: every key b"k"
    _txn_partition(d)
    rc_args = ["--topic", "tx", "--isolation-level", "read_committed"]
    assert run_cli(capsysbinary, str(d), *rc_args, "--key", "k")[1] == b"c2\np3\nc6\np11\np14\n"
    assert run_cli(capsysbinary, str(d), *rc_args, "--key", "x")[1] == b""
