"""A real Spark standalone cluster (a master and one worker on 127.0.0.1, started from the
venv's pyspark): ingest, extract and lookup through ./spark-submit.sh, with executors in
JVMs and Python workers of their own (own working directory, seglake only from the zip
spark-submit.sh ships), answers checked against a brute-force decode without Spark; the
lake on a local path and on object storage (SeaweedFS's S3 on loopback,
tests/s3_server.py: executors see no local lake path)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.staging import open_partition
from seglake.sample import START_MS, generate
from tests.conftest import ROOT
from tests.crash_runner import JVM_OPTIONS
from tests.s3_server import CREDENTIALS

pytestmark = pytest.mark.spark

START_TIMEOUT_S = 240  # the machine is busy: JVMs start slowly
JOB_TIMEOUT_S = 600
# every JVM here is short-lived on a few MB: master and worker (SPARK_DAEMON_JAVA_OPTS)
# and each job's executor with JVM_OPTIONS (C1 only, the serial GC) as its driver
# (conftest.py); Delta's log replayed in one task, not 50, at every read of a table's
# state (spark.databricks.delta.snapshotPartitions)
JOB_CONF = {
    "spark.executor.defaultJavaOptions": JVM_OPTIONS,
    "spark.databricks.delta.snapshotPartitions": "1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 40) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return f"--- {path.name} (last {n} lines) ---\n" + "\n".join(lines[-n:])


def _wait_for(path: Path, text: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with status {proc.returncode}\n{_tail(path)}")
        time.sleep(0.5)
    pytest.fail(f"{what} not ready after {START_TIMEOUT_S} s (no {text!r})\n{_tail(path)}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM by pid, wait; then SIGKILL its process group (it leads one of its own:
    a worker's executor JVMs) and wait."""
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _env() -> dict[str, str]:
    """No PYTHONPATH: driver and executors import seglake from the zip spark-submit.sh
    ships (as from a fresh clone), never from the test's own path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.pop("SPARK_HOME", None)
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``spark://127.0.0.1:<port>`` of a master with one worker (1 core, 1 GiB), and the
    worker's log."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no java on PATH (nor JAVA_HOME): a Spark standalone cluster needs a JVM")
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    work = tmp_path_factory.mktemp("cluster")
    env = _env()
    env["SPARK_WORKER_DIR"] = str(work / "worker")
    env["SPARK_DAEMON_JAVA_OPTS"] = JVM_OPTIONS
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        master_log = work / "master.log"
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host",
                 "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
                start_new_session=True,
            )  # fmt: skip
        procs.append(master)
        _wait_for(master_log, "I have been elected leader", master, "Spark master")
        worker_log = work / "worker.log"
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host",
                 "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                 str(_free_port()), "--work-dir", str(work / "worker")],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work,
                start_new_session=True,
            )  # fmt: skip
        procs.append(worker)
        _wait_for(worker_log, "Successfully registered with master", worker, "Spark worker")
        yield url, worker_log
    finally:
        for proc in reversed(procs):
            _stop(proc)


def submit(url: str, log: Path, *args: str) -> None:
    """``./spark-submit.sh --master URL ... [SPARK OPTIONS] JOB ARGS``; fails with the
    job's output."""
    cmd = [
        str(ROOT / "spark-submit.sh"),
        "--master", url,
        "--conf", "spark.cores.max=1",
        "--conf", "spark.executor.memory=1g",
        "--conf", "spark.driver.memory=1g",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        *(f"--conf={k}={v}" for k, v in JOB_CONF.items()),
        *args,
    ]  # fmt: skip
    job = next(a for a in args if not a.startswith("--"))
    with log.open("wb") as out:
        try:
            res = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=log.parent,
                timeout=JOB_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"{job} on {url} did not finish in {JOB_TIMEOUT_S} s\n{_tail(log)}")
    if res.returncode:
        pytest.fail(f"{job} on {url} exited {res.returncode}\n{_tail(log, 80)}")


def lake_records(root: str) -> dict[tuple[str, int], list[dict]]:
    """Every record of every partition, read without Spark (catalog + segments)."""
    rows = Catalog(root).segments()
    out = {}
    for topic, part in sorted(
        set(zip(*(rows.column(c).to_pylist() for c in ("topic", "partition")), strict=True))
    ):
        log = open_partition(LakeHandle.open(root), topic, part)
        out[(topic, part)] = log.read_range(0, log.log_end_offset).to_pylist()
    return out


def launched(worker_log: Path) -> int:
    """Executors the worker launched so far."""
    return worker_log.read_text().count("Asked to launch executor")


@pytest.fixture(params=["local", "s3"])
def lake_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A lake root and the spark-submit options its jobs need: a local path, or an
    ``s3://`` root on the SeaweedFS server (endpoint in the root's query; its dummy
    credentials in this process's environment, so the driver's, and passed to the
    executors as ``spark.executorEnv.*``: executors see no local lake path)."""
    if request.param == "local":
        yield str(tmp_path / "lake"), []
        return
    server = request.getfixturevalue("s3_credentials")
    server.create_bucket("cluster")
    yield (
        server.root("cluster", "lake"),
        [f"--conf=spark.executorEnv.{k}={v}" for k, v in CREDENTIALS.items()],
    )


def test_ingest_extract_lookup_on_a_standalone_cluster(
    cluster: tuple[str, Path], lake_root: tuple[str, list[str]], tmp_path: Path
) -> None:
    cluster, worker_log = cluster
    root, opts = lake_root
    before = launched(worker_log)
    messages = generate(3000, seed=11, rate_per_s=200.0)
    pq.write_table(messages, tmp_path / "messages.parquet")
    submit(
        cluster, tmp_path / "ingest.log", *opts, "ingest",
        "--input", str(tmp_path / "messages.parquet"), "--root", root,
        "--num-partitions", "2", "--conf", "log.segment.bytes=65536",
    )  # fmt: skip
    # ingest: every input message exactly once, in the lake's segments
    got = lake_records(root)
    assert {t for t, _ in got} == set(messages.column("topic").to_pylist())
    cols = ("topic", "key", "value", "timestamp")
    want = Counter(zip(*(messages.column(c).to_pylist() for c in cols), strict=True))
    have = Counter(
        (t, r["key"], r["value"], r["timestamp"]) for (t, _), rs in got.items() for r in rs
    )
    assert have == want
    rows = Catalog(root).segments()
    assert len(rows) > 4  # several segments per partition
    # the executors wrote the rows with this tree's code (the shipped zip): its column
    assert set(rows.column("index_interval_bytes").to_pylist()) == {4096}

    # extract (Kafka's semantics): offsetsForTimes(start) .. offsetsForTimes(end) per partition
    start, end = START_MS + 4_000, START_MS + 9_000
    submit(
        cluster, tmp_path / "extract.log", *opts, "extract", "--root", root, "--topic", "orders",
        "--start", str(start), "--end", str(end), "--output", str(tmp_path / "extract"),
    )  # fmt: skip
    out = pq.read_table(tmp_path / "extract")
    have = sorted(
        zip(*(out.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True)
    )
    expected = []
    for (topic, part), rs in got.items():
        if topic != "orders":
            continue
        log = open_partition(LakeHandle.open(root), topic, part)
        lo, hi = log.offsets_for_times(start), log.offsets_for_times(end)
        lo = log.log_end_offset if lo is None else lo.offset
        hi = log.log_end_offset if hi is None else hi.offset
        expected += [(part, r["offset"], r["value"]) for r in rs if lo <= r["offset"] < hi]
    assert len(expected) > 100 and have == sorted(expected)

    # lookup: offsets (inside, beyond the end) and timestamps
    rng = np.random.default_rng(5)
    queries = []
    for (topic, part), rs in got.items():
        for r in rng.choice(len(rs), 5, replace=False):
            queries.append({"topic": topic, "partition": part, "offset": rs[int(r)]["offset"]})
        queries.append({"topic": topic, "partition": part, "offset": 10**9})
        queries.append({"topic": topic, "partition": part, "timestamp": START_MS + 7_777})
    (tmp_path / "queries.json").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    submit(
        cluster, tmp_path / "lookup.log", *opts, "lookup", "--root", root,
        "--queries", str(tmp_path / "queries.json"), "--output", str(tmp_path / "lookup"),
    )  # fmt: skip
    answers = pq.read_table(tmp_path / "lookup").to_pylist()
    assert len(answers) == len(queries)
    for a in answers:
        key = (a["topic"], a["partition"])
        by_offset = {r["offset"]: r for r in got[key]}
        if a["query_timestamp"] is not None:
            found = open_partition(LakeHandle.open(root), *key).offsets_for_times(
                a["query_timestamp"]
            )
            assert a["offset"] == found.offset and a["status"] == "ok", a
        elif a["query_offset"] in by_offset:
            assert a["status"] == "ok" and a["value"] == by_offset[a["query_offset"]]["value"]
        else:
            assert a["status"] == "offset_out_of_range", a
    # each job ran its tasks in an executor the worker launched (not in the driver)
    assert launched(worker_log) - before == 3


def test_delta_input_and_output_on_a_standalone_cluster(
    cluster: tuple[str, Path], tmp_path: Path, spark
) -> None:
    """With delta-spark (``make jars``: spark-submit.sh adds ``--jars`` and Delta's session
    extension), ``--input-format delta`` and ``--output-format delta`` run Spark's Delta
    reader and writer on the cluster: a table with a deletion vector is read without its
    deleted rows, and the output's commit is delta-spark's."""
    from deltalake import DeltaTable

    from seglake.spark.session import extra_jars

    if not any(Path(j).name.startswith("delta-spark") for j in extra_jars()):
        pytest.skip("no delta-spark jar in .jars/spark (make jars needs mvn and java)")
    url, _ = cluster
    table = str(tmp_path / "in-delta")
    spark.createDataFrame(generate(1200, seed=12, topics=("cd",))).coalesce(1).write.format(
        "delta"
    ).option("delta.enableDeletionVectors", "true").save(table)
    spark.sql(f"DELETE FROM delta.`{table}` WHERE value LIKE '%\"user\":3,%'")
    assert "deletionVectors" in (DeltaTable(table).protocol().reader_features or [])
    kept = sorted(spark.read.format("delta").load(table).toArrow().column("value").to_pylist())
    assert 0 < len(kept) < 1200
    root = str(tmp_path / "lake")
    submit(
        url, tmp_path / "ingest.log", "ingest", "--input", table, "--input-format", "delta",
        "--root", root, "--num-partitions", "2",
    )  # fmt: skip
    got = sorted(r["value"] for rs in lake_records(root).values() for r in rs)
    assert got == kept
    out = str(tmp_path / "out-delta")
    submit(
        url, tmp_path / "extract.log", "extract", "--root", root, "--topic", "cd",
        "--start", "0", "--end", str(2**62), "--output", out, "--output-format", "delta",
    )  # fmt: skip
    assert sorted(DeltaTable(out).to_pyarrow_table().column("value").to_pylist()) == kept
    log = (Path(out) / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    info = next(json.loads(x)["commitInfo"] for x in log if "commitInfo" in x)
    assert "Delta-Lake" in info.get("engineInfo", ""), info  # delta-spark wrote it
