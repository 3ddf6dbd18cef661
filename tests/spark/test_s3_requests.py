"""What each lake operation costs on object storage, in requests (issue 30 item 5): one
ingest commit, a 10% time-range extract, 10,000 lookups and one notebook ``range``
against a lake on the SeaweedFS server, every request counted by the proxy in front of
it (tests/s3_server.py) whatever process sent it, per kind (GET, ranged GET, PUT, LIST,
HEAD, DELETE). Request counts are deterministic for a given lake, unlike timings: each
operation fails here when a kind's count goes past its bound (the counts measured, with a
little room; bench/RESULTS.md has them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import seglake
from seglake.lake.catalog import Catalog
from seglake.sample import generate
from seglake.spark.extract import extract
from seglake.spark.ingest import ingest
from seglake.spark.lookup import lookup
from tests.lake_check import lake_records
from tests.s3_server import S3Server, counts

pytestmark = pytest.mark.spark

MESSAGES = 20_000
CONF = {"log.segment.bytes": "262144"}  # several segments a partition
LOOKUPS = 10_000
# the most requests of each kind an operation may make (unlisted kinds: none): the counts
# measured (bench/RESULTS.md, "requests on object storage") and about 10% more
BOUNDS: dict[str, dict[str, int]] = {
    # 13 segments of 4 files (.log, .index, .timeindex, .keyindex): each one PUT staged, one
    # copy PUT and one DELETE published (measured with the key index: PUT 161, HEAD 69,
    # DELETE 53)
    "ingest": {"GET": 20, "PUT": 178, "LIST": 36, "HEAD": 76, "DELETE": 58, "POST": 2},
    # the time searches' bytes up to the next time index entry in one read (was 20 ranged)
    "extract": {"GET": 11, "ranged GET": 18, "LIST": 3, "HEAD": 27},
    "lookup": {"GET": 11, "ranged GET": 55, "LIST": 3, "HEAD": 72},
    "sparse lookup": {"GET": 11, "ranged GET": 58, "LIST": 3, "HEAD": 62},
    "range": {"GET": 17, "ranged GET": 9, "LIST": 4, "HEAD": 11},
}
MEASURED: dict[str, dict[str, int]] = {}


@pytest.fixture(scope="module")
def messages() -> pa.Table:
    return generate(MESSAGES, seed=30, topics=("t",))


@pytest.fixture(scope="module")
def lake(spark, spark_s3: S3Server, messages: pa.Table) -> str:
    """The lake root, after one ingest whose requests are counted."""
    spark_s3.create_bucket("requests")
    root = spark_s3.root("requests", "lake")
    df = spark.createDataFrame(messages)
    mark = spark_s3.mark()
    ingest(spark, df, root, run_id="counted", num_partitions=2, conf=CONF)
    MEASURED["ingest"] = counts(spark_s3.requests_since(mark))
    return root


def _check(operation: str, got: dict[str, int]) -> None:
    MEASURED[operation] = got
    print(f"\n{operation}: " + ", ".join(f"{k} {v}" for k, v in got.items() if v))
    bounds = BOUNDS[operation]
    over = {k: (v, bounds.get(k, 0)) for k, v in got.items() if v > bounds.get(k, 0)}
    assert not over, f"{operation} made more requests than its bounds: {over} (all: {got})"


def _window(root: str) -> tuple[int, int]:
    """The middle 10% of the lake's time range."""
    ts = lake_records(root)["timestamp"]
    return int(ts.quantile(0.45)), int(ts.quantile(0.55))


def test_ingest_commit_requests(lake: str) -> None:
    assert len(Catalog(lake).segments()) > 4
    _check("ingest", MEASURED["ingest"])


def test_extract_of_a_tenth_requests(spark, spark_s3: S3Server, lake: str) -> None:
    lo, hi = _window(lake)
    mark = spark_s3.mark()
    n = extract(spark, lake, "t", start=lo, end=hi).count()
    got = counts(spark_s3.requests_since(mark))
    assert MESSAGES * 0.08 < n < MESSAGES * 0.12
    _check("extract", got)


@pytest.mark.parametrize(("operation", "n"), [("lookup", LOOKUPS), ("sparse lookup", 200)])
def test_lookups_requests(spark, spark_s3: S3Server, lake: str, operation: str, n: int) -> None:
    """10,000 random offsets (every segment read whole, about 800 a segment), and 200
    (about 15 a segment: index intervals apart, read as one ranged GET a segment)."""
    ends = Catalog(lake).log_end_offsets("t")
    rng = np.random.default_rng(3)
    part = rng.integers(0, 2, n)
    highs = [ends[("t", int(p))] for p in part]
    queries = pd.DataFrame({"topic": "t", "partition": part, "offset": rng.integers(0, highs)})
    mark = spark_s3.mark()
    out = lookup(spark, lake, spark.createDataFrame(queries)).toPandas()
    got = counts(spark_s3.requests_since(mark))
    assert len(out) == n and (out["status"] == "ok").all()
    _check(operation, got)


def test_notebook_range_requests(spark_s3: S3Server, lake: str) -> None:
    lo, hi = _window(lake)
    records = lake_records(lake)
    mine = records[(records["partition"] == 0) & records["timestamp"].between(lo, hi - 1)]
    mark = spark_s3.mark()
    rows = seglake.open(lake).partition("t", 0).range(lo, hi)
    got = counts(spark_s3.requests_since(mark))
    assert len(rows) == len(mine) > 200
    _check("range", got)
