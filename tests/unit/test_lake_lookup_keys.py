"""``Lake.lookup`` key queries (:mod:`seglake.lake.lookup_keys`) against a brute-force
answer from the decoded records: a transactional topic (aborts, markers) or the same
compacted (gaps), beside a partition with null keys whose first segment has no
``.keyindex`` (scanned); random keys (present, absent, null, duplicated), a partition
given, null (every partition) or unknown, mixed with offset queries; every match or
the latest per key."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seglake
from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.lake.catalog import Catalog
from seglake.lake.lookup_answer import KEY_LOOKUP_SCHEMA, LOOKUP_SCHEMA
from seglake.lake.rows import rows_table, segment_row
from seglake.record.reader import read_log
from seglake.storage.log import PartitionLog
from seglake.storage.recovery import recover_segment
from tests.unit.test_compact_rules import txn_lake
from tests.unit.test_lake_lookup import TOPIC, compacted_txn_lake


def _keyed_partition(root: Path, partition: int) -> None:
    """``TOPIC``-``partition``: keys k0..k19 (some null) in several segments, committed;
    the first segment's ``.keyindex`` removed (a segment the lookup must scan)."""
    rng = np.random.default_rng(partition)
    n = 400
    keys = [None if rng.random() < 0.1 else f"k{rng.integers(0, 20)}".encode() for _ in range(n)]
    recs = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n) * 10, pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([f"v{i}".encode() for i in range(n)], pa.binary()),
        }
    )
    d = root / f"{TOPIC}-{partition}"
    d.mkdir(parents=True)
    PartitionLog.open(str(d)).append(recs, config=LogConfig(segment_bytes=2000, batch_size=300))
    fs, _ = lakefs.resolve(str(root))
    logs = sorted(d.glob("*.log"))
    rows = [
        segment_row(
            TOPIC, partition, recover_segment(fs, str(p), interval=512), f"{d.name}/{p.name}"
        )
        for p in logs
    ]
    Catalog(str(root)).commit(rows_table(rows), "keyed")
    logs[0].with_suffix(".keyindex").unlink()


def _records(root: str, partition: int) -> tuple[np.ndarray, list[bytes | None]]:
    """Every data record of a partition (aborted ones too), decoded: offsets, keys."""
    offs, keys = [], []
    for r in Catalog(root).segments(TOPIC, [partition]).to_pylist():
        t = read_log((Path(root) / r["path"]).read_bytes())[0]
        offs += t.column("offset").to_pylist()
        keys += t.column("key").to_pylist()
    return np.array(offs), keys


@pytest.fixture(scope="module", params=["transactional", "compacted"])
def lake(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("keys") / "lake"
    if request.param == "compacted":
        compacted_txn_lake(root)
    else:
        txn_lake(root, seed=3, codec=3)
    _keyed_partition(root, 1)
    truth = {p: _records(str(root), p) for p in (0, 1)}
    assert any(k is None for k in truth[1][1])
    return seglake.open(str(root)), truth


def _expected(truth, queries: list[tuple[int | None, bytes | None]], latest: bool) -> list:
    """(status, partition, offset, query_key) rows of key queries, by brute force."""
    out = []
    for part, key in queries:
        if key is None:
            out.append(("invalid_query", part, None, None))
            continue
        asked = sorted(truth) if part is None else [part] if part in truth else []
        if not asked:
            out.append(("unknown_partition", part, None, key))
            continue
        rows = []
        for p in asked:
            offs, keys = truth[p]
            hit = [int(o) for o, k in zip(offs, keys, strict=True) if k == key]
            rows += [("ok", p, o, key) for o in (hit[-1:] if latest else hit)]
        out += rows or [("no_record_for_key", part, None, key)]
    return out


def _rows(out: pa.Table) -> list:
    cols = [out.column(c).to_pylist() for c in ("status", "partition", "offset", "query_key")]
    return list(zip(*cols, strict=True))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_key_queries_equal_brute_force(lake, data) -> None:
    lk, truth = lake
    present = sorted({k for p in truth for k in truth[p][1] if k is not None})
    key = st.one_of(st.sampled_from(present), st.sampled_from([b"absent", b"", None]))
    queries = data.draw(st.lists(st.tuples(st.sampled_from([0, 1, None, 7]), key), max_size=25))
    latest = data.draw(st.booleans())
    as_text = data.draw(st.booleans())  # keys given as strings: their UTF-8 bytes
    keys = [None if k is None else k.decode() if as_text else k for _, k in queries]
    q = pa.table(
        {
            "topic": [TOPIC] * len(queries),
            "partition": pa.array([p for p, _ in queries], pa.int32()),
            "key": pa.array(keys, pa.string() if as_text else pa.binary()),
        }
    )
    out = lk.lookup(q, latest_per_key=latest)
    assert out.schema == KEY_LOOKUP_SCHEMA
    assert _rows(out) == _expected(truth, queries, latest)
    ok = out.filter(pa.compute.equal(out.column("status"), "ok"))
    assert ok.column("key").to_pylist() == ok.column("query_key").to_pylist()


def test_key_and_offset_queries_mixed_answer_in_order(lake, caplog) -> None:
    """Offset queries beside key queries answer what they answer alone (one row each, in
    place); a key with an offset too is ``invalid_query``; the scanned segment is logged."""
    lk, truth = lake
    key = truth[1][1][5] or b"k1"
    offsets = [int(truth[0][0][3]), int(truth[1][0][7]), 10**9]
    alone = lk.lookup(
        pa.table(
            {"topic": [TOPIC] * 3, "partition": pa.array([0, 1, 0], pa.int32()), "offset": offsets}
        )
    )
    assert alone.schema == LOOKUP_SCHEMA  # no key column: the columns as before
    q = pa.table(
        {
            "topic": [TOPIC] * 5,
            "partition": pa.array([0, None, 1, 0, 1], pa.int32()),
            "offset": pa.array([offsets[0], None, offsets[1], offsets[2], 3], pa.int64()),
            "key": pa.array([None, key, None, None, key], pa.binary()),
        }
    )
    with caplog.at_level(logging.WARNING, logger="seglake.spark.lookup"):
        out = lk.lookup(q)
    assert "scanned" in caplog.text and ".keyindex: missing" in caplog.text
    rows = _rows(out)
    n_key = len(_expected(truth, [(None, key)], False))
    want_off = [
        (*r, None)
        for r in zip(
            *(alone[c].to_pylist() for c in ("status", "partition", "offset")), strict=True
        )
    ]
    assert rows[0] == want_off[0]
    assert rows[1 : 1 + n_key] == _expected(truth, [(None, key)], False)
    assert rows[1 + n_key :] == [*want_off[1:], ("invalid_query", 1, None, key)]
    same = out.slice(0, 1).select(LOOKUP_SCHEMA.names).cast(LOOKUP_SCHEMA)
    assert same.equals(alone.slice(0, 1))


def test_key_without_partition_column(lake) -> None:
    lk, truth = lake
    out = lk.lookup(pa.table({"topic": [TOPIC, "nope"], "key": ["k3", "k3"]}))
    assert _rows(out) == [
        *_expected(truth, [(None, b"k3")], False),
        ("unknown_partition", None, None, b"k3"),
    ]


def test_cli_lookup_answers_key_queries(lake, capsys, tmp_path: Path) -> None:
    """``seglake lookup --queries`` with a key column (``--latest-per-key``): the rows of
    ``Lake.lookup``, the key asked echoed (base64 in JSON)."""
    import base64
    import json

    from seglake.cli.main import main

    lk, truth = lake
    queries = tmp_path / "q.csv"
    queries.write_text(f"topic,partition,key\n{TOPIC},,k3\n{TOPIC},1,absent\n")
    for latest in (False, True):
        flag = ["--latest-per-key"] if latest else []
        assert main(["lookup", lk.root, "--json", "--queries", str(queries), *flag]) == 0
        got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        want = _expected(truth, [(None, b"k3"), (1, b"absent")], latest)
        assert [
            (g["status"], g["partition"], g.get("offset"), base64.b64decode(g["query_key"]))
            for g in got
        ] == want
    assert main(["lookup", lk.root, "--queries", str(queries)]) == 0
    assert f"{TOPIC}-1 key b'absent': no_record_for_key" in capsys.readouterr().out


def test_each_segment_is_asked_once_a_chunk(lake, monkeypatch) -> None:
    """Queries of a partition given and of every partition (null) share one
    ``find_keys_many`` call per partition (each of its segments asked once), all their
    keys at once."""
    from seglake.lake import lookup_keys

    lk, truth = lake
    calls: list[int] = []
    asked: list[int] = []
    find = lookup_keys.find_keys_many

    def counted(segs, keys):
        asked.append(len(segs))
        calls.append(len(keys))
        return find(segs, keys)

    monkeypatch.setattr(lookup_keys, "find_keys_many", counted)
    queries = [(0, b"k3"), (None, b"k3"), (1, b"k5"), (None, b"absent"), (1, b"k3")]
    q = pa.table(
        {
            "topic": [TOPIC] * len(queries),
            "partition": pa.array([p for p, _ in queries], pa.int32()),
            "key": pa.array([k for _, k in queries], pa.binary()),
        }
    )
    assert _rows(lk.lookup(q)) == _expected(truth, queries, False)
    segments = sum(len(lk.segments(TOPIC).query(f"partition == {p}")) for p in (0, 1))
    assert len(calls) == 2 and sum(asked) == segments and max(calls) == 3  # unique keys


def test_a_cached_segment_keeps_its_checked_key_index(tmp_path: Path, monkeypatch) -> None:
    """A key lookup reads and checks each ``.keyindex`` once per process (kept on the
    cached segment, weighed as its filter: the local exact level is memory-mapped); a
    segment without a usable one keeps nothing (scanned), and once ``seglake index
    build`` wrote it the next lookup uses it."""
    from seglake.lake.handle import LakeHandle
    from seglake.lake.key_build import build_key_indexes
    from seglake.storage import key_lookup
    from seglake.storage.index_cache import get_cache

    root = tmp_path / "lake"
    _keyed_partition(root, 1)
    lk = seglake.open(str(root))
    truth = {1: _records(str(root), 1)}
    queries = [(1, b"k3"), (1, b"k7")]
    q = pa.table({"topic": [TOPIC] * 2, "partition": [1, 1], "key": [k for _, k in queries]})
    loads: list[str] = []
    load = key_lookup.load_key_index
    monkeypatch.setattr(
        key_lookup, "load_key_index", lambda seg, *a: loads.append(seg.log_path) or load(seg, *a)
    )
    get_cache().clear()
    segments = len(lk.segments(TOPIC))
    assert _rows(lk.lookup(q)) == _expected(truth, queries, False)
    assert len(loads) == segments  # each once, the first (no .keyindex) among them
    before = get_cache().bytes
    loads.clear()
    assert _rows(lk.lookup(q)) == _expected(truth, queries, False)
    assert len(loads) == 1  # only the one without: looked for again
    assert get_cache().bytes == before
    kept = [s for s, _ in get_cache()._entries.values() if not isinstance(s.key_index, str)]
    assert len(kept) == segments - 1
    assert all(key_lookup.key_index_bytes(s) == s.key_index.filter.words.nbytes for s in kept)
    build_key_indexes(LakeHandle.open(str(root)))
    loads.clear()
    assert _rows(lk.lookup(q)) == _expected(truth, queries, False)
    assert len(loads) == 1 and get_cache().bytes > before  # read, kept, weighed
    loads.clear()
    assert _rows(lk.lookup(q)) == _expected(truth, queries, False)
    assert loads == []


def test_integer_keys_are_their_big_endian_bytes(tmp_path: Path) -> None:
    """A ``key`` column of integers asks the keys Kafka's Short/Integer/LongSerializer
    write: the big-endian two's complement bytes at the column's width (the Spark job's
    rule, ``int_key_sql``); a null is ``invalid_query``; a float column is one line."""
    import struct

    from seglake.errors import InputSchemaError
    from seglake.lake.lookup_queries import query_table

    ints = [-1, 0, 7, 300, -40000, 2**31 - 1]
    fmts = {pa.int8(): ">b", pa.int16(): ">h", pa.int32(): ">i", pa.int64(): ">q"}
    for t, fmt in fmts.items():
        vals = [v for v in ints if -(2 ** (t.bit_width - 1)) <= v < 2 ** (t.bit_width - 1)]
        got = query_table(
            pa.table({"topic": ["x"] * (len(vals) + 1), "key": pa.array([*vals, None], t)})
        )
        assert got.column("query_key").to_pylist() == [*(struct.pack(fmt, v) for v in vals), None]
    assert query_table(pa.table({"topic": ["x"], "key": pa.array([255], pa.uint8())}))[
        "query_key"
    ].to_pylist() == [b"\xff"]
    root = tmp_path / "lake"
    keys = [struct.pack(">i", i % 5 - 2) for i in range(40)] + [struct.pack(">q", 3)] * 2
    recs = pa.table(
        {
            "offset": pa.array(np.arange(len(keys)), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(len(keys)), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([b"v"] * len(keys), pa.binary()),
        }
    )
    d = root / f"{TOPIC}-0"
    d.mkdir(parents=True)
    PartitionLog.open(str(d)).append(recs, config=LogConfig(segment_bytes=500))
    fs, _ = lakefs.resolve(str(root))
    rows = [
        segment_row(TOPIC, 0, recover_segment(fs, str(p), interval=64), f"{d.name}/{p.name}")
        for p in sorted(d.glob("*.log"))
    ]
    Catalog(str(root)).commit(rows_table(rows), "ints")
    lk = seglake.open(str(root))
    q = pd.DataFrame({"topic": TOPIC, "key": pd.array([-2, None], "Int32")})
    out = lk.lookup(q)
    assert out["offset"].tolist()[:-1] == list(range(0, 40, 5))
    assert out["status"].tolist()[-1] == "invalid_query"
    longs = lk.lookup(pd.DataFrame({"topic": [TOPIC], "key": [3]}))  # pandas int64: 8 bytes
    assert longs["offset"].tolist() == [40, 41]
    with pytest.raises(InputSchemaError, match="key column of type double; expected a string"):
        lk.lookup(pd.DataFrame({"topic": [TOPIC], "key": [1.5]}))
