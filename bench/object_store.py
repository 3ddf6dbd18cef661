"""Extract and lookup on object storage: a lake on SeaweedFS's S3 (on loopback, behind the
request-counting proxy) vs the same rows as parquet on the same server.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/object_store.py [--messages N]
        [--window PCT] [--queries Q] [--repeat R] [--dir DIR]

Workload: the lake of bench/extract.py (N messages, default 2,000,000, one topic, 4
partitions, lz4, 8 MiB segments, built without Spark) and its parquet copy (the same
records in the Kafka source schema, snappy, row groups of N/32 rows so that a time
window prunes by the statistics), both uploaded to one bucket of a ``weed server``
(``make weed``; seglake.s3_server) started by the bench.

Queries: a PCT% (default 10) time window in the middle of the log, every column
(seglake ``extract(mode="filter")`` and ``mode="offsets"`` collected with ``toArrow()``,
and the notebook's ``Partition.range`` per partition without Spark; parquet: the same
``start <= timestamp < end`` filter); Q (default 10,000) random (partition, offset)
point lookups (seglake ``lookup()``; parquet: the rows whose offsets are among the
queries', per partition). Rows checked equal (count, sum of value lengths, of offsets).

The parquet reader is **pyarrow's dataset reader** (``pyarrow.dataset`` over
``S3FileSystem``, in the driver, threads on both cores), not Spark: Spark reads ``s3a://``
through ``hadoop-aws``, whose release for Spark 4.2's Hadoop (3.5.0) depends on the AWS
SDK v2 ``bundle`` jar (2.35.4), a single jar of 686 MB (686,119,507 bytes: Maven
Central's Content-Length, 2026-12-02), not fetched for a bench.
The parquet side so pays no Spark job's fixed cost (0.1-0.2 s a query on this machine);
seglake's Spark cases do, its ``range`` case does not.

local[2]; warmed up; best of R (default 3), every round running every case in turn.
Requests per case (one run each, from the proxy's log) are reported too. Replaces the
"## object storage (bench/object_store.py)" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as bx  # bench/extract.py
from results import replace_section

SECTION = "## object storage (bench/object_store.py)"
REPEAT = int(os.environ.get("SEGLAKE_BENCH_REPEAT", "3"))
BUCKET = "bench"


def upload(server, local_root: str, n: int) -> tuple[str, str]:
    """The lake and a re-written parquet copy (row groups of n/32 rows) in the bucket;
    returns (lake root, parquet path on the filesystem)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    server.create_bucket(BUCKET)
    s3 = s3_filesystem(server)
    pafs.copy_files(local_root, f"{BUCKET}/lake", destination_filesystem=s3)
    table = pq.read_table(local_root + "-parquet")
    with s3.open_output_stream(f"{BUCKET}/parquet/part-0.parquet") as out:
        pq.write_table(table, out, compression="snappy", row_group_size=max(1000, n // 32))
    root = f"s3://{BUCKET}/lake?endpoint_override=127.0.0.1:{server.port}&scheme=http"
    return root, f"{BUCKET}/parquet"


def s3_filesystem(server):
    import pyarrow.fs as pafs

    from seglake.s3_server import REGION

    return pafs.S3FileSystem(
        access_key="bench",
        secret_key="bench",
        region=REGION,
        endpoint_override=f"127.0.0.1:{server.port}",
        scheme="http",
    )


def request_counts(log: Path, since: int) -> tuple[dict[str, int], int]:
    """Requests per kind logged after line ``since``, and the lines now."""
    import json

    from seglake.s3_server import count_requests

    lines = log.read_text().splitlines() if log.exists() else []
    return count_requests(json.loads(line) for line in lines[since:]), len(lines)


def runs(spark, server, root: str, parquet: str, n: int, pct: float, q: int) -> dict:
    """The timed functions (answers checked first)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    import seglake
    from seglake.lake.catalog import Catalog
    from seglake.sample import START_MS
    from seglake.spark.extract import extract
    from seglake.spark.lookup import lookup

    s3 = s3_filesystem(server)
    total = sum(Catalog(root).log_end_offsets(bx.TOPIC).values())
    width = int(total * pct / 100)
    lo = START_MS + total // 2 - width // 2  # 1 message per ms
    hi = lo + width
    lake = seglake.open(root)

    def check(t: pa.Table) -> tuple:
        return (
            t.num_rows,
            pc.sum(pc.binary_length(t["value"])).as_py(),
            pc.sum(t["offset"]).as_py(),
        )

    def parquet_window() -> pa.Table:
        ts = ds.field("timestamp")
        start, end = (pa.scalar(x * 1000, pa.timestamp("us", tz="UTC")) for x in (lo, hi))
        return ds.dataset(parquet, filesystem=s3, format="parquet").to_table(
            filter=(ts >= start) & (ts < end)
        )

    def seglake_window(mode: str):
        return lambda: extract(spark, root, bx.TOPIC, start=lo, end=hi, mode=mode).toArrow()

    def seglake_range() -> pa.Table:
        return pa.concat_tables(
            [lake.partition(bx.TOPIC, p).range(lo, hi, as_="arrow") for p in range(bx.PARTITIONS)]
        )

    rng = np.random.default_rng(1)
    ends = Catalog(root).log_end_offsets(bx.TOPIC)
    part = rng.integers(0, bx.PARTITIONS, q)
    off = np.array([rng.integers(0, ends[(bx.TOPIC, int(p))]) for p in part])
    part, off = np.unique(np.stack([part, off]), axis=1)  # distinct queries
    queries = spark.createDataFrame(
        pa.table(
            {"topic": [bx.TOPIC] * len(off), "partition": part.astype("int32"), "offset": off}
        ).to_pandas()
    ).cache()
    queries.count()

    def seglake_lookup() -> pa.Table:
        return lookup(spark, root, queries).filter("status = 'ok'").toArrow()

    def parquet_lookup() -> pa.Table:
        d = ds.dataset(parquet, filesystem=s3, format="parquet")
        want = None
        for p in range(bx.PARTITIONS):
            mine = (ds.field("partition") == p) & ds.field("offset").isin(
                pa.array(np.unique(off[part == p]))
            )
            want = mine if want is None else want | mine
        return d.to_table(filter=want)

    window = check(parquet_window())
    assert check(seglake_window("filter")()) == window, "filter mode: other rows"
    assert check(seglake_range()) == window, "range: other rows"
    assert check(seglake_lookup()) == check(parquet_lookup()), "lookup: other rows"
    return {
        "parquet_window": parquet_window,
        "seglake_filter": seglake_window("filter"),
        "seglake_offsets": seglake_window("offsets"),
        "seglake_range": seglake_range,
        "parquet_lookup": parquet_lookup,
        "seglake_lookup": seglake_lookup,
        "rows": window[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--window", type=float, default=10.0, help="percent of the log")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=REPEAT)
    ap.add_argument("--dir", default=None, help="build (or reuse) the local lake here, keep it")
    args = ap.parse_args(argv)

    from seglake.s3_server import S3ServerError, WeedServer, client_environment

    tmp = tempfile.mkdtemp(prefix="seglake-bench-s3-")
    base = args.dir or tmp
    local_root = bx.lake_path(base, args.messages)
    bx.build(local_root, args.messages)
    log = Path(tmp) / "requests.jsonl"
    server = WeedServer(Path(tmp) / "weed", log_path=log)
    try:
        server.start()
    except S3ServerError as exc:
        print(f"object_store bench: {exc}", file=sys.stderr)
        return 2
    os.environ.update(client_environment(server.endpoint))
    os.environ.pop("AWS_ENDPOINT_URL", None)  # the root carries it; deltalake reads the env
    spark = bx.session()
    try:
        root, parquet = upload(server, local_root, args.messages)
        fns = runs(spark, server, root, parquet, args.messages, args.window, args.queries)
        rows = fns.pop("rows")
        for fn in fns.values():  # warm up
            fn()
        requests = {}
        for name, fn in fns.items():
            _, mark = request_counts(log, 0)
            fn()
            requests[name] = request_counts(log, mark)[0]
        got = bx.best(fns, repeat=args.repeat)
        text = report(args, rows, {k: t for k, (t, _) in got.items()}, requests)
        print(text)
        replace_section(text)
    finally:
        spark.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report(args, rows: int, t: dict[str, float], requests: dict[str, dict[str, int]]) -> str:
    def req(name: str) -> str:
        return ", ".join(f"{v} {k}" for k, v in requests[name].items() if v) or "none"

    load = os.getloadavg()
    lines = [
        SECTION,
        "",
        f"`local[2]`, {os.cpu_count()} CPUs shared with other engineers' jobs (load average "
        f"{load[0]:.1f} at the end); {args.messages:,} messages (the lake of bench/extract.py), "
        f"lake and parquet copy in one bucket of SeaweedFS on loopback; best of {args.repeat}. "
        "Parquet read by pyarrow's dataset reader (no hadoop-aws: see the script). "
        "Ratio = seglake time / parquet time.",
        "",
        "| query | rows | parquet (pyarrow) s | seglake | ratio | seglake requests "
        "| parquet requests |",
        "|---|---:|---:|---|---:|---|---|",
    ]
    for name, label in (
        ("seglake_filter", "extract filter (Spark, toArrow)"),
        ("seglake_offsets", "extract offsets (Spark, toArrow)"),
        ("seglake_range", "notebook range (no Spark)"),
    ):
        lines.append(
            f"| {args.window:g}% window, {label} | {rows:,} | {t['parquet_window']:.2f} | "
            f"{t[name]:.2f} s | **{t[name] / t['parquet_window']:.2f}x** | {req(name)} | "
            f"{req('parquet_window')} |"
        )
    lines.append(
        f"| {args.queries:,} offset lookups (Spark) | {args.queries:,} | "
        f"{t['parquet_lookup']:.2f} | {t['seglake_lookup']:.2f} s | "
        f"**{t['seglake_lookup'] / t['parquet_lookup']:.2f}x** | {req('seglake_lookup')} | "
        f"{req('parquet_lookup')} |"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
