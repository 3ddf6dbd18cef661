"""compact against the Spark job a user would write instead, and merge-only against ingest.

    .venv/bin/python bench/compact.py [--records N] [--keys K] [--merge-records M] [--rounds R]

Workload 1 (compaction): a changelog of N messages (default 8,000,000) over K keys
(default 100,000), 4 partitions (key -> partition by a stable hash), 40-byte values, a
tenth of them tombstones, increasing timestamps; ingested once (shuffle, lz4,
``log.segment.bytes`` 8 MiB: several segments per partition) into a lake whose topic has
``cleanup.policy=compact`` and ``min.cleanable.dirty.ratio=0``; the same records (with
their offsets) written once as the "parquet copy". Timed, alternating, R rounds
(default 2), each on a fresh copy of the lake:

- seglake: ``seglake.spark.compact(spark, root)`` (one round of Kafka's cleaner);
- peer: ``spark.read.parquet(copy)``, ``row_number() over (partition by partition, key
  order by offset desc) = 1``, ``.write.parquet(out)`` (snappy).

Also: the bytes compact read and wrote against the minimum (the cleanable section read
once, the kept batches written once).

Workload 2 (merge-only): bench/ingest.py's 2,000,000 messages ingested without a shuffle
(48 segments for 24 partitions), then ``compact --merge-only``; ratio merge / ingest time,
segments before/after, batches byte-identical.

One SparkSession (local[2]); results replace the "## compact (bench/compact.py)" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SECTION = "## compact (bench/compact.py)"
NOW = 1_900_000_000_000


def changelog(n: int, keys: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, keys, n)
    key = pa.array(np.char.add("key-", k.astype(str)).astype(object), pa.string()).cast(pa.binary())
    tomb = rng.random(n) < 0.1
    body = np.char.add("value-", np.arange(n).astype(str))
    value = pa.array(np.char.ljust(body, 40).astype(object), pa.string()).cast(pa.binary())
    value = pa.compute.if_else(pa.array(tomb), pa.nulls(n, pa.binary()), value)
    return pa.table(
        {
            "topic": pa.array(["cl"] * n, pa.string()),
            "partition": pa.array((k % 4).astype(np.int32)),
            "key": key,
            "value": value,
            "timestamp": pa.array(1_800_000_000_000 + np.arange(n, dtype=np.int64)),
        }
    )


def dir_bytes(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*.log") if p.is_file())


def partition_bytes(root: str) -> dict[tuple[str, int], bytes]:
    """Each partition's catalogued .log files, concatenated in offset order."""
    from seglake.lake.catalog import Catalog

    out: dict[tuple[str, int], bytes] = {}
    for row in Catalog(root).segments().to_pylist():
        key = (row["topic"], row["partition"])
        out[key] = out.get(key, b"") + Path(root, row["path"]).read_bytes()
    return out


def copy_floor(root: str, out: str) -> float:
    """Seconds to copy every catalogued .log of ``root`` into ``out`` (one file per old
    file, the kernel's ``copy_file_range``): what merging costs at the least."""
    from seglake.lake.catalog import Catalog
    from seglake.storage.log_copy import copy_range

    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    for i, row in enumerate(Catalog(root).segments().to_pylist()):
        src = os.open(os.path.join(root, row["path"]), os.O_RDONLY)
        dst = os.open(os.path.join(out, f"{i}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            copy_range(src, dst, row["size_bytes"])
        finally:
            os.close(src)
            os.close(dst)
    took = time.perf_counter() - t0
    shutil.rmtree(out)
    return took


def peer(spark, copy: str, out: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    (
        spark.read.parquet(copy)
        .withColumn("rn", F.row_number().over(w))
        .where("rn = 1")
        .drop("rn")
        .write.mode("overwrite")
        .option("compression", "snappy")
        .parquet(out)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=8_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--merge-records", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--segment-bytes", type=int, default=8 << 20)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--merge-only", action="store_true", help="workload 2 only (no write)")
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]  # bench/ (ingest) and the repo (tests)
    from tests.lake_check import lake_records

    import ingest as ingest_bench
    from results import replace_section
    from seglake.lake.catalog import Catalog
    from seglake.lake.topic_store import alter_config
    from seglake.spark import compact
    from seglake.spark.ingest import ingest
    from seglake.spark.session import get_session

    spark = get_session("seglake-bench-compact", master="local[2]", quiet=True)
    tmp = Path(tempfile.mkdtemp(prefix="seglake-bench-compact-"))
    try:
        # ---------------------------------------------------------------- compaction
        if args.merge_only:  # workload 2 alone: print its row, write nothing
            args.no_write = True
        else:
            table = changelog(args.records, args.keys)
            inp = str(tmp / "input.parquet")
            pq.write_table(table, inp)
            template = str(tmp / "template")
            conf = {
                "log.segment.bytes": str(args.segment_bytes),
                "compression.type": "lz4",
                "seglake.ingest.shuffle": "always",
            }
            ingest(spark, spark.read.parquet(inp), template, conf=conf)
            alter_config(
                Catalog(template),
                "cl",
                set_={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"},
            )
            copy = str(tmp / "copy.parquet")  # the parquet copy a user would have: with offsets
            recs = lake_records(template)
            pq.write_table(pa.Table.from_pandas(recs, preserve_index=False), copy)
            del recs
            rows0 = Catalog(template).segments()
            times: dict[str, list[float]] = {"seglake": [], "peer": []}
            result = None
            for r in range(args.rounds):
                for side in ("seglake", "peer") if r % 2 == 0 else ("peer", "seglake"):
                    if side == "seglake":
                        root = str(tmp / f"lake{r}")
                        shutil.copytree(template, root)
                        t0 = time.perf_counter()
                        result = compact(spark, root, now_ms=NOW)
                        times[side].append(time.perf_counter() - t0)
                    else:
                        t0 = time.perf_counter()
                        peer(spark, copy, str(tmp / f"peer{r}"))
                        times[side].append(time.perf_counter() - t0)
            assert result is not None and result.committed, result and result.summary()
            ratios = [s / p for s, p in zip(times["seglake"], times["peer"], strict=True)]
            kept = sum(p.records_kept for p in result.partitions)
            removed = sum(p.records_removed for p in result.partitions)
            read = sum(p.bytes_read for p in result.partitions)
            written = sum(p.bytes_written for p in result.partitions)
            # minimum: the cleanable section (segments below the first uncleanable offset) read
            # once, the kept batches written once
            cleanable_bytes = 0
            for p in result.partitions:
                prow = rows0.filter(pa.compute.equal(rows0["partition"], p.partition))
                below = pa.compute.less(prow["base_offset"], p.checkpoint)
                cleanable_bytes += int(
                    pa.compute.sum(prow.filter(below)["size_bytes"]).as_py() or 0
                )
            peer_bytes = sum(f.stat().st_size for f in Path(copy).parent.glob("copy.parquet"))
        # ---------------------------------------------------------------- merge-only
        minp = str(tmp / "merge-input.parquet")
        ingest_bench.write_input(args.merge_records, minp)
        mroot = str(tmp / "merge-lake")
        ingest_times, merge_times, floor_times = [], [], []
        seg_before = seg_after = 0
        identical = True
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            ingest_bench.run_seglake(spark, minp, mroot, shuffle="never")
            ingest_times.append(time.perf_counter() - t0)
            seg_before = Catalog(mroot).segments().num_rows
            blobs = partition_bytes(mroot)
            t0 = time.perf_counter()
            compact(spark, mroot, merge_only=True)
            merge_times.append(time.perf_counter() - t0)
            floor_times.append(copy_floor(mroot, str(tmp / "floor")))
            seg_after = Catalog(mroot).segments().num_rows
            got = partition_bytes(mroot)
            identical &= got == blobs
        mratios = [m / i for m, i in zip(merge_times, ingest_times, strict=True)]
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def rng(xs: list[float], fmt: str = "{:.2f}") -> str:
        return fmt.format(min(xs)) + ("" if len(xs) < 2 else " - " + fmt.format(max(xs)))

    n, k, m = args.records, args.keys, args.merge_records
    merge_row = (
        f"| merge-only: {m:,} messages, {seg_before} -> {seg_after} segments "
        f"| {rng(merge_times)} s | {rng(ingest_times)} s (the no-shuffle ingest) "
        f"| **{rng(mratios)}x** |"
    )
    floor_note = (
        f"The copy floor (the merged lake's .log files copied again with `os.copy_file_range`, "
        f"right after each merge): {rng(floor_times)} s."
    )
    print(f"merge-only: merge {merge_times}, ingest {ingest_times}, floor {floor_times}")
    print(floor_note)
    if args.merge_only:
        print(merge_row)
        return 0
    rows = [
        f"| compact: {n:,} messages, {k:,} keys, 4 partitions | {rng(times['seglake'])} s "
        f"| {rng(times['peer'])} s (parquet copy, window, write) | **{rng(ratios)}x** |",
        merge_row,
    ]
    body = "\n".join(
        [
            f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), local[2]; "
            f"{args.rounds} rounds, alternating, ranges are min - max.",
            "",
            "| workload | seglake | peer | ratio (seglake / peer) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Compaction kept {kept:,} records and removed {removed:,}. Merged batches "
            f"byte-identical to the ingested ones: {identical}. {floor_note}",
            f"Bytes compact read: {read:,} (an analysis task reads each partition once, the "
            f"group tasks read the cleanable section once more) against the minimum "
            f"{cleanable_bytes:,} (the cleanable section once): "
            f"**{read / max(cleanable_bytes, 1):.2f}x**. Bytes written: {written:,}, the kept "
            "batches each written once (no temporary copy): 1.00x. The peer reads its "
            f"parquet copy ({peer_bytes:,} bytes).",
        ]
    )
    print(body)
    if not args.no_write:
        replace_section(f"{SECTION}\n\n{body}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
