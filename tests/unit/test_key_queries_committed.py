"""Key queries everywhere a user asks them without Spark (``Lake.lookup``, every record
and the latest per key; ``Lake.find``; ``seglake consume --key``), under both isolation
levels, against a brute force: every ``.log`` of the lake decoded whole, filtered by key
bytes, the records of aborted transactions dropped under read_committed (the generator's
truth, not any ``.txnindex``).

The lakes are drawn at random from a few: topic ``c``, partition 0 a transactional log
(three producers, interleaved commits and aborts, non-transactional batches, null and
repeated keys; ``tests/txn_log.py``), partition 1 non-transactional keys with nulls whose
first segment has no ``.keyindex`` (scanned); as written, or after seglake's compaction
(older records of a key and aborted transactions removed from the first half, the
records older than ``min.compaction.lag.ms``: offset gaps, markers kept or removed by
their delete horizon; the second half's aborted transactions kept).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seglake
from seglake.cli.main import main
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_answer import KEY_LOOKUP_SCHEMA
from seglake.record.reader import read_log
from tests.unit.test_compact_rules import COMPACT, NOW, txn_lake
from tests.unit.test_lake_lookup import TOPIC
from tests.unit.test_lake_lookup_keys import _keyed_partition

# (compacted, seed, codec): codec 0 none, 3 lz4
LAKES = [(False, 3, 3), (False, 11, 0), (True, 3, 3), (True, 7, 0)]
LEVELS = ("read_uncommitted", "read_committed")
START_MS = 1_700_000_000_000  # the first record's time (tests/txn_log.py, _keyed_partition)


class Brute:
    """A lake's data records decoded whole, per partition, in offset order:
    ``(offset, timestamp, key, value, aborted)``."""

    def __init__(self, root: str, aborted: set[int]) -> None:
        self.root = root
        self.parts: dict[int, list[tuple[int, int, bytes | None, bytes | None, bool]]] = {}
        for p in (0, 1):
            rows = []
            for r in Catalog(root).segments(TOPIC, [p]).to_pylist():
                t = read_log((Path(root) / r["path"]).read_bytes())[0]
                cols = [t.column(c).to_pylist() for c in ("offset", "timestamp", "key", "value")]
                rows += [(*x, p == 0 and x[0] in aborted) for x in zip(*cols, strict=True)]
            self.parts[p] = rows

    def records(
        self,
        p: int,
        keys: set[bytes],
        level: str,
        lo: int | None = None,
        hi: int | None = None,
    ) -> list[tuple[int, int, bytes | None, bytes | None, bool]]:
        """The records of partition ``p`` with one of ``keys``, read at ``level``, with
        ``lo <= timestamp < hi``."""
        return [
            r
            for r in self.parts[p]
            if r[2] in keys
            and not (level == "read_committed" and r[4])
            and (lo is None or r[1] >= lo)
            and (hi is None or r[1] < hi)
        ]

    def lookup(self, queries: list[tuple[int | None, bytes | None]], latest: bool, level: str):
        """(status, partition, offset, query_key) rows of key queries."""
        out: list[tuple[str, int | None, int | None, bytes | None]] = []
        for part, key in queries:
            if key is None:
                out.append(("invalid_query", part, None, None))
                continue
            asked = sorted(self.parts) if part is None else [part] if part in self.parts else []
            if not asked:
                out.append(("unknown_partition", part, None, key))
                continue
            rows = []
            for p in asked:
                hit = [r[0] for r in self.records(p, {key}, level)]
                rows += [("ok", p, o, key) for o in (hit[-1:] if latest else hit)]
            out += rows or [("no_record_for_key", part, None, key)]
        return out


@pytest.fixture(scope="module")
def lakes(tmp_path_factory):
    """The lakes of :data:`LAKES`, each built on first use: (root, brute force)."""
    built: dict[tuple[bool, int, int], tuple[str, Brute]] = {}

    def get(which: tuple[bool, int, int]) -> tuple[str, Brute]:
        if which not in built:
            compacted, seed, codec = which
            root = tmp_path_factory.mktemp("keytxn") / "lake"
            truth = txn_lake(root, seed=seed, codec=codec)
            _keyed_partition(root, 1)
            if compacted:
                # the records of the first 4 s (about half) cleanable: the rest keeps
                # its aborted transactions for read_committed to drop
                lag = NOW - START_MS - 4000
                conf = {**COMPACT, "segment.bytes": "3000", "min.compaction.lag.ms": str(lag)}
                assert run_compaction(
                    LakeHandle.open(str(root)), CompactOptions(conf=conf, now_ms=NOW)
                ).committed
            aborted = set(truth.loc[truth["aborted"], "offset"].tolist())
            built[which] = str(root), Brute(str(root), aborted)
        return built[which]

    return get


def _keys(brute: Brute) -> list[bytes]:
    return sorted({r[2] for p in brute.parts for r in brute.parts[p] if r[2] is not None})


@st.composite
def key_queries(draw: Any, present: list[bytes]) -> list[tuple[int | None, bytes | None]]:
    key = st.one_of(st.sampled_from(present), st.sampled_from([b"absent", b"", None]))
    return draw(st.lists(st.tuples(st.sampled_from([0, 1, None, 7]), key), max_size=20))


def _last_aborted(brute: Brute) -> list[bytes]:
    """Keys of partition 0 whose last record is aborted."""
    last = {r[2]: r for r in brute.parts[0] if r[2] is not None}
    return sorted(k for k, r in last.items() if r[4])


def _rows(out: pa.Table) -> list:
    cols = [out.column(c).to_pylist() for c in ("status", "partition", "offset", "query_key")]
    return list(zip(*cols, strict=True))


def test_the_lakes_hold_what_the_properties_need(lakes) -> None:
    """Aborted records with keys, keys that are only aborted, null keys, repeated keys,
    compaction gaps: the properties below are about something."""
    for which in LAKES:
        _, brute = lakes(which)
        p0 = brute.parts[0]
        assert any(r[4] and r[2] is not None for r in p0)
        assert any(r[2] is None for p in (0, 1) for r in brute.parts[p])
        offs = [r[0] for r in p0]
        keys = [r[2] for r in p0 if r[2] is not None]
        assert len(set(keys)) < len(keys)  # repeats
        assert _last_aborted(brute)  # read_committed's latest per key is another record
        if which[0]:
            assert offs[-1] - offs[0] + 1 > len(offs)  # gaps


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_lookup_key_queries_equal_brute_force(lakes, data) -> None:
    """``Lake.lookup`` key queries (every record, or the latest per key: the latest
    committed one under read_committed) equal the brute force at either level."""
    root, brute = lakes(data.draw(st.sampled_from(LAKES)))
    queries = data.draw(key_queries(_keys(brute)))
    latest, level = data.draw(st.booleans()), data.draw(st.sampled_from(LEVELS))
    q = pa.table(
        {
            "topic": [TOPIC] * len(queries),
            "partition": pa.array([p for p, _ in queries], pa.int32()),
            "key": pa.array([k for _, k in queries], pa.binary()),
        }
    )
    out = seglake.open(root).lookup(q, latest_per_key=latest, isolation_level=level)
    assert out.schema == KEY_LOOKUP_SCHEMA
    assert _rows(out) == brute.lookup(queries, latest, level)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_find_equals_brute_force(lakes, data) -> None:
    """``Lake.find`` (one key or many, a time range or not) equals the brute force at
    either level: partition, offset, key and value of every record, in order."""
    root, brute = lakes(data.draw(st.sampled_from(LAKES)))
    asked = data.draw(st.lists(st.sampled_from([*_keys(brute), b"absent", None]), max_size=6))
    level = data.draw(st.sampled_from(LEVELS))
    ts = sorted(r[1] for p in brute.parts for r in brute.parts[p])
    lo, hi = None, None
    if data.draw(st.booleans()):
        lo, hi = sorted(data.draw(st.lists(st.sampled_from(ts), min_size=2, max_size=2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partition 1's first segment: scanned
        got = seglake.open(root).find(TOPIC, asked, lo, hi, as_="arrow", isolation_level=level)
    want = [
        (p, r[0], r[2], r[3])
        for p in (0, 1)
        for r in brute.records(p, {k for k in asked if k is not None}, level, lo, hi)
    ]
    cols = [got.column(c).to_pylist() for c in ("partition", "offset", "key", "value")]
    assert list(zip(*cols, strict=True)) == want


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_consume_key_equals_brute_force(lakes, data, capsysbinary) -> None:
    """``seglake consume --key K ... --isolation-level L`` (the CLI's main, stdout
    captured) prints the brute force's records, each partition in offset order."""
    root, brute = lakes(data.draw(st.sampled_from(LAKES)))
    asked = data.draw(st.lists(st.sampled_from([*_keys(brute), b"absent"]), min_size=1, max_size=4))
    level = data.draw(st.sampled_from(LEVELS))
    argv = ["consume", root, "--topic", TOPIC, "--isolation-level", level]
    argv += ["--formatter", r"%p %o %k\n"] + [a for k in asked for a in ("--key", k.decode())]
    capsysbinary.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(argv) == 0
    got = [tuple(line.split(b" ", 2)) for line in capsysbinary.readouterr().out.splitlines()]
    want = [
        (str(p).encode(), str(r[0]).encode(), r[2])
        for p in (0, 1)
        for r in brute.records(p, set(asked), level)
    ]
    assert sorted(got, key=lambda x: int(x[0])) == want  # partition by partition, in order


def test_isolation_level_refused_by_name(lakes) -> None:
    root, _ = lakes(LAKES[0])
    lake = seglake.open(root)
    with pytest.raises(ConfigError, match="isolation_level: 'committed' is not one of"):
        lake.find(TOPIC, "k1", isolation_level="committed")
    with pytest.raises(ConfigError, match="isolation_level: 'read-committed'"):
        lake.lookup(pa.table({"topic": [TOPIC], "key": ["k1"]}), isolation_level="read-committed")


def test_cli_lookup_isolation_level(lakes, capsys, tmp_path: Path) -> None:
    """``seglake lookup --queries F --latest-per-key --isolation-level L``: a key whose
    last record aborted answers it under read_uncommitted, the last committed one (or
    none) under read_committed."""
    root, brute = lakes(LAKES[0])
    key = _last_aborted(brute)[0]
    queries = tmp_path / "q.csv"
    queries.write_text(f"topic,partition,key\n{TOPIC},0,{key.decode()}\n")
    got = {}
    for level in LEVELS:
        argv = ["lookup", root, "--queries", str(queries), "--latest-per-key"]
        assert main([*argv, "--isolation-level", level]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        got[level] = line
        want = brute.lookup([(0, key)], True, level)[0]
        assert line.startswith(f"{TOPIC}-0 key {key!r}: {want[0]}")
        assert want[2] is None or f" offset: {want[2]} " in line
    assert got["read_committed"] != got["read_uncommitted"]


def test_committed_reads_txnindex_only_for_transactional_matches(lakes, monkeypatch) -> None:
    """Under read_committed a key query reads ``.txnindex`` files only where its
    matches hold a transactional record (a partition without transactions pays none)."""
    from seglake.lake import lookup_keys

    root, brute = lakes(LAKES[0])
    calls: list[int] = []
    real = lookup_keys.aborted_in
    monkeypatch.setattr(
        lookup_keys, "aborted_in", lambda segs, lo, hi: calls.append(lo) or real(segs, lo, hi)
    )
    key = next(r[2] for r in brute.parts[1] if r[2] is not None)
    q = pa.table({"topic": [TOPIC], "partition": pa.array([1], pa.int32()), "key": [key]})
    seglake.open(root).lookup(q, isolation_level="read_committed")
    assert calls == []
    tx = next(r for r in brute.parts[0] if r[4] and r[2] is not None)
    q = pa.table({"topic": [TOPIC], "partition": pa.array([0], pa.int32()), "key": [tx[2]]})
    seglake.open(root).lookup(q, isolation_level="read_committed")
    assert len(calls) == 1 and calls[0] <= tx[0]


def test_cli_lookup_key_flags(lakes, capsys) -> None:
    """``seglake lookup LAKE --topic T [--partition P] --key K ...`` (beside ``--offset``):
    the rows of the same queries given as a file, at either level; a --key without a
    topic, or a topic without a key, is one line (exit 2)."""
    import base64
    import json

    root, brute = lakes(LAKES[2])
    key = _last_aborted(brute)[0]
    for level, part in [("read_uncommitted", None), ("read_committed", None), (LEVELS[1], 0)]:
        argv = ["lookup", root, "--json", "--topic", TOPIC, "--key", key.decode()]
        argv += ["--key", "absent", "--offset", f"{TOPIC}:1:3", "--isolation-level", level]
        argv += [] if part is None else ["--partition", str(part)]
        assert main(argv) == 0
        got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert (got[0]["query_offset"], got[0]["query_key"]) == (3, None)
        want = brute.lookup([(part, key), (part, b"absent")], False, level)
        assert [
            (g["status"], g["partition"], g.get("offset"), base64.b64decode(g["query_key"]))
            for g in got[1:]
        ] == want
    for argv, line in [
        (["--key", "k1"], "--key k1: which topic? (give --topic)"),
        (["--topic", TOPIC, "--offset", f"{TOPIC}:0:1"], "no --key given"),
    ]:
        assert main(["lookup", root, *argv]) == 2
        assert line in capsys.readouterr().err


def test_the_lookup_job_takes_an_isolation_level(capsys) -> None:
    """``./spark-submit.sh lookup ... --isolation-level L`` (the job's parser, checked
    before Spark): read_uncommitted by default, Kafka's two names only."""
    from seglake.cli.jobargs import PARSERS

    base = ["--root", "/data/lake", "--queries", "q.csv", "--output", "out"]
    assert PARSERS["lookup"]().parse_args(base).isolation_level == "read_uncommitted"
    args = PARSERS["lookup"]().parse_args([*base, "--isolation-level", "read_committed"])
    assert args.isolation_level == "read_committed"
    with pytest.raises(SystemExit):
        PARSERS["lookup"]().parse_args([*base, "--isolation-level", "committed"])
    assert "--isolation-level" in capsys.readouterr().err
