"""Broker -> lake, judged by Kafka: what a real client produced to a real broker (every
codec, keys, headers, null values, idempotent and transactional producers, aborted
transactions, a topic the broker's cleaner cleaned) is registered from the stopped
broker's data directory; every seglake reader must return what Kafka's consumer got, in
read_committed and read_uncommitted, and offset-for-time must answer what the broker's
ListOffsets answered."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pytest

import seglake
from seglake.cli.main import run
from seglake.cli.targets import open_partition
from tests.kafka_client import ISOLATION, Rec, recs_from_arrow
from tests.spark.kafka.conftest import Produced

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lake(produced: Produced, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``seglake register`` of the stopped broker's data directory."""
    root = str(tmp_path_factory.mktemp("from-broker") / "lake")
    assert run(["register", "--root", root, str(produced.snapshot)]) == 0
    return root


def _b64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def recs_from_json(lines: list[dict], partition: int | None = None) -> list[Rec]:
    return sorted(
        Rec(
            d.get("partition", partition),
            d["offset"],
            d["timestamp"],
            _b64(d["key"]),
            _b64(d["value"]),
            tuple((h["key"], _b64(h["value"])) for h in d["headers"]),
        )
        for d in lines
    )


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _topics(produced: Produced) -> list[tuple[str, int]]:
    return sorted(produced.topics.items())


def test_the_client_saw_what_it_should(produced: Produced) -> None:
    """The oracle itself: aborted records only under read_uncommitted, cleaned keys gone."""
    c, u = (produced.consumed[("txn", iso)] for iso in ISOLATION)
    assert set(c) < set(u) and len(c) > 1000 and len(u) - len(c) > 500
    raw = produced.consumed[("compacted-raw", "read_uncommitted")]
    cleaned = produced.consumed[("compacted", "read_uncommitted")]
    assert len(cleaned) < len(raw) / 5
    for codec_topic, n in _topics(produced):
        if codec_topic.startswith("codec-"):
            got = produced.consumed[(codec_topic, "read_committed")]
            assert len(got) == 1500 and {r.partition for r in got} == set(range(n))
            assert any(r.value is None for r in got) and any(r.key is None for r in got)
            assert any(r.headers for r in got)


@pytest.mark.parametrize("isolation", ISOLATION)
def test_seglake_consume(produced: Produced, lake: str, isolation: str, capfd) -> None:
    for topic, _ in _topics(produced):
        code = run(
            [
                "consume",
                lake,
                "--topic",
                topic,
                "--formatter",
                "json",
                "--isolation-level",
                isolation,
            ]
        )
        out = capfd.readouterr().out
        assert code == 0
        assert recs_from_json(_json_lines(out)) == produced.consumed[(topic, isolation)], topic


def test_seglake_read(produced: Produced, lake: str, capfd) -> None:
    """``seglake read`` has no isolation level: Kafka's read_uncommitted."""
    for topic, n in _topics(produced):
        got: list[Rec] = []
        for p in range(n):
            args = ["read", f"{lake}/{topic}-{p}", "--offset", "0", "--max-records", "100000"]
            code = run([*args, "--json"])
            assert code == 0
            got += recs_from_json(_json_lines(capfd.readouterr().out), p)
        assert sorted(got) == produced.consumed[(topic, "read_uncommitted")], topic


def test_notebook_api(produced: Produced, lake: str) -> None:
    """``seglake.open``: ``read`` (read_uncommitted, as Kafka's default), ``range`` over
    every timestamp, and ``offsets_for_times`` against the broker's ListOffsets."""
    nb = seglake.open(lake)
    for topic, n in _topics(produced):
        want = produced.consumed[(topic, "read_uncommitted")]
        got: list[Rec] = []
        for p in range(n):
            part = nb.partition(topic, p)
            got += recs_from_arrow(part.read(0, max_records=100_000, as_="arrow"))
            asked = produced.list_offsets[(topic, p, "read_uncommitted")]
            answers = {}
            for spec in asked:
                found = part.offsets_for_times(spec)
                answers[spec] = -1 if found is None else found.offset
            assert answers == {s: o for s, (o, _) in asked.items()}, (topic, p)
        assert sorted(got) == want, topic
        if want:
            lo, hi = min(r.timestamp for r in want), max(r.timestamp for r in want)
            ranged: list[Rec] = []
            for p in range(n):
                ranged += recs_from_arrow(nb.partition(topic, p).range(lo, hi + 1, as_="arrow"))
            assert sorted(ranged) == want, topic


def test_offset_for_time_equals_list_offsets(produced: Produced, lake: str, capfd) -> None:
    """``seglake offset-for-time`` per partition directory, for >= 100 timestamps and
    -1/-2/-3, equals the broker's ListOffsets (read_uncommitted: a directory has no
    isolation level; every transaction is ended, so read_committed's answers are the
    same, which is checked too). Every timestamp is asked of the log the command opens
    (``open_partition``, its ``offsets_for_times``); the command itself (a process-wide
    parse and open each: 50 ms) is run for -1/-2/-3 and every 25th timestamp."""
    asked_total = 0
    for topic, n in _topics(produced):
        for p in range(n):
            asked = produced.list_offsets[(topic, p, "read_uncommitted")]
            assert asked == produced.list_offsets[(topic, p, "read_committed")]
            log = open_partition(f"{lake}/{topic}-{p}")
            for i, (spec, (offset, timestamp)) in enumerate(asked.items()):
                found = log.offsets_for_times(spec)
                got = {} if found is None else found._asdict()
                if spec < 0 or i % 25 == 0:
                    assert run(["offset-for-time", f"{lake}/{topic}-{p}", str(spec)]) == 0
                    printed = json.loads(capfd.readouterr().out)
                    assert printed == ({"offset": None} if found is None else got)
                assert got.get("offset") == (None if offset == -1 else offset), (topic, p, spec)
                if spec == -3 or spec >= 0:
                    assert got.get("timestamp", -1) == timestamp, (topic, p, spec)
            asked_total += len(asked)
    assert asked_total >= 100 * len(produced.topics)


@pytest.mark.parametrize("isolation", ISOLATION)
def test_spark_data_source(spark, produced: Produced, lake: str, isolation: str) -> None:
    from seglake.spark import register

    register(spark)
    for topic, _ in _topics(produced):
        df = (
            spark.read.format("seglake")
            .option("subscribe", topic)
            .option("includeHeaders", "true")
            .option("isolationLevel", isolation)
            .load(lake)
        )
        assert recs_from_arrow(df.toArrow()) == produced.consumed[(topic, isolation)], topic


@pytest.mark.parametrize("isolation", ISOLATION)
def test_extract_job(spark, produced: Produced, lake: str, isolation: str) -> None:
    from seglake.spark.extract import extract

    for topic, n in _topics(produced):
        want = produced.consumed[(topic, isolation)]
        hi = max(r.timestamp for r in produced.consumed[(topic, "read_uncommitted")]) + 1
        df = extract(spark, lake, topic, start=0, end=hi, mode="filter", isolation_level=isolation)
        assert recs_from_arrow(df.toArrow()) == [r for r in want if r.timestamp < hi], topic
        # offsets: [ListOffsets(0), ListOffsets(hi)) of each partition, as the Spark Kafka
        # source's *OffsetsByTimestamp (a marker stamped later than every record can end it)
        bounds = {}
        for p in range(n):
            asked = produced.list_offsets[(topic, p, "read_uncommitted")]
            end = asked[hi][0] if asked[hi][0] >= 0 else asked[-1][0]
            bounds[p] = (asked[0][0], end)
        in_range = [r for r in want if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]
        df = extract(spark, lake, topic, start=0, end=hi, mode="offsets", isolation_level=isolation)
        assert recs_from_arrow(df.toArrow()) == in_range, topic


def _lookup_queries(produced: Produced, by_marker: bool) -> tuple[list[dict], dict]:
    """Queries and the answers Kafka gives: every offset from 0 to the log end (the first
    record at or after it that the consumer got: a marker's or cleaned offset answers
    the next record, as a fetch from there does), and the timestamps asked of ListOffsets
    (the record a fetch from its answer returns). ``by_marker``: only the timestamps
    whose ListOffsets answer is a transaction marker (no offsets); else the others."""
    queries, want = [], {}
    for topic, n in _topics(produced):
        got = produced.consumed[(topic, "read_uncommitted")]
        for p in range(n):
            recs = [r for r in got if r.partition == p]
            offsets = {r.offset for r in recs}
            asked = produced.list_offsets[(topic, p, "read_uncommitted")]
            i = 0
            for o in range(0 if not by_marker else asked[-1][0], asked[-1][0]):
                while i < len(recs) and recs[i].offset < o:
                    i += 1
                queries.append({"topic": topic, "partition": p, "offset": o, "timestamp": None})
                want[(topic, p, "o", o)] = recs[i] if i < len(recs) else None
            for spec, (offset, _) in asked.items():
                marker = offset >= 0 and offset not in offsets
                if spec >= 0 and marker == by_marker:
                    queries.append(
                        {"topic": topic, "partition": p, "offset": None, "timestamp": spec}
                    )
                    nxt = [r for r in recs if r.offset >= offset] if offset >= 0 else []
                    want[(topic, p, "t", spec)] = nxt[0].offset if nxt else -1
    return queries, want


def _lookup_wrong(spark, lake: str, queries: list[dict], want: dict) -> list[tuple]:
    from seglake.spark.lookup import lookup

    schema = pa.schema(
        {
            "topic": pa.string(),
            "partition": pa.int32(),
            "offset": pa.int64(),
            "timestamp": pa.int64(),
        }
    )
    out = lookup(spark, lake, pa.Table.from_pylist(queries, schema)).toArrow().to_pylist()
    assert len(out) == len(queries)
    wrong = []
    for row in out:
        t, p = row["topic"], row["partition"]
        if row["query_offset"] is not None:
            rec = want[(t, p, "o", row["query_offset"])]
            got = None
            if row["status"] == "ok":
                ms = int(row["timestamp"].timestamp() * 1000)
                hs = tuple((h["key"], h["value"]) for h in row["headers"] or [])
                got = Rec(p, row["offset"], ms, row["key"], row["value"], hs)
        else:
            rec = want[(t, p, "t", row["query_timestamp"])]
            got = row["offset"] if row["status"] == "ok" else -1
        if got != rec:
            q = row["query_offset"] if row["query_offset"] is not None else row["query_timestamp"]
            wrong.append((t, p, q, row["status"], row["offset"], rec))
    return wrong


def test_lookup_job(spark, produced: Produced, lake: str) -> None:
    """Every offset, and every timestamp whose ListOffsets answer is a record, answers
    what Kafka does (read_uncommitted: lookup has no isolation level)."""
    queries, want = _lookup_queries(produced, by_marker=False)
    assert len(queries) > 15_000
    assert _lookup_wrong(spark, lake, queries, want) == []


def test_lookup_by_a_timestamp_kafka_answers_with_a_marker(spark, produced: Produced, lake: str):
    """Kafka's ListOffsets can answer a transaction marker (stamped with the broker's
    clock): lookup answers the record a fetch from it returns, the next one."""
    queries, want = _lookup_queries(produced, by_marker=True)
    assert len(queries) > 10
    assert _lookup_wrong(spark, lake, queries, want) == []


def test_register_took_every_broker_segment(produced: Produced, lake: str) -> None:
    """Every non-empty ``.log`` of the broker's directories is a catalog row, byte for
    byte the same file."""
    from seglake.lake.catalog import Catalog

    rows = Catalog(lake).segments().to_pylist()
    paths = {r["path"] for r in rows}
    for d in Path(produced.snapshot).iterdir():
        if not d.is_dir():
            continue
        for log in d.glob("*.log"):
            if log.stat().st_size:
                rel = f"{d.name}/{log.name}"
                assert rel in paths
                assert (Path(lake) / rel).read_bytes() == log.read_bytes(), rel
