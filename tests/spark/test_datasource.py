"""spark.read.format("seglake") against brute force (every .log decoded, ranges chosen in
pandas) and against the extract job: every option, filter pushdown, bad options, and the
bytes a narrow time window reads (a Spark accumulator the planner and tasks add to).

The lake is test_extract's (five ingest runs, one per codec, non-monotonic CreateTime),
built once for this module; a second one holds tests.txn_log's transactions."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import datasource as sds
from pyspark.sql import functions as F

import seglake
import seglake.spark
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark import datasource
from seglake.spark.datasource import Pushed
from seglake.spark.extract import extract
from seglake.spark.extract_plan import ExtractOptions, plan_extract
from tests.spark.test_extract import kafka_offsets_for_time, lake  # noqa: F401 (fixture)
from tests.txn_log import write_transactional_log

pytestmark = pytest.mark.spark
KEYS = ["topic", "partition", "offset"]
COLUMNS = [*KEYS, "timestamp", "key", "value"]
Bounds = dict[tuple[str, int], tuple[int, int]]


@dataclasses.dataclass
class Source:
    """The registered data source on one session; ``bytes`` is what reads have counted."""

    spark: Any
    root: str
    recs: pd.DataFrame  # brute force: every record of the lake
    acc: Any

    def df(self, root: str | None = None, **options: str) -> DataFrame:
        if not {"subscribe", "subscribePattern", "assign"} & set(options):
            options = {"subscribePattern": ".*", **options}  # every topic, as Kafka's asks
        reader = self.spark.read.format("seglake")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(root or self.root)

    @property
    def bytes(self) -> int:
        return int(self.acc.value)


@pytest.fixture(scope="module")
def source(spark, lake) -> Source:  # noqa: F811 (the imported fixture)
    acc = spark.sparkContext.accumulator(0)
    seglake.spark.register(spark, bytes_accumulator=acc)
    return Source(spark, *lake, acc)


def ts(ms: int, us: int = 0) -> dt.datetime:
    """A Spark timestamp literal ``ms`` milliseconds (+ ``us`` µs) after the epoch."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms, microseconds=us)


def records(df: DataFrame) -> pd.DataFrame:
    """The rows of ``df`` sorted by topic, partition, offset; timestamps in epoch ms."""
    t = df.toArrow()
    i = t.column_names.index("timestamp")
    t = t.set_column(i, "timestamp", pc.divide(t.column(i).cast(pa.int64()), 1000))
    return t.to_pandas().sort_values(KEYS).reset_index(drop=True)


def sorted_arrow(df: DataFrame) -> pa.Table:
    return df.toArrow().sort_by([(k, "ascending") for k in KEYS])


def assert_rows(df: DataFrame, expected: pd.DataFrame, *, at_least: int = 1) -> None:
    got = records(df)
    exp = expected.sort_values(KEYS)
    assert len(got) == len(exp) >= at_least
    assert got[COLUMNS].values.tolist() == exp[COLUMNS].values.tolist()


def within(recs: pd.DataFrame, bounds: Bounds) -> pd.DataFrame:
    """Records of the partitions in ``bounds`` with lo <= offset < hi."""
    parts = [
        g[(g["offset"] >= bounds[tp][0]) & (g["offset"] < bounds[tp][1])]
        for tp, g in recs.groupby(["topic", "partition"])
        if tp in bounds
    ]
    return pd.concat(parts) if parts else recs.iloc[:0]


def bounds(
    recs: pd.DataFrame,
    lo: Callable[[pd.DataFrame], int] = lambda g: 0,
    hi: Callable[[pd.DataFrame], int] = lambda g: 2**62,
) -> Bounds:
    """``{(topic, partition): (lo(g), hi(g))}`` over the partitions of ``recs``."""
    return {tp: (lo(g), hi(g)) for tp, g in recs.groupby(["topic", "partition"])}


def quantile_ms(recs: pd.DataFrame, q: float) -> int:
    return int(recs["timestamp"].quantile(q))


# ------------------------------------------------------------------------------ results
@pytest.mark.parametrize("which", ["generated", "broker-fixtures"])
def test_a_task_decodes_bounded_groups_with_the_same_rows(source, tmp_path, monkeypatch, which):
    """A reader task decodes its splits a group of about ``group_bytes`` of log at a time
    (``iter_splits``, as extract's tasks): with a small group a task makes several
    decode calls, hands the first group's rows over before decoding the next, and its
    rows are the whole task's ``read_splits`` (the old read) and the notebook API's."""
    from seglake.lake import scan_read
    from seglake.lake.register import register as register_broker
    from seglake.storage.index_cache import get_cache
    from tests.conftest import FIXTURES

    if which == "generated":
        root = source.root
    else:
        if not FIXTURES.exists():
            pytest.skip("no broker fixtures (SEGLAKE_FIXTURES)")
        root = str(tmp_path / "lake")
        register_broker(LakeHandle.open(root), str(FIXTURES), run_id="fixtures")
    opts = datasource.parse_options({"path": root, "subscribePattern": ".*"})
    reader = datasource.SeglakeReader(opts, parallelism=2)
    reader.group_bytes = 1  # every split its own group
    tasks = reader.partitions()
    calls: list[int] = []
    decode = scan_read.read_splits

    def counted(*args: Any) -> pa.Table:
        calls.append(len(args[2]))
        return decode(*args)

    monkeypatch.setattr(scan_read, "read_splits", counted)
    names, got = opts.arrow_schema.names, []
    for task in tasks:
        calls.clear()
        batches = reader.read(task)
        first = next(batches, None)
        assert first is not None and calls == [1]  # one split decoded before the first rows
        rest = list(batches)
        assert calls == [1] * len(task.value)
        whole = decode(get_cache(), root, task.value).select(names)
        assert pa.Table.from_batches([first, *rest], schema=whole.schema).equals(whole)
        got += [first, *rest]
    assert max(len(t.value) for t in tasks) > 1  # some task has several groups
    rows = pa.Table.from_batches(got).to_pandas()
    opened = seglake.open(root)
    # the fixtures' user topics hold 21 records (a read leaves internal topics out)
    assert len(rows) >= (100 if which == "generated" else 21)
    for (topic, partition), g in rows.groupby(["topic", "partition"]):
        p = opened.partition(topic, partition)
        n = p.log_end_offset - p.log_start_offset
        exp = p.read(p.log_start_offset, n, as_="arrow")
        assert g["offset"].tolist() == exp.column("offset").to_pylist()
        assert g["value"].tolist() == exp.column("value").to_pylist()
        assert g["key"].tolist() == exp.column("key").to_pylist()
    every = {(t, q) for t in opened.topics() for q in opened.partitions(t)}
    nonempty = {k for k in every if opened.partition(*k).log_end_offset > 0}
    assert set(rows.groupby(["topic", "partition"]).groups) == nonempty


def test_whole_lake_and_headers_equal_brute_force_and_extract(spark, source):
    recs = source.recs
    df = source.df()
    names = KAFKA_SOURCE_SCHEMA.names
    assert df.columns == names[:-1]  # no headers without includeHeaders, as Kafka's source
    assert_rows(df, recs, at_least=7000)
    for topic in ("t1", "t2"):
        with_headers = source.df(subscribe=topic, includeHeaders="true")
        assert with_headers.columns == names
        got, exp = sorted_arrow(with_headers), sorted_arrow(extract(spark, source.root, topic))
        assert got.num_rows > 1000 and got.column("headers").null_count == 0
        assert got.equals(exp)


def test_splits_are_packed_into_fewer_tasks_with_the_same_rows(source):
    """The splits packed as extract packs them: fewer input partitions than splits,
    every split in exactly one, and the same rows (the whole lake)."""
    opts = datasource.parse_options({"path": source.root, "subscribePattern": ".*"})
    splits = datasource.plan_read(opts)
    parts = datasource.SeglakeReader(opts, parallelism=2).partitions()

    def key(s: dict) -> tuple:
        return s.topic, s.partition, s.path, s.start_pos, s.end_pos

    assert len(splits) > len(parts) >= 1
    assert sorted(map(key, splits)) == sorted(key(s) for p in parts for s in p.value)
    df = source.df()
    assert df.rdd.getNumPartitions() < len(splits)
    assert_rows(df, source.recs, at_least=7000)


def test_time_range_equals_extract_job_both_semantics(spark, source):
    recs = source.recs
    t1 = recs[recs["topic"] == "t1"]
    lo, hi = quantile_ms(t1, 0.3), quantile_ms(t1, 0.45)
    # Kafka's semantics: offsetsForTimes(start) .. offsetsForTimes(end)
    ds = source.df(
        subscribe="t1",
        startingTimestamp=str(lo),
        endingTimestamp=str(hi),
        includeHeaders="true",
        splitBytes="4096",
    )
    job = extract(spark, source.root, "t1", start=lo, end=hi, mode="offsets", split_bytes=4096)
    assert sorted_arrow(ds).equals(sorted_arrow(job))
    assert_rows(
        ds,
        within(
            t1,
            bounds(
                t1,
                lo=lambda g: kafka_offsets_for_time(g, lo, 0),
                hi=lambda g: kafka_offsets_for_time(g, hi, 0),
            ),
        ),
        at_least=100,
    )
    # a pushed timestamp filter: every record in [lo, hi), like extract's filter mode
    ds = source.df(subscribe="t1", includeHeaders="true").filter(
        (F.col("timestamp") >= ts(lo)) & (F.col("timestamp") < ts(hi))
    )
    job = extract(spark, source.root, "t1", start=lo, end=hi, mode="filter")
    assert sorted_arrow(ds).equals(sorted_arrow(job))
    assert_rows(ds, t1[(t1["timestamp"] >= lo) & (t1["timestamp"] < hi)], at_least=100)


def test_offset_topic_and_catalog_options(source):
    root, recs = source.root, source.recs
    t1, t2 = recs[recs["topic"] == "t1"], recs[recs["topic"] == "t2"]
    assert_rows(
        source.df(
            subscribe="t1",
            startingOffsets='{"t1":{"0":100,"1":-2}}',
            endingOffsets='{"t1":{"0":400,"1":-1}}',
        ),
        within(t1, {("t1", 0): (100, 400), ("t1", 1): (0, 2**62)}),
    )
    assert_rows(
        source.df(
            assign='{"t2":[1]}', startingOffsets='{"t2":{"1":50}}', endingOffsets='{"t2":{"1":-1}}'
        ),
        within(t2, {("t2", 1): (50, 2**62)}),
    )
    assert_rows(
        source.df(subscribePattern="t[12]", startingOffsets="earliest", endingOffsets="latest"),
        recs,
    )
    assert_rows(source.df(subscribePattern="t2"), t2)
    assert_rows(source.df(subscribe="t2,t1"), recs)
    # failOnDataLoss=false: a range past the log end reads nothing (t1-0), as Kafka's
    assert_rows(
        source.df(
            subscribe="t1",
            failOnDataLoss="false",
            startingOffsets='{"t1":{"0":1000000000,"1":-2}}',
            endingOffsets='{"t1":{"0":2000000000,"1":-1}}',
        ),
        t1[t1["partition"] == 1],
    )
    # splitBytes: segments cut at index entries, more tasks, the same rows
    small = source.df(subscribe="t1", splitBytes="4096")
    assert small.rdd.getNumPartitions() > source.df(subscribe="t1").rdd.getNumPartitions()
    assert_rows(small, t1)
    # versionAsOf: the catalog as the first ingest run left it
    ends = Catalog(root).log_end_offsets(version=1)
    assert_rows(source.df(versionAsOf="1"), within(recs, {tp: (0, e) for tp, e in ends.items()}))
    # kafka.* options of a Kafka source's option map are accepted and ignored
    assert source.df(**{"kafka.bootstrap.servers": "x:9092", "subscribe": "t2"}).count() == len(t2)


def test_partitions_with_their_own_offsets_are_planned_in_one_catalog_read(source, monkeypatch):
    """Every partition starting and ending elsewhere: one catalog read for the whole
    plan (plan_partition per partition on the rows read once), the same splits as one
    plan_extract per partition."""
    real, calls = Catalog.segments, []

    def counting(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Catalog, "segments", counting)
    opts = datasource.parse_options(
        {
            "path": source.root,
            "subscribe": "t1,t2",
            "startingOffsets": '{"t1":{"0":100,"1":7},"t2":{"0":3,"1":-2}}',
            "endingOffsets": '{"t1":{"0":400,"1":-1},"t2":{"0":-1,"1":90}}',
        }
    )
    splits = datasource.plan_read(opts)
    assert len(calls) == 1
    monkeypatch.undo()
    leo = Catalog(source.root).log_end_offsets()
    want = {
        ("t1", 0): (100, 400),
        ("t1", 1): (7, leo[("t1", 1)]),
        ("t2", 0): (3, leo[("t2", 0)]),
        ("t2", 1): (0, 90),
    }

    def key(s: dict) -> tuple:
        return s.topic, s.partition, s.path, s.start_pos, s.end_pos, s.lo, s.hi

    one_by_one = [
        key(s)
        for (t, p), (lo, hi) in want.items()
        for s in plan_extract(
            source.root,
            t,
            ExtractOptions(partitions=[p], start_offset=lo, end_offset=hi, mode="filter"),
        ).tasks
    ]
    assert sorted(map(key, splits)) == sorted(one_by_one) and len(one_by_one) >= 4


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # Kafka's validateTopicPartitions: a JSON option names every assigned partition
        ({"endingOffsets": '{"t1":{"0":400}}'}, "Specified: t1-0; assigned: t1-0, t1-1"),
        ({"startingOffsetsByTimestamp": '{"t1":{"1":0}}'}, "startingOffsetsByTimestamp: the"),
        ({"startingOffsets": '{"t1":{"0":1,"1":1,"2":1}}'}, "Specified: t1-0, t1-1, t1-2"),
        # a resolved start past the resolved end, whatever failOnDataLoss says
        (
            {"startingOffsets": '{"t1":{"0":1000000000,"1":-2}}', "failOnDataLoss": "false"},
            "the resolved start offset 1000000000 is greater than the resolved end offset",
        ),
    ],
)
def test_where_kafkas_source_refuses_a_read_seglake_does(source, options, message):
    opts = datasource.parse_options({"path": source.root, "subscribe": "t1", **options})
    with pytest.raises(ConfigError, match=re.escape(message)):
        datasource.plan_read(opts)


def test_timestamp_options(source):
    recs = source.recs
    t1, t2 = recs[recs["topic"] == "t1"], recs[recs["topic"] == "t2"]
    lo, hi = quantile_ms(recs, 0.2), quantile_ms(recs, 0.6)

    def at(ms: int) -> Callable[[pd.DataFrame], int]:
        return lambda g: kafka_offsets_for_time(g, ms, 0)

    iso = ts(lo).isoformat()
    # startingTimestamp (ISO or ms) wins over startingOffsets, as in Kafka
    assert_rows(
        source.df(
            subscribe="t1",
            startingTimestamp=iso,
            endingTimestamp=str(hi),
            startingOffsets='{"t1":{"0":5}}',
        ),
        within(t1, bounds(t1, lo=at(lo), hi=at(hi))),
        at_least=100,
    )
    # per partition (a timestamp past every record: the log end)
    by = {
        ("t2", 0): (at(lo)(t2[t2["partition"] == 0]), 2**62),
        ("t2", 1): (0, at(hi)(t2[t2["partition"] == 1])),
    }
    assert_rows(
        source.df(
            subscribe="t2",
            startingOffsetsByTimestamp=f'{{"t2":{{"0":{lo},"1":0}}}}',
            endingOffsetsByTimestamp=f'{{"t2":{{"0":{2**62},"1":{hi}}}}}',
        ),
        within(t2, by),
        at_least=100,
    )
    # no record at or after the start: "latest" starts at the log end
    late = str(int(recs["timestamp"].max()) + 1)
    assert (
        source.df(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest").count() == 0
    )


# ------------------------------------------------------------------------------ pushdown
def test_pushed_filters_are_ranges_and_say_what_is_exact():
    p = Pushed()
    assert p.push(sds.GreaterThan(("timestamp",), ts(1000, 1)))  # > 1000.001 ms: >= 1001
    assert p.push(sds.LessThanOrEqual(("timestamp",), ts(2000)))  # <= 2000 ms: < 2001
    assert p.timestamp == (1001, 2001)
    assert p.push(sds.GreaterThanOrEqual(("timestamp",), ts(1500, 1)))  # >= 1500.001: >= 1501
    assert p.push(sds.LessThan(("timestamp",), ts(1600, 1)))  # < 1600.001: <= 1600
    assert p.timestamp == (1501, 1601)
    assert p.push(sds.EqualTo(("timestamp",), ts(1550, 5))) and p.nothing()  # no such ms
    q = Pushed()
    assert q.push(sds.In(("topic",), ("a", "b"))) and q.push(sds.EqualTo(("topic",), "b"))
    assert q.topics == {"b"}
    assert q.push(sds.In(("partition",), (1, 3))) and q.push(sds.GreaterThan(("partition",), 1))
    assert q.admits(("b", 3)) and not q.admits(("b", 1)) and not q.admits(("a", 3))
    assert not q.push(sds.In(("offset",), (5, 9)))  # the hull is pushed, Spark checks the rest
    assert q.push(sds.LessThan(("offset",), 7)) and q.offset == (5, 7)
    for f in (
        sds.GreaterThan(("topic",), "a"),
        sds.EqualTo(("offset",), 1.5),
        sds.EqualTo(("timestampType",), 0),
        sds.EqualTo(("value",), b"x"),
        sds.GreaterThan(("key",), "a"),
        sds.EqualTo(("key",), 5),
    ):
        assert not q.push(f)
    assert not q.nothing()
    assert q.push(sds.In(("key",), ("a", b"b", bytearray(b"c"), None)))  # exact: key bytes
    assert q.push(sds.EqualTo(("key",), b"b")) and q.keys == {b"b"} and not q.nothing()
    assert q.push(sds.EqualTo(("key",), "a")) and q.nothing()  # b and a: no record


def test_filter_pushdown_results_are_exact(source):
    recs = source.recs
    t = recs["timestamp"]
    mid = int(t.median())
    some = int(t.iloc[len(recs) // 3])  # bounds on records' own timestamps: edges count
    other = int(t[t > some + 200].min())
    c = F.col
    cases = [
        (
            (c("topic") == "t2")
            & (c("partition") == 1)
            & (c("offset") >= 100)
            & (c("offset") < 300),
            (recs["topic"] == "t2") & (recs["partition"] == 1) & recs["offset"].between(100, 299),
        ),
        (
            c("topic").isin("t1") & c("partition").isin(0) & c("offset").isin(3, 77, 1000, 10**9),
            (recs["topic"] == "t1") & (recs["partition"] == 0) & recs["offset"].isin([3, 77, 1000]),
        ),
        (
            (c("partition") > 0) & (c("offset") <= 50),
            (recs["partition"] > 0) & (recs["offset"] <= 50),
        ),
        (
            (c("timestamp") > ts(some, 250)) & (c("timestamp") <= ts(other)),
            (t > some) & (t <= other),
        ),
        (
            (c("timestamp") >= ts(some, 1)) & (c("timestamp") < ts(other, 1)),
            (t > some) & (t <= other),
        ),
        ((c("timestamp") >= ts(some)) & (c("timestamp") < ts(other)), (t >= some) & (t < other)),
        (c("timestamp") == ts(some), t == some),
        (c("timestamp") == ts(some, 500), t < 0),
        (c("timestamp").isin(ts(some), ts(mid)), t.isin([some, mid])),
        (
            (c("offset") < 10) | (c("partition") == 1),  # not pushed: Spark filters
            (recs["offset"] < 10) | (recs["partition"] == 1),
        ),
        ((c("topic") == "t1") & (c("topic") == "t2"), t < 0),
    ]
    for cond, expected in cases:
        assert_rows(source.df().filter(cond), recs[expected], at_least=0)
    # filters and options together: Kafka's range first, then the filter
    lo = quantile_ms(recs, 0.4)
    df = source.df(subscribe="t1", startingTimestamp=str(lo)).filter(c("timestamp") < ts(mid))
    t1 = recs[recs["topic"] == "t1"]
    exp = within(t1, bounds(t1, lo=lambda g: kafka_offsets_for_time(g, lo, 0)))
    assert_rows(df, exp[exp["timestamp"] < mid], at_least=10)
    # pushed topic/partition filters leave out the other partitions' splits
    opts, narrow = (
        datasource.parse_options({"path": source.root, "subscribePattern": ".*"}),
        Pushed(),
    )
    assert narrow.push(sds.EqualTo(("topic",), "t2"))
    assert narrow.push(sds.EqualTo(("partition",), 1))
    assert len(datasource.plan_read(opts, narrow)) < len(datasource.plan_read(opts)) / 3


def test_narrow_time_window_reads_only_overlapping_segments(source):
    root, recs = source.root, source.recs
    t1 = recs[recs["topic"] == "t1"]
    rows = Catalog(root).segments("t1").to_pandas()
    lo = quantile_ms(t1, 0.5)
    hi = lo + 20
    overlapping = rows[(rows["max_timestamp"] >= lo) & (rows["min_timestamp"] < hi)]
    index_bytes = sum(
        os.path.getsize(os.path.join(root, p[: -len(".log")] + suffix))
        for p in rows["path"]
        for suffix in (".index", ".timeindex")
    )
    budget = int(overlapping["size_bytes"].sum()) + index_bytes
    before = source.bytes
    df = source.df().filter(
        (F.col("topic") == "t1") & (F.col("timestamp") >= ts(lo)) & (F.col("timestamp") < ts(hi))
    )
    assert df.count() == int(((t1["timestamp"] >= lo) & (t1["timestamp"] < hi)).sum()) > 0
    read = source.bytes - before
    total = int(rows["size_bytes"].sum())
    print(
        f"\nwindow [{lo}, {hi}) of t1: {read} bytes read; {len(overlapping)} of "
        f"{len(rows)} segments overlap ({int(overlapping['size_bytes'].sum())} bytes), "
        f"index files {index_bytes} bytes, t1 .log bytes {total}"
    )
    assert 0 < read <= budget
    assert budget < total / 2  # the window is narrow: most segments are skipped


# ------------------------------------------------------------------------------ transactions
@pytest.fixture(scope="module")
def txn(tmp_path_factory) -> tuple[str, pd.DataFrame]:
    """tests.txn_log's transactional partition (interleaved producers, aborted and
    committed transactions, several segments, zstd), registered; and its truth."""
    tmp = tmp_path_factory.mktemp("txn")
    truth, aborted = write_transactional_log(tmp / "broker" / "txn-0", seed=3, codec=4)
    assert aborted
    root = str(tmp / "lake")
    register(LakeHandle.open(root), str(tmp / "broker"))
    return root, truth.assign(topic="txn", partition=0)


def test_isolation_levels_drop_aborted_transactions(spark, source, txn):
    root, truth = txn
    lo, hi = quantile_ms(truth, 0.3), quantile_ms(truth, 0.6)
    window = (F.col("timestamp") >= ts(lo)) & (F.col("timestamp") < ts(hi))
    for level, keep in (("read_uncommitted", truth), ("read_committed", truth[~truth["aborted"]])):
        for name in ("isolationLevel", "kafka.isolation.level"):
            assert_rows(source.df(root, **{name: level}), keep, at_least=100)
        assert_rows(
            source.df(root, isolationLevel=level).filter(window),
            keep[(keep["timestamp"] >= lo) & (keep["timestamp"] < hi)],
            at_least=10,
        )
        job = extract(spark, root, "txn", isolation_level=level)
        assert sorted_arrow(source.df(root, isolationLevel=level, includeHeaders="true")).equals(
            sorted_arrow(job)
        )


# ------------------------------------------------------------------------------ keys
def test_pushed_key_filters_read_candidate_segments_and_equal_a_full_read(spark, txn, tmp_path):
    """``key = ...`` / ``key IN (...)`` pushed: segments their ``.keyindex`` filters rule
    out are not planned, the others read by key; rows equal a full read filtered by key
    (string and binary literals, nulls, an absent key, read_committed, and a segment
    whose ``.keyindex`` is gone: scanned)."""
    from seglake.lake.key_plan import key_candidates
    from seglake.storage.index_cache import IndexCache
    from tests.unit.test_api import append
    from tests.unit.test_api import records as api_records

    clustered = tmp_path / "clustered"  # keys in runs of 40 records: filters prune
    clustered.mkdir()
    recs = api_records(0, 400, 1)
    keys = [None if i % 9 == 0 else f"c{i // 40}".encode() for i in range(400)]
    append(clustered, "c", 0, recs.set_column(2, "key", pa.array(keys, pa.binary())), "r1")
    damaged = tmp_path / "damaged"
    shutil.copytree(txn[0], damaged)
    gone = sorted(damaged.glob("txn-0/*.keyindex"))[1]
    gone.unlink()
    seglake.spark.register(spark)
    source = Source(spark, "", pd.DataFrame(), None)
    c = F.col
    cases = [
        (str(clustered), {}, c("key") == "c3", [b"c3"]),
        (str(clustered), {}, c("key") == F.lit(b"c5"), [b"c5"]),
        (str(clustered), {}, c("key").isin("c1", "c7", "absent"), [b"c1", b"c7"]),
        (str(clustered), {}, c("key") == "absent", []),
        (str(clustered), {}, c("key").isNull(), None),  # not pushed: Spark's
        (txn[0], {"isolationLevel": "read_committed"}, c("key").isin("k1", "k2"), [b"k1", b"k2"]),
        (txn[0], {}, (c("key") == "k3") & (c("offset") > 40), [b"k3"]),
        (str(damaged), {"isolationLevel": "read_committed"}, c("key") == "k4", [b"k4"]),
    ]
    for root, options, cond, wanted in cases:
        full = sorted_arrow(source.df(root, **options))
        if wanted is None:
            want = full.filter(pc.is_null(full["key"]))
        else:
            want = full.filter(pc.is_in(full["key"], pa.array(wanted, pa.binary())))
            if "offset" in str(cond):
                want = want.filter(pc.greater(want["offset"], 40))
        got = sorted_arrow(source.df(root, **options).filter(cond))
        assert got.equals(want), (root, cond)
        assert wanted != [] or got.num_rows == 0
    # the planner: segments the filter rules out are not planned (absent: none at all)
    opts = datasource.parse_options({"path": str(clustered), "subscribe": "c"})
    tasks = datasource.plan_read(opts)
    one = Pushed()
    assert one.push(sds.EqualTo(("key",), "c3"))
    plan = key_candidates(opts.root.location, IndexCache(), tasks, one.keys or ())
    assert (plan.segments, plan.skipped, len(plan.tasks)) == (4, 2, 2)  # c3: offsets 120..159
    assert datasource.plan_read(opts, one) == plan.tasks
    # a segment ruled out is never read: its .log damaged, the answer is the same
    last = sorted(clustered.glob("c-0/*.log"))[-1]
    last.write_bytes(b"\xff" * last.stat().st_size)
    c3 = pd.DataFrame({"offset": [o for o, k in enumerate(keys) if k == b"c3"]})
    assert records(source.df(str(clustered)).filter(c("key") == "c3"))[["offset"]].equals(c3)
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")  # the planner's line
    try:
        assert source.df(str(clustered)).filter(c("key") == "c3").count() == len(c3)
        said = [r.msg for r in spark.tvf.python_worker_logs().collect()]
    finally:
        spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "false")
    assert any("2 of 4 segment(s) skipped by their .keyindex filters" in m for m in said), said
    none = Pushed()
    assert none.push(sds.In(("key",), ("absent", None)))
    assert datasource.plan_read(opts, none) == []


# ------------------------------------------------------------------------------ bad options
def test_bad_options_name_the_option_and_the_values(spark, source):
    recs = source.recs
    leo = int(recs[(recs["topic"] == "t1") & (recs["partition"] == 0)]["offset"].max()) + 1
    late = int(recs["timestamp"].max()) + 10_000
    cases = [
        ({"subscribe": "t1,nope"}, "subscribe: no topic nope in the lake"),
        ({"subscribe": "bad/name"}, "subscribe: "),
        ({"assign": '{"t1":[0,7]}'}, "assign: no partition t1-7"),
        ({"assign": "[0]"}, "assign: '[0]' is not"),
        ({"assign": '{"t1":"01"}'}, "assign: 't1' maps to '01', not a list of partition"),
        ({"assign": '{"t1":[true]}'}, "assign: t1: True is not a partition number"),
        ({"assign": '{"t1":{"0":1}}'}, "assign: 't1' maps to {'0': 1}, not a list"),
        ({"startingOffsets": '{"t1":{"x":1}}'}, "startingOffsets: t1: 'x' is not a partition"),
        ({"startingOffsets": '{"t1":{"0":true}}'}, "startingOffsets: True is not an integer"),
        ({"subscribe": "t1", "assign": '{"t1":[0]}'}, "Only one of the following options can"),
        ({"startingOffsets": '{"t1":{"0":}'}, 'startingOffsets: \'{"t1":{"0":}\' is not JSON'),
        (
            {"assign": '{"t1":[0]}', "startingOffsets": '{"t1":{"0":999999}}'},
            "startingOffsets / endingOffsets: the resolved start offset 999999 is greater "
            f"than the resolved end offset {leo} for topic t1 partition 0",
        ),
        (
            {"assign": '{"t1":[0]}', "endingOffsets": '{"t1":{"0":999999}}'},
            f"endingOffsets: offset 999999 of t1-0 is outside its log [0, {leo}]",
        ),
        ({"startingOffsets": "latest"}, "startingOffsets: 'latest' is not allowed in a batch"),
        ({"endingOffsets": '{"t1":{"0":-2}}'}, "endingOffsets: -2 (earliest) is not allowed"),
        (
            {"subscribe": "t1", "startingOffsets": '{"t2":{"0":1}}'},
            "startingOffsets: the partitions it names must be the ones the read is assigned",
        ),
        (
            {
                "assign": '{"t1":[0]}',
                "startingOffsets": '{"t1":{"0":400}}',
                "endingOffsets": '{"t1":{"0":100}}',
            },
            "the resolved start offset 400 is greater than the resolved end offset 100",
        ),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp: time 'yesterday'"),
        (
            {"startingTimestamp": str(late)},
            f"startingTimestamp: no record of t1-0 has a timestamp >= {late}",
        ),
        (
            {"endingOffsetsByTimestamp": '{"t1":{"0":"soon"}}'},
            "endingOffsetsByTimestamp: time 'soon'",
        ),
        (
            {"startingOffsetsByTimestampStrategy": "earliest"},
            "startingOffsetsByTimestampStrategy: 'earliest' is not",
        ),
        ({"includeHeaders": "yes"}, "includeHeaders: 'yes' is not 'true' or 'false'"),
        ({"isolationLevel": "serializable"}, "isolationLevel: 'serializable' is not one of"),
        ({"splitBytes": "0"}, "splitBytes: 0 is below 1"),
        (
            {"isolationLevel": "read_committed", "kafka.isolation.level": "read_uncommitted"},
            "isolationLevel, kafka.isolation.level: "
            "['read_committed', 'read_uncommitted'] disagree",
        ),
        ({"versionAsOf": "999"}, "version"),
        ({"subscrbe": "t1"}, "unknown option(s) subscrbe"),
    ]
    for options, message in cases:
        with pytest.raises(Exception) as info:
            source.df(**options).count()
        assert message in str(info.value), (options, str(info.value)[-2000:])
        assert not any(f"{k}: {k}:" in str(info.value) for k in options)  # named once
    with pytest.raises(Exception, match="no lake root"):
        spark.read.format("seglake").load().count()
