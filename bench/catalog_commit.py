"""Catalog commits: deltalake (seglake's ``Catalog.commit``) vs delta-spark in the same
process, on copies of one catalog.

    .venv/bin/python bench/catalog_commit.py [--history 30] [--commits 8] [--rows 24]
                                             [--rounds 2] [--no-write]

Each commit is what a run's driver does at its end: read the catalog's current rows of the
run's topic (the state the checks plan on), check the run id's app transaction, append the
run's rows (``--rows`` segments continuing each partition) in one Delta commit that records
the run id as an app transaction (idempotent reruns) and seglake's commit metadata.

    deltalake     ``Catalog.commit`` as it is (no JVM: also where no SparkSession exists)
    delta-spark   ``spark.read.format("delta")`` of the rows (``toArrow``), then
                  ``df.write.format("delta").mode("append")`` with ``txnAppId`` /
                  ``txnVersion`` (Delta's idempotent write: skipped when the run's app
                  transaction is committed) and ``userMetadata``

Both are one atomic Delta commit (a new ``_delta_log/<version>.json``, put-if-absent). The
rounds alternate the two on fresh copies of a catalog of ``--history`` commits; the figure
is the median seconds per commit and delta-spark / deltalake.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import replace_section
from seglake.lake.catalog import Catalog
from seglake.lake.rows import normalize_rows
from seglake.lake.table import app_id

SECTION = "## catalog commits (bench/catalog_commit.py)"
READS: list[float] = []  # delta-spark: seconds of each commit's read of the rows
TOPIC = "bench"
PARTITIONS = 4


def rows(start: dict[int, int], n: int) -> pa.Table:
    """``n`` catalog rows (segments of 1,000 offsets) continuing each partition's
    ``start``; ``start`` is moved on."""
    data: dict[str, list] = {k: [] for k in ("topic", "partition", "base_offset", "next_offset")}
    for i in range(n):
        p = i % PARTITIONS
        base = start.get(p, 0)
        start[p] = base + 1000
        data["topic"].append(TOPIC)
        data["partition"].append(p)
        data["base_offset"].append(base)
        data["next_offset"].append(base + 1000)
    m = len(data["topic"])
    data |= {
        "record_count": [1000] * m,
        "min_timestamp": [1_767_225_600_000 + b for b in data["base_offset"]],
        "max_timestamp": [1_767_225_600_999 + b for b in data["base_offset"]],
        "size_bytes": [100_000] * m,
        "index_entries": [24] * m,
        "time_index_entries": [24] * m,
        "codec": ["lz4"] * m,
        "path": [
            f"{TOPIC}-{p}/{b:020d}.log"
            for p, b in zip(data["partition"], data["base_offset"], strict=True)
        ],
    }
    return pa.table(data)


def build(root: str, history: int, n: int) -> dict[int, int]:
    start: dict[int, int] = {}
    catalog = Catalog(root)
    for i in range(history):
        catalog.commit(rows(start, n), f"history-{i}")
    return start


def commit_deltalake(root: str, table: pa.Table, run_id: str) -> None:
    Catalog(root).commit(table, run_id)


def commit_delta_spark(spark, root: str, table: pa.Table, run_id: str) -> None:
    """The same change through delta-spark: read the topic's rows (the plan's input), one
    append that Delta skips when the run id's app transaction is committed (its rerun
    check), with the commit metadata."""
    cat = f"{root}/_catalog"
    t0 = time.perf_counter()
    current = spark.read.format("delta").load(cat).where(f"topic = '{TOPIC}'").toArrow()
    READS.append(time.perf_counter() - t0)
    full = current.schema  # the catalog's columns, run_id and committed_at too
    new = normalize_rows(table, run_id, dt.datetime.now(dt.UTC), restamp=False)
    new = new.select(full.names).cast(full)
    meta = json.dumps({"seglake.run_id": run_id, "seglake.operation": "commit"})
    (
        spark.createDataFrame(new)
        .coalesce(1)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id(run_id))
        .option("txnVersion", 1)
        .option("userMetadata", meta)
        .save(cat)
    )


def run(history: int, commits: int, n: int, rounds: int) -> dict[str, list[float]]:
    from seglake.spark.session import get_session

    spark = get_session("bench-catalog-commit", master="local[2]", quiet=True)
    work = Path(tempfile.mkdtemp(prefix="catalog-commit-"))
    template = str(work / "template")
    start = build(template, history, n)
    times: dict[str, list[float]] = {"deltalake": [], "delta-spark": []}
    try:
        for r in range(rounds * 2 + 1):  # round 0: delta-spark's warm-up (JVM, classes)
            engine = "delta-spark" if r % 2 == 0 else "deltalake"
            root = str(work / f"r{r}")
            shutil.copytree(template, root)
            s = dict(start)
            for i in range(commits):
                t = rows(s, n)
                t0 = time.perf_counter()
                if engine == "deltalake":
                    commit_deltalake(root, t, f"run-{r}-{i}")
                else:
                    commit_delta_spark(spark, root, t, f"run-{r}-{i}")
                if r:
                    times[engine].append(time.perf_counter() - t0)
            assert Catalog(root).version() == history + commits, engine  # one commit each
            if r == 0:
                READS.clear()  # the warm-up's
            shutil.rmtree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return times


def report(times: dict[str, list[float]], history: int, n: int, load: float) -> str:
    dl, ds = (statistics.median(times[k]) for k in ("deltalake", "delta-spark"))
    return "\n".join(
        [
            SECTION,
            "",
            f"2 shared CPUs (load average {load:.1f}), `local[2]`; a catalog of {history} "
            f"commits, each commit adds {n} rows over {PARTITIONS} partitions of one topic "
            "(read of the topic's rows, run-id check, one append with an app transaction).",
            "",
            "| engine | commits | median s / commit | min s | ratio |",
            "|---|---:|---:|---:|---:|",
            f"| deltalake (`Catalog.commit`) | {len(times['deltalake'])} | {dl:.3f} | "
            f"{min(times['deltalake']):.3f} | 1.0x |",
            f'| delta-spark (read, txn check, `write.format("delta")`) | '
            f"{len(times['delta-spark'])} | {ds:.3f} | {min(times['delta-spark']):.3f} | "
            f"**{ds / dl:.1f}x** |",
            "",
            f"delta-spark's read of the current rows: median {statistics.median(READS):.3f} s "
            "of its commit (the rest: the write job, Delta's snapshot update and commit).",
            "",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--history", type=int, default=30)
    ap.add_argument("--commits", type=int, default=8)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    times = run(args.history, args.commits, args.rows, args.rounds)
    text = report(times, args.history, args.rows, os.getloadavg()[0])
    print(text)
    if not args.no_write:
        replace_section(text)


if __name__ == "__main__":
    main()
