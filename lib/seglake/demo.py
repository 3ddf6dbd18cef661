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
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from seglake.sample import START_MS, generate

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> None:
    print(f"\n$ {' '.join(args)}", flush=True)
    subprocess.run(args, cwd=ROOT, check=True)


# the lookups the demo asks: an offset at a partition's start, one inside, a time, one past the end
QUERIES = [
    {"topic": "orders", "partition": 0, "offset": 0},
    {"topic": "orders", "partition": 1, "offset": 12345},
    {"topic": "clicks", "partition": 2, "timestamp": START_MS + 600_000},
    {"topic": "orders", "partition": 3, "offset": 10**12},
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seglake.demo")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--dir", default="demo-lake")
    args = p.parse_args(argv)
    work = (ROOT / args.dir).resolve()
    lake = work / "lake"
    messages = work / "input" / "messages.parquet"
    started = time.time()
    _generate(messages, args.records)
    for old in (lake, work / "extract", work / "lookup"):  # a rerun starts afresh
        if old.exists():
            shutil.rmtree(old)
    _ingest(messages, lake)
    _extract(lake, work / "extract")
    _lookup(lake, work / "input" / "queries.json", work / "lookup")
    _summary(lake, time.time() - started)
    return 0


def _generate(messages: Path, records: int) -> None:
    """The sample messages, as a Parquet file the ingest job reads."""
    messages.parent.mkdir(parents=True, exist_ok=True)
    print(f"generating {records:,} sample messages -> {messages}", flush=True)
    pq.write_table(generate(records), messages, row_group_size=256_000)


def _ingest(messages: Path, lake: Path) -> None:
    """``spark-submit.sh ingest``: the messages into 4 partitions of 16 MiB segments."""
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


def _extract(lake: Path, output: Path) -> None:
    """``spark-submit.sh extract``: ten seconds of topic orders."""
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
        str(output),
    )


def _lookup(lake: Path, queries: Path, output: Path) -> None:
    """``spark-submit.sh lookup``: :data:`QUERIES`, written as JSON lines, answered as JSON."""
    queries.write_text("\n".join(json.dumps(q) for q in QUERIES) + "\n")
    _run(
        "./spark-submit.sh",
        "lookup",
        "--root",
        str(lake),
        "--queries",
        str(queries),
        "--output",
        str(output),
        "--output-format",
        "json",
    )


def _summary(lake: Path, seconds: float) -> None:
    from seglake.cli.dump import dump
    from seglake.lake.handle import LakeHandle
    from seglake.lake.snapshot import Snapshot

    seg = Snapshot.read(LakeHandle.open(str(lake))).table
    print("\n== the lake ==")
    print(lake_table(seg))
    extracted = pq.read_table(lake.parent / "extract")
    print(f"\n== extract: {extracted.num_rows:,} records ==")
    print(extract_table(extracted))
    print("\n== lookup answers ==")
    print(lookup_table(read_json_lines(lake.parent / "lookup")))
    first = seg.slice(0, 1).to_pylist()[0]
    print(f"\n== first batches of {first['path']} (seglake dump) ==")
    import io

    buf = io.StringIO()
    dump([str(lake / first["path"])], max_bytes=65536, out=buf)
    print("\n".join(buf.getvalue().splitlines()[:6]))
    print(f"\ndemo done in {seconds:.0f} s; lake at {lake}")


def lake_table(seg: pa.Table) -> str:
    """Catalog rows summed per partition: segments, records, bytes, offsets, times."""
    from seglake.render import iso, size_text, text_table

    parts: dict[tuple[str, int], list[Any]] = {}
    for r in seg.to_pylist():
        p = parts.setdefault(
            (r["topic"], r["partition"]), [0, 0, 0, r["base_offset"], 0, None, None]
        )
        p[0] += 1
        p[1] += r["record_count"]
        p[2] += r["size_bytes"]
        p[3] = min(p[3], r["base_offset"])
        p[4] = max(p[4], r["next_offset"])
        lo, hi = r["min_timestamp"], r["max_timestamp"]
        p[5] = lo if p[5] is None else min(p[5], lo)
        p[6] = hi if p[6] is None else max(p[6], hi)
    rows = [
        [t, n, segs, recs, size_text(size), start, end, iso(lo), iso(hi)]
        for (t, n), (segs, recs, size, start, end, lo, hi) in sorted(parts.items())
    ]
    headers = ["topic", "partition", "segments", "records", "bytes", "log start", "log end"]
    return text_table(
        [*headers, "first timestamp (UTC)", "last timestamp (UTC)"], rows, right={1, 2, 3, 4, 5, 6}
    )


def extract_table(records: pa.Table) -> str:
    """An extraction's records per partition: count, offsets and times."""
    from seglake.render import text_table

    df = records.select(["topic", "partition", "offset", "timestamp"]).to_pandas()
    g = df.groupby(["topic", "partition"]).agg(
        records=("offset", "size"),
        first_offset=("offset", "min"),
        last_offset=("offset", "max"),
        first_time=("timestamp", "min"),
        last_time=("timestamp", "max"),
    )
    rows = [
        [
            t,
            int(p),
            int(r.records),
            int(r.first_offset),
            int(r.last_offset),
            str(r.first_time)[:23],
            str(r.last_time)[:23],
        ]
        for (t, p), r in g.iterrows()
    ]
    headers = ["topic", "partition", "records", "first offset", "last offset"]
    return text_table([*headers, "first timestamp", "last timestamp"], rows)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines output directory (Spark's ``part-*.json`` files)."""
    return [
        json.loads(line)
        for f in sorted(path.glob("part-*"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]


def lookup_table(answers: list[dict[str, Any]]) -> str:
    """Lookup answers as Spark's JSON writer writes them (key/value base64, null fields
    left out): what was asked, the status, the record found."""
    import base64

    from seglake.render import iso, text_table

    def text(b64: str | None, width: int = 24) -> str:
        if b64 is None:
            return ""
        s = base64.b64decode(b64).decode("utf-8", "replace")
        return s if len(s) <= width else s[: width - 3] + "..."

    def asked(a: dict[str, Any]) -> str:
        if a.get("query_offset") is not None:
            return f"offset {a['query_offset']:,}"
        return f"time {iso(a.get('query_timestamp'))}"

    rows = [
        [
            f"{a['topic']}-{a['partition']}",
            asked(a),
            a["status"],
            a.get("offset"),
            (a.get("timestamp") or "").replace("T", " ").rstrip("Z")[:23],
            text(a.get("key")),
            text(a.get("value")),
        ]
        for a in sorted(
            answers,
            key=lambda a: (a["topic"], a["partition"], a.get("query_offset", -1)),
        )
    ]
    headers = ["partition", "query", "status", "offset", "timestamp (UTC)", "key", "value"]
    return text_table(headers, rows, right={3})


if __name__ == "__main__":
    sys.exit(main())
