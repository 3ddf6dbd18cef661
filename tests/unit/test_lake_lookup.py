"""``Lake.lookup``: the lookup job's answers in process, checked against a brute-force
answer from the decoded records of a lake with several segments, transactions (markers,
aborts) and compaction gaps; and the job's query rules (columns, string and datetime
timestamps, unknown topic/partition) from their one home, :mod:`seglake.lake.lookup_queries`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seglake
from seglake.errors import InputSchemaError, VersionSupersededError
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_answer import LOOKUP_SCHEMA
from seglake.lake.staging import cleanup
from seglake.record.reader import read_log
from tests.unit.test_compact_rules import COMPACT, NOW, txn_lake

TOPIC = "c"


def compacted_txn_lake(root: Path) -> None:
    """Topic ``c``-0: a transactional log (commits, aborts, markers) in several
    segments, compacted (keys' older records and aborted ones removed: offset gaps)."""
    txn_lake(root, seed=3, codec=3)
    assert run_compaction(
        LakeHandle.open(str(root)),
        CompactOptions(conf={**COMPACT, "segment.bytes": "3000"}, now_ms=NOW),
    ).committed


class Truth:
    """The lake's records decoded whole: data records and every record (markers too)."""

    def __init__(self, root: str) -> None:
        rows = Catalog(root).segments(TOPIC, [0]).to_pylist()
        every, data = [], []
        for r in rows:
            buf = (Path(root) / r["path"]).read_bytes()
            every.append(read_log(buf, skip_control=False)[0].select(["offset", "timestamp"]))
            data.append(read_log(buf)[0].select(["offset", "timestamp", "key", "value"]))
        self.segments = len(rows)
        self.log_start, self.log_end = rows[0]["base_offset"], rows[-1]["next_offset"]
        e = pa.concat_tables(every)
        self.e_off, self.e_ts = e.column("offset").to_numpy(), e.column("timestamp").to_numpy()
        self.data = pa.concat_tables(data)
        self.d_off = self.data.column("offset").to_numpy()

    def at_or_after(self, off: int, none: str) -> tuple[str, int | None]:
        """The data record a fetch from ``off`` returns first."""
        nxt = self.d_off[self.d_off >= off]
        return ("ok", int(nxt[0])) if len(nxt) else (none, None)

    def answer(self, offset: int | None, ts: int | None) -> tuple[str, int | None]:
        """(status, offset) by Kafka's rules, record by record."""
        if offset is not None:
            if offset < 0:
                return ("invalid_query", None)
            if not self.log_start <= offset < self.log_end:
                return ("offset_out_of_range", None)
            return self.at_or_after(offset, "no_record_at_offset")
        assert ts is not None
        if ts == -1:
            return ("log_end_offset", self.log_end)
        if ts == -2:
            return self.at_or_after(self.log_start, "no_record_at_offset")
        if ts < -3:
            return ("invalid_query", None)
        t = int(self.e_ts.max()) if ts == -3 else ts
        hit = self.e_off[self.e_ts >= t]  # offsetsForTimes counts markers: then the next
        return self.at_or_after(int(hit[0]), "x") if len(hit) else ("no_record_for_timestamp", None)


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lookup") / "lake"
    compacted_txn_lake(root)
    truth = Truth(str(root))
    assert truth.segments >= 3
    assert len(truth.d_off) < truth.log_end - truth.log_start  # gaps
    assert len(truth.e_off) > len(truth.d_off)  # markers
    return seglake.open(str(root)), truth


def _check(lake, truth: Truth, offsets: list[int], times: list[int]) -> None:
    q = pd.DataFrame(
        {
            "topic": TOPIC,
            "partition": 0,
            "offset": pd.array([*offsets, *[None] * len(times)], "Int64"),
            "timestamp": pd.array([*[None] * len(offsets), *times], "Int64"),
        }
    )
    out = lake.lookup(q)
    assert list(out.columns) == LOOKUP_SCHEMA.names and len(out) == len(q)
    got = [
        (s, None if pd.isna(o) else int(o))
        for s, o in zip(out["status"], out["offset"], strict=True)
    ]
    want = [truth.answer(o, None) for o in offsets] + [truth.answer(None, t) for t in times]
    wrong = [(i, g, w) for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    assert wrong == []
    keys = dict(zip(truth.d_off.tolist(), truth.data.column("key").to_pylist(), strict=True))
    ok = out[out["status"] == "ok"]
    assert [keys[int(o)] for o in ok["offset"]] == ok["key"].tolist()


def test_every_offset_and_time_equals_brute_force(lake) -> None:
    lk, truth = lake
    # (every other offset, every fifth record's time: the gaps and markers send many
    # queries to answer_queries' scan, see the next test)
    offsets = list(range(truth.log_start - 2, truth.log_end + 3, 2))
    ts = {int(t) + d for t in truth.e_ts[::5] for d in (-1, 0, 1)}
    times = sorted(ts | {0, int(truth.e_ts.min()) - 100, int(truth.e_ts.max()) + 5, -1, -2, -3})
    _check(lk, truth, offsets, times)


def test_the_queries_the_index_cannot_place_read_each_segment_once(lake, monkeypatch) -> None:
    """Offsets compacted away or on markers, times the index cannot place: hundreds of
    queries answered by a scan, all of a segment's from one read of it (not one
    scan per query: ~10,000 reads here before), answers as brute force."""
    from seglake.storage.segment import LogSegment

    lk, truth = lake
    reads: list[str] = []
    window = LogSegment.window
    monkeypatch.setattr(
        LogSegment,
        "window",
        lambda seg, *a, **kw: reads.append(seg.log_path) or window(seg, *a, **kw),
    )
    offsets = list(range(truth.log_start, truth.log_end))
    times = sorted({int(t) + d for t in truth.e_ts for d in (-1, 0, 1)})
    _check(lk, truth, offsets, times)
    assert len(reads) <= truth.segments


@pytest.mark.parametrize("chunk", [100, 700])
def test_a_scan_read_in_chunks_answers_the_same(lake, monkeypatch, chunk: int) -> None:
    """The scan reads ``SCAN_CHUNK`` bytes at a time (batches larger than it whole):
    with chunks smaller than a batch, or a few batches, the same answers."""
    from seglake.storage import point_reads

    lk, truth = lake
    monkeypatch.setattr(point_reads, "SCAN_CHUNK", chunk)
    offsets = list(range(truth.log_start, truth.log_end, 3))
    times = sorted({int(t) + d for t in truth.e_ts[::4] for d in (-1, 0, 1)})
    _check(lk, truth, offsets, times)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_queries_equal_brute_force(lake, data) -> None:
    lk, truth = lake
    lo, hi = int(truth.e_ts.min()), int(truth.e_ts.max())
    offsets = data.draw(st.lists(st.integers(truth.log_start - 5, truth.log_end + 5), max_size=30))
    times = data.draw(
        st.lists(
            st.one_of(st.integers(lo - 50, hi + 50), st.sampled_from([-1, -2, -3, -4])), max_size=30
        )
    )
    _check(lk, truth, offsets, times)


def test_query_rules_as_the_job_takes_them(lake) -> None:
    """Unknown topic/partition, a null partition, neither/both kinds, ISO strings,
    sentinel names, datetimes (floored to ms) and Arrow in, Arrow out."""
    lk, truth = lake
    t0 = int(truth.e_ts[len(truth.e_ts) // 2])
    iso = dt.datetime.fromtimestamp(t0 / 1000, dt.UTC).isoformat()
    q = pa.table(
        {
            "topic": [TOPIC, "nope", TOPIC, TOPIC, TOPIC, TOPIC, TOPIC, TOPIC, TOPIC],
            "partition": pa.array([1, 0, None, 0, 0, 0, 0, 0, 0], pa.int64()),
            "offset": pa.array([0, 0, 0, None, 5, None, None, None, None], pa.int64()),
            "timestamp": [None, None, None, None, "1", iso, "latest", "not a time", str(t0)],
        }
    )
    out = lk.lookup(q)
    assert isinstance(out, pa.Table) and out.schema == LOOKUP_SCHEMA
    assert out.column("status").to_pylist() == [
        "unknown_partition",
        "unknown_partition",
        "unknown_partition",
        "invalid_query",
        "invalid_query",
        *[truth.answer(None, t0)[0], "log_end_offset", "invalid_query", truth.answer(None, t0)[0]],
    ]
    assert out.column("query_timestamp").to_pylist()[5:] == [t0, -1, None, t0]
    stamps = pd.DataFrame(
        {
            "topic": TOPIC,
            "partition": [0, 0],
            "timestamp": pd.to_datetime([t0 * 1000 + 999, -1000], unit="us", utc=True),
        }
    )
    got = lk.lookup(stamps)
    assert got["query_timestamp"].tolist()[0] == t0  # floored to ms
    assert got["status"].tolist()[1] == "invalid_query"  # before 1970: no time


def test_a_missing_column_is_one_line(lake) -> None:
    lk, _ = lake
    with pytest.raises(
        InputSchemaError, match=r"no 'partition' column \(given: \['offset', 'topic'\]\)"
    ):
        lk.lookup(pd.DataFrame({"topic": ["c"], "offset": [1]}))
    with pytest.raises(InputSchemaError, match="no offset, timestamp or key column"):
        lk.lookup(pd.DataFrame({"topic": ["c"], "partition": [0]}))


def test_lookup_follows_the_lake_version(tmp_path: Path) -> None:
    """After a compaction, ``refresh()`` moves the answers to the new version."""
    root = tmp_path / "lake"
    txn_lake(root, seed=5, codec=0)
    lk = seglake.open(str(root))
    q = pd.DataFrame({"topic": TOPIC, "partition": 0, "offset": np.arange(0, 40)})
    want = lk.lookup(q)
    assert run_compaction(
        LakeHandle.open(str(root)), CompactOptions(conf=COMPACT, now_ms=NOW)
    ).committed
    after = lk.refresh().lookup(q)
    assert (after["status"] == "ok").all() and (want["status"] == "ok").all()
    assert not after["offset"].equals(want["offset"])  # compaction removed some


def test_cli_lookup_answers_as_lake_lookup(lake, capsys, tmp_path: Path) -> None:
    """``seglake lookup``: --offset/--time (an ISO time holds ':') or a queries file, one
    JSON answer per query in order, as ``Lake.lookup`` answers; a bad query is one line."""
    import json

    from seglake.cli.main import main

    lk, truth = lake
    t0 = int(truth.e_ts[len(truth.e_ts) // 3])
    iso = dt.datetime.fromtimestamp(t0 / 1000, dt.UTC).isoformat()
    o = int(truth.d_off[5])
    argv = ["lookup", lk.root, "--json", "--offset", f"{TOPIC}:0:{o}", "--offset", f"{TOPIC}:7:0"]
    assert main([*argv, "--time", f"{TOPIC}:0:{iso}", "--time", f"{TOPIC}:0:latest"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(g["status"], g.get("offset")) for g in got] == [
        truth.answer(o, None),
        ("unknown_partition", None),
        truth.answer(None, t0),
        ("log_end_offset", truth.log_end),
    ]
    queries = tmp_path / "q.csv"
    queries.write_text(f"topic,partition,offset\n{TOPIC},0,{o}\n{TOPIC},0,{truth.log_end}\n")
    assert main(["lookup", lk.root, "--json", "--queries", str(queries)]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [g["status"] for g in got] == ["ok", "offset_out_of_range"]
    for bad in ("c0:5", "c:0:five"):
        with pytest.raises(SystemExit) as exc:
            main(["lookup", lk.root, "--offset", bad])
        assert exc.value.code == 2
    assert "expected TOPIC:PARTITION:OFFSET" in capsys.readouterr().err
    assert main(["lookup", lk.root, "--queries", str(tmp_path / "none.csv")]) == 2


def test_a_cached_segment_compacted_in_place_reads_its_retired_copy(tmp_path: Path) -> None:
    """The process's index cache holds segments of version 1; a compaction replaces them
    under their names (the old files retired): a lookup still pinned to version 1 in the
    same process answers as a fresh process does (no VersionSupersededError), and the
    cache still serves the repeated lookup. Its hits before the compaction (a lookup
    pinned to version 1 too, which found no retired copy) do not stand for the lookups
    after it: the retired copy is looked for once per reader, not per pinned version."""
    from seglake.storage.index_cache import get_cache

    root = tmp_path / "lake"
    txn_lake(root, seed=5, codec=0)
    lk = seglake.open(str(root))
    q = pd.DataFrame({"topic": TOPIC, "partition": 0, "offset": np.arange(0, 400, 7)})
    want = lk.lookup(q)
    pd.testing.assert_frame_equal(lk.lookup(q), want)  # hits, version 1: no retired copy
    names = {r["path"] for r in Catalog(str(root)).segments(TOPIC, [0]).to_pylist()}
    assert run_compaction(
        LakeHandle.open(str(root)), CompactOptions(conf=COMPACT, now_ms=NOW)
    ).committed
    now = {r["path"] for r in Catalog(str(root)).segments(TOPIC, [0]).to_pylist()}
    assert names & now  # a segment kept its name
    hits = get_cache().stats()["hits"]
    pd.testing.assert_frame_equal(lk.lookup(q), want)  # the cached segments, version 1
    assert get_cache().stats()["hits"] > hits
    get_cache().clear()  # as a fresh process reads version 1
    pd.testing.assert_frame_equal(seglake.open(str(root), version=lk.version).lookup(q), want)
    cleanup(LakeHandle.open(str(root)), delete_delay_s=0)  # the retired copies deleted
    with pytest.raises(VersionSupersededError):  # the cached segments: their copies gone
        lk.lookup(q)
