"""Point reads' plumbing: ranges read by rounds straight into one buffer, each segment's
file opened once a round; the reads go through the segment (its other copy when the files
move)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake.storage import point_reads
from seglake.storage.header_chains import Chains
from seglake.storage.segment import LogSegment
from tests.unit.test_corrupt_reads import brute, lake, logs, offsets, pristine  # noqa: F401


def test_chains_fetch_keeps_every_read_in_place_one_open_per_segment(tmp_path):
    """Ranges of two segments added interleaved, read by rounds: each buffer's bytes are
    where ``headers`` says, each segment's file opened once per round."""
    from seglake import fs as lakefs

    rng = np.random.default_rng(1)
    blobs, segs = [], []
    for i in range(2):
        blobs.append(rng.integers(0, 256, 5000, dtype=np.uint8).tobytes())
        (tmp_path / f"{i:020d}.log").write_bytes(blobs[i])
        segs.append(LogSegment(pafs.LocalFileSystem(), str(tmp_path / f"{i:020d}.log")))
    chains = Chains()
    rounds = [[(0, 0, 100)], [(1, 300, 900), (0, 50, 60), (1, 4990, 5100)], [(0, 4000, 5000)]]
    bufs = []
    for ranges in rounds:
        before = lakefs.IO_STATS.snapshot()["files_opened"]
        for i, start, end in ranges:
            bufs.append(
                (int(chains.add(segs[i], np.array([start]), np.array([end]))[0]), i, start, end)
            )
        assert chains.fetch() == {}
        assert lakefs.IO_STATS.snapshot()["files_opened"] - before == len({i for i, _, _ in ranges})
        for buf, i, start, end in bufs:  # every buffer so far, also earlier rounds'
            at, room, _ = chains.headers(np.array([buf]), np.array([start]))
            want = blobs[i][start:end]
            assert int(room[0]) == len(want)
            assert chains.data[int(at[0]) : int(at[0]) + len(want)].tobytes() == want


def test_chains_fetch_names_the_segment_it_cannot_read(tmp_path):
    seg = LogSegment(pafs.LocalFileSystem(), str(tmp_path / "00000000000000000000.log"))
    chains = Chains()
    buf = int(chains.add(seg, np.array([0]), np.array([100]))[0])
    failed = chains.fetch()
    assert list(failed) == [id(seg)] and "no such file" in str(failed[id(seg)])
    assert int(chains.headers(np.array([buf]), np.array([0]))[1][0]) == 0  # nothing read


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


def test_a_target_in_the_batch_at_the_next_index_entry_takes_one_read(tmp_path):
    """Where every batch has an index entry, a target's batch is the one at the entry
    after its floor: the first read holds it whole (one ``preadv``, no second round)."""
    from seglake import fs as lakefs
    from tests.unit.test_key_index import open_segments, write_segments

    keys = [b"k%d" % i for i in range(3000)]  # at offsets 5, 7, 9, ...
    d = write_segments(tmp_path, keys, **{"index.interval.bytes": 1})
    seg = open_segments(d)[0]
    assert len(seg.offset_index.offsets) > 10  # an entry a batch
    targets = np.array([2 * 1499 + 5, 2 * 2600 + 6])
    assert seg.offset_index is not None  # opened before counting
    before = lakefs.IO_STATS.snapshot()["reads"]
    got = point_reads.read_offsets(seg, targets)
    assert lakefs.IO_STATS.snapshot()["reads"] - before == 2  # one a target (far apart)
    assert got.column("offset").to_pylist() == [int(targets[0])]  # odd offsets: none there
    assert got.column("key").to_pylist() == [b"k1499"]


def test_read_offsets_many_is_each_segments_read_together(lake):  # noqa: F811
    """Targets of every segment of a partition (present, in gaps past a segment's end,
    none for one segment) read as one set of point reads: each segment's table is the
    brute-force records at its targets, as ``read_offsets`` of it alone gives; a damaged
    segment's error is raised, the first in order, as reading it alone raises it."""
    from tests.unit.test_corrupt_reads import damage

    want = brute(lake)
    segs = [LogSegment(pafs.LocalFileSystem(), str(p)) for p in logs(lake)]
    have = set(offsets(want))
    rng = np.random.default_rng(5)
    parts, ends = [], []
    for i, seg in enumerate(segs):
        ends.append(segs[i + 1].base_offset if i + 1 < len(segs) else max(have) + 1)
        t = rng.integers(seg.base_offset, ends[-1] + 3, 12) if i != 1 else np.zeros(0, np.int64)
        parts.append((seg, t))
    got = point_reads.read_offsets_many(parts)
    assert len(got) == len(segs)
    for (seg, t), g, end in zip(parts, got, ends, strict=True):
        mine = {int(o) for o in t if seg.base_offset <= o < end} & have
        assert offsets(g) == sorted(mine)
        assert offsets(g) == offsets(point_reads.read_offsets(seg, t))
    path, _, lo, hi = damage(lake, seg=2)
    segs = [LogSegment(pafs.LocalFileSystem(), str(p)) for p in logs(lake)]
    parts = [(s, np.arange(s.base_offset, s.base_offset + 5)) for s in segs[:2]]
    parts.append((segs[2], np.array([lo, hi])))
    for fn in (
        lambda: point_reads.read_offsets_many(parts),
        lambda: point_reads.read_offsets(segs[2], np.array([lo, hi])),
    ):
        try:
            fn()
            raise AssertionError("no error")
        except Exception as exc:
            assert str(path) in str(exc), exc
