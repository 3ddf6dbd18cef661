"""Kafka itself as the judge of seglake's bytes, and of ``seglake dump``.

Every kind of file seglake writes (ingest with each codec and LogAppendTime, a one-pass
ingest's rebased segment, non-monotonic timestamps, transactions with their markers and
``.txnindex``, compaction with delete horizons, merge, stream-sink appends in place,
recovery output, torn copies) and the broker fixtures go through Kafka 4.1's own
``DumpLogSegments`` (kafka-dump-log.sh), one JVM per option set over many files:

* ``--deep-iteration --print-data-log`` over every file: no exception, every batch
  ``isvalid: true``, and each batch's fields and each record's offset, timestamp, key,
  value, header keys and sequence, parsed from Kafka's text, equal seglake's own decode;
* ``--index-sanity-check`` and ``--verify-index-only`` over every index: each passes,
  Kafka reports no mismatch (and on damaged copies, seglake reports what Kafka reports);
* each time ``seglake dump`` with the same options prints exactly Kafka's stdout (and the
  same non-consecutive-offset report on stderr); likewise ``--skip-record-metadata``,
  ``--max-bytes`` and the three internal-topic decoders.

Skipped, saying why, only without java or the jars (``make jars``).
"""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import RecoverOptions, recover_lake
from seglake.record.batch import increment_sequence, scan_batches
from seglake.record.codecs import NAMES
from seglake.record.reader import decode_batches
from seglake.record.schema import HEADERS_TYPE
from seglake.spark.ingest_rebase import _patch
from seglake.storage.log import PartitionLog
from seglake.storage.naming import segment_file_name
from tests.conftest import FIXTURES
from tests.kafka_tools import dump_log_segments, require_kafka_tools
from tests.unit.test_compact_rules import COMPACT, NOW, keyed_lake, txn_lake
from tests.unit.test_merge import MERGE
from tests.unit.test_recovery import make_lake, write_partition
from tests.unit.test_stream_commit import _batches, _commit

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def _records(n: int, seed: int) -> pa.Table:
    """Text keys and values (Kafka's dump prints them as UTF-8), null keys, a null and an
    empty value, headers, non-monotonic CreateTime."""
    rng = np.random.default_rng(seed)
    keys = [None if i % 7 == 3 else f"key-{i % 13}".encode() for i in range(n)]
    values = [
        None
        if i == 5
        else b""
        if i == 6
        else f"value {i} {'x' * int(rng.integers(0, 40))}".encode()
        for i in range(n)
    ]
    headers = [
        [{"key": f"h{j}", "value": None if j == 1 else b"hv"} for j in range(i % 3)]
        for i in range(n)
    ]
    return pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n) * 10 + rng.integers(-40, 40, n)),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, fixtures_dir: Path) -> dict[str, Path]:
    """One directory per kind of output seglake writes, each made by the library calls
    the jobs use (no Spark)."""
    require_kafka_tools()
    top = tmp_path_factory.mktemp("kafka-judge")
    out: dict[str, Path] = {}
    for i, codec in enumerate(CODECS):
        d = top / f"ingest-{codec}" / "t-0"
        d.mkdir(parents=True)
        cfg = LogConfig(segment_bytes=4000, batch_size=400, compression_type=codec)
        PartitionLog.open(str(d), index_interval_bytes=512).append(_records(300, i), config=cfg)
        out[f"ingest-{codec}"] = d
    d = top / "ingest-logappendtime" / "t-0"
    d.mkdir(parents=True)
    cfg = LogConfig(segment_bytes=4000, batch_size=400)
    appended = _records(120, 9)  # LogAppendTime: one append time per batch (the ingest's)
    appended = appended.append_column("timestamp_type", pa.array([1] * 120, pa.int32()))
    PartitionLog.open(str(d)).append(appended, config=cfg)
    out["ingest-logappendtime"] = d
    # one-pass ingest: a later task's staged segment moved to its planned offsets (every
    # batch's baseOffset patched in place, the files renamed), as ingest_rebase does it
    d = top / "ingest-rebased" / "t-0"
    d.mkdir(parents=True)
    cfg = LogConfig(segment_bytes=1 << 20, batch_size=400, compression_type="lz4")
    (info,) = PartitionLog.open(str(d), index_interval_bytes=512).append(
        _records(200, 12), config=cfg
    )
    _patch(info.log_path, 5000, 200)
    for f in d.iterdir():
        f.rename(d / segment_file_name(5000, f.suffix))
    out["ingest-rebased"] = d
    # batch maxima going down and up: a time index entry names the batch that carried
    # the largest timestamp so far (Kafka's maxTimestampSoFar), which Kafka's
    # --verify-index-only checks against that batch's records
    d = top / "ingest-nonmonotonic" / "t-0"
    d.mkdir(parents=True)
    peaks = np.repeat([1000, 500, 2000, 700, 800, 3000, 900, 950, 4000, 100], 4)
    swings = _records(40, 11).set_column(
        1, "timestamp", pa.array(1_700_000_000_000 + peaks - np.tile([3, 2, 1, 0], 10))
    )
    cfg = LogConfig(batch_size=300, index_interval_bytes=100)
    PartitionLog.open(str(d), index_interval_bytes=100).append(swings, config=cfg)
    out["ingest-nonmonotonic"] = d
    # transactions (markers, .txnindex), then a compaction of them (aborted ones removed)
    for codec in (0, 4):
        root = top / f"txn-{codec}"
        txn_lake(root, seed=codec + 1, codec=codec)
        out[f"txn-{codec}"] = _copy(root / "c-0", top / f"txn-{codec}-before")
        assert run_compaction(
            LakeHandle.open(str(root)), CompactOptions(conf=COMPACT, now_ms=NOW)
        ).committed
        out[f"txn-{codec}-compacted"] = root / "c-0"
    # keyed updates and tombstones compacted: batches with a delete horizon
    root = top / "keyed"
    keyed_lake(root, seed=7)
    assert run_compaction(
        LakeHandle.open(str(root)),
        CompactOptions(conf={**COMPACT, "delete.retention.ms": "1000"}, now_ms=NOW),
    ).committed
    out["compacted"] = root / "c-0"
    # merge of adjacent segments
    pristine = top / "pristine" / "t-0"
    write_partition(pristine)
    root = top / "merge"
    make_lake(root, pristine)
    assert run_compaction(
        LakeHandle.open(str(root)), CompactOptions(merge_only=True, conf=MERGE)
    ).committed
    out["merged"] = root / "t-0"
    # stream sink: micro-batches appended to the newest segment in place
    root = top / "stream"
    for i, pieces in enumerate(_batches(root, 6)):
        _commit(root, f"stream-q-{i}", pieces, True, append="true")
    for p in ("t-0", "t-1", "t-2"):
        out[f"stream-{p}"] = root / p
    # recovery: a flipped bit in a middle segment cut out, a torn tail truncated
    root = top / "recovered"
    make_lake(root, pristine)
    logs = sorted((root / "t-0").glob("*.log"))
    data = bytearray(logs[1].read_bytes())
    data[len(data) // 2] ^= 0x10
    logs[1].write_bytes(bytes(data))
    tail = logs[-1].read_bytes()
    logs[-1].write_bytes(tail[: len(tail) - 9])
    recover_lake(LakeHandle.open(str(root)), RecoverOptions(delete_delay_ms=0))
    out["recovered"] = root / "t-0"
    # torn tails as a crash leaves them (not recovered): Kafka's "invalid bytes at the end"
    # for a batch cut inside its records, inside its header, and before its length field
    for name, keep in (("torn", -7), ("torn-header", 30), ("torn-length", 10)):
        torn = _copy(out["ingest-gzip"], top / name / "t-0")
        last = sorted(torn.glob("*.log"))[-1]
        data = last.read_bytes()
        start = int(scan_batches(data).position[-1])
        last.write_bytes(data[:keep] if keep < 0 else data[: start + keep])
        out[name] = torn
    for name in sorted(p.name for p in fixtures_dir.iterdir() if p.is_dir()):
        out[f"fixture-{name}"] = fixtures_dir / name
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _files(corpus: dict[str, Path], suffixes: tuple[str, ...]) -> list[str]:
    return [
        str(f)
        for d in corpus.values()
        for f in sorted(d.iterdir())
        if f.suffix in suffixes and f.stem.isdigit()
    ]


def _seglake(capsys, files: list[str], *options: str) -> tuple[int, str, str]:
    status = main(["dump", "--files", ",".join(files), *options])
    got = capsys.readouterr()
    return status, got.out, got.err


def _gaps(stderr: str) -> dict[str, set[str]]:
    """Kafka's "Non-consecutive offsets in FILE" blocks, by file."""
    out: dict[str, set[str]] = {}
    current = None
    for line in stderr.splitlines():
        if line.startswith("Non-consecutive offsets in "):
            current = out.setdefault(line.split(" in ", 1)[1], set())
        elif line.startswith("  ") and current is not None:
            current.add(line.strip())
        else:
            current = None
    return out


def _problems(stderr: str) -> list[str]:
    """Kafka's stderr without its logging noise and its non-consecutive-offset notes."""
    drop = ("SLF4J:", "Non-consecutive offsets in ", "  ")
    return [x for x in stderr.splitlines() if x and not x.startswith(drop)]


@pytest.fixture(scope="module")
def deep(corpus):
    files = _files(corpus, KINDS)
    return files, dump_log_segments(files, "--deep-iteration", "--print-data-log")


def test_kafka_reads_every_file_seglake_writes(deep, capsys) -> None:
    files, kafka = deep
    assert kafka.returncode == 0, kafka.stderr[-3000:]
    assert _problems(kafka.stderr) == []
    assert "isvalid: false" not in kafka.stdout
    assert kafka.stdout.count("Dumping ") == len(files)
    for kind in (
        "endTxnMarker: ABORT",
        "endTxnMarker: COMMIT",
        "deleteHorizonMs: OptionalLong[",
        "LogAppendTime: ",
        "LeaderChange: ",
        "version: 0 producerId: ",
        *(f"compresscodec: {c}" for c in CODECS),
    ):
        assert kind in kafka.stdout, kind  # the corpus holds every kind
    # the torn copies: Kafka's line for a crash's tail, status 0
    for name in ("torn", "torn-header", "torn-length"):
        torn = [f for f in files if f"/{name}/" in f and f.endswith(".log")][-1]
        assert f"invalid bytes at the end of {Path(torn).name}" in kafka.stdout


def test_seglake_dump_prints_what_kafka_prints(deep, capsys) -> None:
    files, kafka = deep
    status, out, err = _seglake(capsys, files, "--deep-iteration", "--print-data-log")
    assert status == kafka.returncode == 0
    assert out == kafka.stdout
    assert _gaps(err) == _gaps(kafka.stderr)
    assert _gaps(err), "compacted logs have gaps Kafka reports"


_BATCH = re.compile(
    r"baseOffset: (-?\d+) lastOffset: (-?\d+) count: (-?\d+) baseSequence: (-?\d+) "
    r"lastSequence: (-?\d+) producerId: (-?\d+) producerEpoch: (-?\d+) "
    r"partitionLeaderEpoch: (-?\d+) isTransactional: (\w+) isControl: (\w+) "
    r"deleteHorizonMs: (\S+) position: (\d+) (CreateTime|LogAppendTime): (-?\d+) "
    r"size: (\d+) magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: true$"
)
_RECORD = re.compile(
    r"\| offset: (\d+) (?:CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) "
    r"valueSize: (-?\d+) sequence: (-?\d+) headerKeys: \[([^\]]*)\]"
    r"(?: (?:endTxnMarker|LeaderChange|controlType).*| key: (.*?))??(?: payload: (.*))?$"
)


def _kafka_view(stdout: str) -> dict[str, list]:
    """Per ``.log``: its batches and records as Kafka's dump printed them."""
    out: dict[str, list] = {}
    current: list | None = None
    for line in stdout.split("\n"):  # Java's println; a value may hold other breaks
        if line.startswith("Dumping "):
            name = line[len("Dumping ") :]
            current = out.setdefault(name, []) if name.endswith(".log") else None
        elif current is not None and line.startswith("baseOffset: "):
            m = _BATCH.match(line)
            assert m, line
            current.append((m.groups(), []))
        elif current is not None and line.startswith("| offset: "):
            m = _RECORD.match(line)
            assert m, line
            current[-1][1].append(m.groups())
    return out


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def test_kafkas_records_equal_seglakes_decode(deep) -> None:
    """Kafka's view of every batch and record, parsed from its text, against seglake's
    scan and decode of the same bytes (the independent oracle is Kafka's reader)."""
    files, kafka = deep
    view = _kafka_view(kafka.stdout)
    logs = [f for f in files if f.endswith(".log")]
    assert sorted(view) == sorted(logs)
    checked = 0
    for f in logs:
        data = Path(f).read_bytes()
        scan = scan_batches(data, stop_on_crc_error=False)
        rows = decode_batches(data, scan, skip_control=False).to_pylist()
        batches = view[f]
        assert len(batches) == len(scan), f
        i = 0
        for b, (fields, records) in enumerate(batches):
            h = scan.header(b)
            crc = int.from_bytes(data[h.position + 17 : h.position + 21], "big")
            horizon = f"OptionalLong[{h.base_timestamp}]" if h.attributes & 0x40 else None
            want = (
                h.base_offset,
                h.last_offset,
                h.records_count,
                h.base_sequence,
                h.producer_id,
                h.producer_epoch,
                h.leader_epoch,
                h.is_transactional,
                h.is_control,
                horizon or "OptionalLong.empty",
                h.position,
                "LogAppendTime" if h.is_log_append_time else "CreateTime",
                h.max_timestamp,
                h.size,
                NAMES[h.codec],
                crc,
            )
            got = (
                *map(int, fields[0:4]),
                *map(int, fields[5:8]),
                fields[8] == "true",
                fields[9] == "true",
                fields[10],
                int(fields[11]),
                fields[12],
                int(fields[13]),
                int(fields[14]),
                fields[15],
                int(fields[16]),
            )
            assert got == want, (f, b)
            assert len(records) == h.records_count, (f, b)
            for rec in records:
                r = rows[i]
                i += 1
                seq = (
                    -1
                    if h.base_sequence < 0
                    else increment_sequence(h.base_sequence, r["offset"] - h.base_offset)
                )
                key_size = -1 if r["key"] is None else len(r["key"])
                value_size = -1 if r["value"] is None else len(r["value"])
                assert tuple(int(x) for x in rec[:5]) == (
                    r["offset"],
                    r["timestamp"],
                    key_size,
                    value_size,
                    seq,
                ), (f, r["offset"])
                assert rec[5] == ",".join(x["key"] for x in r["headers"])
                key, value = _text(r["key"]), _text(r["value"])
                if not h.is_control and "\n" not in f"{key}{value}":  # one line each
                    assert (rec[6], rec[7]) == (key, value), (f, r["offset"])
                    checked += 1
        assert i == len(rows), f
    assert checked > 5000


@pytest.mark.parametrize("option", ["--index-sanity-check", "--verify-index-only"])
def test_kafka_checks_every_index_and_seglake_agrees(corpus, capsys, option) -> None:
    """Every ``.index``/``.timeindex``/``.txnindex``/``.snapshot`` seglake wrote passes
    Kafka's sanity check and its verification against the ``.log``; ``seglake dump``
    prints what Kafka prints (their entries, listed without an option, are in the deep
    run's files)."""
    files = _files(corpus, (".index", ".timeindex", ".txnindex", ".snapshot"))
    kafka = dump_log_segments(files, option)
    assert kafka.returncode == 0, kafka.stderr[-3000:]
    assert _problems(kafka.stderr) == []
    if option == "--index-sanity-check":
        checked = [x for x in kafka.stdout.splitlines() if not x.startswith("Dumping ")]
        idx = [f for f in files if f.endswith((".index", ".timeindex"))]
        assert sum(x.endswith(("passed sanity check.", "is empty.")) for x in checked) >= len(idx)
    status, out, err = _seglake(capsys, files, option)
    assert (status, out) == (0, kafka.stdout)
    assert err == ""


def _offsets_variants(directory: Path) -> Path:
    """A seglake-written ``__consumer_offsets`` log of the fixture's records plus what the
    broker's hold few or none of: a tombstone of each key, an unknown record type."""
    src = FIXTURES / "__consumer_offsets-0" / "00000000000000000000.log"
    data = src.read_bytes()
    rows = decode_batches(data, scan_batches(data)).to_pylist()
    keys = [r["key"] for r in rows] + [r["key"] for r in rows[:5]] + [b"\x00\x09junk"]
    values = [r["value"] for r in rows] + [None] * 5 + [b"\x00\x00"]
    n = len(keys)
    d = directory / "__consumer_offsets-0"
    d.mkdir(parents=True)
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    PartitionLog.open(str(d)).append(recs, config=LogConfig(batch_size=500))
    return d


def _string(text: str, *, compact: bool = False) -> bytes:
    raw = text.encode()
    return (_uvarint(len(raw) + 1) if compact else struct.pack(">h", len(raw))) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes([*out, n])


def _txn_value(version: int, pid: int, status: int, parts, tags=()) -> bytes:
    """A ``TransactionLogValue`` written by hand from Kafka's schema (v1: flexible)."""
    flex = version >= 1
    out = struct.pack(">hqhib", version, pid, 3, 60_000, status)
    if parts is None:
        out += _uvarint(0) if flex else struct.pack(">i", -1)
    else:
        out += _uvarint(len(parts) + 1) if flex else struct.pack(">i", len(parts))
        for topic, ids in parts:
            out += _string(topic, compact=flex)
            out += _uvarint(len(ids) + 1) if flex else struct.pack(">i", len(ids))
            out += b"".join(struct.pack(">i", i) for i in ids) + (_uvarint(0) if flex else b"")
    out += struct.pack(">qq", 1_700_000_000_000 + pid, 1_699_999_999_000)
    if flex:
        out += _uvarint(len(tags)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in tags)
    return out


def _transaction_state_log(directory: Path) -> Path:
    """A seglake-written ``__transaction_state`` log (no broker fixture has one): every
    transaction state, null and empty partition lists, a flexible v1 value with tagged
    fields, a tombstone, an unknown record type."""
    keys, values = [], []
    for status in range(9):
        parts = [("orders", [0, 2]), ("b", [])] if status % 2 else []
        keys.append(struct.pack(">h", 0) + _string(f"tx-{status}"))
        values.append(_txn_value(0, 1000 + status, status, parts))
    tags = [(0, struct.pack(">q", 77)), (1, struct.pack(">q", 78)), (2, struct.pack(">h", 2))]
    keys += [struct.pack(">h", 0) + _string(t) for t in ("tx-null", "tx-v1", "tx-gone")]
    values += [_txn_value(0, 7, 0, None), _txn_value(1, 8, 4, [("t", [1])], tags), None]
    keys.append(struct.pack(">h", 5) + b"zz")
    values.append(b"\x00\x00")
    d = directory / "__transaction_state-0"
    d.mkdir(parents=True)
    n = len(keys)
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
        }
    )
    PartitionLog.open(str(d)).append(recs, config=LogConfig())
    return d


@pytest.mark.parametrize(
    ("option", "topic"),
    [
        ("--offsets-decoder", "__consumer_offsets"),
        ("--transaction-log-decoder", "__transaction_state"),
        ("--cluster-metadata-decoder", "__cluster_metadata"),
    ],
)
def test_decoders_print_what_kafkas_print(capsys, tmp_path: Path, option: str, topic: str) -> None:
    """Kafka's decoder of an internal topic's payloads (JSON of each message, at its
    version) against seglake's, on the broker's own partitions of that topic and on a
    seglake-written one."""
    require_kafka_tools()
    files = sorted(str(f) for f in FIXTURES.glob(f"{topic}-*/*.log"))
    if option == "--offsets-decoder":
        files += [str(f) for f in sorted(_offsets_variants(tmp_path).glob("*.log"))]
    if option == "--transaction-log-decoder":
        files += [str(f) for f in sorted(_transaction_state_log(tmp_path).glob("*.log"))]
        assert files
    kafka = dump_log_segments(files, option)
    assert kafka.returncode == 0 and _problems(kafka.stderr) == [], kafka.stderr[-3000:]
    assert kafka.stdout.count(" payload: {") > 10
    if option != "--cluster-metadata-decoder":
        assert "payload: <DELETE>" in kafka.stdout and "Unknown record type " in kafka.stdout
    status, out, _ = _seglake(capsys, files, option)
    assert (status, out) == (0, kafka.stdout)


def test_skip_record_metadata_prints_what_kafka_prints(corpus, capsys) -> None:
    """``--skip-record-metadata``: only keys and payloads, spaced as Kafka spaces them
    (a record without a key starts with `` payload:``; a control record's line is empty)."""
    files = [
        f
        for f in _files(corpus, (".log",))
        if "/ingest-" in f or "fixture-first" in f or "__cluster_metadata" in f or "/txn-0/" in f
    ]
    files = [*files, *(str(f) for f in FIXTURES.glob("__cluster_metadata-*/*.log"))]
    kafka = dump_log_segments(files, "--print-data-log", "--skip-record-metadata")
    assert kafka.returncode == 0 and _problems(kafka.stderr) == [], kafka.stderr[-3000:]
    assert "\n payload: " in kafka.stdout and "\n| key: " in kafka.stdout
    status, out, _ = _seglake(capsys, files, "--print-data-log", "--skip-record-metadata")
    assert (status, out) == (0, kafka.stdout)


def _damaged_indexes(corpus: dict[str, Path], directory: Path) -> list[str]:
    """The non-monotonic segment's indexes with entries that keep Kafka's order rules but
    disagree with the log: an offset entry naming the wrong offset, a time entry with the
    wrong timestamp, one naming an offset no batch ends at; an ingest segment's indexes
    all zero, and with a zero-filled tail."""
    d = _copy(corpus["ingest-nonmonotonic"], directory / "damaged" / "t-0")
    oi = d / "00000000000000000000.index"
    data = bytearray(oi.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, len(data) - 8)
    struct.pack_into(">ii", data, len(data) - 8, rel + 1, pos)
    oi.write_bytes(bytes(data))
    ti = d / "00000000000000000000.timeindex"
    data = bytearray(ti.read_bytes())
    ts, rel = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">qi", data, 0, ts + 1, rel)
    ts, rel = struct.unpack_from(">qi", data, 12)
    struct.pack_into(">qi", data, 12, ts, rel + 1)
    ti.write_bytes(bytes(data))
    # as a crash leaves them: all zero (preallocated, nothing written), or a zero tail
    blank = _copy(corpus["ingest-none"], directory / "blank" / "t-0")
    tailed = _copy(corpus["ingest-none"], directory / "tailed" / "t-0")
    out = [str(oi), str(ti)]
    for suffix, size in ((".index", 8), (".timeindex", 12)):
        (f,) = blank.glob(f"00000000000000000000{suffix}")
        f.write_bytes(bytes(10 * size))
        (g,) = tailed.glob(f"00000000000000000000{suffix}")
        g.write_bytes(g.read_bytes() + bytes(10 * size))
        out += [str(f), str(g)]
    return out


@pytest.mark.parametrize("option", ["", "--verify-index-only"])
def test_index_mismatches_are_reported_as_kafka_reports_them(corpus, capsys, tmp_path, option):
    """Entries that disagree with the log: Kafka's report, line for line, on stderr; the
    listing (without an option) on stdout, the same. seglake's status is 1 (Kafka's 0)."""
    files = _damaged_indexes(corpus, tmp_path)
    opts = (option,) if option else ()
    kafka = dump_log_segments(files, *opts)
    report = sorted(x for x in kafka.stderr.splitlines() if not x.startswith("SLF4J:"))
    assert "Mismatches in :" in kafka.stderr and "Found timestamp mismatch" in kafka.stderr
    assert "The following indexed offsets are not found in the log." in kafka.stderr
    status, out, err = _seglake(capsys, files, *opts)
    assert (status, out) == (1, kafka.stdout)
    assert sorted(err.splitlines()) == report


def test_max_bytes_prints_what_kafka_prints(corpus, capsys) -> None:
    """``--max-bytes``: the batches that fit in the first N bytes of each file, no
    "invalid bytes" line for the batch the limit cuts (as Kafka)."""
    files = [f for f in _files(corpus, (".log",)) if "/ingest-" in f or "/fixture-first" in f]
    kafka = dump_log_segments(files, "--deep-iteration", "--max-bytes", "1000")
    assert kafka.returncode == 0 and _problems(kafka.stderr) == [], kafka.stderr[-3000:]
    assert "invalid bytes" not in kafka.stdout
    status, out, _ = _seglake(capsys, files, "--deep-iteration", "--max-bytes", "1000")
    assert (status, out) == (0, kafka.stdout)


def test_damaged_logs_print_what_kafka_prints(corpus, capsys, tmp_path) -> None:
    """A flipped bit in a record's value: Kafka's ``isvalid: false``, its records still
    printed, status 0, the same from seglake. Zeros after the last batch (a length below
    the minimum): Kafka stops with an exception, status 1; seglake prints the same lines,
    names the position on stderr in one line, status 1."""
    flipped = _copy(corpus["ingest-none"], tmp_path / "flipped" / "t-0")
    log = sorted(flipped.glob("*.log"))[0]
    data = bytearray(log.read_bytes())
    data[data.index(b"value 0 ")] ^= 0x01  # "v" -> "w"
    log.write_bytes(bytes(data))
    zeros = _copy(corpus["ingest-none"], tmp_path / "zeros" / "t-0")
    tail = sorted(zeros.glob("*.log"))[-1]
    tail.write_bytes(tail.read_bytes() + bytes(100))
    files = [str(log), str(tail)]  # Kafka stops at the zeros: they come last
    kafka = dump_log_segments(files, "--print-data-log")
    assert kafka.returncode == 1 and "CorruptRecordException" in kafka.stderr
    assert kafka.stdout.count("isvalid: false") == 1 and "payload: walue 0 " in kafka.stdout
    status, out, err = _seglake(capsys, files, "--print-data-log")
    assert (status, out) == (1, kafka.stdout)
    assert err.count("\n") == 1 and str(tail) in err and "below the minimum" in err
    status, out, err = _seglake(capsys, files[:1], "--print-data-log")
    assert (status, err) == (0, "")


def _kraft_snapshot(directory: Path) -> Path:
    """A KRaft snapshot (``<end offset>-<epoch>.checkpoint``) as a controller writes one:
    snapshot header, kraft.version and voters control records, the fixture's first
    metadata records, snapshot footer."""
    from seglake.record.batch import CONTROL_BIT
    from tests.unit.test_decode import raw_batch, raw_record

    def control(offset: int, kind: int, value: bytes) -> bytes:
        record = raw_record(0, 0, struct.pack(">hh", 0, kind), value)
        return raw_batch(record, 1, base_offset=offset, attributes=CONTROL_BIT, base_ts=1000)

    endpoint = _string("CONTROLLER", compact=True) + _string("localhost", compact=True)
    voter = struct.pack(">i", 1) + bytes(range(16)) + _uvarint(2) + endpoint
    voter += struct.pack(">H", 9093) + _uvarint(0) + struct.pack(">hh", 0, 1) + _uvarint(0) * 2
    src = (FIXTURES / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    rows = decode_batches(src, scan_batches(src).take(slice(1, 4))).to_pylist()
    records = b"".join(raw_record(i, i, None, r["value"]) for i, r in enumerate(rows))
    d = directory / "__cluster_metadata-0"
    d.mkdir(parents=True)
    path = d / "00000000000000000100-0000000003.checkpoint"
    path.write_bytes(
        control(0, 3, struct.pack(">hq", 0, 1_728_480_000_123) + _uvarint(0))
        + control(1, 5, struct.pack(">hh", 0, 1) + _uvarint(0))
        + control(2, 6, struct.pack(">h", 0) + _uvarint(2) + voter + _uvarint(0))
        + raw_batch(records, len(rows), base_offset=3, base_ts=1000)
        + control(3 + len(rows), 4, struct.pack(">h", 0) + _uvarint(0))
    )
    return path


@pytest.mark.parametrize("option", ["--deep-iteration", "--cluster-metadata-decoder"])
def test_kraft_snapshots_print_what_kafka_prints(capsys, tmp_path, option) -> None:
    """A ``.checkpoint``: Kafka's heading, its KRaft control records as JSON (snapshot
    header and footer, kraft.version, voters), its metadata records decoded."""
    require_kafka_tools()
    files = [str(_kraft_snapshot(tmp_path))]
    kafka = dump_log_segments(files, option)
    assert kafka.returncode == 0 and _problems(kafka.stderr) == [], kafka.stderr[-3000:]
    for text in ("Snapshot end offset: 100, epoch: 3", "SnapshotHeader {", "KRaftVoters {"):
        assert text in kafka.stdout
    status, out, _ = _seglake(capsys, files, option)
    assert (status, out) == (0, kafka.stdout)
