"""Run every benchmark in turn (what ``make bench`` runs).

    .venv/bin/python bench/run.py [--quick] [--only NAME,...] [--dir DIR]

Full sizes (the figures of bench/RESULTS.md): each bench's defaults. ``--quick`` runs
small sizes and fewer repeats (under 10 minutes on 2 shared cores) and writes its tables
to bench/RESULTS-quick.md instead, so a smoke run never replaces the measured figures.
Each bench runs in its own process (its own SparkSession); a failing bench is reported
and the others still run; the exit status is 1 if any failed. ``--dir`` keeps the lakes
of extract and lookup (built once, shared by both) between runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name -> (full-size args, quick args); {dir} is the shared lake directory
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "encode": ([], ["--records", "200000", "--repeat", "3"]),
    "ingest": ([], ["--records", "200000", "--big-records", "400000", "--repeat", "1"]),
    "extract": (
        ["--dir", "{dir}"],
        ["--dir", "{dir}", "--messages", "200000", "--growth", "4"],
    ),
    "lookup": (
        ["--dir", "{dir}"],
        ["--dir", "{dir}", "--sizes", "200000,800000", "--queries", "2000"],
    ),
    "notebook": ([], ["--messages", "50000", "--lookups", "500"]),
    "compact": (
        [],
        [
            "--records",
            "400000",
            "--keys",
            "10000",
            "--merge-records",
            "200000",
            "--segment-bytes",
            "262144",
        ],
    ),
}
QUICK_REPEAT = "3"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, < 10 minutes")
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated bench names")
    ap.add_argument("--dir", default=None, help="keep the extract/lookup lakes here")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown bench(es) {unknown}; known: {list(BENCHES)}")
    lakes = args.dir or tempfile.mkdtemp(prefix="seglake-bench-lakes-")
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.quick:
        env["SEGLAKE_BENCH_RESULTS"] = str(HERE / "RESULTS-quick.md")
        env["SEGLAKE_BENCH_REPEAT"] = QUICK_REPEAT
    failed, started = [], time.perf_counter()
    try:
        for name in names:
            extra = BENCHES[name][1 if args.quick else 0]
            cmd = [sys.executable, str(HERE / f"{name}.py"), *(a.format(dir=lakes) for a in extra)]
            t0 = time.perf_counter()
            print(f"== {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            if subprocess.run(cmd, env=env, check=False).returncode != 0:
                failed.append(name)
            print(f"== {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        if not args.dir:
            subprocess.run(["rm", "-rf", lakes], check=False)
    print(
        f"== all: {time.perf_counter() - started:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        file=sys.stderr,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
