"""Key lookups (issue 32, KEY1): seglake ``lookup`` by key vs a full scan, parquet with a
bloom filter on ``key``, and Spark's Kafka source on a local broker.

    .venv/bin/python bench/key_lookup.py [--messages N] [--keys K] [--partitions P]
        [--queries Q] [--repeat R] [--build-only] [--no-kafka] [--dir DIR]

Data (built once per (N, K, P), kept in ``--dir``, default bench/out/keys): N messages
(default 32,000,000) of one topic, keys drawn uniformly from K distinct keys (default
1,000,000; ``k<id>``), routed to P partitions (default 16) by Kafka's default partitioner
(:mod:`seglake.record.partitioner`), 100-byte values (a per-record number plus padding),
1 message per ms. Written without Spark by seglake's ``SegmentWriter`` (the files the
ingest job writes, ``.keyindex`` included; lz4, 8 MiB segments, as bench/extract.py), and
the same records, as they are generated, into ``input.parquet`` (pyarrow, the Kafka
source's columns): the brute-force answer is read from it. Then Spark rewrites that file
as the peer's parquet, unsorted, with ``parquet.bloom.filter.enabled#key`` and
``parquet.bloom.filter.expected.ndv#key`` (the distinct keys expected in one row group:
all of them at the full size; the filter is then capped by parquet's 1 MiB
``parquet.bloom.filter.max.bytes``, about 2% false positives at 1M keys). With 1,000
keys of 32 records each, every row group holds some of them: the filters can prune little.
A broker directory serving a copy of the lake (``seglake serve``'s ``prepare``: the lake's
segments copied into a real broker's partition directories) is kept too.

Queries: Q (default 1,000) random distinct keys, every record of each. Cases, every one
answering the same rows (count and a SHA-256 of the sorted (partition, offset, key,
value), checked against the brute-force answer before timing; the answers collected into
the driver with ``toArrow()``):

* lookup: ``seglake.spark.lookup.lookup`` with key queries (``topic``, ``key``: every
  partition asked); and with each key's ``partition`` too (Kafka's partitioner), as a
  user who knows how the producer routed the keys would ask;
* data source, index: ``spark.read.format("seglake")`` with ``key IN (...)`` pushed down;
* data source, full scan: the same reader with no filter pushed (the reader Spark uses
  when ``spark.sql.python.filterPushdown.enabled`` is off, ``UnpushedReader``): Spark
  applies ``key IN (...)`` to every record read; the index unused;
* parquet + bloom: ``spark.read.parquet`` filtered ``key IN (...)``, Spark's defaults:
  an IN list longer than ``spark.sql.parquet.pushdown.inFilterThreshold`` (10) reaches
  parquet as a min/max range, not a bloom probe (raised to 1,000, Spark's chain of 1,000
  ORs overflowed the executors' stacks: StackOverflowError, the JVM died);
* kafka: Spark's Kafka source (earliest .. latest) on the broker, filtered ``key IN
  (...)`` (the Kafka source pushes no filter);
* in-process, no Spark: ``Lake.lookup`` of the same key queries and ``Lake.find``.

Ratios: data source full scan / lookup (target >= 20x), parquet + bloom / lookup (>= 3x),
kafka / lookup (>= 3x). ``local[2]``; best of R rounds (default 3), every case in every
round, every other round reversed (bench/extract.py's ``best``), all warmed up by the
check. Load average printed. ``--build-only`` builds and stops; ``--no-kafka`` leaves the
broker out. Skips the kafka case without java or ``.jars/kafka``. Replaces the "## key
lookups (bench/key_lookup.py)" section of bench/RESULTS.md (``$SEGLAKE_BENCH_RESULTS``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as bx  # bench/extract.py
from results import kernel_note, replace_section

HERE = Path(__file__).resolve().parent
SECTION = "## key lookups (bench/key_lookup.py)"
TOPIC = "bench"
VALUE_BYTES = 100
CHUNK = 1_000_000
REPEAT = int(os.environ.get("SEGLAKE_BENCH_REPEAT", "3"))
TARGETS = {"scan": 20.0, "parquet": 3.0, "kafka": 3.0}


# ---------------------------------------------------------------- the data


def key_names(k: int):
    """The K distinct keys, ``k<id>`` as binary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(k), pa.int64()).cast(pa.string())
    return pc.binary_join_element_wise("k", ids, "").cast(pa.binary())


def generate(done: int, k: int, keys, random_values: bool = False):
    """Chunk ``done // CHUNK``: CHUNK (or fewer) messages' key, value, timestamp. Values:
    ``v<number>:`` padded with dots to VALUE_BYTES (lz4 makes them ~6x smaller), or with
    ``random_values`` VALUE_BYTES random letters and digits (lz4 keeps them whole)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from seglake.sample import START_MS

    rng = np.random.default_rng(done + 1)
    key = keys.take(pa.array(rng.integers(0, len(keys), k)))
    number = pa.array(np.arange(done, done + k)).cast(pa.string())
    if random_values:
        alphabet = np.frombuffer(string.ascii_letters.encode() + string.digits.encode(), np.uint8)
        pad = alphabet[rng.integers(0, len(alphabet), k * VALUE_BYTES, dtype=np.uint8)]
        ends = pa.py_buffer(np.arange(0, (k + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32))
        value = pa.Array.from_buffers(pa.binary(), k, [None, ends, pa.py_buffer(pad)])
    else:
        value = pc.utf8_rpad(pc.binary_join_element_wise("v", number, ":", ""), VALUE_BYTES, ".")
    ts = START_MS + np.arange(done, done + k, dtype=np.int64)
    return key, value.cast(pa.binary()), pa.array(ts)


def build(
    work: Path, n: int, n_keys: int, partitions: int, random_values: bool = False
) -> dict[str, float]:
    """The lake (``work/lake``) and ``work/input.parquet``, without Spark; reused when
    there. Returns the seconds it took ({} if reused)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from seglake.config import LogConfig
    from seglake.record.partitioner import default_partition
    from seglake.record.schema import HEADERS_TYPE, to_kafka_source
    from seglake.storage.writer import SegmentWriter

    root = str(work / "lake")
    if (work / "lake" / "_catalog").exists() and (work / "input.parquet").exists():
        return {}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    config = LogConfig(segment_bytes=bx.SEGMENT_BYTES, compression_type="lz4")
    fs = pafs.LocalFileSystem()
    writers = [SegmentWriter(fs, f"{root}/{TOPIC}-{p}", config=config) for p in range(partitions)]
    infos: list[list] = [[] for _ in range(partitions)]
    next_offset = [0] * partitions
    keys = key_names(n_keys)
    out = None
    for done in range(0, n, CHUNK):
        k = min(CHUNK, n - done)
        key, value, ts = generate(done, k, keys, random_values)
        part = default_partition(key, partitions)
        no_headers = pa.ListArray.from_arrays(
            pa.array(np.zeros(k + 1, np.int32)), pa.array([], HEADERS_TYPE.value_type)
        )
        chunk = []
        for p in range(partitions):
            mine = pa.array(part == p)
            m = int(np.count_nonzero(part == p))
            recs = pa.table(
                {
                    "offset": pa.array(np.arange(next_offset[p], next_offset[p] + m)),
                    "timestamp": ts.filter(mine),
                    "timestamp_type": pa.array(np.zeros(m, np.int32)),
                    "key": key.filter(mine),
                    "value": value.filter(mine),
                    "headers": no_headers.filter(mine),
                }
            )
            next_offset[p] += m
            infos[p] += writers[p].append(recs)
            chunk.append(to_kafka_source(recs.drop_columns(["headers"]), TOPIC, p))
        table = pa.concat_tables(chunk)
        if out is None:
            out = pq.ParquetWriter(str(work / "input.parquet"), table.schema)
        out.write_table(table, row_group_size=CHUNK)
    if out is not None:
        out.close()
    bx.commit_lake(root, TOPIC, writers, infos)
    return {"lake": time.perf_counter() - started}


def expected_ndv(n: int, n_keys: int) -> int:
    """Distinct keys expected in one row group of uniform keys (the bloom filter's
    sizing): every key once the size allows it (Spark's 128 MiB row groups held 5.25M of
    these compressible rows, so nearly all of 1M keys), else the messages."""
    return max(1, min(n, n_keys))


def build_parquet(spark, work: Path, n: int, n_keys: int) -> dict[str, float]:
    """``work/parquet-bloom``: the input rewritten by Spark, unsorted, with a bloom filter
    on ``key``; reused when there."""
    out = work / "parquet-bloom"
    if (out / "_SUCCESS").exists():
        return {}
    t0 = time.perf_counter()
    (
        spark.read.parquet(str(work / "input.parquet"))
        .write.mode("overwrite")
        .option("parquet.bloom.filter.enabled#key", "true")
        .option("parquet.bloom.filter.expected.ndv#key", str(expected_ndv(n, n_keys)))
        .parquet(str(out))
    )
    return {"parquet": time.perf_counter() - t0}


def prepare_broker(broker, work: Path) -> dict[str, float]:
    """The broker's directory holding a copy of the lake (``seglake serve``'s
    ``prepare``), started once and stopped cleanly (Kafka loads the copied segments);
    reused when there."""
    from seglake.cli.serve import prepare
    from seglake.lake.handle import LakeHandle

    done = work / "broker.prepared"
    if done.exists():
        return {}
    shutil.rmtree(broker.dir, ignore_errors=True)
    t0 = time.perf_counter()
    prepare(LakeHandle.open(str(work / "lake")), broker, [TOPIC])
    broker.start()
    broker.stop()
    done.write_text("ok\n")
    return {"broker": time.perf_counter() - t0}


# ---------------------------------------------------------------- the answers


def query_keys(n_keys: int, q: int) -> list[bytes]:
    import numpy as np

    rng = np.random.default_rng(42)
    return [f"k{i}".encode() for i in rng.choice(n_keys, size=min(q, n_keys), replace=False)]


def digest(t) -> tuple[int, str]:
    """(rows, SHA-256 of the rows sorted by (partition, offset): partition, offset, key,
    value)."""
    import pyarrow as pa

    t = t.select(["partition", "offset", "key", "value"])
    t = t.cast(
        pa.schema(
            [
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("key", pa.binary()),
                ("value", pa.binary()),
            ]
        )
    ).sort_by([("partition", "ascending"), ("offset", "ascending")])
    h = hashlib.sha256()
    for p, o, k, v in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True):
        h.update(b"%d:%d:%d:" % (p, o, len(k)) + k + b"%d:" % len(v) + v)
    return t.num_rows, h.hexdigest()


def brute_force(work: Path, keys: list[bytes]) -> tuple[int, str]:
    """The answer read from the generated input, every row compared."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    want = pa.array(keys, pa.binary())
    f = pq.ParquetFile(str(work / "input.parquet"))
    parts = []
    for i in range(f.num_row_groups):
        t = f.read_row_group(i, columns=["partition", "offset", "key", "value"])
        parts.append(t.filter(pc.is_in(t.column("key"), value_set=want)))
    return digest(pa.concat_tables(parts))


def cases(spark, work: Path, keys: list[bytes], broker) -> dict:
    """The timed functions, each returning its answer rows as Arrow."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import functions as F

    import seglake
    from seglake.lake.catalog import Catalog
    from seglake.record.partitioner import default_partition
    from seglake.spark.datasource import SeglakeDataSource, UnpushedReader
    from seglake.spark.lookup import lookup

    lake = str(work / "lake")
    cols = ["partition", "offset", "key", "value"]
    # the reader without pushdown, under its own name (same options, same reads)
    spark.dataSource.register(
        type(
            "SeglakeFullScan",
            (SeglakeDataSource,),
            {
                "name": classmethod(lambda cls: "seglake_fullscan"),
                "reader_class": UnpushedReader,
                "parallelism": int(spark.sparkContext.defaultParallelism),
            },
        )
    )
    q = spark.createDataFrame(pd.DataFrame({"topic": TOPIC, "key": keys})).cache()
    # the same queries with their partition, as a producer picks it (Kafka's partitioner)
    n_parts = len(Catalog(lake).log_end_offsets(TOPIC))
    part = default_partition(pa.array(keys, pa.binary()), n_parts)
    qp = spark.createDataFrame(pd.DataFrame({"topic": TOPIC, "partition": part, "key": keys}))
    qp = qp.cache()
    q.count(), qp.count()
    in_keys = F.col("key").isin(keys)
    handle = seglake.open(lake)
    local_q = pa.table({"topic": [TOPIC] * len(keys), "key": pa.array(keys, pa.binary())})

    def source(fmt: str):
        return spark.read.format(fmt).option("subscribe", TOPIC).load(lake).filter(in_keys)

    runs = {
        "lookup": lambda: lookup(spark, lake, q).filter("status = 'ok'").select(cols).toArrow(),
        "lookup_partition": lambda: (
            lookup(spark, lake, qp).filter("status = 'ok'").select(cols).toArrow()
        ),
        "source_index": lambda: source("seglake").select(cols).toArrow(),
        "source_scan": lambda: source("seglake_fullscan").select(cols).toArrow(),
        "parquet": lambda: (
            spark.read.parquet(str(work / "parquet-bloom")).filter(in_keys).select(cols).toArrow()
        ),
        "lake_lookup": lambda: _ok(handle.lookup(local_q)),
        "lake_find": lambda: handle.find(TOPIC, keys, as_="arrow"),
    }
    if broker is not None:
        runs["kafka"] = lambda: (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .filter(in_keys)
            .select(cols)
            .toArrow()
        )
    return runs


def _ok(t):
    import pyarrow.compute as pc

    return t.filter(pc.equal(t.column("status"), "ok"))


# ---------------------------------------------------------------- report


def report(got: dict, facts: dict, args, loads: list[str]) -> str:
    lk = got["lookup"][0]
    names = {
        "lookup": "seglake `lookup` (Spark job, key queries)",
        "lookup_partition": "seglake `lookup`, each key's partition given (Kafka's partitioner)",
        "source_index": "data source, `key IN` pushed down (the index)",
        "source_scan": "data source, full scan (no filter pushed: `UnpushedReader`)",
        "parquet": "Spark parquet + bloom filter on `key`",
        "kafka": "Spark Kafka source on a local broker, `key IN` filter",
        "lake_lookup": "`Lake.lookup` in-process (no Spark)",
        "lake_find": "`Lake.find` in-process (no Spark)",
    }
    target = {"source_scan": "scan", "parquet": "parquet", "kafka": "kafka"}
    built = ", ".join(f"{k} {v:.0f} s" for k, v in facts["built"].items()) or "reused"
    lines = [
        SECTION,
        "",
        f"`local[2]`, {os.cpu_count()} CPUs, {kernel_note()}; {args.messages:,} messages "
        f"of topic `{TOPIC}`, "
        f"{args.keys:,} distinct keys (uniform), {args.partitions} partitions (Kafka's "
        f"partitioner), {VALUE_BYTES}-byte values ({facts['values']}), lz4, 8 MiB segments "
        f"({facts['log_bytes']:,} bytes of .log, {facts['key_bytes']:,} of .keyindex); "
        f"parquet by Spark, "
        f"unsorted, bloom filter on `key` (expected ndv "
        f"{expected_ndv(args.messages, args.keys):,}; Spark's default IN threshold, 10: "
        f"the IN list reaches parquet as a min/max range); built: {built}. "
        f"{len(facts['keys']):,} random keys, every record of each: "
        f"{facts['rows']:,} rows, every case's rows equal to the brute-force answer "
        f"(count and SHA-256 of partition, offset, key, value). Best of {args.repeat} "
        f"(each round every case, every other round reversed), answers collected with "
        f"`toArrow()`. Load average (1 min) over the run: {', '.join(loads)}.",
        "",
        "| case | s | / lookup |",
        "|---|---:|---:|",
    ]
    for k, label in names.items():
        if k not in got:
            continue
        t = got[k][0]
        r = f"{t / lk:.1f}x" if k != "lookup" else ""
        if k in target:
            r = f"**{r}** (target >= {TARGETS[target[k]]:g}x)"
        lines.append(f"| {label} | {t:.2f} | {r} |")
    if "kafka" not in got:
        lines += ["", f"No kafka case: {facts.get('no_kafka', 'left out')}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=32_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct keys")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--queries", type=int, default=1_000, help="random keys asked")
    ap.add_argument("--repeat", type=int, default=REPEAT, help="best of this many rounds")
    ap.add_argument("--build-only", action="store_true", help="build the inputs and stop")
    ap.add_argument(
        "--random-values", action="store_true", help="values of random letters (lz4 cannot shrink)"
    )
    ap.add_argument("--no-kafka", action="store_true", help="leave out the broker case")
    ap.add_argument("--dir", default=str(HERE / "out" / "keys"), help="the built data (kept)")
    args = ap.parse_args(argv)
    import seglake.spark
    from seglake.kafka_broker import KafkaBroker, missing_requirements

    work = Path(args.dir) / f"keys-{args.messages}-{args.keys}-{args.partitions}"
    if args.random_values:
        work = work.with_name(work.name + "-random")
    loads = [f"{os.getloadavg()[0]:.1f}"]
    facts: dict = {"built": {}}
    why = "--no-kafka" if args.no_kafka else missing_requirements()
    broker = None if why else KafkaBroker(work / "broker")
    spark = None
    try:
        built = build(work, args.messages, args.keys, args.partitions, args.random_values)
        facts["built"].update(built)
        spark = bx.session()
        seglake.spark.register(spark)
        facts["built"].update(build_parquet(spark, work, args.messages, args.keys))
        if broker is not None:
            facts["built"].update(prepare_broker(broker, work))
        print(f"built in {work}: {facts['built'] or 'reused'}", file=sys.stderr)
        if args.build_only:
            return 0
        if broker is not None:
            broker.start()
        keys = query_keys(args.keys, args.queries)
        facts["values"] = "random letters" if args.random_values else "a number, dot-padded"
        for name, suffix in (("log_bytes", ".log"), ("key_bytes", ".keyindex")):
            facts[name] = sum(f.stat().st_size for f in (work / "lake").glob(f"*/*{suffix}"))
        facts["keys"] = keys
        facts["no_kafka"] = why
        want = brute_force(work, keys)
        facts["rows"] = want[0]
        runs = cases(spark, work, keys, broker)
        for name, fn in runs.items():  # the check, and the warm-up
            t0 = time.perf_counter()
            got = digest(fn())
            print(f"checked {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            if got != want:
                print(f"bench/key_lookup.py: error: {name}: {got} != {want}", file=sys.stderr)
                return 2
        loads.append(f"{os.getloadavg()[0]:.1f}")
        got = bx.best(runs, repeat=args.repeat)
        loads.append(f"{os.getloadavg()[0]:.1f}")
        for name, (_, out) in got.items():
            assert digest(out) == want, name
        text = report(got, facts, args, loads)
        print(text)
        replace_section(text)
    finally:  # the broker stopped even when Spark's JVM died (spark.stop() raises then)
        try:
            if spark is not None:
                spark.stop()
        finally:
            if broker is not None:
                broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
