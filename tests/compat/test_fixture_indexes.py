"""The broker's own index files: parsed, rebuilt byte for byte, and used for lookups that
must answer exactly as a scan of the ``.log`` does."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from seglake.record.batch import BatchScan, scan_batches
from seglake.storage.index_builder import IndexBuilder, rebuild_indexes
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.time_index import TimeIndex
from tests.conftest import FIXTURE_PARTITIONS, FIXTURES, SINGLE_RUN_PARTITIONS, load_expected

INTERVAL = 4096  # the broker ran with the default log.index.interval.bytes


def segment_params(partitions: list[str]) -> list[tuple[str, str]]:
    if not FIXTURES.exists():
        return []
    return [(p, name) for p in partitions for name in load_expected(p)]


ALL_SEGMENTS = segment_params(FIXTURE_PARTITIONS)


def test_the_fixtures_are_there(fixtures_dir) -> None:
    """Without the fixtures every parametrized test here would be skipped, not failed."""
    assert ALL_SEGMENTS, f"no broker segments under {fixtures_dir}"


@cache
def log_of(partition: str, name: str) -> tuple[bytes, BatchScan]:
    buf = (FIXTURES / partition / f"{name}.log").read_bytes()
    return buf, scan_batches(buf)


def broker_indexes(partition: str, name: str) -> tuple[OffsetIndex, TimeIndex]:
    base = load_expected(partition)[name]["base_offset"]
    d = FIXTURES / partition
    return (
        OffsetIndex.from_bytes((d / f"{name}.index").read_bytes(), base, d / f"{name}.index"),
        TimeIndex.from_bytes((d / f"{name}.timeindex").read_bytes(), base, d / f"{name}.timeindex"),
    )


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_broker_index_files_parse_as_expected(fixtures_dir, partition: str, name: str) -> None:
    seg = load_expected(partition)[name]
    base = seg["base_offset"]
    oi, ti = broker_indexes(partition, name)
    oi.sanity_check()
    ti.sanity_check()
    assert [[o - base, p] for o, p in oi] == seg["offset_index"]
    assert [[t, o - base] for t, o in ti] == seg["time_index"]
    with (
        OffsetIndex.open(fixtures_dir / partition / f"{name}.index", base) as mapped_oi,
        TimeIndex.open(fixtures_dir / partition / f"{name}.timeindex", base) as mapped_ti,
    ):
        mapped_oi.sanity_check()
        mapped_ti.sanity_check()
        assert mapped_oi.to_bytes() == oi.to_bytes()
        assert mapped_ti.to_bytes() == ti.to_bytes()
    _, scan = log_of(partition, name)
    # a closed segment's last time index entry is its largestTimestamp
    assert ti.last_entry.timestamp == int(scan.max_timestamp.max())
    positions = set(scan.position.tolist())
    assert all(p in positions for p in oi.positions.tolist())


@pytest.mark.parametrize(("partition", "name"), segment_params(SINGLE_RUN_PARTITIONS))
def test_rebuild_single_run_byte_for_byte(fixtures_dir, partition: str, name: str) -> None:
    base = load_expected(partition)[name]["base_offset"]
    _, scan = log_of(partition, name)
    oi, ti = rebuild_indexes(scan, base, INTERVAL)
    d = fixtures_dir / partition
    assert oi.to_bytes() == (d / f"{name}.index").read_bytes()
    assert ti.to_bytes() == (d / f"{name}.timeindex").read_bytes()


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_rebuild_with_a_restart_per_leader_epoch(fixtures_dir, partition: str, name: str) -> None:
    """Every fixture, including ``__consumer_offsets-*``, is reproduced byte for byte when
    the broker is taken to have restarted at each leader-epoch change (single broker:
    each start bumps the epoch): a new builder on the same indexes (byte count reset) and
    a forced time index entry at each close."""
    base = load_expected(partition)[name]["base_offset"]
    _, scan = log_of(partition, name)
    oi, ti = OffsetIndex(base, None), TimeIndex(base, None)
    epochs = scan.leader_epoch
    starts = np.flatnonzero(np.r_[True, epochs[1:] != epochs[:-1]]) if len(scan) else []
    bounds = [*np.asarray(starts).tolist(), len(scan)]
    for a, b in itertools.pairwise(bounds):
        run = IndexBuilder(base, index_interval_bytes=INTERVAL, offset_index=oi, time_index=ti)
        assert (
            run.add_batches(
                scan.position[a:b], scan.size[a:b], scan.last_offset[a:b], scan.max_timestamp[a:b]
            )
            == b - a
        )
        run.finish()
    d = fixtures_dir / partition
    assert oi.to_bytes() == (d / f"{name}.index").read_bytes()
    assert ti.to_bytes() == (d / f"{name}.timeindex").read_bytes()
    if partition.startswith("__consumer_offsets"):
        assert len(bounds) > 2  # several runs: why a one-run rebuild differs
        assert rebuild_indexes(scan, base, INTERVAL)[1].to_bytes() != ti.to_bytes()


class ScanFrom:
    """Batch scans of the ``.log`` from a start position, as a reader does (cached)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.scans: dict[int, BatchScan] = {}

    def __call__(self, position: int) -> BatchScan:
        if position not in self.scans:
            self.scans[position] = scan_batches(self.buf, start=position, verify_crc=False)
        return self.scans[position]


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_offset_lookups_equal_a_full_scan(fixtures_dir, partition: str, name: str) -> None:
    base = load_expected(partition)[name]["base_offset"]
    buf, scan = log_of(partition, name)
    oi, _ = broker_indexes(partition, name)
    scan_from = ScanFrom(buf)
    targets = np.arange(base - 2, int(scan.last_offset[-1]) + 3)
    floor_offsets, floor_positions = oi.lookup_many(targets)
    biggest_batch = int(scan.size.max())
    for t, f_off, f_pos in zip(
        targets.tolist(), floor_offsets.tolist(), floor_positions.tolist(), strict=True
    ):
        assert (f_off, f_pos) == oi.lookup(t)
        assert f_off <= max(t, base)
        # brute force: the first batch (over all headers) whose last offset >= target
        i = int(np.searchsorted(scan.last_offset, t, side="left"))
        want = int(scan.position[i]) if i < len(scan) else None
        part = scan_from(f_pos)
        j = int(np.searchsorted(part.last_offset, t, side="left"))
        got = int(part.position[j]) if j < len(part) else None
        assert got == want, (t, f_off, f_pos)
        if want is not None and partition in SINGLE_RUN_PARTITIONS:
            assert want - f_pos <= INTERVAL + biggest_batch  # the index keeps scans short


@pytest.mark.parametrize(("partition", "name"), ALL_SEGMENTS)
def test_timestamp_lookups_equal_a_full_scan(fixtures_dir, partition: str, name: str) -> None:
    buf, scan = log_of(partition, name)
    oi, ti = broker_indexes(partition, name)
    scan_from = ScanFrom(buf)
    stamps = np.unique(np.concatenate([scan.max_timestamp, scan.base_timestamp]))
    targets = np.unique(np.concatenate([stamps - 1, stamps, stamps + 1, [-1, 0]]))
    strict_ts, strict_off = ti.lookup_many(targets, strict=True)
    floor_ts, floor_off = ti.lookup_many(targets, strict=False)
    for k, t in enumerate(targets.tolist()):
        assert (strict_ts[k], strict_off[k]) == ti.lookup_strict(t)
        assert (floor_ts[k], floor_off[k]) == ti.lookup(t)
        hits = np.flatnonzero(scan.max_timestamp >= t)
        want = int(scan.position[hits[0]]) if len(hits) else None
        for entry_offset in (int(strict_off[k]), int(floor_off[k])):
            # Kafka's <= floor is exact on these files too: each entry's offset is the
            # batch that first reached its timestamp. seglake uses the strict one.
            part = scan_from(oi.lookup(entry_offset).position)
            found = np.flatnonzero(part.max_timestamp >= t)
            got = int(part.position[found[0]]) if len(found) else None
            assert got == want, (t, entry_offset)
    # no batch is past the largest timestamp: a reader answers "none", it does not raise
    assert ti.lookup_strict(int(scan.max_timestamp.max()) + 1).timestamp == ti.last_entry.timestamp
