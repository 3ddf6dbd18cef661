"""Issue 25 item 7: a job whose task fails, run through ./spark-submit.sh as people run
it, prints seglake's one line on stderr, last and once; the Python worker's traceback
(which Spark logs 2-4 times: ERROR Executor, WARN TaskSetManager...) only in the log
file that line names, never on stdout or stderr. Item 6 through the jobs: a lake the
file system refuses is one line too, nothing committed, no staging left."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.lake.catalog import Catalog
from seglake.record.batch import scan_batches
from seglake.spark.jobs import main
from tests.conftest import FIXTURES
from tests.disk_faults import ROOT, refusing, run, seglake, tmpfs

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"no fixtures at {FIXTURES}"),
]


def _damaged_lake(root: Path) -> Path:
    """A lake of the broker's __cluster_metadata-0 with one bit flipped in a batch in
    the middle of its segment (CRC-32C mismatch): the extract task reading it raises."""
    proc = seglake("register", str(FIXTURES), "--root", str(root), "--topics", "__cluster_metadata")
    assert proc.returncode == 0, proc.stderr
    log = root / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    scan = scan_batches(bytes(data))
    middle = len(scan.position) // 2
    data[int(scan.position[middle + 1]) - 1] ^= 0x01  # its last record byte, under the CRC
    log.write_bytes(bytes(data))
    return log


def test_a_failed_task_is_one_line_on_stderr_last(tmp_path) -> None:
    """Old code: the worker's traceback three times on stderr (ERROR Utils, ERROR
    Executor, WARN TaskSetManager, each with the JVM stack), and seglake's line on stdout
    (spark-submit sends the Python driver's stderr to its stdout)."""
    log = _damaged_lake(tmp_path / "lake")
    env = {
        **os.environ,
        "SEGLAKE_LOG_DIR": str(tmp_path / "logs"),
        "SEGLAKE_MASTER": "local[1]",
    }
    env.pop("SEGLAKE_ERROR_FILE", None)
    args = ["--root", str(tmp_path / "lake"), "--topic", "__cluster_metadata"]
    args += ["--start-offset", "0", "--end-offset", "4000", "--output", str(tmp_path / "out")]
    proc = run([str(ROOT / "spark-submit.sh"), "extract", *args], env=env, timeout=900)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream and "PythonException" not in stream, stream
        assert "ERROR Executor" not in stream and "TaskSetManager" not in stream, stream
    lines = [x for x in proc.stderr.splitlines() if x.strip()]  # \r: the progress bar
    ours = [x for x in lines if "seglake extract" in x]
    assert ours == [lines[-1]], proc.stderr  # once, and last
    assert "seglake extract" not in proc.stdout
    m = re.fullmatch(
        rf"seglake extract: error: CorruptRecordError: {re.escape(str(log))}: position \d+: "
        r"batch with offsets \d+\.\.\d+ .*CRC-32C mismatch.* \(Spark's log: (.+)\)",
        lines[-1],
    )
    assert m, lines[-1]
    spark_log = Path(m.group(1))
    assert spark_log.parent == tmp_path / "logs"
    assert "Traceback" in spark_log.read_text()  # the worker's traceback is kept there
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.parquet"))


def _messages(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table({"value": [rng.bytes(200) for _ in range(n)]})


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_ingest_into_a_lake_the_file_system_refuses(spark, capsys, tmp_path, fault) -> None:
    """Old code: a Py4J/PythonException traceback (read-only: the task's OSError)."""
    pq.write_table(_messages(200), tmp_path / "small.parquet")
    pq.write_table(_messages(20_000), tmp_path / "big.parquet")  # ~4 MB: does not fit
    with tmpfs(tmp_path / "disk", "1m") as disk:
        root = disk / "lake"
        argv = ["--input", str(tmp_path / "small.parquet"), "--root", str(root), "--topic", "t"]
        assert main("ingest", argv) == 0
        version = Catalog(str(root)).version()
        capsys.readouterr()
        argv[1] = str(tmp_path / ("small.parquet" if fault == "read-only" else "big.parquet"))
        if fault == "read-only":
            with refusing(disk, fault):
                assert main("ingest", argv) == 2
        else:  # the input itself fills the disk
            assert main("ingest", argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        lines = [x for x in err.splitlines() if x.startswith("seglake ingest: ")]
        assert len(lines) == 1 and lines[0].startswith("seglake ingest: error: "), err
        assert str(root) in lines[0], lines[0]
        assert ("(EROFS)" if fault == "read-only" else "(ENOSPC)") in lines[0], lines[0]
        assert Catalog(str(root)).version() == version
        staging = root / "_staging"
        assert not staging.exists() or not os.listdir(staging), os.listdir(staging)


def _check_cases(tmp_path: Path) -> dict[str, tuple[str, list[str], str]]:
    lake = tmp_path / "lake"
    if not lake.exists():
        assert seglake("register", str(FIXTURES), "--root", str(lake)).returncode == 0
    (tmp_path / "notes.txt").write_text("x")
    out = ["--output", str(tmp_path / "o")]
    return {
        "extract no lake": (
            "extract",
            ["--root", "nolake", "--topic", "first", *out],
            "nolake: not a lake",
        ),
        "extract no topic": (
            "extract",
            ["--root", str(lake), "--topic", "nope", *out],
            "topic 'nope' is not in the lake",
        ),
        "ingest no input": (
            "ingest",
            ["--input", "nope.parquet", "--root", str(lake)],
            "nope.parquet: input path does not exist",
        ),
        "ingest root a file": (
            "ingest",
            ["--input", str(tmp_path / "notes.txt"), "--root", str(tmp_path / "notes.txt")],
            "notes.txt: is a file, not a lake directory",
        ),
        "ingest bad topic": (
            "ingest",
            ["--input", str(tmp_path / "notes.txt"), "--root", str(lake), "--topic", "a/b"],
            "InvalidTopicError",
        ),
        "lookup no queries": (
            "lookup",
            ["--root", str(lake), "--queries", "q.json", *out],
            "q.json: queries path does not exist",
        ),
        "retention no lake": (
            "retention",
            ["--root", "nolake", "--retention-ms", "1"],
            "not a lake",
        ),
        "recover no lake": ("recover", ["--root", "nolake"], "nolake: not a lake"),
        "compact no lake": ("compact", ["--root", "nolake"], "nolake: not a lake"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "extract no lake",
        "extract no topic",
        "ingest no input",
        "ingest root a file",
        "ingest bad topic",
        "lookup no queries",
        "retention no lake",
        "recover no lake",
        "compact no lake",
    ],
)
def test_arguments_are_checked_before_spark_starts(tmp_path, monkeypatch, capsys, case) -> None:
    """Issue 23 item 3: a wrong root, input path or topic is one line before any Spark
    session is asked for (old code: the session first, ~17 s, then the error)."""
    job, argv, named = _check_cases(tmp_path)[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEGLAKE_ERROR_FILE", raising=False)

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started before the arguments were checked")

    monkeypatch.setattr("seglake.spark.jobs.get_session", no_spark)
    capsys.readouterr()
    assert main(job, argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"seglake {job}: error: "), lines
    assert named in lines[0], lines[0]
    assert not (tmp_path / "nolake").exists()


def test_spark_submit_checks_before_the_jvm(tmp_path) -> None:
    """spark-submit.sh runs the same checks (``python -m seglake.cli.jobargs``) before it
    starts spark-submit: one line, exit 2; --help needs no JVM either."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("SEGLAKE_ERROR_FILE", None)
    for job, argv, named in _check_cases(tmp_path).values():
        proc = run([sys.executable, "-m", "seglake.cli.jobargs", job, *argv], env=env, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "", (job, proc.stderr)
        assert proc.stderr.count("\n") == 1 and named in proc.stderr, proc.stderr
    proc = run([str(ROOT / "spark-submit.sh"), "extract", "--help"])
    assert proc.returncode == 0 and "--isolation-level" in proc.stdout
    assert "WARNING: Using incubator modules" not in proc.stderr  # no JVM was started
