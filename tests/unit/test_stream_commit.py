"""A streaming micro-batch's commit (lake/stream_commit.py), without Spark: pieces staged
as the sink's tasks stage them, rebased, joined into the newest segment, committed once
per run id; checked against a brute-force decode of the lake and against segments
written directly at the final offsets, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from seglake.config import LogConfig
from seglake.errors import OffsetOrderError
from seglake.lake import staging as staging_module
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import recover_lake
from seglake.lake.stream_commit import PIECE_COLUMNS, Piece, commit_pieces
from seglake.storage.segment_join import rebase
from seglake.storage.stats import STAT_COLUMNS
from seglake.storage.writer import SegmentWriter
from tests.key_index_check import check_partition_dir
from tests.lake_check import lake_records

CONF = LogConfig.load(
    overrides={"log.segment.bytes": "4000", "batch.size": "512", "log.index.interval.bytes": "256"}
)
FS = pafs.LocalFileSystem()


def _records(first: int, n: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array(range(first, first + n), pa.int64()),
            "timestamp": pa.array(
                [1_700_000_000_000 + (i * 37 + 13 * ord(tag[0])) % 997 for i in range(n)],
                pa.int64(),
            ),
            "timestamp_type": pa.array([0] * n, pa.int32()),
            "key": pa.array([f"k{i % 5}".encode() for i in range(n)], pa.binary()),
            "value": pa.array([f"{tag}-{i}".encode() * 3 for i in range(n)], pa.binary()),
            "headers": pa.array(
                [[]] * n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            ),
        }
    )


def _piece(
    root: Path, stage: str, order: int, parts: dict[int, pa.Table], indexes: bool = True
) -> Piece:
    """What a sink task stages: segments under _staging/<stage>/t-<p>/."""
    rows = []
    for p, recs in parts.items():
        d = root / "_staging" / stage / f"t-{p}"
        first = int(recs["offset"][0].as_py())
        w = SegmentWriter(FS, str(d), config=CONF, min_offset=first, indexes=indexes)
        infos = w.append(recs) + w.close()
        rows += [i.catalog_row("t", p, f"t-{p}/{Path(i.log_path).name}") for i in infos]
    return Piece(stage, order, pa.Table.from_pylist(rows).select(list(PIECE_COLUMNS)))


def _commit(root: Path, run: str, pieces: list[Piece], assigned: bool, append: str = "copy"):
    return commit_pieces(
        LakeHandle.open(str(root)), run, pieces, config=CONF, assigned=assigned, append=append
    )


def test_rebase_equals_writing_at_the_final_offsets(tmp_path):
    recs = _records(0, 300, "r")
    shifted = recs.set_column(0, "offset", pa.array(range(1000, 1300), pa.int64()))
    a = SegmentWriter(
        FS, str(tmp_path / "a"), config=CONF.with_overrides({"log.segment.bytes": "1000000"})
    )
    b = SegmentWriter(
        FS,
        str(tmp_path / "b"),
        config=CONF.with_overrides({"log.segment.bytes": "1000000"}),
        min_offset=1000,
    )
    (ia,) = a.append(recs) + a.close()
    (ib,) = b.append(shifted) + b.close()
    got = rebase(Path(ia.log_path).read_bytes(), 1000)
    assert got == Path(ib.log_path).read_bytes()  # CRCs untouched: baseOffset is outside them


def test_pieces_are_rebased_in_task_order_and_grow_the_newest_segment(tmp_path):
    root = tmp_path / "lake"
    a, b, c = _records(0, 40, "a"), _records(0, 30, "b"), _records(0, 25, "c")
    r1 = _commit(
        root,
        "stream-q-0",
        [_piece(root, "s1", 1, {0: b}), _piece(root, "s0", 0, {0: a, 1: c})],
        True,
    )
    assert r1.result.committed and r1.tails == []
    got = lake_records(str(root))
    p0 = got[got.partition == 0]
    assert p0.offset.tolist() == list(range(70))
    assert p0.value.tolist() == a["value"].to_pylist() + b["value"].to_pylist()
    # the next batch goes into the same (newest, small) segments: one commit, tails replaced
    d = _records(0, 10, "d")
    r2 = _commit(root, "stream-q-1", [_piece(root, "s2", 0, {0: d, 1: d})], True)
    assert sorted(r2.tails) == [("t", 0, 0), ("t", 1, 0)]
    segs = Catalog(str(root)).segments().to_pandas()
    assert sorted(segs.base_offset.tolist()) == [0, 0] and sorted(segs.next_offset) == [35, 80]
    got = lake_records(str(root))
    assert got[got.partition == 0].value.tolist()[70:] == d["value"].to_pylist()
    assert got[got.partition == 1].offset.tolist() == list(range(35))
    # the grown segments' old files are retired: a reader of the version before still reads them
    assert (root / "_retired" / "stream-q-0" / "t-0" / "00000000000000000000.log").stat().st_size
    before = lake_records(str(root), version=r1.result.version)
    assert (
        before[before.partition == 0].value.tolist()
        == a["value"].to_pylist() + b["value"].to_pylist()
    )
    # the segment reads back whole and its indexes are Kafka's (recover finds nothing to fix)
    from seglake.storage.recovery import recover_segment

    rec = recover_segment(
        FS, str(root / "t-0" / "00000000000000000000.log"), interval=256, dry_run=True
    )
    assert not rec.changed and rec.next_offset == 80
    assert rec.key_index is None  # the joined and the grown segments' .keyindex are right
    assert check_partition_dir(root / "t-0") == check_partition_dir(root / "t-1") == 1
    row = segs[segs.partition == 0].iloc[0]
    for c in STAT_COLUMNS:  # what the files say of it, tail minima aside (checked below)
        if c == "tail_min_timestamps":
            continue
        assert row[c] == getattr(rec, c), c
    # the joined tail minima are exact: min timestamp of every record from the offset on
    p0 = got[got.partition == 0]
    for cp in row["tail_min_timestamps"]:
        assert cp["min_timestamp"] == p0[p0.offset >= cp["offset"]].timestamp.min()
    # a replay of a committed batch writes nothing and drops its new pieces
    version = Catalog(str(root)).version()
    again = _commit(root, "stream-q-1", [_piece(root, "s3", 0, {0: d})], True)
    assert again.already_committed and Catalog(str(root)).version() == version
    assert not (root / "_staging").exists() or not any((root / "_staging").iterdir())


def test_full_segments_roll_and_given_offsets_are_kept(tmp_path):
    root = tmp_path / "lake"
    big = _records(100, 400, "g")  # given offsets from 100
    r = _commit(root, "stream-q-0", [_piece(root, "s0", 0, {0: big})], False)
    segs = r.rows.to_pandas().sort_values("base_offset")
    assert segs.base_offset.iloc[0] == 100 and segs.next_offset.iloc[-1] == 500
    assert (segs.size_bytes <= 4000).all() and len(segs) > 1
    with pytest.raises(OffsetOrderError, match="below 500"):
        _commit(root, "stream-q-1", [_piece(root, "s1", 0, {0: _records(450, 5, "x")})], False)


def test_a_grown_segment_not_yet_published_reads_from_staging(tmp_path, monkeypatch):
    """The driver died after the commit, before the move: the old, shorter file is still
    at the final path; readers of the new catalog version must read the staged copy."""
    root = tmp_path / "lake"
    _commit(root, "stream-q-0", [_piece(root, "s0", 0, {0: _records(0, 20, "a")})], True)
    monkeypatch.setattr("seglake.lake.stream_commit.publish_pending", lambda *a, **k: 0)
    _commit(root, "stream-q-1", [_piece(root, "s1", 0, {0: _records(0, 20, "b")})], True)
    got = lake_records(str(root))
    assert got.offset.tolist() == list(range(40))
    assert got.value.tolist()[20:] == _records(0, 20, "b")["value"].to_pylist()
    staging_module.publish_pending(LakeHandle.open(str(root)), "stream-q-1")
    assert lake_records(str(root)).equals(got)


def _files(root: Path) -> dict[str, bytes]:
    """Every segment file of the lake's partition directories."""
    return {
        str(f.relative_to(root)): f.read_bytes()
        for f in sorted(root.glob("t-*/*"))
        if f.suffix in (".log", ".index", ".timeindex", ".keyindex")
    }


def _batches(root: Path, n: int) -> list[list[Piece]]:
    """``n`` micro-batches of two tasks each over three partitions (non-monotonic
    timestamps; sizes that fill the 4000-byte segments every few batches)."""
    out = []
    for i in range(n):
        a, b = _records(0, 7 + 5 * i, f"a{i}"), _records(0, 11 + 3 * i, f"b{i}")
        out.append(
            [
                _piece(root, f"s{i}-0", 0, {0: a, 1: b}),
                _piece(root, f"s{i}-1", 1, {0: b, 2: a}),
            ]
        )
    return out


def test_in_place_append_equals_the_staged_copy_byte_for_byte(tmp_path):
    roots = {mode: tmp_path / mode for mode in ("true", "copy")}
    in_place = []
    for mode, root in roots.items():
        for i, pieces in enumerate(_batches(root, 8)):
            r = _commit(root, f"stream-q-{i}", pieces, True, append=mode)
            if mode == "true":
                in_place += r.in_place
    assert in_place, "some batches grew a segment in place"
    grown, copied = (_files(r) for r in roots.values())
    assert grown == copied
    assert any(name.endswith(".keyindex") for name in grown)
    for d in roots["true"].glob("t-*"):
        check_partition_dir(d)
    cols = [c for c in Catalog(str(roots["copy"])).segments().schema.names if c != "committed_at"]
    assert (
        Catalog(str(roots["true"]))
        .segments()
        .select(cols)
        .equals(Catalog(str(roots["copy"])).segments().select(cols))
    )
    # nothing retired or staged for segments grown in place
    assert not (roots["true"] / "_retired").exists() or not any(
        (roots["true"] / "_retired").rglob("*.log")
    )


def test_a_crash_between_the_append_and_the_commit_is_cut_then_appended_once(tmp_path, monkeypatch):
    root, ref = tmp_path / "lake", tmp_path / "ref"
    batches = _batches(root, 3)
    for i, pieces in enumerate(_batches(ref, 3)):
        _commit(ref, f"stream-q-{i}", pieces, True, append="copy")
    _commit(root, "stream-q-0", batches[0], True, append="true")
    before = lake_records(str(root))
    version = Catalog(str(root)).version()

    def die(*a, **k):
        raise KeyboardInterrupt("the driver died before the catalog commit")

    monkeypatch.setattr(Catalog, "commit", die)
    with pytest.raises(KeyboardInterrupt):
        _commit(root, "stream-q-1", batches[1], True, append="true")
    monkeypatch.undo()
    rows = Catalog(str(root)).segments().to_pandas()
    longer = [
        (root / p).stat().st_size > s for p, s in zip(rows.path, rows.size_bytes, strict=True)
    ]
    assert any(longer), "bytes were appended past the catalog size"
    # readers of the committed version see exactly it (indexes clipped to the row)
    assert Catalog(str(root)).version() == version
    assert lake_records(str(root)).equals(before)
    # recover (before the restart) cuts the uncommitted bytes instead of committing them
    recover_lake(LakeHandle.open(str(root)))
    assert lake_records(str(root)).equals(before)
    assert all(
        (root / p).stat().st_size == s for p, s in zip(rows.path, rows.size_bytes, strict=True)
    )
    # Spark replays the batch (its tasks stage new pieces): cut, appended once
    replay = _batches(root, 2)[1]
    _commit(root, "stream-q-1", replay, True, append="true")
    _commit(root, "stream-q-2", batches[2], True, append="true")
    assert _files(root) == _files(ref)
    assert lake_records(str(root)).equals(lake_records(str(ref)))


def test_a_reader_pinned_before_an_append_reads_its_version(tmp_path):
    from seglake.api.lake import Lake

    root = tmp_path / "lake"
    batches = _batches(root, 2)
    _commit(root, "stream-q-0", batches[0], True, append="true")
    pinned = Lake(str(root))
    first = lake_records(str(root))
    r = _commit(root, "stream-q-1", batches[1], True, append="true")
    assert r.in_place
    for p in (0, 1, 2):
        part = pinned.partition("t", p)
        got = part.read(0, 10_000, as_="arrow")
        want = first[first.partition == p]
        assert got.column("offset").to_pylist() == want.offset.tolist()
        assert got.column("value").to_pylist() == want.value.tolist()


def test_segment_ms_rolls_the_newest_segment(tmp_path):
    root = tmp_path / "lake"
    conf = CONF.with_overrides({"log.roll.ms": "5000", "log.segment.bytes": "1000000"})
    base = _records(0, 20, "a")
    for i in range(4):  # batch i's timestamps are i * 3 s later
        recs = base.set_column(
            1, "timestamp", pa.compute.add(base["timestamp"], pa.scalar(3000 * i, pa.int64()))
        )
        pieces = [_piece(root, f"s{i}", 0, {0: recs})]
        commit_pieces(
            LakeHandle.open(str(root)), f"stream-q-{i}", pieces, config=conf, assigned=True
        )
    segs = Catalog(str(root)).segments().to_pandas().sort_values("base_offset")
    # batches 0 and 1 are within 5 s of the segment's first batch, 2 is not: rolls; 3 joins 2
    assert segs.base_offset.tolist() == [0, 40]
    assert segs.next_offset.tolist() == [40, 80]
    recs = lake_records(str(root))
    for s in segs.itertuples():  # no segment spans more than log.roll.ms of batch time
        mine = recs[(recs.offset >= s.base_offset) & (recs.offset < s.next_offset)]
        assert mine.timestamp.max() - mine.timestamp.min() <= 5000 + 997


def test_a_batch_planned_on_a_tail_that_grew_since_is_a_conflict(tmp_path, monkeypatch):
    """Two appenders of one newest segment (staged copies: no lock): the second must not
    replace the first's grown row with its own (that would drop the first's records)."""
    from seglake.errors import ConcurrentRunError
    from seglake.lake import stream_commit

    root = tmp_path / "lake"
    batches = _batches(root, 3)
    _commit(root, "stream-q-0", batches[0], True)
    stale = stream_commit._newest(Catalog(str(root)).segments())
    _commit(root, "stream-a-1", batches[1], True)  # another query grows the tails first
    monkeypatch.setattr(stream_commit, "_newest", lambda catalog: stale)
    with pytest.raises(ConcurrentRunError, match="grown by another run first"):
        _commit(root, "stream-b-1", batches[2], True)


def test_pieces_at_their_final_offsets_are_moved_as_rewritten_ones_would_be(tmp_path):
    """append=false: a piece numbered from the log end offset (the sink's first task of a
    partition) is moved into place; one numbered from 0 is rebased and rewritten; the
    lakes are equal byte for byte."""
    lakes = {}
    for name, starts in {"moved": (0, 30), "rebased": (0, 0)}.items():
        root = lakes[name] = tmp_path / name
        for i, first in enumerate(starts):
            piece = _piece(root, f"s{i}", 0, {0: _records(first, 30, f"m{i}")})
            r = _commit(root, f"stream-q-{i}", [piece], True, append="false")
            assert r.result.committed
    assert _files(lakes["moved"]) == _files(lakes["rebased"])
    assert len(_files(lakes["moved"])) == 8  # two segments (.keyindex equal too)


def test_an_in_place_append_planned_on_rows_read_before_another_append_rereads_them(
    tmp_path, monkeypatch
):
    """The rows are read before the files are locked: when another batch grew a file in
    between, the appender re-reads them under the lock and appends after that batch
    (cutting to the stale size would destroy committed records)."""
    from seglake.lake import stream_commit

    root, ref = tmp_path / "lake", tmp_path / "ref"
    for i, pieces in enumerate(_batches(ref, 3)):
        _commit(ref, f"stream-q-{i}", pieces, True, append="true")
    batches = _batches(root, 3)
    _commit(root, "stream-q-0", batches[0], True, append="true")
    stale = stream_commit._newest(Catalog(str(root)).segments())
    _commit(root, "stream-q-1", batches[1], True, append="true")
    real = stream_commit._newest
    first = iter([lambda catalog: stale])
    monkeypatch.setattr(stream_commit, "_newest", lambda catalog: next(first, real)(catalog))
    r = _commit(root, "stream-q-2", batches[2], True, append="true")
    assert r.in_place
    assert _files(root) == _files(ref)


@pytest.mark.parametrize("append", ["true", "copy"])
def test_pieces_staged_without_index_files_make_the_same_lake(tmp_path, append):
    """The sink stages no index files when the commit appends (it continues the newest
    segment's indexes; a piece that becomes a segment of its own is rewritten with its
    indexes built): the lake is the one pieces with index files make, byte for byte."""
    lakes = {}
    for indexes in (True, False):
        root = lakes[indexes] = tmp_path / f"indexes-{indexes}"
        for i in range(4):
            parts = {0: _records(0, 40, f"m{i}"), 1: _records(0, 15, f"n{i}")}
            piece = _piece(root, f"s{i}", 0, parts, indexes)
            assert _commit(root, f"stream-q-{i}", [piece], True, append=append).result.committed
        assert not list((root / "_staging").rglob("*.*index"))  # nothing left staged
    assert _files(lakes[True]) == _files(lakes[False])
    assert sum(n.endswith(".timeindex") for n in _files(lakes[False])) >= 3  # rolled
