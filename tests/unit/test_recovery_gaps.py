"""The lake's recovery keeps every valid batch: a damaged batch in the middle of a
partition costs only its own offsets (a gap), not the rest of the partition as Kafka's
LogLoader rule does (which stays behind ``kafka_truncate`` and for broker directories).
Also: indexes are rebuilt with the ``log.index.interval.bytes`` recorded in the catalog."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from seglake import fs as lakefs
from seglake.cli.main import main
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import RecoverOptions, recover_lake
from seglake.lake.rows import rows_table
from seglake.lake.staging import open_partition
from seglake.record.batch import scan_batches
from seglake.record.reader import decode_batches
from seglake.storage.log import PartitionLog
from seglake.storage.recovery import recover_partition, recover_segment
from tests.unit.test_recovery import CFG, INTERVAL, N, _records, logs, make_lake, pristine  # noqa: F401


def brute_force(d: Path) -> dict[int, tuple]:
    """{offset: (timestamp, key, value)} of every valid batch of every ``.log`` in ``d``."""
    out = {}
    for p in logs(d):
        buf = p.read_bytes()
        t = decode_batches(buf, scan_batches(buf))
        for o, ts, k, v in zip(
            *(t.column(c).to_pylist() for c in ("offset", "timestamp", "key", "value")),
            strict=True,
        ):
            out[o] = (ts, k, v)
    return out


def readable(root: Path) -> dict[int, tuple]:
    t = open_partition(LakeHandle.open(str(root)), "t", 0).read(0, 10 * N)
    cols = (t.column(c).to_pylist() for c in ("offset", "timestamp", "key", "value"))
    return {o: (ts, k, v) for o, ts, k, v in zip(*cols, strict=True)}


def damage(root: Path, where: str) -> tuple[Path, int, int, int]:
    """Flip a byte of a middle batch of a middle segment: in its records (CRC catches it)
    or in its length field (the next batch must be found by its magic byte). Returns the
    file, the batch's position and its first and last offsets."""
    seg = logs(root / "t-0")[1]
    data = bytearray(seg.read_bytes())
    scan = scan_batches(bytes(data))
    k = len(scan) // 2
    pos = int(scan.position[k])
    data[pos + (70 if where == "records" else 9)] ^= 0x10
    seg.write_bytes(bytes(data))
    return seg, pos, int(scan.base_offset[k]), int(scan.last_offset[k])


@pytest.mark.parametrize("where", ["records", "length"])
def test_bit_flip_in_a_lake_loses_only_the_damaged_batch(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    where: str,
) -> None:
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    expected = brute_force(root / "t-0")
    bases = cat.segments("t", 0).column("base_offset").to_pylist()
    seg, pos, first, last = damage(root, where)
    want = {o: r for o, r in expected.items() if not first <= o <= last}
    assert len(want) == len(expected) - (last - first + 1)
    v = cat.version()
    rep = recover_lake(LakeHandle.open(str(root)))
    assert cat.version() == v + 1  # not a dry run: one commit
    (part,) = [p for p in rep.partitions if p.changed]
    assert not part.deleted_segments
    assert part.lost == [
        dict(
            file=str(seg),
            position=pos,
            first_offset=first,
            last_offset=last,
            reason=part.lost[0]["reason"],
        )
    ]
    assert f"lost offsets {first}..{last}" in str(rep) and f"position {pos}" in str(rep)
    # every segment kept, the damaged one rewritten without the damaged batch
    assert cat.segments("t", 0).column("base_offset").to_pylist() == bases
    assert brute_force(root / "t-0") == want
    assert readable(root) == want
    log = open_partition(LakeHandle.open(str(root)), "t", 0)
    for o in want:  # every valid record at its offset
        assert log.read(o, 1).column("offset").to_pylist() == [o]
    for o in range(first, last + 1):  # an offset in the gap reads from the next one
        assert log.read(o, 1).column("offset").to_pylist() == [last + 1]
    ts = [want[o][0] for o in sorted(want)]
    for t in ts[:: max(1, len(ts) // 29)]:
        found = log.offsets_for_times(t)
        assert found.offset == min(o for o in want if want[o][0] >= t)
    row = cat.segments("t", 0).to_pylist()[1]
    assert row["record_count"] == sum(
        1 for o in want if row["base_offset"] <= o < row["next_offset"]
    )
    assert not recover_lake(LakeHandle.open(str(root))).changed  # idempotent


def test_kafka_truncate_deletes_later_segments(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    expected = brute_force(root / "t-0")
    rows = cat.segments("t", 0).to_pylist()
    _, _, first, _ = damage(root, "records")
    rep = recover_lake(LakeHandle.open(str(root)), RecoverOptions(kafka_truncate=True))
    (part,) = rep.partitions
    assert part.deleted_segments == [r["base_offset"] for r in rows[2:]]
    assert readable(root) == {o: r for o, r in expected.items() if o < first}
    lost = [(x["first_offset"], x["last_offset"]) for x in part.lost]
    assert lost == [(first, rows[1]["next_offset"] - 1)] + [
        (r["base_offset"], r["next_offset"] - 1) for r in rows[2:]
    ]


def test_broker_directory_keeps_kafkas_rule(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    """The CLI on a plain partition directory truncates and deletes (a replica refills);
    on a lake it keeps what is valid."""
    root = tmp_path / "lake"
    make_lake(root, pristine)
    names = [p.name for p in logs(root / "t-0")]
    damage(root, "records")
    d = tmp_path / "broker" / "t-0"
    shutil.copytree(root / "t-0", d)
    assert main(["recover", str(d)]) == 0
    assert [p.name for p in logs(d)] == names[:2]
    assert not recover_partition(str(d)).changed
    assert main(["recover", str(root)]) == 0
    assert [p.name for p in logs(root / "t-0")] == names


def test_kafka_truncate_flag_of_the_cli(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    capsys: pytest.CaptureFixture,
) -> None:
    root = tmp_path / "lake"
    make_lake(root, pristine)
    names = [p.name for p in logs(root / "t-0")]
    _, _, first, last = damage(root, "records")
    assert main(["recover", str(root), "--dry-run"]) == 0
    assert f"would lose offsets {first}..{last}" in capsys.readouterr().out
    assert main(["recover", str(root), "--kafka-truncate"]) == 0
    assert "lost offsets" in capsys.readouterr().out
    # the later segments lose their rows (their files go after file.delete.delay.ms)
    bases = Catalog(str(root)).segments("t", 0).column("base_offset").to_pylist()
    assert bases == [int(n[:20]) for n in names[:2]]


# ------------------------------------------------------------ recorded index interval


def written_lake(root: Path, interval: int) -> Catalog:
    """A lake whose rows come from the writer (as ingest's do)."""
    d = root / "t-0"
    d.mkdir(parents=True)
    cfg = CFG.__class__(**{**CFG.__dict__, "index_interval_bytes": interval})
    infos = PartitionLog.open(str(d), index_interval_bytes=interval).append(_records(), config=cfg)
    rows = [i.catalog_row("t", 0, f"t-0/{Path(i.log_path).name}") for i in infos]
    cat = Catalog(str(root))
    cat.commit(rows_table(rows), "setup")
    return cat


def test_recover_rebuilds_indexes_with_the_recorded_interval(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = written_lake(root, 500)  # not the default 4096 nor the tests' 300
    assert set(cat.segments().column("index_interval_bytes").to_pylist()) == {500}
    seg = logs(root / "t-0")[2]
    idx, tix = seg.with_suffix(".index"), seg.with_suffix(".timeindex")
    original = idx.read_bytes(), tix.read_bytes()
    assert len(original[0]) > 8  # several entries: the interval matters
    idx.write_bytes(bytes(range(256)) * 3)
    tix.unlink()
    rep = recover_lake(LakeHandle.open(str(root)))  # no interval given
    assert rep.rows_replaced == 0  # the rows still describe the files
    assert (idx.read_bytes(), tix.read_bytes()) == original
    assert set(cat.segments().column("index_interval_bytes").to_pylist()) == {500}


def test_readers_rebuild_a_missing_index_with_the_recorded_interval(tmp_path: Path) -> None:
    from seglake.storage.offset_index import OffsetIndex

    root = tmp_path / "lake"
    written_lake(root, 500)
    seg = logs(root / "t-0")[2]
    idx = seg.with_suffix(".index")
    want = OffsetIndex.from_bytes(idx.read_bytes(), int(seg.stem)).offsets.tolist()
    idx.unlink()  # a reader rebuilds it in memory
    log = open_partition(LakeHandle.open(str(root)), "t", 0)
    got = next(s for s in log.segments if s.base_offset == int(seg.stem))
    assert got.offset_index.offsets.tolist() == want


def test_catalog_without_the_interval_falls_back_to_the_argument(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    cat = written_lake(root, 500)
    rows = cat.segments()
    k = rows.schema.get_field_index("index_interval_bytes")
    cat.replace_rows(
        rows.set_column(k, rows.schema.field(k), pa.nulls(rows.num_rows, pa.int32())), "old"
    )
    seg = logs(root / "t-0")[2]
    idx = seg.with_suffix(".index")
    original = idx.read_bytes()
    idx.unlink()
    rep = recover_lake(LakeHandle.open(str(root)), RecoverOptions(interval=500))
    assert idx.read_bytes() == original
    # the rebuilt segment's row now records the interval its index was built with
    got = cat.segments().column("index_interval_bytes").to_pylist()
    assert got[2] == 500 and got.count(None) == len(got) - 1 and rep.rows_replaced == 1


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_one_flipped_bit_costs_only_its_batch(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    data: st.DataObject,
) -> None:
    """Any single bit flipped outside a batch's baseOffset (which its CRC does not cover):
    recovery with skip_damaged keeps every other batch of the segment byte for byte and
    every kept record is the original one at its offset."""
    src = logs(pristine)[1]
    buf = src.read_bytes()
    scan = scan_batches(buf)
    pos = data.draw(st.integers(0, len(buf) - 1))
    k = int(np.searchsorted(scan.position, pos, side="right")) - 1
    assume(pos - int(scan.position[k]) >= 8)
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(buf)
    bad[pos] ^= 1 << bit
    d = tmp_path / f"flip-{pos}-{bit}"
    d.mkdir()
    (d / src.name).write_bytes(bytes(bad))
    fs, _ = lakefs.resolve(str(d))
    rep = recover_segment(fs, str(d / src.name), interval=INTERVAL, skip_damaged=True)
    got = (d / src.name).read_bytes()
    batches = [buf[int(p) : int(p + n)] for p, n in zip(scan.position, scan.size, strict=True)]
    if rep.error is None:  # a flip no check sees (e.g. the leader epoch): nothing changes
        assert got == bytes(bad)
        return
    assert got == b"".join(batches[:k] + batches[k + 1 :])
    assert [(x.first_offset, x.last_offset) for x in rep.dropped] == [
        (int(scan.base_offset[k]), int(scan.last_offset[k]) if k < len(scan) - 1 else None)
    ]


def test_crash_after_the_rewrite_before_the_indexes(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rewrite moves later batches back: their old index entries would point past
    them, so the indexes are removed before the .log is rewritten. A crash right after
    the rewrite leaves no index (readers rebuild in memory) and every valid record is
    read at its offset; the next recover finishes the job."""
    from seglake.storage import segment_recovery

    root = tmp_path / "lake"
    make_lake(root, pristine)
    expected = brute_force(root / "t-0")
    _, _, first, last = damage(root, "records")
    want = {o: r for o, r in expected.items() if not first <= o <= last}
    real = segment_recovery.lakefs.write_bytes

    def crash(fs, path, data):
        if path.endswith(".index"):
            raise KeyboardInterrupt("crash")
        return real(fs, path, data)

    monkeypatch.setattr(segment_recovery.lakefs, "write_bytes", crash)
    with pytest.raises(KeyboardInterrupt):
        recover_lake(LakeHandle.open(str(root)))
    monkeypatch.undo()
    seg = logs(root / "t-0")[1]
    assert not seg.with_suffix(".index").exists()
    log = open_partition(LakeHandle.open(str(root)), "t", 0)
    assert readable(root) == want
    for o in sorted(want)[:: max(1, len(want) // 50)]:
        assert log.read(o, 1).column("offset").to_pylist() == [o]
    rep = recover_lake(LakeHandle.open(str(root)))
    assert rep.rows_replaced == 1 and seg.with_suffix(".index").exists()
    assert readable(root) == want
