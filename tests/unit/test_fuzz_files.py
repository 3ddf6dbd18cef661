"""Fuzzing every file kind seglake reads, through the entry points users hit: a partition
directory's ``.log`` / ``.index`` / ``.timeindex`` / ``.txnindex`` (``PartitionLog`` reads,
recovery, ``seglake dump``; the same files in a lake: notebook reads, ``recover_lake``; a
broker directory under ``register``), a broker's producer-state ``.snapshot``, a KRaft
``.checkpoint`` and the internal topics' logs (``dump``'s decoders), ``_retired/``
manifests (``lake/garbage.py``), stored topic configs (catalog table properties, JSON),
``.properties`` files and catalog rows with hostile values (``lake/rows.py``, segments
opened from rows, rows appended to the Delta table past the checks).

Contract, each input: a result or one :class:`SeglakeError` line; no other exception, no
hang (a 20 s alarm), memory bounded (each example runs under ``RLIMIT_AS`` 1.5 GiB above
the process's size at its start: a ``MemoryError`` is a failure). Inputs are random bytes
and mutations of valid files (:func:`tests.unit.test_fuzz.mutated_logs`: bit flips,
truncations, forged length/count/int fields, zero tails), with CRCs fixed up after the
mutation half of the time so the fuzzer reaches past the checksum.

seglake reads no ``leader-epoch-checkpoint``, ``partition.metadata`` or
``replication-offset-checkpoint`` (``register`` copies segment files only): not fuzzed.

SEGLAKE_FUZZ_EXAMPLES (default 300, ``make fuzz``: 20000) / 10 examples per target (/ 30
for the Delta commits)."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake.exceptions import DeltaError
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

import seglake
import tests.unit.test_fuzz as fuzz
from seglake import fs as lakefs
from seglake import lake_paths
from seglake.cli.dump import dump
from seglake.config import LogConfig
from seglake.errors import CorruptRecordError, SeglakeError
from seglake.lake import garbage
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import (
    catalog_schema,
    check_rows,
    normalize_rows,
    rows_table,
    segment_refs,
)
from seglake.lake.topic_config import with_topics
from seglake.lake.topic_store import DEFAULTS_KEY, TOPIC_PREFIX, _stored
from seglake.record.batch import HEADER_SIZE
from seglake.record.crc import crc32c
from seglake.record.schema import HEADERS_TYPE
from seglake.storage.log import PartitionLog
from seglake.storage.producer_snapshot import read_producer_snapshot
from seglake.storage.recovery import recover_partition
from seglake.storage.stats import segment_row
from seglake.storage.txn_index import AbortedTxn, TransactionIndex
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_fuzz import EXAMPLES, FUZZ, limited, mutated_logs, valid_log

pytestmark = pytest.mark.filterwarnings("ignore::seglake.errors.CorruptBatchWarning")
FILE_FUZZ = settings(FUZZ, max_examples=max(10, EXAMPLES // 10), deadline=None)
DELTA_FUZZ = settings(FUZZ, max_examples=max(5, EXAMPLES // 30), deadline=None)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn``'s result, or ``None`` for a one-line SeglakeError; anything else (a
    ``MemoryError`` included) fails the example."""
    with limited():
        try:
            return fn(*args, **kwargs)
        except SeglakeError as exc:
            assert "\n" not in str(exc), f"a {type(exc).__name__} of many lines: {exc}"
            return None


# ------------------------------------------------------------------ seeds and mutations


def fix_crcs(buf: bytes) -> bytes:
    """``buf`` with each batch's CRC-32C recomputed (batches found by their length
    fields), so mutations of the header and records reach the decoders."""
    out = bytearray(buf)
    pos = 0
    while pos + HEADER_SIZE <= len(out):
        (length,) = struct.unpack_from(">i", out, pos + 8)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(out):
            break
        struct.pack_into(">I", out, pos + 17, crc32c(out[pos + 21 : end]))
        pos = end
    return bytes(out)


def fix_snapshot_crc(buf: bytes) -> bytes:
    """A producer snapshot with its CRC-32C (bytes 2..6, over what follows) recomputed."""
    if len(buf) < 6:
        return buf
    return buf[:2] + struct.pack(">I", crc32c(buf[6:])) + buf[6:]


def inputs(seed: bytes, fix: Callable[[bytes], bytes] = fix_crcs) -> st.SearchStrategy[bytes]:
    """Random bytes, or mutations of ``seed`` (half of them with checksums fixed)."""
    mutated = st.tuples(mutated_logs(seed), st.booleans()).map(
        lambda m: fix(m[0]) if m[1] else m[0]
    )
    return st.one_of(st.binary(max_size=len(seed) + 64), mutated, mutated)


N = 120
TS0 = 1_700_000_000_000


_ROWS: dict[str, dict[str, Any]] = {}  # the seed segment's catalog row, by codec


@cache
def seed_partition(codec: str = "lz4") -> dict[str, bytes]:
    """One segment's files as seglake writes them (``codec`` batches, indexes every 200
    bytes; every fourth record with headers) and a ``.txnindex`` of two aborted
    transactions."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "t-0"
        d.mkdir()
        records = pa.table(
            {
                "offset": pa.array(np.arange(N), pa.int64()),
                "timestamp": pa.array(TS0 + np.arange(N) * 10, pa.int64()),
                "key": pa.array([f"k{i}".encode() for i in range(N)], pa.binary()),
                "value": pa.array([b"v" * (i % 30) for i in range(N)], pa.binary()),
                "headers": pa.array(
                    [[{"key": "h", "value": b"x" * (i % 5)}] * (i % 4 == 0) for i in range(N)],
                    HEADERS_TYPE,
                ),
            }
        )
        config = LogConfig(batch_size=300, index_interval_bytes=200, compression_type=codec)
        (info,) = PartitionLog.open(str(d), index_interval_bytes=200).append(records, config=config)
        _ROWS[codec] = segment_row("t", 0, info, f"t-0/{0:020d}.log")
        files = {p.suffix: p.read_bytes() for p in d.iterdir()}
    txn = TransactionIndex(base_offset=0)
    txn.append(AbortedTxn(7, 10, 20, 5))
    txn.append(AbortedTxn(8, 30, 45, 25))
    files[".txnindex"] = txn.to_bytes()
    return files


def fixture_bytes(partition: str, name: str, limit: int | None = None) -> bytes | None:
    """A broker fixture's file (its first ``limit`` bytes cut at a batch end)."""
    path = FIXTURES / partition / name
    if not path.exists():
        return None
    data = path.read_bytes()
    if limit is None:
        return data
    pos = 0
    while pos + 12 <= len(data):
        end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if end > limit:
            break
        pos = end
    return data[:pos]


# ------------------------------------------------------------------ partition directories


def write_partition(d: Path, replaced: dict[str, bytes] | None = None, codec: str = "lz4") -> None:
    """The seed segment's files in a new directory ``d``, some replaced by other bytes."""
    d.mkdir()
    for suffix, seed in seed_partition(codec).items():
        (d / f"{0:020d}{suffix}").write_bytes((replaced or {}).get(suffix, seed))


SUFFIXES = [".log", ".index", ".timeindex", ".txnindex"]


def read_partition(d: Path) -> None:
    """What ``read``, ``offsets``, ``offset-for-time``, ``dump`` and ``recover`` do with a
    partition directory, then a read of what recovery left."""
    sink = io.StringIO()
    files = sorted(str(p) for p in d.iterdir())
    for kwargs in ({"deep": True, "print_data": True, "sanity": True}, {"verify_only": True}):
        outcome(dump, files, out=sink, err=sink, **kwargs)
    outcome(dump, files, deep=True, as_json=True, out=sink, err=sink)
    for on_corrupt in ("raise", "skip"):
        log = outcome(PartitionLog.open, str(d), on_corrupt=on_corrupt)
        if log is None:
            continue
        for offset in (0, 5, 60, N - 1):
            outcome(log.read, offset, 50, skip_control=False)
        for ts in (0, TS0 + 333, TS0 + 10 * N, -1, -2):
            outcome(log.offsets_for_times, ts)
        for seg in log.segments:
            txn = outcome(lambda s=seg: s.txn_index)
            if txn is not None:
                outcome(txn.collect_aborted, 0, 2**62)
                outcome(txn.sanity_check)
    outcome(recover_partition, str(d), dry_run=True)
    outcome(recover_partition, str(d))
    log = outcome(PartitionLog.open, str(d))
    if log is not None:
        outcome(log.read, 0, N, skip_control=False)


@pytest.mark.parametrize(
    "suffix,codec", [(".log", "none"), (".log", "lz4")] + [(s, "lz4") for s in SUFFIXES[1:]]
)
def test_partition_dir_files(tmp_path_factory, suffix: str, codec: str) -> None:
    """One file of a valid partition directory replaced by fuzzed bytes (uncompressed
    batches: the record and header decoders see the damage; lz4: the codec does)."""

    @FILE_FUZZ
    @given(inputs(seed_partition(codec)[suffix]))
    def run(data: bytes) -> None:
        d = tmp_path_factory.mktemp("fz") / "t-0"
        write_partition(d, {suffix: data}, codec)
        read_partition(d)

    run()


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_partition_dir_seeds_read(tmp_path: Path, codec: str) -> None:
    """The seeds are valid: the fuzzer starts from files that read whole."""
    write_partition(tmp_path / "t-0", codec=codec)
    records = PartitionLog.open(str(tmp_path / "t-0")).read(0, 2 * N, skip_control=False)
    assert records.column("offset").to_pylist() == list(range(N))
    assert sum(len(h) for h in records.column("headers").to_pylist()) == N // 4
    assert len(TransactionIndex.from_bytes(seed_partition(codec)[".txnindex"], 0)) == 2


# ------------------------------------------------------------------ dumps of broker files


def snapshot_seed() -> bytes:
    seed = fixture_bytes("sensor-data-0", "00000000000000000010.snapshot")
    if seed is not None:
        return seed
    entry = struct.pack(">qhiqiqiq", 1000, 0, 9, 9, 9, TS0, -1, -1)
    body = struct.pack(">i", 1) + entry
    return struct.pack(">hI", 1, crc32c(body)) + body


@FILE_FUZZ
@given(inputs(snapshot_seed(), fix_snapshot_crc))
def test_producer_snapshot(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fz") / f"{10:020d}.snapshot"
    path.write_bytes(data)
    outcome(read_producer_snapshot, data, path=str(path))
    for as_json in (False, True):
        outcome(dump, [str(path)], as_json=as_json, out=io.StringIO(), err=io.StringIO())


INTERNAL_LOGS = {  # (fixture partition, file name given, dump decoder)
    "consumer offsets": ("__consumer_offsets-0", f"{0:020d}.log", "offsets"),
    "cluster metadata checkpoint": (
        "__cluster_metadata-0",
        f"{100:020d}-{3:010d}.checkpoint",
        "cluster-metadata",
    ),
    "transaction log": ("first-0", f"{0:020d}.log", "transaction-log"),
}


@pytest.mark.parametrize("name", sorted(INTERNAL_LOGS))
def test_dump_decoders(tmp_path_factory, name: str) -> None:
    """``dump``'s decoders of the internal topics (and KRaft snapshots) on fuzzed logs."""
    partition, file_name, decoder = INTERNAL_LOGS[name]
    seed = fixture_bytes(partition, f"{0:020d}.log", limit=6000)
    if not seed:
        pytest.skip(f"broker fixtures not found at {FIXTURES}")

    @FILE_FUZZ
    @given(inputs(seed))
    def run(data: bytes) -> None:
        path = tmp_path_factory.mktemp("fz") / file_name
        path.write_bytes(data)
        for as_json in (False, True):
            outcome(
                dump,
                [str(path)],
                decoder=decoder,
                as_json=as_json,
                out=io.StringIO(),
                err=io.StringIO(),
            )

    run()


# ------------------------------------------------------------------ JSON the lake keeps

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def json_inputs(seed: dict, keys: list[str]) -> st.SearchStrategy[bytes]:
    """Mutated JSON text of ``seed``, ``seed`` with values of any JSON type, any JSON."""
    text = json.dumps(seed).encode()
    reshaped = st.fixed_dictionaries({}, optional={k: json_values for k in keys}).map(
        lambda m: json.dumps({**seed, **m}).encode()
    )
    anything = json_values.map(lambda v: json.dumps(v).encode())
    return st.one_of(mutated_logs(text), reshaped, anything)


MANIFEST = {
    "version": 3,
    "retired_at_ms": 0,
    "operation": "retention",
    "run_id": "r1",
    "paths": ["t-0/00000000000000000000.log", "t-0/00000000000000000000.index"],
}


@FILE_FUZZ
@given(json_inputs(MANIFEST, list(MANIFEST)))
@example(b'{"version": 3, "paths": []}')  # on main before wt/paths: KeyError
@example(b"null")  # AttributeError
@example(b'{"retired_at_ms": 0, "paths": 7}')  # TypeError
def test_retired_manifests(tmp_path_factory, data: bytes) -> None:
    """``cleanup`` and ``retention`` read every manifest (dry run: nothing deleted)."""
    root = tmp_path_factory.mktemp("lake")
    (root / "t-0").mkdir()
    (root / "t-0" / f"{0:020d}.log").write_bytes(b"x")
    (root / lake_paths.RETIRED_DIR).mkdir()
    (root / lake_paths.RETIRED_DIR / f"{3:020d}-000000000000.json").write_bytes(data)
    outcome(garbage.retired_paths, LakeHandle.open(str(root)))
    outcome(
        garbage.collect, LakeHandle.open(str(root)), older_than_ms=0, dry_run=True, in_use=set()
    )


TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "60000", "segment.bytes": "4096"}


@FILE_FUZZ
@given(json_inputs(TOPIC_CONFIG, list(TOPIC_CONFIG)), st.booleans())
@example(b'{"retention.ms": "6', False)  # on main before wt/metadata: JSONDecodeError
@example(b"[1]", True)  # TypeError
def test_stored_topic_configs(data: bytes, lake_wide: bool) -> None:
    """A catalog table property as ``config``, ``ingest`` and ``retention`` read it."""
    key = DEFAULTS_KEY if lake_wide else TOPIC_PREFIX + "t"
    own = outcome(_stored, key, data.decode("utf-8", "replace"), "catalog version 3")
    if own is not None:
        config = outcome(with_topics, LogConfig(), {None if lake_wide else "t": own})
        if config is not None:
            outcome(config.for_topic, "t")


def test_deeply_nested_topic_config_is_one_line() -> None:
    """200k levels of JSON in a stored config: one line, no RecursionError."""
    with pytest.raises(SeglakeError):
        _stored(TOPIC_PREFIX + "t", "[" * 200_000 + "]" * 200_000, "catalog version 3")


# ------------------------------------------------------------------ .properties files


@cache
def properties_seed() -> bytes:
    return (ROOT / "conf" / "seglake.properties").read_bytes()[:1500]


@FILE_FUZZ
@given(inputs(properties_seed(), lambda b: b))
def test_properties_files(tmp_path_factory, data: bytes) -> None:
    """``--conf-file``: a ``.properties`` file read and its settings applied."""
    path = tmp_path_factory.mktemp("fz") / "seglake.properties"
    path.write_bytes(data)
    outcome(LogConfig.load, path)


# ------------------------------------------------------------------ catalog rows

INT64 = st.one_of(
    st.sampled_from([0, 1, -1, N, N - 1, 2**31, 2**62, 2**63 - 1, -(2**63)]),
    st.integers(-(2**63), 2**63 - 1),
)
INT32 = st.one_of(
    st.sampled_from([0, -1, 1, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1)
)
NAMES = st.one_of(
    st.sampled_from(["t", "..", ".", "t-0", "a/b", "", "x" * 300, "%2e%2e", "t\n0"]), st.text()
)


def seed_row(codec: str = "lz4") -> dict[str, Any]:
    """The seed segment's catalog row."""
    seed_partition(codec)
    return dict(_ROWS[codec])


@st.composite
def catalog_rows(draw) -> dict[str, Any]:
    """A catalog row of the seed segment's partition, any field made hostile."""
    row = seed_row()
    hostile = {
        "topic": NAMES,
        "partition": INT32,
        "base_offset": INT64,
        "next_offset": INT64,
        "record_count": INT64,
        "min_timestamp": INT64,
        "max_timestamp": INT64,
        "size_bytes": st.one_of(
            st.sampled_from([0, 1, 61, row["size_bytes"] - 1, row["size_bytes"] + 1]), INT64
        ),
        "index_entries": INT32,
        "time_index_entries": INT32,
        "codec": NAMES,
        "path": st.one_of(NAMES, st.just(f"t-0/{0:020d}.log")),
        "index_interval_bytes": INT32,
    }
    for name in draw(st.lists(st.sampled_from(sorted(hostile)), min_size=1, max_size=3)):
        row[name] = draw(hostile[name])
    return row


@FILE_FUZZ
@given(catalog_rows(), st.sampled_from(["run-1", "../x", "", "a/b"]))
def test_catalog_rows(tmp_path_factory, row: dict[str, Any], run_id: str) -> None:
    """Rows checked as every catalog read checks them; a row that passes is opened and
    read as a reader of that catalog version would."""
    root = tmp_path_factory.mktemp("lake")
    write_partition(root / "t-0")
    table = outcome(rows_table, [row])
    if table is None:
        return
    outcome(check_rows, table, reading="catalog version 1")
    if not _passes(table):
        return
    outcome(normalize_rows, table, "run-1", dt.datetime.now(dt.UTC))
    refs = outcome(segment_refs, [{**row, "run_id": run_id}])
    if not refs:
        return
    fs, base = lakefs.resolve(str(root))
    log = outcome(PartitionLog.from_refs, fs, base, refs)
    if log is not None:
        outcome(log.read, max(row["base_offset"], 0), 50)
        outcome(log.offsets_for_times, TS0 + 100)


def _passes(table: pa.Table) -> bool:
    try:
        check_rows(table)
    except SeglakeError:
        return False
    return True


@DELTA_FUZZ
@given(st.lists(catalog_rows(), min_size=1, max_size=2))
def test_delta_rows(tmp_path_factory, rows: list[dict[str, Any]]) -> None:
    """Rows of any value appended to the catalog's Delta table past seglake's checks (a
    hand edit, another writer), then read by the notebook API as a user would."""
    from deltalake import write_deltalake

    root = tmp_path_factory.mktemp("fz") / "lake"
    shutil.copytree(lake_of(tmp_path_factory, "lz4"), root)
    now = dt.datetime.now(dt.UTC)
    table = pa.Table.from_pylist(
        [{**r, "run_id": "evil", "committed_at": now} for r in rows], schema=catalog_schema()
    )
    try:
        write_deltalake(Catalog(str(root)).uri, table, mode="append")
    except (ValueError, OSError, DeltaError):  # no Delta table holds them (an empty or
        reject()  # 300-character partition value: topic is the table's partition column)
    read_lake(root)


@DELTA_FUZZ
@given(st.sampled_from(SUFFIXES), st.sampled_from(["none", "lz4"]), st.data())
def test_lake_files(tmp_path_factory, suffix: str, codec: str, data: st.DataObject) -> None:
    """A damaged disk under a lake: one committed segment's file fuzzed, then read by the
    notebook API (the catalog's sizes: no torn tails), recovered by ``recover`` (dry run,
    then for real) and read again."""
    from seglake.lake.recovery import RecoverOptions, recover_lake

    fuzzed = data.draw(inputs(seed_partition(codec)[suffix]))
    root = tmp_path_factory.mktemp("fz") / "lake"
    shutil.copytree(lake_of(tmp_path_factory, codec), root)
    (root / "t-0" / f"{0:020d}{suffix}").write_bytes(fuzzed)
    for on_corrupt in ("raise", "skip"):
        read_lake(root, on_corrupt)
    outcome(recover_lake, LakeHandle.open(str(root)), RecoverOptions(dry_run=True))
    outcome(recover_lake, LakeHandle.open(str(root)), RecoverOptions(delete_delay_ms=0))
    read_lake(root, "raise")


def read_lake(root: Path, on_corrupt: str = "raise") -> None:
    """What a notebook does with a lake: every partition read, sought by time, ranged."""
    lake = outcome(seglake.open, str(root), on_corrupt=on_corrupt)
    if lake is None:
        return
    outcome(lake.describe)
    for topic in outcome(lake.topics) or []:
        for p in outcome(lake.partitions, topic) or []:
            part = outcome(lake.partition, topic, p)
            if part is None:
                continue
            start = outcome(lambda part=part: part.log_start_offset)
            outcome(part.read, 0 if start is None else start, 50)
            outcome(part.offsets_for_times, TS0 + 100)
            outcome(part.range, TS0, TS0 + 500)


_LAKES: dict[str, Path] = {}


def lake_of(tmp_path_factory, codec: str) -> Path:
    """A lake of the seed segment (``codec``), committed (made once a session)."""
    if codec not in _LAKES:
        root = tmp_path_factory.mktemp("base") / "lake"
        root.mkdir()
        write_partition(root / "t-0", codec=codec)
        Catalog(str(root)).commit(rows_table([seed_row(codec)]), "r0")
        _LAKES[codec] = root
    return _LAKES[codec]


# ------------------------------------------------------------------ files of any size or kind


def read_dir_files(d: Path) -> None:
    """Each reader once (no recovery: it would write): ``dump``, ``PartitionLog`` reads."""
    sink = open(os.devnull, "w")  # noqa: SIM115 (closed below): a dump's lines are output
    files = sorted(str(p) for p in d.iterdir())
    outcome(dump, files, deep=True, sanity=True, out=sink, err=sink)
    sink.close()
    log = outcome(PartitionLog.open, str(d))
    if log is not None:
        outcome(log.read, 0, 50)
        outcome(log.offsets_for_times, TS0 + 333)
    outcome(recover_partition, str(d), dry_run=True)


@pytest.mark.parametrize(
    "suffix,size",
    # a .txnindex is dumped whole, as Kafka's dump lists every entry (zeros are entries
    # of version 0): 32 MiB of them are 2M lines, read in windows (old: read whole and
    # listed at once: over the 256 MiB headroom)
    [(".index", 1 << 30), (".timeindex", 1 << 30), (".txnindex", 64 << 20), (".log", 1 << 30)],
)
def test_sparse_huge_files_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, size: int
) -> None:
    """A file grown to 1 GiB of zeros after its bytes (sparse: no disk used), as a
    broker's preallocated segment or a hostile index: each read within 256 MiB (reading
    up to 1.5 GiB of zeros before the MemoryError would take seconds)."""
    monkeypatch.setattr(fuzz, "HEADROOM", 256 << 20)
    d = tmp_path / "t-0"
    write_partition(d)
    with open(d / f"{0:020d}{suffix}", "r+b") as f:
        f.truncate(size)
    read_dir_files(d)


def test_named_pipe_is_refused(tmp_path: Path) -> None:
    """A ``.log`` that is a FIFO nobody writes: refused, not waited on. A child process
    (killed after 30 s: its start alone, Python and seglake's imports, took over 3 s on a
    loaded machine): the alarm cannot stop an ``open`` blocked inside pyarrow."""
    d = tmp_path / "t-0"
    write_partition(d)
    (d / f"{0:020d}.log").unlink()
    os.mkfifo(d / f"{0:020d}.log")
    code = (
        f"import sys; sys.path[:0] = {sys.path!r}; from pathlib import Path; "
        f"from tests.unit.test_fuzz_files import read_dir_files; read_dir_files(Path({str(d)!r}))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


@DELTA_FUZZ
@given(st.sampled_from(SUFFIXES), st.sampled_from(["none", "lz4"]), st.data())
def test_register_broker_dir(
    tmp_path_factory, suffix: str, codec: str, data: st.DataObject
) -> None:
    """``register``: a broker data directory with one fuzzed file (and a fuzzed
    ``meta.properties``) copied into a new lake, then the lake read."""
    from seglake.lake.register import register

    fuzzed = data.draw(inputs(seed_partition(codec)[suffix]))
    broker = tmp_path_factory.mktemp("broker")
    write_partition(broker / "t-0", {suffix: fuzzed}, codec)
    (broker / "meta.properties").write_bytes(data.draw(inputs(b"version=1\nnode.id=1\n")))
    root = broker.parent / (broker.name + "-lake")
    if outcome(register, LakeHandle.open(str(root)), str(broker), run_id="fuzz") is None:
        return
    lake = outcome(seglake.open, str(root))
    part = None if lake is None else outcome(lake.partition, "t", 0)
    if part is not None:
        outcome(part.read, 0, N)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_dump_of_an_unknown_codec_id(tmp_path: Path, codec: int) -> None:
    """Found by the fuzzer: a CRC-valid batch whose attributes name codec id 5-7 made
    ``dump`` (without ``--deep-iteration``) fail with ``KeyError``; now its line says
    ``unknown(5)`` and a deep dump is one CorruptRecordError line."""
    buf = bytearray(valid_log(0))
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attributes & ~7 | codec)
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(fix_crcs(bytes(buf)))
    out = io.StringIO()
    assert dump([str(path)], out=out, err=io.StringIO()) == 0
    assert f"compresscodec: unknown({codec}) crc:" in out.getvalue().splitlines()[2]
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec}"):
        dump([str(path)], deep=True, out=io.StringIO(), err=io.StringIO())
