"""Issue 29 items 3 and 4: values that forge output, and tampered metadata. Each case ends
in one line naming the file, row or property and what is wrong, exit 2, nothing changed
(RELIABILITY.md, "Hostile names and bytes"); a config value or a stored name can no
longer print a line of its own.

Also kept holding (regression tests): Delta log damage (truncated or garbage commits, a
version gap) is one line and deletes nothing; hostile internal-topic records in ``dump``
are one line each.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from seglake.cli.jobargs import precheck
from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.errors import CatalogError, OffsetOrderError
from seglake.lake.catalog import Catalog
from seglake.lake.runs import RunInput, check_reuse
from seglake.lake.topic_store import stored_configs
from seglake.record.encode import encode_batches
from seglake.spark.ingest_plan import plan_ingest

BROKER = "first-0"  # 11 records, offsets 0..10
PROPERTY = "seglake.topic.first"
MAX_OFFSET = 2**63 - 2  # seglake.format.MAX_OFFSET: a record's highest offset


@pytest.fixture(scope="module")
def template(fixtures_dir: Path, tmp_path_factory) -> Path:
    """A lake of the broker partition ``first-0`` (catalog versions 0, 1)."""
    base = tmp_path_factory.mktemp("hostile")
    shutil.copytree(fixtures_dir / BROKER, base / "part" / BROKER)
    assert main(["register", "--root", str(base / "lake"), str(base / "part")]) == 0
    return base / "lake"


@pytest.fixture
def lake(template: Path, tmp_path: Path) -> Path:
    """A copy of the template lake, for a test to damage."""
    shutil.copytree(template, tmp_path / "lake", symlinks=True)
    return tmp_path / "lake"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(capsys, *argv: str) -> str:
    """Run ``seglake ARGV``: exit 2 and one error line, no traceback; that line."""
    code, _, err = cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err[-2000:])
    assert lines[0].startswith("seglake: error: ") and "Traceback" not in err
    return lines[0]


def version(root: Path) -> int:
    return Catalog(str(root)).version()


def set_property(root: Path, value: str, key: str = PROPERTY) -> int:
    """Set a catalog table property behind seglake's back; the version after."""
    table = DeltaTable(str(root / "_catalog"))
    table.alter.set_table_properties({key: value}, raise_if_not_exists=False)
    return version(root)


def commit_info(root: Path, v: int, change) -> None:
    """Rewrite the commitInfo action of catalog version ``v`` with ``change(info)``."""
    path = root / "_catalog" / "_delta_log" / f"{v:020d}.json"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    change(first["commitInfo"])
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")


# --------------------------------------------------------- 3. values that forge output
FORGED = "x\nretention.ms=1  (override)"


@pytest.mark.parametrize(
    "value",
    [
        FORGED,  # old: accepted; `config` then printed a forged line
        "0:1\x1b[2J",  # a terminal escape
        "0:1\u2028retention.ms=1",  # a line separator
        "x",  # not what Kafka's ThrottledReplicaListValidator takes
    ],
)
def test_config_set_refuses_values_kafka_would_not_take(lake: Path, capsys, value: str) -> None:
    before = version(lake)
    line = one_line(
        capsys, "config", lake, "--topic", "first", "--set",
        f"leader.replication.throttled.replicas={value}",
    )  # fmt: skip
    assert "leader.replication.throttled.replicas=" in line and repr(value) in line
    assert version(lake) == before  # nothing committed


def test_config_takes_what_kafka_takes(lake: Path, capsys) -> None:
    for value in ("*", "0:1, 2:3", ""):
        code, out, _ = cli(
            capsys, "config", lake, "--topic", "first", "--set",
            f"follower.replication.throttled.replicas={value}",
        )  # fmt: skip
        assert code == 0 and f"follower.replication.throttled.replicas={value}  (override)" in out


def test_a_stored_value_with_a_newline_forges_no_line(lake: Path, capsys) -> None:
    """A table property altered outside seglake: refused where it is read, naming it
    (old: `config` printed the forged ``retention.ms=1 (override)`` line, exit 0)."""
    before = set_property(lake, json.dumps({"leader.replication.throttled.replicas": FORGED}))
    for argv in (["config", lake, "--topic", "first"], ["config", lake]):
        line = one_line(capsys, *argv)
        assert repr(PROPERTY) in line and f"version {before}" in line and "\\n" in line
    line = one_line(capsys, "retention", "--retention-ms", "1", "--dry-run", lake)
    assert repr(PROPERTY) in line
    assert version(lake) == before


def test_history_escapes_what_it_did_not_write(lake: Path, capsys) -> None:
    """A run's input path (or run id) holding a newline prints as ``\\n``: one line per
    version (old: the path's newline made a line of its own)."""
    recorded = RunInput(paths=("in/a\nforged",), files=1, files_sha256="0" * 64)
    commit_info(lake, 1, lambda info: info.update({"seglake.input": recorded.to_json()}))
    code, out, _ = cli(capsys, "history", lake)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 + version(lake) + 1, out
    assert "in/a\\nforged" in lines[-2]


def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path: Path, capsys) -> None:
    """Every error line is escaped where it is printed (old: the path's newline split
    the error in two, the second line free text)."""
    line = one_line(capsys, "config", tmp_path / "no\nseglake: error: forged")
    assert "no\\nseglake: error: forged: not a lake" in line


# ------------------------------------------------------ 4. tampered metadata: configs
DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        ('["retention.ms"]', "not a JSON object"),  # old: AttributeError traceback
        ('{"retention.ms": 5}', "not a JSON object"),  # a number, not a string
        ("{not json", "is not a topic's configs"),
        ('{"retention.ms": "soon"}', "'soon' is not an integer"),
        ('{"log.retention.ms": "1"}', "is not a topic setting"),
        (DEEP, "nested too deep"),  # old: RecursionError traceback
        ('{"a": "' + "x" * (2 << 20) + '"}', "characters"),  # bounded before parsing
    ],
    ids=["list", "number", "garbage", "bad-value", "broker-name", "deep", "huge"],
)
def test_a_damaged_stored_config_is_one_line(lake: Path, capsys, stored: str, named: str) -> None:
    before = set_property(lake, stored)
    for argv in (
        ["config", lake, "--topic", "first"],
        ["config", lake, "--topic", "first", "--set", "retention.ms=5"],
        ["retention", "--retention-ms", "1", lake],
    ):
        line = one_line(capsys, *argv)
        assert repr(PROPERTY) in line and named in line, line
        assert len(line) < 600
    assert version(lake) == before  # nothing committed
    with pytest.raises(CatalogError, match=PROPERTY):
        stored_configs(Catalog(str(lake)))


def test_a_stored_config_of_an_illegal_topic_name_is_refused(lake: Path, capsys) -> None:
    """Stored topics are lake topics, which become paths: the name is checked."""
    set_property(lake, "{}", key="seglake.topic.../../x")
    line = one_line(capsys, "config", lake)
    assert "'seglake.topic.../../x'" in line


# --------------------------------------------- 4. tampered metadata: commits (history)
@pytest.mark.parametrize(
    ("value", "named"),
    [
        (json.dumps({"files": "x"}), "files='x'"),
        (json.dumps({"files": 1, "files_sha256": "abc"}), "files_sha256='abc'"),
        (json.dumps({"records": -5}), "records=-5"),
        (json.dumps({"paths": "in/a"}), "paths='in/a'"),
        ("[1, 2]", "not a JSON object"),
        (DEEP, "nested too deep"),  # old: RecursionError traceback
        ("{garbage", "is not JSON"),
        ({"files": 1}, "is dict"),  # an object, not the JSON text of one
    ],
    ids=["files", "sha", "records", "paths", "list", "deep", "garbage", "object"],
)
def test_a_damaged_run_input_is_one_line(lake: Path, capsys, value, named: str) -> None:
    commit_info(lake, 1, lambda info: info.update({"seglake.input": value}))
    line = one_line(capsys, "history", lake)
    assert "version 1" in line and "seglake.input" in line and named in line, line
    catalog = Catalog(str(lake))
    run_id = catalog.history()[-2].run_id
    with pytest.raises(CatalogError, match=r"version 1: seglake\.input"):  # a run's reuse check
        check_reuse(catalog, run_id, RunInput(files=1, files_sha256="0" * 64))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda info: info.pop("timestamp"), "no 'timestamp'"),
        (lambda info: info.update({"seglake.run_id": ["a"]}), "is not a string"),
    ],
    ids=["no-timestamp", "run-id-list"],
)
def test_a_damaged_commit_info_is_one_line(lake: Path, capsys, change, named: str) -> None:
    commit_info(lake, 1, change)
    line = one_line(capsys, "history", lake)
    assert "version 1" in line and named in line, line


# ---------------------------------------------------- 4. offsets near 2^63 (no Spark)
def _records(offsets: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([1] * n, pa.int64()),
            "value": pa.array([b"v"] * n),
        }
    )


def test_the_highest_offset_is_2_63_minus_2() -> None:
    """Kafka's log end offset (the last offset + 1) is a long: a record at 2^63 - 1 has
    none (old: encoded, then an OverflowError where its next offset was computed)."""
    assert len(encode_batches(_records([MAX_OFFSET - 1, MAX_OFFSET]))) == 1
    with pytest.raises(OffsetOrderError, match=f"row 2: offset {MAX_OFFSET + 1} is above"):
        encode_batches(_records([0, MAX_OFFSET - 1, MAX_OFFSET + 1]))


def test_ingest_plan_refuses_offsets_past_the_last() -> None:
    config = LogConfig()
    row = {"task": 0, "topic": "t", "partition": 0, "count": 2}
    ok = plan_ingest([{**row, "lo": MAX_OFFSET - 1, "hi": MAX_OFFSET}], {}, config, has_offset=True)
    assert ok.partitions[("t", 0)].last_offset == MAX_OFFSET
    with pytest.raises(OffsetOrderError, match=rf"t-0: input offset {MAX_OFFSET + 1} is above"):
        plan_ingest([{**row, "lo": 5, "hi": MAX_OFFSET + 1}], {}, config, has_offset=True)
    # offsets assigned from the log end offset: the last would be 2^63 - 1
    leo = {("t", 0): MAX_OFFSET}
    with pytest.raises(OffsetOrderError, match=rf"t-0: offset of record 2 .* {MAX_OFFSET + 1}"):
        plan_ingest([{**row, "lo": None, "hi": None}], leo, config, has_offset=False)


def test_register_of_a_segment_ending_at_2_63_minus_1(tmp_path: Path, capsys) -> None:
    """A broker segment whose last offset is 2^63 - 1 (old: an OverflowError traceback
    building the catalog row; nothing committed either way)."""
    base = MAX_OFFSET  # its last offset: base + 1
    part = tmp_path / "broker" / "t-0"
    part.mkdir(parents=True)
    log = encode_batches(_records([0, 1])).tobytes()
    log = struct.pack(">q", base) + log[8:]  # baseOffset (the CRC does not cover it)
    (part / f"{base:020d}.log").write_bytes(log)
    line = one_line(capsys, "register", "--root", tmp_path / "lake", tmp_path / "broker")
    assert f"{base:020d}.log" in line and f"last offset {MAX_OFFSET + 1} is above" in line
    assert not (tmp_path / "lake" / "_catalog").exists()


# ------------------------------------------- 4. an object store that refuses connections
@pytest.fixture
def refused_endpoint(monkeypatch) -> str:
    """``host:port`` on loopback where nothing listens, with dummy S3 credentials."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return f"127.0.0.1:{port}"


@pytest.mark.parametrize(
    "argv",
    [
        ["consume", "{root}", "--topic", "t"],
        ["cleanup", "{root}"],
        ["history", "{root}"],
        ["config", "{root}", "--topic", "t", "--set", "retention.ms=5"],
        ["register", "--root", "{root}", "{broker}"],
    ],
    ids=lambda a: a[0],
)
def test_an_endpoint_refusing_connections_is_one_line(
    refused_endpoint: str, fixtures_dir: Path, capsys, argv: list[str]
) -> None:
    """Old: an OSError traceback (pyarrow's or deltalake's), after retries."""
    root = f"s3://bucket/lake?endpoint_override={refused_endpoint}&scheme=http"
    args = [a.format(root=root, broker=fixtures_dir / BROKER) for a in argv]
    started = time.monotonic()
    line = one_line(capsys, *args)
    assert f"cannot reach the object store at http://{refused_endpoint}" in line, line
    assert time.monotonic() - started < 30  # bounded retries


def test_a_job_precheck_of_an_unreachable_lake_is_one_line(refused_endpoint: str, capsys) -> None:
    root = f"s3://bucket/lake?endpoint_override={refused_endpoint}&scheme=http"
    assert precheck(["extract", "--root", root, "--topic", "t", "--output", "/tmp/o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and refused_endpoint in err[0] and "FileSystemError" in err[0]


# --------------------------------------------------- 4. a job's output inside the lake
@pytest.mark.parametrize(
    "output",
    ["{lake}/_catalog", "{lake}", "{lake}/first-0", "{lake}/_staging/x", "{lake}/_retired",
     "{lake}/..", "{link}/_catalog", "file://{lake}/_catalog"],
    ids=["catalog", "root", "partition", "staging", "retired", "parent", "link", "uri"],
)  # fmt: skip
def test_a_job_output_inside_the_lake_is_refused(
    template: Path, tmp_path: Path, capsys, output: str
) -> None:
    """Old: ``extract --output LAKE/_catalog`` started Spark and ended in its internal
    error; with ``--output-format delta`` it would append records to the catalog."""
    (tmp_path / "link").symlink_to(template)
    out = output.format(lake=template, link=tmp_path / "link")
    for job in (
        ["extract", "--root", str(template), "--topic", "first"],
        ["lookup", "--root", str(template), "--queries", str(template)],
    ):
        assert precheck([*job, "--output", out, "--output-format", "delta"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--output {out}: inside the lake" in err[0], err
    # beside the lake: fine
    extract = ["extract", "--root", str(template), "--topic", "first"]
    assert precheck([*extract, "--output", f"{template}-out"]) == 0


def test_nested_object_store_places() -> None:
    from seglake.location import nested

    assert nested("s3://b/lake?endpoint_override=h:1", "s3a://b/lake/_catalog")
    assert nested("s3://b/lake/", "s3://b")
    assert not nested("s3://b/lake", "s3://b/lake2")
    assert not nested("s3://b/lake", "s3://c/lake")
    assert not nested("s3://b/lake", "/b/lake")


# ------------------------------------------------------------- kept: Delta log damage
def _damage(log: Path, how: str) -> None:
    first = log / f"{1:020d}.json"
    if how == "truncated":
        data = first.read_bytes()
        first.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        first.write_bytes(b"\x00\xffgarbage\n{]")
    elif how == "gap":
        first.unlink()
    elif how == "torn-last":
        last = sorted(log.glob("*.json"))[-1]
        data = last.read_bytes()
        last.write_bytes(data[: len(data) - 40])


@pytest.mark.parametrize("how", ["truncated", "garbage", "gap", "torn-last"])
def test_delta_log_damage_is_one_line_and_deletes_nothing(lake: Path, capsys, how: str) -> None:
    """Old: a truncated or garbage commit printed deltalake's Rust backtrace after the
    line (with RUST_BACKTRACE set), and cleanup took a version gap for orphans: the data
    file only the lost commit named was deleted."""
    commit = (lake / "_catalog" / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    data_file = lake / "_catalog" / json.loads(commit[1])["add"]["path"]  # only it names it
    hours_ago = time.time() - 7200
    os.utime(data_file, (hours_ago, hours_ago))  # past the orphan age
    assert main(["config", str(lake), "--topic", "first", "--set", "retention.ms=5"]) == 0
    capsys.readouterr()
    _damage(lake / "_catalog" / "_delta_log", how)
    for argv in (
        ["history", lake],
        ["consume", lake, "--topic", "first"],
        ["offsets", lake],
        ["config", lake],
        ["cleanup", "--older-than", "0", lake],
    ):
        line = one_line(capsys, *argv)
        assert "_catalog" in line and len(line) < 600, line
        if how != "gap" and argv[0] in ("history", "cleanup"):
            assert ".json: line" in line, line  # the damaged commit is named
    assert data_file.exists()


def test_an_empty_commit_file_stops_cleanup(lake: Path, capsys) -> None:
    """deltalake reads a zero-byte commit (a torn write, a damaged disk) as a commit with
    no actions. Old: ``cleanup`` then took the data file only that commit named for an
    orphan and deleted it, losing its rows for good. Now the log's reader names the file."""
    commit = lake / "_catalog" / "_delta_log" / f"{1:020d}.json"
    data_file = lake / "_catalog" / json.loads(commit.read_text().splitlines()[1])["add"]["path"]
    hours_ago = time.time() - 7200
    os.utime(data_file, (hours_ago, hours_ago))
    commit.write_bytes(b"")
    line = one_line(capsys, "cleanup", "--older-than", "0", lake)
    assert f"{1:020d}.json: the commit file is empty" in line, line
    assert data_file.exists()


# ---------------------------------------------- kept: hostile internal-topic records
@pytest.mark.parametrize("decoder", ["offsets", "transaction-log", "cluster-metadata"])
def test_hostile_internal_topic_records_are_one_line_each(
    tmp_path: Path, capsys, decoder: str
) -> None:
    """Keys and values with forged lengths, versions and varints: each record's line
    says what is wrong; no traceback, nothing on stderr."""
    rng = random.Random(29)
    forged = [
        b"\x00\x01\x7f\xff",  # a string of 32767 bytes in 2
        b"\x00\x00\xff\xffabc",  # a null string
        b"\x00\x01\x00\x01a\x00\x01b\x7f\xff\xff\xff",
        b"\x00\x03\xff\xff\xff\xff",
        b"\x00\x04\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80",  # a varint that never ends
        b"\x7f\xff",  # an unknown version
        b"",
    ]
    n = 60
    keys = [rng.choice([*forged, rng.randbytes(rng.randrange(16))]) for _ in range(n)]
    values = [rng.choice([*forged, rng.randbytes(rng.randrange(40)), None]) for _ in range(n)]
    records = _records(list(range(n))).append_column("key", pa.array(keys, pa.binary()))
    records = records.set_column(2, "value", pa.array(values, pa.binary()))
    part = tmp_path / "__consumer_offsets-0"
    part.mkdir()
    log = part / f"{0:020d}.log"
    log.write_bytes(encode_batches(records).tobytes())
    code, out, err = cli(capsys, "dump", f"--{decoder}-decoder", log)
    assert code == 0 and err == "", err[-2000:]
    assert sum(line.startswith("| offset: ") for line in out.splitlines()) == n
