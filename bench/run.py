"""Run every benchmark in turn (what ``make bench`` runs) and print a summary of the figures.

    .venv/bin/python bench/run.py [--quick] [--only NAME,...] [--dir DIR]

Full sizes (the figures of bench/RESULTS.md): each bench's defaults, plus issue 14's P3
(extract of a 10% window of 32M messages). ``--quick`` (``make bench QUICK=1``) runs small
sizes, two rounds each (a ratio needs two), cheapest first (meant for under 10 minutes
on 2 quiet cores; 25 minutes at load average 19-27, ingest 10 of them), and writes its
tables to bench/RESULTS-quick.md (emptied first unless ``--only``), so a smoke run never
replaces the measured figures. Each bench runs in its
own process (its own SparkSession); a failing bench is reported and the others still run;
the exit status is 1 if any failed. At the end, every line of the results holding a
ratio in bold is printed under its issue-14 target (the summary).

The lakes of extract and lookup (built without Spark, shared by both) are kept in
``--dir`` (default bench/out/lakes, ignored by git): built once, reused by later runs.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAKES = HERE / "out" / "lakes"
# (name, script, full-size args, quick args or None: not in quick runs); {dir} is the
# lakes directory. Quick order: cheap first, so a slow machine gets most figures early.
BENCHES: list[tuple[str, str, str, str | None]] = [
    ("encode", "encode", "", "--records 200000 --repeat 2"),
    ("notebook", "notebook", "", "--messages 50000 --lookups 500"),
    # P3; quick: 10% of 2M (200k rows), the lake of lookup's quick run
    (
        "extract-p3",
        "extract",
        "--dir {dir} --messages 32000000 --growth 1 --window 10",
        "--dir {dir} --messages 2000000 --growth 1 --window 10 --repeat 2 --no-floors",
    ),
    ("lookup", "lookup", "--dir {dir}", "--dir {dir} --sizes 2000000 --queries 2000"),
    ("ingest", "ingest", "", "--records 200000 --big-records 400000 --repeat 2"),
    (
        "compact",
        "compact",
        "",
        "--records 400000 --keys 10000 --merge-records 200000 --segment-bytes 262144",
    ),
    ("streaming", "streaming", "", "--records 200000 --batches 4 --rounds 2"),
    ("extract", "extract", "--dir {dir}", None),  # 1% window, flatness: full runs only
    # issue 22 K1-K3: a local broker (skips without java or .jars/kafka); its broker
    # directory and lake are kept in bench/out/kafka
    ("kafka", "broker_peers", "", "--quick"),
    ("broadcast", "broadcast", "", "--quick"),  # issue 32: the lookup job's broadcast
    # issue 32 KEY1: key lookups vs a full scan, parquet + bloom, a broker (its lake,
    # parquet and broker directory are kept in bench/out/keys)
    (
        "key-lookup",
        "key_lookup",
        "",
        "--messages 2000000 --keys 100000 --partitions 16 --queries 200",
    ),
    (
        "catalog-commit",
        "catalog_commit",
        "--history 20 --commits 4 --rounds 2",
        "--history 5 --commits 2 --rounds 1",
    ),
]
QUICK_REPEAT = "2"
# RESULTS.md section (title prefix) -> the issue-14 rows its bold figures answer
TARGETS = {
    "## encode": "P2 encode / decode vs kafka-python (>= 25x)",
    "## ingest": "P1 ingest (<= 1.0x), P1b 16 files (<= 1.0x), P6 worker memory (<= 1.5x)",
    "## extract, 10% window": "P3 extract of a 10% window (<= 0.6x)",
    "## extract (": "extract of a 1% window, flatness",
    "## lookup": "P4 lookups vs a join (>= 1.5x at 2M, >= 10x at 32M)",
    "## compact": "compact vs a Spark job; merge-only vs ingest",
    "## streaming": "streaming sink and source",
    "## notebook": "notebook point reads vs pandas",
    "## kafka": "issue 22 K1-K3 vs Spark's Kafka source / a consumer (<= 0.3x, <= 0.5x, >= 10x); "
    "issue 32 K3 in-process (Lake.lookup) and K3x (the job on 1,000,000 queries) >= 10x",
    "## broadcast": "issue 32: the lookup job's broadcast for 10,000 segments (< 64 MiB)",
    "## key lookups": "issue 32 KEY1: key lookups vs full scan (>= 20x), parquet bloom (>= 3x)",
    "## catalog commits": "issue 23: catalog commits, deltalake vs delta-spark",
}


def summary(path: Path) -> str:
    """Each section of ``path`` under its target, with its lines holding a bold figure."""
    if not path.exists():
        return f"(no {path})"
    out = []
    for part in re.split(r"(?m)^(?=## )", path.read_text()):
        title = part.split("\n", 1)[0]
        target = next((v for k, v in TARGETS.items() if title.startswith(k)), None)
        if target is None:
            continue
        out.append(f"{target}  [{title[3:]}]")
        head, prev = None, ""
        for line in part.splitlines()[1:]:
            if line.startswith("|") and not prev.startswith("|"):
                head = line  # a table's header: printed before its first bold row
            if "**" in line:
                if head and line.startswith("|"):
                    out.append(f"    {head}")
                    head = None
                out.append(f"    {line}")
            prev = line
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, < 10 minutes")
    ap.add_argument("--only", default=None, help="comma-separated bench names")
    ap.add_argument("--dir", default=str(LAKES), help="the extract/lookup lakes (kept)")
    args = ap.parse_args(argv)
    known = [name for name, *_ in BENCHES]
    names = [n for n in (args.only or ",".join(known)).split(",") if n]
    if unknown := [n for n in names if n not in known]:
        ap.error(f"unknown bench(es) {unknown}; known: {known}")
    os.makedirs(args.dir, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    results = HERE / "RESULTS.md"
    if args.quick:
        results = HERE / "RESULTS-quick.md"
        env["SEGLAKE_BENCH_RESULTS"] = str(results)
        env["SEGLAKE_BENCH_REPEAT"] = QUICK_REPEAT
        if args.only is None:
            results.unlink(missing_ok=True)
    failed, took, started = [], [], time.perf_counter()
    for name, script, full, quick in BENCHES:
        extra = quick if args.quick else full
        if name not in names or extra is None:
            continue
        cmd = [sys.executable, str(HERE / f"{script}.py"), *extra.format(dir=args.dir).split()]
        t0 = time.perf_counter()
        print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        if subprocess.run(cmd, env=env, check=False).returncode != 0:
            failed.append(name)
        took.append(f"{name} {time.perf_counter() - t0:.0f} s")
        print(f"== {name}: {took[-1]}", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(f"\n== summary ({results}):\n{summary(results)}")
    print(
        f"== all: {time.perf_counter() - started:.0f} s ({', '.join(took)}); "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
