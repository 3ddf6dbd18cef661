"""Point lookups: seglake lookup vs a Spark join of the queries with the parquet copy.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/lookup.py [--messages N] [--queries Q]

Workload: the lake of bench/extract.py (N messages, default 2,000,000, 4 partitions, lz4,
8 MiB segments) and its parquet copy (same records). Q (default 10,000) random
(topic, partition, offset) queries. seglake: ``lookup()`` (broadcast segment arrays,
per-worker index cache, reads one index interval + one batch per answer); peer: the
queries joined with ``spark.read.parquet`` on (topic, partition, offset). Every column
materialised (sum of value lengths); local[2]; best of 3. Replaces the
"## lookup (bench/lookup.py)" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as bx  # noqa: E402  (bench/extract.py)

SECTION = "## lookup (bench/lookup.py)"


def main(argv: list[str] | None = None) -> int:
    import numpy as np
    import pandas as pd
    from pyspark.sql import functions as F

    from seglake.catalog import Catalog
    from seglake.spark.lookup import lookup

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="reuse/keep a lake here")
    args = ap.parse_args(argv)
    spark = bx.session()
    tmp = args.dir or tempfile.mkdtemp(prefix="seglake-bench-lookup-")
    root = os.path.join(tmp, "small")
    try:
        if not os.path.exists(os.path.join(root, "_catalog")):
            bx.build(spark, root, args.messages)
        leo = Catalog(root).log_end_offsets(bx.TOPIC)
        rng = np.random.default_rng(1)
        parts = rng.integers(0, len(leo), args.queries)
        offs = [int(rng.integers(0, leo[(bx.TOPIC, int(p))])) for p in parts]
        q = spark.createDataFrame(pd.DataFrame({"topic": bx.TOPIC, "partition": parts.astype(
            "int32"), "offset": offs})).cache()
        q.count()

        def agg(df):
            return tuple(df.agg(F.count("*"), F.sum(F.length("value"))).collect()[0])

        def seglake_run():
            return agg(lookup(spark, root, q).filter("status = 'ok'"))

        def join_run():
            pq = spark.read.parquet(root + "-parquet")
            return agg(q.join(pq, ["topic", "partition", "offset"]))

        s_t, s_out = bx.best(seglake_run)
        j_t, j_out = bx.best(join_run)
        assert s_out == j_out, (s_out, j_out)
        text = "\n".join([
            SECTION, "",
            f"local[2], {os.cpu_count()} CPUs; {args.messages:,} messages (lake of "
            f"bench/extract.py); {args.queries:,} random offset lookups; best of 3.", "",
            "| method | seconds | rows |", "|---|---:|---:|",
            f"| seglake lookup | {s_t:.2f} | {s_out[0]:,} |",
            f"| Spark join with parquet copy | {j_t:.2f} | {j_out[0]:,} |", "",
            f"Ratio join / seglake: {j_t / s_t:.2f}x.", ""])
        print(text)
        bx.SECTION = SECTION
        bx.replace_section(text)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
