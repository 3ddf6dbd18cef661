"""Point reads' plumbing: the joined buffer grows without copying what it holds each
round; the reads go through the segment (its other copy when the files move)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake.storage import point_reads
from seglake.storage.header_chains import Chains
from seglake.storage.segment import LogSegment
from tests.unit.test_corrupt_reads import brute, lake, logs, offsets, pristine  # noqa: F401


def test_chains_join_keeps_every_read_in_order(tmp_path):
    blob = np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    (tmp_path / "00000000000000000000.log").write_bytes(blob)
    seg = LogSegment(pafs.LocalFileSystem(), str(tmp_path / "00000000000000000000.log"))
    chains = Chains()
    want = b""
    for ranges in [[(0, 100)], [(300, 900), (50, 60)], [(4000, 5000)]]:
        for start, end in ranges:
            assert chains.read(seg, start, end) >= 0
            want += blob[start:end]
        chains.join()
        assert chains.data.tobytes() == want
        at, room, _ = chains.headers(np.array([len(chains.bufs) - 1]), np.array([ranges[-1][0]]))
        assert int(at[0]) == len(want) - (ranges[-1][1] - ranges[-1][0])
        assert int(room[0]) == ranges[-1][1] - ranges[-1][0]


def test_point_reads_of_a_moved_segment_read_through_the_segment(lake, monkeypatch):  # noqa: F811
    """A segment opened (indexes read) at the catalog's path whose files then move to
    its other copy (staged, as between staging and publishing): the batched reads go
    through the segment, which finds the other copy, so no target needs the careful
    path; the answers are the records there."""
    want = brute(lake)
    final = logs(lake)[1]
    staged = lake / "_staging" / "run" / "t-0"
    staged.mkdir(parents=True)
    seg = LogSegment(
        pafs.LocalFileSystem(),
        str(final),
        size=final.stat().st_size,
        staged_path=str(staged / final.name),
        committed=True,
    )
    assert len(seg.offset_index)  # opened where the catalog says
    for f in sorted(final.parent.glob(final.stem + ".*")):
        f.rename(staged / f.name)

    def no_careful(*_a):
        raise AssertionError("the careful path")

    monkeypatch.setattr(point_reads, "_careful_offsets", no_careful)
    monkeypatch.setattr(point_reads, "_careful_timestamps", no_careful)
    lo = int(final.stem)
    targets = np.array([o for o in offsets(want) if o >= lo][:40:3])
    assert len(targets) > 5
    assert offsets(point_reads.read_offsets(seg, targets)) == targets.tolist()
    ts = np.array(want.column("timestamp").to_pylist())[targets]
    row, got = point_reads.resolve_timestamps(seg, ts)
    assert offsets(got.take(pa.array(row))) == targets.tolist()
