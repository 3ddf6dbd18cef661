"""Kafka itself as the peer: Spark's Kafka source reading a local broker vs seglake reading
a lake of the same batches (issue 22, item 7).

    .venv/bin/python bench/broker_peers.py [--messages N] [--partitions P] [--window PCT]
        [--queries Q] [--scale-queries S] [--consumer-queries C] [--repeat R] [--quick]
        [--dir DIR]

The data: a single-node KRaft broker (``seglake.kafka_broker``, on 127.0.0.1) gets a topic
of P partitions (default 4) and N messages (default 2,000,000) from Kafka's own producer
benchmark (``org.apache.kafka.tools.ProducerPerformance``: 100-byte values drawn from a
payload file, no keys, CreateTime, lz4, the producer's default batching). The broker is
then stopped cleanly, ``seglake register`` copies its data directory into a lake, and the
broker is started again on the same directory: both sides hold exactly the same batches.
Broker and lake are kept in ``--dir`` (default bench/out/kafka) and reused by later runs.

Cases, each a Spark job materialising every row in the JVM (a ``noop`` write) in ONE
SparkSession (``local[2]``), except K3's peer:

* K1, a PCT% time window (default 10%; between the timestamps at 50 -/+ PCT/2 % of the
  records): Spark's Kafka source with ``startingOffsetsByTimestamp`` /
  ``endingOffsetsByTimestamp`` vs the seglake data source with the same options, and
  seglake's ``extract`` (``mode="offsets"``, the same rule);
* K2, the whole topic: the Kafka source (earliest .. latest) vs the seglake data source;
* K3, Q random (partition, offset) point lookups (default 10,000): a Java consumer per
  partition seeking each offset and polling its record (bench/KafkaSeek.java, one JVM
  kept running; its own loop time, JVM start and warm-up excluded) vs seglake's
  ``lookup`` job of the same queries, and vs the same answered in this process (issue
  32): ``seglake.open(lake).lookup(queries)`` timed whole, a new Lake each round with the
  index cache emptied (a session's first lookup, its imports aside), and the same Lake
  again (warm);
* K3x, S random point lookups (default 1,000,000; issue 32's "at scale"): the Spark
  ``lookup`` job vs the consumer seeking the first C of them (default 100,000; another
  KafkaSeek JVM), its time (and CPU) scaled by S / C in the report (C = S: all of them).

Same rows checked before timing: count, sum of value lengths and a checksum of
(partition, offset, key, value) (Spark's ``xxhash64``) for K1 and K2; K3's answers (the
job's and ``Lake.lookup``'s) row for row (partition, offset, key, value) against the
consumer's; K3x: every answer ``ok`` at its own offset, the job's answers equal
``Lake.lookup``'s (SHA-1 of every row), and the consumer's C row for row. Timed: best of
R rounds (default 3), every case in every round, every other round reversed, all warmed
up. CPU seconds by process over each case's best round, from ``/proc/<pid>/stat``
(bench/ingest.py's sampler): this driver process, Spark's JVM, its Python workers, the
broker and the consumer JVMs.

Floors, timed in the same rounds: a one-row Spark job, an empty ``mapInArrow`` job, K3's
``answer_queries`` in the driver (no Spark), and each case's rows decoded beforehand and
handed over by Python (bench/extract.py's ``python_floor``) or read by Spark's parquet
reader. ``--quick`` (``make bench QUICK=1``): 200,000 messages, 1,000 queries, K3x
20,000 (the consumer 2,000). Skips (exit 0) without java or ``.jars/kafka``. Replaces
the "## kafka (bench/broker_peers.py)" section of bench/RESULTS.md (``$SEGLAKE_BENCH_RESULTS``).

Named broker_peers, not kafka: a bench/kafka.py shadowed kafka-python (bench/encode.py's
peer) for every script run from bench/, whose folder is first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from seglake.lake.handle import LakeHandle

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as bx  # bench/extract.py
import ingest as bi  # bench/ingest.py: the /proc samplers
from results import replace_section

HERE = Path(__file__).resolve().parent
SECTION = "## kafka (bench/broker_peers.py)"
TOPIC = "bench"
VALUE_BYTES = 100
PAYLOADS = 10_000  # distinct values in the producer's payload file
REPEAT = int(os.environ.get("SEGLAKE_BENCH_REPEAT", "3"))
TARGETS = {"K1": "<= 0.3x", "K2": "<= 0.5x", "K3": ">= 10x", "K3x": ">= 10x"}


# ---------------------------------------------------------------- per-process CPU


class CpuSampler(bi.Periodic):
    """CPU seconds of named groups of processes while in a ``with`` block: ``groups()``
    maps a name to its PIDs now (asked at every sample, so workers started meanwhile
    count from 0)."""

    def __init__(self, groups, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.groups = groups
        self._start: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}

    def _sample(self) -> None:
        for name, pids in self.groups().items():
            for p in pids:
                c = bi._cpu_s(p)
                if c is not None:
                    self._last[p] = (name, c)

    def __enter__(self) -> CpuSampler:
        for pids in self.groups().values():
            for p in pids:
                self._start[p] = bi._cpu_s(p) or 0.0
        self._thread.start()
        return self

    @property
    def cpu(self) -> dict[str, float]:
        out: dict[str, float] = {name: 0.0 for name in self.groups()}
        for p, (name, c) in self._last.items():
            out[name] = out.get(name, 0.0) + c - self._start.get(p, 0.0)
        return out


def spark_jvm(spark) -> int:
    """The PID of Spark's JVM (the broker and the consumer are JVMs under this process too)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def process_groups(jvm: int, broker, seeks: list) -> dict[str, list[int]]:
    """driver (this process), Spark's JVM, its Python workers, the broker, the consumers."""
    return {
        "driver": [os.getpid()],
        "jvm": [jvm],
        "workers": [p for p in bi._descendants(jvm) if bi._comm(p).startswith("python")],
        "broker": [broker.proc.pid] if broker.proc is not None else [],
        "consumer": [s.proc.pid for s in seeks],
    }


# ---------------------------------------------------------------- the data


def java_tool(main: str, *args: str, timeout: float = 1800) -> str:
    """Run a class of Kafka's tools jars; its output (BrokerError-like failure: exit 2)."""
    from seglake.kafka_broker import kafka_classpath

    cmd = ["java", "-Xmx1g", "-cp", kafka_classpath(), main, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "-").splitlines()[-1]
        fail(f"{main} exited {done.returncode}: {last}")
    return done.stdout


def payload_file(path: Path) -> None:
    """PAYLOADS distinct values of VALUE_BYTES printable characters, one a line."""
    rng = random.Random(1)
    chars = string.ascii_letters + string.digits
    path.write_text(
        "".join("".join(rng.choices(chars, k=VALUE_BYTES)) + "\n" for _ in range(PAYLOADS))
    )


def fail(msg: str) -> NoReturn:
    """One line on stderr, exit 2 (``main`` stops the broker and Spark on the way out)."""
    print(f"bench/broker_peers.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def build(broker, work: Path, n: int, partitions: int) -> tuple[str, dict]:
    """Start ``broker`` (over ``work/broker``) with a topic of ``n`` messages, and the
    lake registered from its data directory; both reused when already built. Returns
    (lake, facts)."""
    from seglake.lake.catalog import Catalog
    from seglake.lake.register import register

    lake = work / "lake"
    facts: dict = {"built": "reused"}
    if (lake / "_catalog").exists() and sum(Catalog(str(lake)).log_end_offsets().values()) == n:
        broker.start()
        return str(lake), facts
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    payload_file(work / "payloads.txt")
    broker.start()
    boot = ["--bootstrap-server", broker.bootstrap]
    java_tool(
        "org.apache.kafka.tools.TopicCommand",
        *boot,
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "1",
    )
    t0 = time.perf_counter()
    out = java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        TOPIC,
        "--num-records",
        str(n),
        "--payload-file",
        str(work / "payloads.txt"),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={broker.bootstrap}",
        "compression.type=lz4",
    )
    facts["produce_s"] = time.perf_counter() - t0
    facts["producer"] = out.strip().splitlines()[-1]
    with broker.stopped():  # a clean shutdown: the broker's indexes trimmed, all flushed
        t0 = time.perf_counter()
        register(LakeHandle.open(str(lake)), str(broker.log_dir), topics=[TOPIC])
        facts["register_s"] = time.perf_counter() - t0
    facts["built"] = (
        f"produced in {facts['produce_s']:.0f} s, registered in {facts['register_s']:.1f} s"
    )
    got = sum(Catalog(str(lake)).log_end_offsets().values())
    if got != n:
        fail(f"the lake {lake} holds {got:,} messages, not {n:,}")
    return str(lake), facts


class Seek:
    """bench/KafkaSeek.java running: one round of the queries per ``round()``."""

    def __init__(self, bootstrap: str, queries: Path, answers: Path, heap: str = "512m") -> None:
        from seglake.kafka_broker import kafka_classpath

        cmd = ["java", f"-Xmx{heap}", "-cp", kafka_classpath(), str(HERE / "KafkaSeek.java")]
        cmd += [bootstrap, TOPIC, str(queries), str(answers)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )

    def round(self) -> float:
        """Seconds of one round by the consumer's own clock."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("round "):
            fail(f"KafkaSeek.java said {line!r} (exit status {self.proc.poll()})")
        return float(line.split()[2])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ---------------------------------------------------------------- the cases


def window(spark, lake: str, pct: float) -> tuple[int, int]:
    """(start, end) ms: the timestamps at 50 -/+ pct/2 % of the lake's records."""
    import numpy as np

    ts = spark.read.format("seglake").option("subscribe", TOPIC).load(lake).select("timestamp")
    ms = ts.toArrow().column(0).cast("int64").to_numpy() // 1000
    lo, hi = np.quantile(ms, [0.5 - pct / 200, 0.5 + pct / 200])
    return int(lo), int(hi)


def checksum(df) -> tuple:
    """count, sum of value lengths, sum of xxhash64(partition, offset, key, value)."""
    from pyspark.sql import functions as F

    h = F.xxhash64("partition", "offset", "key", "value").cast("decimal(38,0)")
    return tuple(df.agg(F.count("*"), F.sum(F.length("value")), F.sum(h)).first())


def seek_answers(path: Path) -> list[tuple]:
    def unhex(s: str) -> bytes | None:
        return None if s == "-" else bytes.fromhex(s)

    rows = [line.split(" ") for line in path.read_text().splitlines()]
    return sorted((int(p), int(o), unhex(k), unhex(v)) for p, o, k, v in rows)


def cases(
    spark,
    broker,
    lake: str,
    work: Path,
    pct: float,
    n_queries: int,
    n_scale: int = 0,
    n_consumer: int = 0,
):
    """(timed functions, facts, the Seek processes): rows checked, every case warmed up.
    ``n_scale`` > 0: K3 at scale too (:func:`at_scale`)."""
    import pyarrow as pa

    from seglake.api.lake import open as open_lake
    from seglake.lake.catalog import Catalog
    from seglake.spark.extract import extract
    from seglake.spark.lookup import lookup

    lo, hi = window(spark, lake, pct)
    parts = {p: end for (_, p), end in Catalog(lake).log_end_offsets(TOPIC).items()}
    by_ts = {
        "startingOffsetsByTimestamp": json.dumps({TOPIC: {str(p): lo for p in parts}}),
        "endingOffsetsByTimestamp": json.dumps({TOPIC: {str(p): hi for p in parts}}),
    }

    def kafka(**opts):
        r = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
        for k, v in {"subscribe": TOPIC, **opts}.items():
            r = r.option(k, v)
        return r.load()

    def seglake(**opts):
        r = spark.read.format("seglake")
        for k, v in {"subscribe": TOPIC, **opts}.items():
            r = r.option(k, v)
        return r.load(lake)

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    q = point_queries(parts, n_queries, seed=1)
    qfile, afile = work / f"queries-{n_queries}.txt", work / f"answers-{n_queries}.txt"
    write_queries(q, qfile)
    queries = spark.createDataFrame(q).cache()
    queries.count()

    def seglake_lookup():
        return lookup(spark, lake, queries).filter("status = 'ok'")

    dfs = {
        "K1 kafka": lambda: kafka(**by_ts),
        "K1 seglake": lambda: seglake(**by_ts),
        "K1 extract": lambda: extract(spark, lake, TOPIC, start=lo, end=hi, mode="offsets"),
        "K2 kafka": lambda: kafka(),
        "K2 seglake": lambda: seglake(),
    }
    facts: dict = {"window": (lo, hi), "queries": n_queries}
    for k in ("K1", "K2"):
        sums = {name: checksum(fn()) for name, fn in dfs.items() if name.startswith(k)}
        if len(set(sums.values())) != 1:
            fail(f"{k}: the rows differ (count, value bytes, checksum): {sums}")
        facts[f"{k} rows"] = next(iter(sums.values()))[0]
    seek = Seek(broker.bootstrap, qfile, afile)
    seek.round()  # warm-up; writes the answers
    theirs = seek_answers(afile)
    ours = same_answers("K3 seglake `lookup`", seglake_lookup().toArrow(), theirs)
    lake_now = open_lake(lake)  # warm: opened once, its index cache kept
    same_answers("K3 Lake.lookup", lake_now.lookup(pa.Table.from_pandas(q)), theirs)
    facts["K3 rows"] = len(ours)
    runs = {name: (lambda fn=fn: noop(fn())) for name, fn in dfs.items()}
    runs["K3 kafka"] = seek.round
    runs["K3 seglake"] = lambda: noop(seglake_lookup())
    runs["K3 Lake.lookup fresh"] = lambda: fresh_lookup(lake, q)
    runs["K3 Lake.lookup warm"] = lambda: lake_now.lookup(q)
    runs["K3 answer_queries"] = in_process_lookup(lake, q)
    if n_scale:
        more, scale_facts, seek_scale = at_scale(
            spark, broker, lake, work, parts, n_scale, n_consumer
        )
        runs.update(more)
        facts.update(scale_facts)
    runs.update(
        floors(
            spark,
            work,
            {"K1": dfs["K1 seglake"], "K2": dfs["K2 seglake"], "K3": seglake_lookup},
            noop,
        )
    )
    for name, fn in runs.items():  # warm up
        if "kafka" not in name:
            fn()
    return runs, facts, [seek, seek_scale] if n_scale else [seek]


def point_queries(parts: dict[int, int], n: int, seed: int):
    """``n`` (topic, partition, offset) queries uniform over the records of ``parts``
    (partition -> log end offset), in random order (pandas)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    keys = sorted(parts)
    ends = np.cumsum([parts[p] for p in keys])
    pick = rng.integers(0, ends[-1], n)
    at = np.searchsorted(ends, pick, side="right")
    return pd.DataFrame(
        {
            "topic": TOPIC,
            "partition": np.asarray(keys, dtype=np.int32)[at],
            "offset": pick - np.concatenate([[0], ends])[at],
        }
    )


def write_queries(q, path: Path) -> None:
    """KafkaSeek.java's query file: "partition offset" a line."""
    path.write_text("".join(f"{p} {o}\n" for p, o in zip(q["partition"], q["offset"], strict=True)))


def rows_of(table) -> list[tuple]:
    """The ``ok`` answers of a lookup (Arrow) as sorted (partition, offset, key, value)."""
    import pyarrow.compute as pc

    t = table.filter(pc.equal(table.column("status"), "ok"))
    cols = [t.column(c).to_pylist() for c in ("partition", "offset", "key", "value")]
    return sorted(zip(*cols, strict=True))


def same_answers(name: str, table, theirs: list[tuple]) -> list[tuple]:
    """``table``'s ok answers (a lookup's, Arrow), checked row for row against the
    consumer's ``theirs`` (sorted); exit 2 naming the first difference."""
    ours = rows_of(table)
    if ours != theirs:
        bad = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
        fail(
            f"{name}: seglake answered {len(ours):,} queries, the consumer {len(theirs):,}; "
            f"first difference at sorted row {bad}: "
            f"{ours[bad][:2] if bad is not None else '-'} vs "
            f"{theirs[bad][:2] if bad is not None else '-'}"
        )
    return ours


def digest(table) -> str:
    """SHA-1 of a lookup's answers (Arrow) sorted by (partition, query_offset): status,
    partition, offset, key and value of each."""
    import hashlib

    import numpy as np

    t = table.sort_by([("partition", "ascending"), ("query_offset", "ascending")])
    h = hashlib.sha1()
    for c in ("partition", "offset", "query_offset"):
        h.update(np.asarray(t.column(c).fill_null(-1).to_numpy(), np.int64).tobytes())
    for c in ("status", "key", "value"):
        for v in t.column(c).to_pylist():
            b = v.encode() if isinstance(v, str) else v
            h.update(b"-" if b is None else len(b).to_bytes(4, "little") + b)
    return h.hexdigest()


def at_scale(spark, broker, lake: str, work: Path, parts: dict, n: int, n_consumer: int):
    """K3 at scale: ``n`` queries (another seed) answered by the Spark ``lookup`` job,
    the consumer seeking the first ``n_consumer`` of them (its time scaled by
    ``n / n_consumer`` in the report; ``n_consumer`` = ``n``: all). Checked: every
    answer ``ok`` at its own offset (a produced topic has no gaps), the job's answers
    equal ``Lake.lookup``'s (SHA-1 of every row), and the consumer's row for row.
    Returns (timed functions, facts, the Seek process)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    import seglake
    from seglake.spark.lookup import lookup

    q = point_queries(parts, n, seed=2)
    sub = q.iloc[:n_consumer]
    qfile = work / f"queries-{n}-{n_consumer}.txt"
    afile = work / f"answers-{n}-{n_consumer}.txt"
    write_queries(sub, qfile)
    queries = spark.createDataFrame(q).cache()
    queries.count()

    def job():
        return lookup(spark, lake, queries).filter("status = 'ok'")

    # a round's records are kept for its answers: 1,000,000 need more than 512 MiB
    seek = Seek(broker.bootstrap, qfile, afile, heap="512m" if n_consumer <= 200_000 else "2g")
    seek.round()  # warm-up; writes the answers
    spark_answers = lookup(spark, lake, queries).toArrow()
    ok = pc.equal(spark_answers.column("status"), "ok")
    at_own = pc.and_(ok, pc.equal(spark_answers.column("offset"), spark_answers["query_offset"]))
    if pc.sum(at_own.cast(pa.int64())).as_py() != n or spark_answers.num_rows != n:
        fail(f"K3 at scale: {pc.sum(ok.cast(pa.int64())).as_py():,} of {n:,} queries ok")
    t0 = time.process_time()
    local = seglake.open(lake).lookup(pa.Table.from_pandas(q))
    local_cpu = time.process_time() - t0
    sha = digest(local)
    if digest(spark_answers) != sha:
        fail(f"K3 at scale: the lookup job's {n:,} answers differ from Lake.lookup's")

    # the consumer's queries are the first n_consumer: their answers, found by query
    def qkey(p, o) -> np.ndarray:
        return np.asarray(p, np.int64) << 40 | np.asarray(o, np.int64)

    asked = qkey(spark_answers["partition"], spark_answers["query_offset"])
    mine_t = spark_answers.filter(pa.array(np.isin(asked, qkey(sub["partition"], sub["offset"]))))
    by_query = {
        (p, o): (p, off, k, v)
        for p, o, off, k, v in zip(
            *(mine_t.column(c).to_pylist() for c in ("partition", "query_offset", "offset")),
            *(mine_t.column(c).to_pylist() for c in ("key", "value")),
            strict=True,
        )
    }
    mine = sorted(
        by_query[(int(p), int(o))] for p, o in zip(sub["partition"], sub["offset"], strict=True)
    )
    theirs = seek_answers(afile)
    if mine != theirs:
        fail(f"K3 at scale: the consumer's {len(theirs):,} answers differ from the job's")
    facts = {
        "K3x queries": n,
        "K3x consumer": n_consumer,
        "K3x digest": sha[:12],
        "K3x Lake.lookup cpu": local_cpu,
    }
    runs = {
        "K3x kafka": seek.round,
        "K3x seglake": lambda: job().write.format("noop").mode("overwrite").save(),
    }
    return runs, facts, seek


def fresh_lookup(lake: str, q):
    """``seglake.open(lake).lookup(q)`` as a new notebook session's first lookup (its
    imports aside): the catalog read, the arrays built, the index cache empty."""
    from seglake.api.lake import open as open_lake
    from seglake.storage.index_cache import get_cache

    get_cache().clear()
    return open_lake(lake).lookup(q)


def in_process_lookup(lake: str, q):
    """K3 without Spark: what a lookup task runs (``answer_queries`` over the broadcast
    catalog arrays, its own index cache), called here in the driver: seglake's own work."""
    import pyarrow as pa

    from seglake.lake.lookup_answer import QUERY_SCHEMA, answer_queries
    from seglake.lake.lookup_plan import partition_arrays
    from seglake.lake.snapshot import Snapshot
    from seglake.storage.index_cache import IndexCache

    parts = partition_arrays(Snapshot.read(LakeHandle.open(lake)))
    queries = pa.table(
        {
            "topic": q["topic"],
            "partition": pa.array(q["partition"], pa.int32()),
            "query_offset": pa.array(q["offset"], pa.int64()),
            "query_timestamp": pa.nulls(len(q), pa.int64()),
        },
        schema=QUERY_SCHEMA,
    )
    cache = IndexCache()
    return lambda: answer_queries(lake, parts, cache, queries).num_rows


def floors(spark, work: Path, dfs: dict, noop) -> dict:
    """The floor cases: a Spark job of one row without Python ("job"), a ``mapInArrow``
    job of no rows ("Python job"), and for each of ``dfs`` its rows decoded beforehand,
    handed over by Python (bench/extract.py's ``python_floor``, "K floor") and read by
    Spark's own parquet reader from one uncompressed file ("K JVM floor")."""

    runs = {"job": lambda: noop(spark.range(0, 1, numPartitions=1))}
    for k, fn in dfs.items():
        rows, jvm = str(work / f"floor-{k}.arrow"), str(work / f"floor-{k}.parquet")
        table = fn().toArrow()
        bx.write_floor_files(table, rows, jvm)
        if k == "K1":
            empty = str(work / "floor-empty.arrow")
            bx.write_floor_files(table.slice(0, 0), empty, empty + ".parquet")
            runs["Python job"] = lambda f=empty: noop(bx.python_floor(spark, f))
        runs[f"{k} floor"] = lambda f=rows: noop(bx.python_floor(spark, f))
        runs[f"{k} JVM floor"] = lambda f=jvm: noop(spark.read.parquet(f))
        del table
    return runs


def measured(runs: dict, groups, repeat: int) -> dict[str, tuple[float, dict]]:
    """Best of ``repeat`` (seconds, CPU by process of that round) of each case, interleaved
    as bench/extract.py's ``best``; K3's peer counts its own loop time."""
    log: dict[str, list[tuple[float, dict]]] = {k: [] for k in runs}

    def timed(name, fn):
        def run():
            with CpuSampler(groups) as cpu:
                t = time.perf_counter()
                inner = fn()
                wall = time.perf_counter() - t
            log[name].append((inner if isinstance(inner, float) else wall, cpu.cpu))

        return run

    bx.best({k: timed(k, fn) for k, fn in runs.items()}, repeat=repeat)
    return {k: min(v, key=lambda x: x[0]) for k, v in log.items()}


# ---------------------------------------------------------------- report


def report(got: dict, facts: dict, args, loads: list[str]) -> str:
    def cpu(c: dict) -> str:
        return " / ".join(f"{c.get(k, 0):.2f}" for k in ("driver", "jvm", "workers", "broker"))

    def total(c: dict) -> float:
        return sum(c.get(k, 0) for k in ("driver", "jvm", "workers", "broker"))

    lo, hi = facts["window"]
    lines = [
        SECTION,
        "",
        f"`local[2]`, {os.cpu_count()} CPUs shared with other engineers' jobs; one broker "
        f"(Kafka 4.1.1, KRaft, `seglake.kafka_broker`) with topic `{TOPIC}`, "
        f"{args.partitions} partitions, {args.messages:,} messages of {VALUE_BYTES} bytes "
        "from `ProducerPerformance` (lz4, no keys, CreateTime, default batching); the lake "
        f"registered from the stopped broker's directory ({facts['built']}). Best of "
        f"{args.repeat} rounds, every case in every round (every other reversed). Load "
        f"average (1 min) over the run: {', '.join(loads)}. Times: a `noop` write of "
        "every row (Spark jobs); K3's peer: the consumer's own loop time. CPU s by process "
        "in the best round: this driver / Spark's JVM / Python workers / the broker "
        "(K3's peer: the consumer JVM instead of Spark's).",
        "",
        "| id | case | rows | seconds | ratio | target | CPU s driver / JVM / workers / broker "
        "| CPU s total, ratio |",
        "|---|---|---:|---:|---:|---|---|---:|",
    ]
    rows = {k: f"{facts[f'{k} rows']:,}" for k in ("K1", "K2", "K3")}
    cases = [
        ("K1", f"{args.window:g}% window ({lo}..{hi} ms)", ["seglake", "extract"]),
        ("K2", "whole topic", ["seglake"]),
        (
            "K3",
            f"{facts['queries']:,} point lookups",
            ["seglake", "Lake.lookup fresh", "Lake.lookup warm"],
        ),
    ]
    scale = 1.0
    if "K3x queries" in facts:
        n, m = facts["K3x queries"], facts["K3x consumer"]
        scale = n / m
        rows["K3x"] = f"{n:,}"
        cases.append(("K3x", f"{n:,} point lookups", ["seglake"]))
    labels = {
        "seglake": "seglake data source",
        "extract": "seglake `extract`",
        "Lake.lookup fresh": "`seglake.open(lake).lookup`, a new Lake, index cache empty",
        "Lake.lookup warm": "`Lake.lookup`, the same Lake again",
    }
    for k, what, mine in cases:
        lookups = k.startswith("K3")  # the peer is slower: ratio peer / seglake
        peer_t, peer_c = got[f"{k} kafka"]
        peer = "Java consumer seeks" if lookups else "Spark Kafka source"
        if lookups:
            peer_c = {"jvm": peer_c.get("consumer", 0.0), "broker": peer_c.get("broker", 0.0)}
        if k == "K3x":
            peer += f" ({facts['K3x consumer']:,} measured, x{scale:g})" if scale != 1 else ""
            peer_t, peer_c = peer_t * scale, {c: v * scale for c, v in peer_c.items()}
        lines.append(
            f"| {k} | {what}: {peer} | {rows[k]} | {peer_t:.2f} | | | {cpu(peer_c)} | "
            f"{total(peer_c):.2f} |"
        )
        for m in mine:
            t, c = got[f"{k} {m}"]
            ratio = peer_t / t if lookups else t / peer_t
            cratio = total(peer_c) / total(c) if lookups else total(c) / total(peer_c)
            label = "seglake `lookup` (Spark)" if lookups and m == "seglake" else labels[m]
            lines.append(
                f"| {k} | {what}: {label} | {rows[k]} | {t:.2f} | **{ratio:.2f}x** | "
                f"{TARGETS[k]} | {cpu(c)} | {total(c):.2f}, {cratio:.2f}x |"
            )
    if "K3x queries" in facts:
        lines += [
            "",
            f"K3x rows checked before timing: all {facts['K3x queries']:,} answers `ok` at "
            "their own offset, the job's equal to `Lake.lookup`'s (SHA-1 of every row, "
            f"{facts['K3x digest']}; `Lake.lookup` of the {facts['K3x queries']:,} took "
            f"{facts['K3x Lake.lookup cpu']:.2f} CPU s once), and the consumer's "
            f"{facts['K3x consumer']:,} row for row. K3's {facts['queries']:,}: the job's "
            "and `Lake.lookup`'s answers row for row against the consumer's.",
        ]
    lines += [
        "",
        "Floors (same session, same rounds): a Spark job of one row without Python, a "
        "`mapInArrow` job of no rows, K3's lookup without Spark (what its task runs, "
        "`answer_queries`, called in the driver with a warm index cache), and each "
        "case's rows decoded beforehand, handed to Spark by Python (one `mapInArrow` "
        "task a core memory-mapping an Arrow file: what any Python reader pays) or read "
        "by Spark's own parquet reader from one uncompressed file (a JVM reader's "
        "floor); ratio as the case's (against the same "
        "peer run):",
        "",
        "| floor | seconds | ratio | CPU s driver / JVM / workers / broker |",
        "|---|---:|---:|---|",
    ]
    for name in (
        "job",
        "Python job",
        "K3 answer_queries",
        "K1 floor",
        "K1 JVM floor",
        "K2 floor",
        "K2 JVM floor",
        "K3 floor",
        "K3 JVM floor",
    ):
        t, c = got[name]
        k = name[:2]
        ratio = ""
        if k in TARGETS:
            peer_t = got[f"{k} kafka"][0]
            ratio = f"{peer_t / t if k == 'K3' else t / peer_t:.2f}x"
        lines.append(f"| {name} | {t:.2f} | {ratio} | {cpu(c)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--window", type=float, default=10.0, help="K1's window, %% of the records")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--scale-queries", type=int, default=1_000_000, help="K3 at scale (0: skip it)")
    ap.add_argument(
        "--consumer-queries",
        type=int,
        default=100_000,
        help="the consumer's share of K3 at scale, timed and scaled up (0: all of them)",
    )
    ap.add_argument("--repeat", type=int, default=REPEAT, help="best of this many rounds")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="200,000 messages, 1,000 queries, at scale 20,000 (the consumer 2,000)",
    )
    ap.add_argument("--dir", default=str(HERE / "out" / "kafka"), help="broker and lake (kept)")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.queries = 200_000, 1_000
        args.scale_queries, args.consumer_queries = 20_000, 2_000
    if not 0 < args.consumer_queries <= args.scale_queries:
        args.consumer_queries = args.scale_queries
    from seglake.kafka_broker import BrokerError, KafkaBroker, missing_requirements

    why = missing_requirements()
    if why:
        print(f"bench/broker_peers.py: skipped: {why}", file=sys.stderr)
        return 0
    import seglake.spark

    work = Path(args.dir) / f"kafka-{args.messages}-{args.partitions}"
    loads = [f"{os.getloadavg()[0]:.1f}"]
    broker = KafkaBroker(work / "broker")
    spark = None
    seeks: list[Seek] = []
    try:
        try:
            lake, facts = build(broker, work, args.messages, args.partitions)
        except (BrokerError, OSError) as e:
            fail(f"{str(e).splitlines()[0]} (broker log: {broker.server_log})")
        spark = bx.session()
        seglake.spark.register(spark)
        runs, more, seeks = cases(
            spark,
            broker,
            lake,
            work,
            args.window,
            args.queries,
            args.scale_queries,
            args.consumer_queries,
        )
        facts.update(more)
        loads.append(f"{os.getloadavg()[0]:.1f}")
        jvm = spark_jvm(spark)
        got = measured(runs, lambda: process_groups(jvm, broker, seeks), args.repeat)
        loads.append(f"{os.getloadavg()[0]:.1f}")
        text = report(got, facts, args, loads)
        print(text)
        replace_section(text)
    finally:
        for s in seeks:
            s.close()
        if spark is not None:
            spark.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
