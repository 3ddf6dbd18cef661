"""Merging segments without decoding (``compact --merge-only``), against brute force:
the groups against Kafka's ``groupSegmentsBySize`` conditions, the merged lake against
the lake before (same records, same batch bytes, indexes as a rebuild makes them), a
reader pinned to the old catalog version, the concurrency guard, crashes of the driver."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.errors import ConcurrentRunError
from seglake.format import INT32_MAX
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
from seglake.lake.rows import rows_table
from seglake.lake.staging import cleanup
from seglake.record.batch import scan_batches
from seglake.record.encode import encode_batches
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.key_index import key_index_of_log
from seglake.storage.merge import MergeSource, group_segments, merge_segments, merged_tail
from seglake.storage.naming import segment_file_name
from seglake.storage.segment import LogSegment
from seglake.storage.tail_minima import tail_minima
from tests.key_index_check import check_key_index
from tests.lake_check import lake_records
from tests.unit.test_recovery import INTERVAL, make_lake, pristine  # noqa: F401

MERGE = {"segment.bytes": "6000", "index.interval.bytes": str(INTERVAL)}


# ------------------------------------------------------------------ grouping rules


@st.composite
def segment_lists(draw):
    n = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([1, 5, 2**30, 2**31]), min_size=n, max_size=n))
    bases = [0]
    for g in gaps[:-1]:
        bases.append(bases[-1] + g)
    idx = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    tidx = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    end = bases[-1] + gaps[-1]
    return bases, sizes, idx, tidx, end


@settings(max_examples=300, deadline=None)
@given(segment_lists(), st.integers(1, 300), st.integers(8, 80))
def test_groups_follow_kafka_conditions(segs, max_size, max_index) -> None:
    bases, sizes, idx, tidx, end = segs
    groups = group_segments(
        bases, sizes, idx, tidx, max_size=max_size, max_index_size=max_index, first_uncleanable=end
    )
    assert [a for a, _ in groups] == [0, *[b for _, b in groups[:-1]]]  # contiguous, in order
    assert groups[-1][1] == len(bases)

    def fits(a: int, b: int) -> bool:  # may segments a..b-1 form a group (a's first check)
        for j in range(a + 1, b):
            last = bases[j + 1] - 1 if j + 1 < len(bases) else end - 1
            if sum(sizes[a : j + 1]) > max_size:
                return False
            if sum(idx[a : j + 1]) * 8 > max_index or sum(tidx[a : j + 1]) * 12 > max_index:
                return False
            if sizes[j] != 0 and last - bases[a] > INT32_MAX:
                return False
        return True

    for a, b in groups:
        assert fits(a, b)
        if b < len(bases):
            assert not fits(a, b + 1)  # greedy: the next segment did not fit


def test_merged_tail_is_exact() -> None:
    """Checkpoints of the concatenation equal what tail_minima computes over all batches."""
    import numpy as np

    from seglake.storage.merge import MergeSource

    rng = np.random.default_rng(5)
    parts, sources, off = [], [], 0
    for _ in range(4):
        n = 20
        first = off + np.arange(n) * 3
        low = rng.integers(0, 1000, n)
        pos = np.arange(n) * 100
        parts.append((first, low))
        tail = tail_minima(first, pos, low, n * 100, min_step=1)
        sources.append(MergeSource(None, off + 3 * n, n, int(low.min()), 0, tail))  # type: ignore[arg-type]
        off += 3 * n
    merged = merged_tail(sources)
    first = np.concatenate([p[0] for p in parts])
    low = np.concatenate([p[1] for p in parts])
    suffix = np.minimum.accumulate(low[::-1])[::-1]
    for point in merged:
        i = int(np.searchsorted(first, point["offset"]))
        assert point["min_timestamp"] == suffix[i]


# ------------------------------------------------------------------ the copy paths

COPY_PATHS = {  # how the bytes are copied: what is patched to take that path
    "kernel": (),  # os.copy_file_range
    "pread": (("os.copy_file_range", OSError(errno.EXDEV, "cross-device")),),
    "stream": (  # an object store's read + write: the callers' fs.is_local and fs.read's own
        ("seglake.fs.is_local", False),
        ("seglake.fs.read.is_local", False),
    ),
}


def _patched(path: str) -> list:
    out = []
    for target, value in COPY_PATHS[path]:
        kw = {"side_effect": value} if isinstance(value, Exception) else {"return_value": value}
        out.append(mock.patch(target, **kw))
    return out


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=2, max_size=5),
    st.sampled_from([0, 150, 400, 4096]),
    st.sampled_from([0, 3]),
    st.integers(0, 2**31),
)
def test_every_copy_path_gives_a_rebuild(tmp_path_factory, per_seg, interval, codec, seed) -> None:
    """Segments of random batches (non-monotonic timestamps) merged by the kernel copy,
    its pread/write fallback and the object-store path: the .log is the old files back
    to back, .index/.timeindex are byte for byte a full rebuild's, the rows equal."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, sum(per_seg))  # records per batch
    n = int(counts.sum())
    rec = pa.table(
        {
            "offset": pa.array(np.cumsum(rng.integers(1, 4, n)), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + rng.integers(0, 10**6, n), pa.int64()),
            "value": pa.array([b"v" * int(k) for k in rng.integers(0, 90, n)], pa.binary()),
            "key": pa.array([None if k < 2 else b"k%d" % k for k in rng.integers(0, 9, n)]),
        }
    )
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    buf = encode_batches(rec, codec=codec, batch_starts=starts).tobytes()
    scan = scan_batches(buf)
    d = tmp_path_factory.mktemp("merge")
    fs = pafs.LocalFileSystem()
    sources, first = [], 0
    for k in per_seg:
        sel = slice(first, first + k)
        a, b = (
            int(scan.position[first]),
            int(scan.position[first + k - 1] + scan.size[first + k - 1]),
        )
        path = d / segment_file_name(int(scan.base_offset[first]))
        path.write_bytes(buf[a:b])
        ts = scan.max_timestamp[sel]
        seg = LogSegment(fs, str(path), size=b - a)
        nxt = int(scan.last_offset[first + k - 1]) + 1
        if len(sources) % 2:  # a source with its .keyindex (reused), one without (read)
            idx = key_index_of_log(buf[a:b], scan_batches(buf[a:b]), seg.base_offset, nxt)
            path.with_suffix(".keyindex").write_bytes(idx.to_bytes())
        sources.append(MergeSource(seg, nxt, k, int(ts.min()), int(ts.max()), None))
        first += k
    want_oi, want_ti = rebuild_indexes(scan_batches(buf), int(scan.base_offset[0]), interval)
    infos = {}
    for name in COPY_PATHS:
        out = d / name
        with contextlib.ExitStack() as stack:
            for p in _patched(name):
                stack.enter_context(p)
            info = merge_segments(fs, str(out), sources, index_interval_bytes=interval)
        stem = Path(info.log_path[: -len(".log")])
        assert Path(info.log_path).read_bytes() == buf
        assert Path(f"{stem}.index").read_bytes() == want_oi.to_bytes()
        assert Path(f"{stem}.timeindex").read_bytes() == want_ti.to_bytes()
        check_key_index(info.log_path)
        infos[name] = dataclasses.replace(info, log_path="")
    assert infos["kernel"] == infos["pread"] == infos["stream"]


def test_a_log_shorter_than_its_row_is_refused(tmp_path: Path) -> None:
    from seglake.errors import CorruptRecordError

    buf = encode_batches(
        pa.table({"offset": pa.array([0, 1], pa.int64()), "timestamp": pa.array([5, 6])}),
        codec=0,
    ).tobytes()
    path = tmp_path / segment_file_name(0)
    path.write_bytes(buf)
    seg = LogSegment(pafs.LocalFileSystem(), str(path), size=len(buf) + 7)
    src = MergeSource(seg, 2, 2, 5, 6, None)
    for name in COPY_PATHS:
        with contextlib.ExitStack() as stack:
            for p in _patched(name):
                stack.enter_context(p)
            with pytest.raises(CorruptRecordError, match=f"has {len(buf)} bytes, its catalog"):
                merge_segments(
                    pafs.LocalFileSystem(), str(tmp_path / name), [src], index_interval_bytes=99
                )


# ------------------------------------------------------------------ a merged lake


def _batch_bytes(root: Path) -> bytes:
    """Every batch of every catalogued segment, in offset order."""
    out = b""
    for r in Catalog(str(root)).segments().to_pylist():
        out += (root / r["path"]).read_bytes()
    return out


@pytest.fixture
def lake(tmp_path: Path, pristine: Path) -> Path:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    return root


def _tasks_without_merges(fn, tasks: list) -> list:
    """``map_tasks`` of a run whose merges the driver takes: no merge may come here."""
    assert not any(s[0] == "merge" for t in tasks for s in t)
    return list(map(fn, tasks))


ON_DRIVER = {"driver_merge_bytes": 1 << 40, "map_tasks": _tasks_without_merges}


@pytest.mark.parametrize("where", [{}, ON_DRIVER], ids=["tasks", "driver"])
def test_merge_keeps_records_batches_and_pinned_readers(lake: Path, where: dict) -> None:
    cat = Catalog(str(lake))
    v0, before, batches = cat.version(), lake_records(str(lake)), _batch_bytes(lake)
    n0 = cat.segments().num_rows
    result = run_compaction(
        LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=MERGE), **where
    )
    assert result.committed
    rows = cat.segments()
    assert rows.num_rows < n0
    assert lake_records(str(lake)).equals(before)
    assert _batch_bytes(lake) == batches  # byte-identical batches
    for r in rows.to_pylist():  # indexes as Kafka's recovery rebuilds them
        data = (lake / r["path"]).read_bytes()
        oi, ti = rebuild_indexes(scan_batches(data), r["base_offset"], INTERVAL)
        stem = lake / r["path"][: -len(".log")]
        assert Path(f"{stem}.index").read_bytes() == oi.to_bytes()
        assert Path(f"{stem}.timeindex").read_bytes() == ti.to_bytes()
        assert r["size_bytes"] == len(data) and r["index_entries"] == len(oi)
    assert lake_records(str(lake), version=v0).equals(before)  # the pinned reader
    v1 = cat.version()
    again = run_compaction(LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=MERGE))
    assert not again.committed and cat.version() == v1  # twice: nothing changes
    # retired files go with cleanup, only after the delete delay
    assert cleanup(LakeHandle.open(str(lake)), delete_delay_s=10**6).retired.deleted == []
    assert lake_records(str(lake), version=v0).equals(before)
    assert cleanup(LakeHandle.open(str(lake)), delete_delay_s=0).retired.deleted
    assert not any((lake / "_retired").rglob("*.log"))
    assert lake_records(str(lake)).equals(before)


def _lake_files(root: Path) -> dict[str, bytes]:
    """Every segment file the catalog names (the .log and its indexes), by path."""
    out = {}
    for r in Catalog(str(root)).segments().to_pylist():
        stem = r["path"][: -len(".log")]
        for suffix in (".log", ".index", ".timeindex"):
            out[stem + suffix] = (root / (stem + suffix)).read_bytes()
    return out


def test_merge_groups_packed_into_tasks_give_the_same_lake(
    lake: Path, tmp_path: Path, monkeypatch
) -> None:
    """Merges as tasks are packed by bytes (``lake/packing.py``, as a read's splits):
    fewer tasks than groups, a multiple of the cores when more than one; the lake after
    is byte for byte the one the driver's merges make, however they were packed."""
    from seglake.lake import compaction

    def rows(root: Path):
        return Catalog(str(root)).segments().drop_columns(["run_id", "committed_at"])

    groups = len([s for s in _specs(lake) if s[0] == "merge"])
    assert groups >= 2
    copies = {k: tmp_path / k for k in ("driver", "one-task", "per-core")}
    for dst in copies.values():
        shutil.copytree(lake, dst)
    run_compaction(
        LakeHandle.open(str(copies["driver"])),
        CompactOptions(merge_only=True, conf=MERGE, run_id="m"),
        **ON_DRIVER,
    )
    seen: dict[str, list[int]] = {}
    for name, cores, least in (("one-task", 2, 1 << 30), ("per-core", 2, 1)):
        monkeypatch.setattr(compaction, "MERGE_TASK_MIN_BYTES", least)

        def tasks(fn, items: list, name: str = name) -> list:
            seen[name] = [len(t) for t in items]
            return list(map(fn, items))

        root = str(copies[name])
        got = run_compaction(
            LakeHandle.open(root),
            CompactOptions(merge_only=True, conf=MERGE, run_id="m"),
            map_tasks=tasks,
            parallelism=cores,
        )
        assert got.committed
        assert rows(copies[name]).equals(rows(copies["driver"]))
        assert _lake_files(copies[name]) == _lake_files(copies["driver"])
    assert seen["one-task"] == [groups]  # small groups: one task
    assert sum(seen["per-core"]) == groups and len(seen["per-core"]) % 2 == 0
    assert 1 < len(seen["per-core"]) <= groups


def _specs(root: Path) -> list:
    """The segment groups a merge run of ``root`` would make (one spec each)."""
    found: list = []

    def record(fn, items: list) -> list:
        if not items:  # the analyses of compacted partitions: none
            return []
        found.extend(s for t in items for s in t)
        raise RuntimeError("planned")

    with pytest.raises(RuntimeError, match="planned"):
        run_compaction(
            LakeHandle.open(str(root)),
            CompactOptions(merge_only=True, conf=MERGE),
            map_tasks=record,
        )
    return found


def test_dry_run_writes_nothing(lake: Path) -> None:
    cat = Catalog(str(lake))
    v0 = cat.version()
    result = run_compaction(
        LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=MERGE, dry_run=True)
    )
    assert result.partitions[0].segments_after < result.partitions[0].segments_before
    assert cat.version() == v0 and not (lake / "_staging").exists()


def test_concurrent_rewrite_of_a_row_wins(lake: Path) -> None:
    """A recovery that replaced a row after the plan: the merge loses, changes nothing."""
    cat = Catalog(str(lake))
    rows = cat.segments()
    planned = {
        (r["topic"], r["partition"], r["base_offset"]): r["run_id"] for r in rows.to_pylist()
    }
    first = rows.slice(0, 1).drop_columns(["run_id", "committed_at"])
    cat.replace_rows(first, "recovery-run")
    v = cat.version()
    with pytest.raises(ConcurrentRunError, match="changed since it was planned"):
        cat.replace_rows(
            rows_table(
                [
                    {
                        k: v
                        for k, v in rows.to_pylist()[0].items()
                        if k not in ("run_id", "committed_at")
                    }
                ]
            ),
            "merge-run",
            expected_runs=planned,
        )
    assert cat.version() == v


# ------------------------------------------------------------------ crashes

CRASH_POINTS = {  # point: committed when the driver dies there
    "catalog.replace": False,
    "catalog.replace.write": False,
    "catalog.replace.done": True,
    "retire": True,
    "publish": True,
}
DRIVER = """
import json, sys
from seglake.lake.compaction import CompactOptions, run_compaction
from seglake.lake.handle import LakeHandle
lake = LakeHandle.open(sys.argv[1])
r = run_compaction(lake, CompactOptions(merge_only=True, conf=json.loads(sys.argv[2]), run_id="m1"))
print(r.committed)
"""


def _killed_at(lake: Path, point: str) -> None:
    """Run merge ``m1`` in a driver process that dies at ``point``."""
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(lake), json.dumps(MERGE)],
        env={**os.environ, "SEGLAKE_CRASH_AT": point},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 137, proc.stderr


@pytest.mark.parametrize("point", sorted(CRASH_POINTS))
def test_driver_killed_at_each_step(lake: Path, point: str) -> None:
    cat = Catalog(str(lake))
    v0, before, batches = cat.version(), lake_records(str(lake)), _batch_bytes(lake)
    _killed_at(lake, point)
    assert cat.run_committed("m1") == CRASH_POINTS[point]
    # whatever state: readers of the newest and of the old version see every record
    assert lake_records(str(lake)).equals(before)
    assert lake_records(str(lake), version=v0).equals(before)
    report = cleanup(LakeHandle.open(str(lake)), delete_delay_s=10**6)
    assert not list((lake / "_staging").glob("*"))
    assert ("m1" in report.published_runs) == CRASH_POINTS[point]
    assert lake_records(str(lake)).equals(before)
    assert lake_records(str(lake), version=v0).equals(before)
    rerun = run_compaction(
        LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=MERGE, run_id="m1")
    )
    assert rerun.committed or rerun.already_committed
    assert lake_records(str(lake)).equals(before)
    assert _batch_bytes(lake) == batches
    names = {p.name for p in (lake / "t-0").iterdir()}
    live = {r["path"].split("/")[1] for r in cat.segments().to_pylist()}
    assert {n for n in names if n.endswith(".log")} == live  # no orphan in the partition


def test_merge_of_rows_whose_files_are_still_staged(lake: Path) -> None:
    """A merge run committed and died before publishing (its files only in
    ``_staging/m1/``); a second merge, before any cleanup, publishes m1 first, then
    merges. Was: its publish retired the old files still under m1's names, and m1's
    moves in ``cleanup`` then put m1's files over the new segment (a row without its
    file)."""
    before, batches = lake_records(str(lake)), _batch_bytes(lake)
    _killed_at(lake, "catalog.replace.done")
    assert any((lake / "_staging" / "m1").rglob("*.log"))
    cat = Catalog(str(lake))
    n = cat.segments().num_rows
    bigger = {**MERGE, "segment.bytes": "1000000"}
    assert run_compaction(
        LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=bigger), **ON_DRIVER
    ).committed
    assert cat.segments().num_rows < n
    assert lake_records(str(lake)).equals(before)
    cleanup(LakeHandle.open(str(lake)), delete_delay_s=10**6)
    assert _batch_bytes(lake) == batches


@pytest.mark.parametrize("where", [{}, ON_DRIVER], ids=["tasks", "driver"])
def test_torn_segment_is_refused_and_nothing_committed(lake: Path, where: dict) -> None:
    from seglake.errors import CorruptRecordError

    cat = Catalog(str(lake))
    v0 = cat.version()
    first = lake / cat.segments().to_pylist()[0]["path"]
    first.write_bytes(first.read_bytes()[:-5])
    with pytest.raises(CorruptRecordError, match="run `recover`"):
        run_compaction(
            LakeHandle.open(str(lake)), CompactOptions(merge_only=True, conf=MERGE), **where
        )
    assert cat.version() == v0 and not list((lake / "_staging").glob("*"))
