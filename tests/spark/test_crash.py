"""Crash safety of ingest: the driver killed at each step, a task killed, concurrent runs.

Each crash runs one ingest in a driver process of its own (tests/crash_runner.py, a
``local[1]`` session) that a crash point (``seglake.testing_hooks``) SIGKILLs together
with its JVM and workers: while tasks write segments, after staging, during the catalog
commit, after it, and half way through moving the files. Afterwards readers must see the
whole run or none of it, ``seglake cleanup`` must leave no garbage (and publish a
committed run, never delete it), and a rerun with the same run id must converge: every
input record exactly once, none of the records committed before lost or changed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.cli.main import main as seglake_cli
from seglake.errors import ConcurrentRunError
from seglake.lake.catalog import Catalog
from seglake.lake_paths import STAGING_DIR
from seglake.sample import generate
from seglake.spark import ingest as ingest_module
from seglake.spark.extract import extract
from seglake.spark.extract_plan import plan_extract
from seglake.spark.ingest import IngestResult, ingest
from seglake.testing_hooks import CRASH_AT, CRASH_ONCE
from tests.lake_check import lake_records, same_records_as_input
from tests.process_group import run_group

pytestmark = pytest.mark.spark
RUNNER = Path(__file__).resolve().parents[1] / "crash_runner.py"
TOPICS = ("c1", "c2")
PARTITIONS = 2
CONF = {"log.segment.bytes": "20000", "batch.size": "2048", "log.index.interval.bytes": "2048"}
RUN = "crash-run"
MARKER = "SEGLAKE_CRASH_TEST_RUN"  # env marker of one driver's processes
# where the driver dies, and whether the run is committed (visible) when it does
DRIVER_CRASHES = {
    "write": False,  # tasks have staged some segments, others are half written
    "catalog.commit": False,  # every segment staged, the commit not started
    "catalog.commit.write": False,  # commit planned and checked, log entry not written
    "catalog.commit.done": True,  # committed, no file moved out of staging
    "publish": True,  # committed, some files moved, others still staged
}


@pytest.fixture(scope="module")
def inputs(spark, tmp_path_factory) -> dict[str, Any]:
    """A lake holding a committed baseline run, and the parquet input of the next run."""
    base = tmp_path_factory.mktemp("crash")
    before = generate(1500, seed=31, topics=TOPICS)
    run = generate(5000, seed=32, topics=TOPICS, start_ms=1_767_225_700_000)
    pq.write_table(run, base / "run.parquet")
    template = str(base / "template")
    ingest(
        spark,
        spark.createDataFrame(before),
        template,
        run_id="baseline",
        num_partitions=PARTITIONS,
        conf=CONF,
    )
    return {
        "template": template,
        "input": str(base / "run.parquet"),
        "before": before,
        "all": pa.concat_tables([before, run]),
    }


def _lake_copy(inputs: dict[str, Any], tmp_path: Path) -> str:
    root = str(tmp_path / "lake")
    shutil.copytree(inputs["template"], root)
    return root


def _run_driver(
    inputs: dict[str, Any],
    root: str,
    tmp_path: Path,
    *,
    env: dict[str, str],
    kill: str,
    master: str = "local[1]",
) -> subprocess.CompletedProcess[str]:
    """The ingest in a process group of its own; the group is SIGKILLed when done with."""
    spec = {
        "root": root,
        "input": inputs["input"],
        "run_id": RUN,
        "num_partitions": PARTITIONS,
        "conf": CONF,
        "kill": kill,
        "master": master,
        "spark_conf": {
            "spark.local.dir": str(tmp_path / "spark-local"),
            "spark.sql.shuffle.partitions": "2",
        },
    }
    marker = f"{MARKER}={uuid.uuid4().hex}"  # inherited by the JVM and Python workers
    done = run_group(RUNNER, json.dumps(spec), {**env, MARKER: marker.split("=", 1)[1]})
    # pyspark.daemon runs in a process group of its own: the group kill misses it and its
    # workers, which exit once they see their JVM gone. Nothing of the run may outlive it.
    survivors = _wait_for_exit(marker)
    assert not survivors, f"processes of the killed run outlived it: {survivors}"
    return done


def _marked(marker: str) -> dict[int, str]:
    """``{pid: command line}`` of live processes whose environment holds ``marker``."""
    found = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with suppress(OSError):
                if marker.encode() in (d / "environ").read_bytes().split(b"\0"):
                    found[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def _wait_for_exit(marker: str, patience_s: float = 120.0) -> dict[int, str]:
    """Wait until no process carries ``marker``; SIGKILL (by pid) and return those that
    are still there after ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def _files(root: str, under: str = "") -> list[str]:
    top = Path(root, under)
    return sorted(str(p.relative_to(root)) for p in top.rglob("*") if p.is_file())


def _garbage(root: str) -> list[str]:
    """Files in the lake that no catalog row owns (the catalog's own files aside)."""
    owned = {r["path"][: -len(".log")] for r in Catalog(root).segments().to_pylist()}
    return [
        f
        for f in _files(root)
        if not f.startswith("_catalog/") and f.rsplit(".", 1)[0] not in owned
    ]


def _ingest_run(spark, inputs: dict[str, Any], root: str) -> IngestResult:
    """The run the crash tests kill, in this process's session."""
    df = spark.read.parquet(inputs["input"])
    return ingest(spark, df, root, run_id=RUN, num_partitions=PARTITIONS, conf=CONF)


def _check_converges(spark, inputs: dict[str, Any], root: str) -> None:
    """``seglake cleanup``, then a rerun of the run id: everything exactly once."""
    assert seglake_cli(["cleanup", "--older-than", "0", root]) == 0
    assert _files(root, STAGING_DIR) == []
    rerun = _ingest_run(spark, inputs, root)
    again = _ingest_run(spark, inputs, root)
    assert again.already_committed and again.catalog_version == rerun.catalog_version
    assert same_records_as_input(lake_records(root), inputs["all"])
    assert _garbage(root) == [] and _files(root, STAGING_DIR) == []


@pytest.mark.parametrize("point", list(DRIVER_CRASHES))
def test_driver_killed(spark, inputs, tmp_path, point):
    root = _lake_copy(inputs, tmp_path)
    before = lake_records(root)
    version = Catalog(root).version()
    done = _run_driver(inputs, root, tmp_path, env={CRASH_AT: point}, kill="group")
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr[-3000:])
    assert _files(root, f"{STAGING_DIR}/{RUN}"), "the run had staged files when it died"
    after = lake_records(root)
    if DRIVER_CRASHES[point]:  # the whole run, read from staging where not moved yet
        assert Catalog(root).version() == version + 1
        assert same_records_as_input(after, inputs["all"])
    else:  # none of it
        assert Catalog(root).version() == version
        pd.testing.assert_frame_equal(after, before)
    _check_converges(spark, inputs, root)
    # the records committed before the crash are still there, unchanged
    merged = lake_records(root).merge(before, how="inner", on=list(before.columns))
    assert len(merged) == len(before)


def test_task_killed_mid_write(spark, inputs, tmp_path):
    """A Python worker dies writing segments (no retries in local mode): the job fails,
    nothing is visible, ``cleanup`` leaves no staged file; a rerun converges."""
    root = _lake_copy(inputs, tmp_path)
    before = lake_records(root)
    env = spark.sparkContext.environment
    env[CRASH_AT] = "write"
    try:
        with pytest.raises(Exception, match=r"(?i)python worker|crash|exit"):
            _ingest_run(spark, inputs, root)
    finally:
        del env[CRASH_AT]
    pd.testing.assert_frame_equal(lake_records(root), before)
    _check_converges(spark, inputs, root)


def test_killed_task_is_retried_and_the_run_commits_once(inputs, tmp_path):
    """``local[1,2]``: a task killed once is retried in a fresh worker; the attempt that
    died leaves no trace in the committed run."""
    root = _lake_copy(inputs, tmp_path)
    env = {CRASH_AT: "write", CRASH_ONCE: str(tmp_path / "crashed-once")}
    done = _run_driver(inputs, root, tmp_path, env=env, kill="task", master="local[1,2]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "crashed-once").exists(), "the task never died"
    assert json.loads(done.stdout.strip().splitlines()[-1])["committed"]
    assert same_records_as_input(lake_records(root), inputs["all"])
    assert _garbage(root) == [] and _files(root, STAGING_DIR) == []


def test_concurrent_ingests_into_one_partition_one_commits(spark, inputs, tmp_path, monkeypatch):
    """Both runs plan from the same log end offset and reach the commit together:
    exactly one commits, the other publishes nothing and leaves nothing behind."""
    root = _lake_copy(inputs, tmp_path)
    batches = [generate(700, seed=40 + i, topics=("c1",)) for i in range(2)]
    barrier = threading.Barrier(2, timeout=120)
    real_commit = Catalog.commit

    def commit_together(self: Catalog, *args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        return real_commit(self, *args, **kwargs)

    monkeypatch.setattr(Catalog, "commit", commit_together)
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(
                ingest,
                spark,
                spark.createDataFrame(b),
                root,
                run_id=f"racer-{i}",
                num_partitions=PARTITIONS,
                conf=CONF,
            )
            for i, b in enumerate(batches)
        ]
    results = [f.exception() or f.result() for f in futures]
    monkeypatch.undo()
    won = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], ConcurrentRunError) and results[won[0]].committed
    want = pa.concat_tables([inputs["before"], batches[won[0]]])
    assert same_records_as_input(lake_records(root), want)
    assert _garbage(root) == [] and _files(root, STAGING_DIR) == []


def _extract_all(spark, root: str) -> pd.DataFrame:
    frames = [extract(spark, root, t).toPandas() for t in TOPICS]
    out = pd.concat(frames)[["topic", "partition", "offset", "value"]]
    return out.sort_values(["topic", "partition", "offset"]).reset_index(drop=True)


@pytest.fixture
def paused_ingest(spark, inputs, tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """An ingest in a thread, paused before its commit and again after it (files still
    staged); the test releases each pause through ``gates``."""
    root = _lake_copy(inputs, tmp_path)
    gates = {k: threading.Event() for k in ("at_commit", "commit", "committed", "publish")}
    real_commit, real_publish = Catalog.commit, ingest_module.publish_pending

    def commit(self: Catalog, *args: Any, **kwargs: Any) -> Any:
        gates["at_commit"].set()
        gates["commit"].wait(120)
        return real_commit(self, *args, **kwargs)

    def publish(*args: Any, **kwargs: Any) -> Any:
        gates["committed"].set()
        gates["publish"].wait(120)
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(Catalog, "commit", commit)
    monkeypatch.setattr(ingest_module, "publish_pending", publish)
    state: dict[str, Any] = {"root": root, "gates": gates}
    state["thread"] = threading.Thread(
        target=lambda: state.update(result=_ingest_run(spark, inputs, root))
    )
    state["thread"].start()
    yield state
    for gate in gates.values():
        gate.set()
    state["thread"].join(300)


def test_reads_during_an_ingest_see_one_catalog_version(spark, inputs, paused_ingest):
    """Extractions before, during and after the commit (and after the files moved) each
    see exactly one catalog version; one pinned to the old version keeps seeing it."""
    root, gates = paused_ingest["root"], paused_ingest["gates"]
    assert gates["at_commit"].wait(180), "the ingest never reached its commit"
    old_version = Catalog(root).version()
    before = _extract_all(spark, root)
    assert sorted(before["value"]) == sorted(inputs["before"]["value"].to_pylist())
    pinned = [plan_extract(root, t, version=old_version) for t in TOPICS]
    gates["commit"].set()
    assert gates["committed"].wait(120)
    assert Catalog(root).version() == old_version + 1
    staged = _extract_all(spark, root)  # committed, files still under _staging/
    assert sorted(staged["value"]) == sorted(inputs["all"]["value"].to_pylist())
    gates["publish"].set()
    paused_ingest["thread"].join(300)
    assert paused_ingest["result"].committed
    pd.testing.assert_frame_equal(_extract_all(spark, root), staged)
    old = pd.concat(
        [extract(spark, root, t, plan=p).toPandas() for t, p in zip(TOPICS, pinned, strict=True)]
    )
    assert sorted(old["value"]) == sorted(before["value"])
