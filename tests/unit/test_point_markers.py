"""Lookup by timestamp where Kafka's ListOffsets answers a transaction marker.

Kafka's time search (``FileRecords.searchForTimestamp``) walks control batches too, and a
marker carries the broker's clock, so offsetsForTimes can answer a marker's offset. Lookup
answers the record a fetch from that offset returns: the next data record. The oracle is
:meth:`PartitionLog.offsets_for_times` (itself checked against brute force and a real
broker) and the log's truth; every way lookup places a target is checked (the header
chains, the careful path, the forward scan), in the kernel's picks and in numpy's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_answer import QUERY_SCHEMA, answer_queries
from seglake.lake.lookup_plan import partition_arrays
from seglake.lake.register import register
from seglake.lake.rows import segment_ref
from seglake.lake.snapshot import Snapshot
from seglake.record import native, reader
from seglake.record.reader import read_log
from seglake.storage import point_reads
from seglake.storage.index_cache import IndexCache
from seglake.storage.log import PartitionLog
from seglake.storage.segment import LogSegment
from tests.txn_log import write_transactional_log
from tests.unit.test_time_lookup import (
    FS,
    SETTINGS,
    encode_spec,
    records_of,
    segment_specs,
    write_segment,
)
from tests.unit.test_time_lookup import targets as time_targets

TOPIC = "txn"


@pytest.fixture(scope="module", params=[(0, 1), (3, 300)], ids=["none-every-batch", "lz4"])
def txn_lake(tmp_path_factory, request):
    """A registered transactional log (commits, aborts, markers stamped above the records
    before them, small segments some of which end with a marker), its partition
    directory, and every record (data and markers) in offset order."""
    codec, interval = request.param
    tmp = tmp_path_factory.mktemp(f"markers{codec}")
    d = tmp / "broker" / f"{TOPIC}-0"
    write_transactional_log(d, seed=14, steps=400, codec=codec, segment_bytes=1500)
    root = str(tmp / "lake")
    register(LakeHandle.open(root), str(tmp / "broker"), interval=interval)
    every = [read_log(p.read_bytes(), skip_control=False)[0] for p in sorted(d.glob("*.log"))]
    data = [read_log(p.read_bytes())[0] for p in sorted(d.glob("*.log"))]
    return root, Path(root) / f"{TOPIC}-0", pa.concat_tables(every), pa.concat_tables(data)


def _targets(every: pa.Table) -> list[int]:
    ts = every.column("timestamp").to_numpy()
    return sorted({int(t) + d for t in ts for d in (-1, 0, 1)} | {0, int(ts.max()) + 5, -3})


def _expected(part: Path, data: pa.Table, targets: list[int]) -> list[tuple[str, int | None]]:
    """(status, offset) a fetch from ListOffsets' answer gives: the first data record at
    or after it (a marker's offset: the record after the marker)."""
    log = PartitionLog.open(str(part))
    offs = data.column("offset").to_numpy()
    out: list[tuple[str, int | None]] = []
    for t in targets:
        found = log.offsets_for_times(t)
        nxt = offs[offs >= found.offset] if found is not None else offs[:0]
        out.append(("ok", int(nxt[0])) if len(nxt) else ("no_record_for_timestamp", None))
    return out


def _answers(root: str, targets: list[int]) -> pa.Table:
    q = pa.Table.from_pylist(
        [
            {"topic": TOPIC, "partition": 0, "query_offset": None, "query_timestamp": t}
            for t in targets
        ],
        schema=QUERY_SCHEMA,
    )
    parts = partition_arrays(Snapshot.read(LakeHandle.open(root)))
    return answer_queries(root, parts, IndexCache(), q)


def _scan_targets(every: pa.Table, data: pa.Table) -> list[int]:
    """The forward scan's targets (a scan a target: 4 s a thousand): every marker's
    timestamp +-1, -3, and every 4th of the other targets (before, between, at and after
    the records)."""
    markers = pc.invert(pc.is_in(every["offset"], data["offset"]))
    near = set(_targets(every.filter(markers))) - {0}
    rest = [t for t in _targets(every) if t not in near]
    return sorted(near | set(rest[::4]) | {rest[0], rest[-1]})


def _check(
    root: str, part: Path, every: pa.Table, data: pa.Table, targets: list[int] | None = None
) -> None:
    targets = _targets(every) if targets is None else targets
    want = _expected(part, data, targets)
    out = _answers(root, targets)
    got = list(zip(out.column("status").to_pylist(), out.column("offset").to_pylist(), strict=True))
    wrong = [(t, g, w) for t, g, w in zip(targets, got, want, strict=True) if g != w]
    assert wrong == []
    # the rows are the records at those offsets, field for field
    by_offset = {r["offset"]: r for r in data.to_pylist()}
    for row in out.to_pylist():
        if row["status"] == "ok":
            rec = by_offset[row["offset"]]
            assert (row["key"], row["value"]) == (rec["key"], rec["value"])
            assert int(row["timestamp"].timestamp() * 1000) == rec["timestamp"]


def test_the_log_has_markers_that_answer_timestamps(txn_lake):
    """The oracle picks markers for many targets, also where a segment ends with one."""
    _, part, every, data = txn_lake
    targets = [t for t in _targets(every) if t >= 0]
    log = PartitionLog.open(str(part))
    data_offsets = set(data.column("offset").to_pylist())
    markers = [log.offsets_for_times(t) for t in targets]
    at_markers = {m.offset for m in markers if m is not None and m.offset not in data_offsets}
    assert len(at_markers) >= 20
    ends = {s.next_offset - 1 for s in log.segments}
    assert at_markers & ends  # a marker that answers is the last record of its segment


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
def test_lookup_by_timestamp_answers_a_fetch_from_offsets_for_times(
    txn_lake, kernel: bool, monkeypatch
) -> None:
    root, part, every, data = txn_lake
    if kernel and native.kernel() is None:
        pytest.skip("no compiled kernel")
    if not kernel:
        monkeypatch.setenv("SEGLAKE_NATIVE", "0")
    picked: list[bool] = []  # whether the kernel took each call's batches
    real = reader._kernel_picks

    def spy(*args):
        got = real(*args)
        picked.append(got is not None)
        return got

    monkeypatch.setattr(reader, "_kernel_picks", spy)
    _check(root, part, every, data)
    assert picked and set(picked) == {kernel}


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("state", [-2, -1], ids=["careful", "scan"])
def test_every_way_a_target_is_placed_agrees(
    txn_lake, kernel: bool, state: int, monkeypatch
) -> None:
    """The header chains bypassed: every target to the careful path (the index rebuilt
    from the log, batches searched in it) or unplaced (the forward scan)."""
    root, part, every, data = txn_lake
    if kernel and native.kernel() is None:
        pytest.skip("no compiled kernel")
    if not kernel:
        monkeypatch.setenv("SEGLAKE_NATIVE", "0")

    def place(reqs, gather):
        for r in reqs:
            r.ids = np.full(len(r.lo), state, dtype=np.int64)

    monkeypatch.setattr(point_reads, "_locate", place)
    _check(root, part, every, data, _scan_targets(every, data) if state == -1 else None)


def test_resolve_timestamps_of_one_segment(txn_lake) -> None:
    """The one-segment API: a marker's answer is the next data record of the segment, or
    none there (-1)."""
    root, _, _, data = txn_lake
    cache = IndexCache()
    offs = data.column("offset").to_numpy()
    checked = 0
    for r in Catalog(root).segments().to_pylist():
        seg = cache.segment(root, segment_ref(r))
        targets = np.unique(
            read_log(Path(root, r["path"]).read_bytes(), skip_control=False)[0]
            .column("timestamp")
            .to_numpy()
        )
        row, got = point_reads.resolve_timestamps(seg, targets)
        for t, i in zip(targets.tolist(), row.tolist(), strict=True):
            found = seg.find_offset_by_timestamp(t)
            nxt = offs[(offs >= found.offset) & (offs < r["next_offset"])] if found else []
            want = int(nxt[0]) if len(nxt) else None
            assert (got.column("offset")[i].as_py() if i >= 0 else None) == want, t
            checked += 1
    assert checked > 100


@SETTINGS
@given(
    spec=segment_specs,
    interval=st.sampled_from([1, 150, 4096]),
    index_files=st.booleans(),
)
def test_resolve_timestamps_equals_a_fetch_from_find_offset_by_timestamp(
    tmp_path: Path, spec, interval: int, index_files: bool
) -> None:
    """Random segments (every codec, non-monotonic CreateTime, LogAppendTime, offset gaps,
    control batches stamped anywhere): each target's answer is the first data record at
    or after ``find_offset_by_timestamp``'s (itself checked against brute force)."""
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    log = write_segment(d, encode_spec(spec, 100), 100, interval=interval, index_files=index_files)
    seg = LogSegment(FS, str(log), index_interval_bytes=interval)
    _, timestamps = records_of([log])
    data = read_log(log.read_bytes())[0].column("offset").to_numpy()
    targets = np.array([t for t in time_targets(timestamps) if t >= 0], dtype=np.int64)
    row, got = point_reads.resolve_timestamps(seg, targets)
    for t, i in zip(targets.tolist(), row.tolist(), strict=True):
        found = seg.find_offset_by_timestamp(t)
        nxt = data[data >= found.offset] if found is not None else data[:0]
        want = int(nxt[0]) if len(nxt) else None
        assert (got.column("offset")[i].as_py() if i >= 0 else None) == want, t
