"""``make demo``: generate sample messages, ingest them with ./spark-submit.sh, extract a
time window and look up a few records, and print what happened.

Run as ``python -m seglake.demo [--records N] [--dir demo-lake]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from seglake.sample import START_MS, generate

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> None:
    print(f"\n$ {' '.join(args)}", flush=True)
    subprocess.run(args, cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seglake.demo")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--dir", default="demo-lake")
    args = p.parse_args(argv)
    work = (ROOT / args.dir).resolve()
    lake = work / "lake"
    messages = work / "input" / "messages.parquet"
    messages.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print(f"generating {args.records:,} sample messages -> {messages}", flush=True)
    pq.write_table(generate(args.records), messages, row_group_size=256_000)
    for old in (lake, work / "extract", work / "lookup"):  # a rerun starts afresh
        if old.exists():
            shutil.rmtree(old)
    _run(
        "./spark-submit.sh",
        "ingest",
        "--input",
        str(messages),
        "--root",
        str(lake),
        "--num-partitions",
        "4",
        "--conf",
        "log.segment.bytes=16777216",
    )
    start, end = START_MS + 300_000, START_MS + 310_000
    _run(
        "./spark-submit.sh",
        "extract",
        "--root",
        str(lake),
        "--topic",
        "orders",
        "--start",
        str(start),
        "--end",
        str(end),
        "--output",
        str(work / "extract"),
    )
    queries = work / "input" / "queries.json"
    queries.write_text(
        "\n".join(
            json.dumps(q)
            for q in [
                {"topic": "orders", "partition": 0, "offset": 0},
                {"topic": "orders", "partition": 1, "offset": 12345},
                {"topic": "clicks", "partition": 2, "timestamp": START_MS + 600_000},
                {"topic": "orders", "partition": 3, "offset": 10**12},
            ]
        )
        + "\n"
    )
    _run(
        "./spark-submit.sh",
        "lookup",
        "--root",
        str(lake),
        "--queries",
        str(queries),
        "--output",
        str(work / "lookup"),
        "--output-format",
        "json",
    )
    _summary(lake, time.time() - started)
    return 0


def _summary(lake: Path, seconds: float) -> None:
    from seglake.cli.dump import dump
    from seglake.lake.catalog import Catalog

    seg = Catalog(str(lake)).segments().to_pandas()
    print("\n== the lake ==")
    print(
        seg.groupby(["topic", "partition"])
        .agg(
            segments=("base_offset", "size"),
            records=("record_count", "sum"),
            bytes=("size_bytes", "sum"),
            first_offset=("base_offset", "min"),
            log_end_offset=("next_offset", "max"),
        )
        .to_string()
    )
    first = seg.iloc[0]
    print(f"\n== first batches of {first['path']} (seglake dump) ==")
    import io

    buf = io.StringIO()
    dump([str(lake / first["path"])], max_bytes=65536, out=buf)
    print("\n".join(buf.getvalue().splitlines()[:6]))
    print(f"\ndemo done in {seconds:.0f} s; lake at {lake}")


if __name__ == "__main__":
    sys.exit(main())
