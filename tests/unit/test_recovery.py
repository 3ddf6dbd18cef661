"""Recovery (Kafka's LogSegment.recover / LogLoader): truncated tails, bit flips, bad or
missing indexes, leftover .swap/.cleaned/.deleted files, transaction indexes, and the
lake-level catalog fix. Every case checks that what was valid is still readable, byte
for byte, and that the recovered indexes answer lookups like a full scan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake import fs as lakefs
from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import RecoverOptions, recover_lake
from seglake.lake.rows import rows_table, segment_row
from seglake.lake.staging import open_partition
from seglake.record.batch import scan_batches
from seglake.record.control import ControlType
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.log import PartitionLog
from seglake.storage.recovery import recover_partition, recover_segment
from seglake.storage.txn_index import AbortedTxn, TransactionIndex
from tests.conftest import FIXTURES
from tests.key_index_check import check_partition_dir
from tests.unit.test_decode import control_batch, raw_batch, raw_record

N = 400
INTERVAL = 300
CFG = LogConfig(
    segment_bytes=2_500, batch_size=400, index_interval_bytes=INTERVAL, compression_type="lz4"
)


def _records(n: int = N, start: int = 0) -> pa.Table:
    ts = 1_700_000_000_000 + np.arange(n) * 10
    return pa.table(
        {
            "offset": pa.array(np.arange(start, start + n), pa.int64()),
            "timestamp": pa.array(ts, pa.int64()),
            "key": pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
            "value": pa.array([b"v" * (i % 40) for i in range(n)], pa.binary()),
        }
    )


def write_partition(d: Path) -> list:
    d.mkdir(parents=True)
    log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
    infos = log.append(_records(), config=CFG)
    assert len(infos) >= 4
    return infos


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pristine") / "t-0"
    write_partition(d)
    return d


@pytest.fixture
def part(pristine: Path, tmp_path: Path) -> Path:
    d = tmp_path / "t-0"
    shutil.copytree(pristine, d)
    return d


def logs(d: Path) -> list[Path]:
    return sorted(d.glob("*.log"))


def records(d: Path) -> list[tuple]:
    t = PartitionLog.open(str(d), index_interval_bytes=INTERVAL).read(0, 10 * N)
    return list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True))


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def assert_indexes_rebuilt(d: Path) -> None:
    """Every segment's indexes equal a rebuild from its (recovered) log."""
    for p in logs(d):
        base = int(p.stem)
        oi, ti = rebuild_indexes(scan_batches(p.read_bytes()), base, INTERVAL)
        assert p.with_suffix(".index").read_bytes() == oi.to_bytes(), p
        assert p.with_suffix(".timeindex").read_bytes() == ti.to_bytes(), p


def assert_lookups_match_scan(d: Path) -> None:
    log = PartitionLog.open(str(d), index_interval_bytes=INTERVAL)
    allr = log.read(0, 10 * N)
    offs = allr.column("offset").to_numpy()
    ts = allr.column("timestamp").to_numpy()
    for s in log.segments:
        assert s.index_source == "unread" or s.index_source == "file"
    for o in offs[:: max(1, len(offs) // 37)]:
        assert log.read(int(o), 1).column("offset").to_pylist() == [int(o)]
    for t in ts[:: max(1, len(ts) // 23)]:
        found = log.offsets_for_times(int(t))
        assert found is not None and found.offset == int(offs[np.argmax(ts >= t)])
    for s in log.segments:
        assert s.index_source == "file", s.index_source  # nothing had to be rebuilt on read


# ----------------------------------------------------------------------- segments


def test_intact_partition_is_untouched(part: Path) -> None:
    before = snapshot(part)
    rep = recover_partition(str(part), interval=INTERVAL)
    assert not rep.changed and snapshot(part) == before
    assert rep.log_end_offset == N


def test_truncated_tail(part: Path) -> None:
    last = logs(part)[-1]
    data = last.read_bytes()
    scan = scan_batches(data)
    cut = int(scan.position[-1]) + 30  # mid-way through the last batch
    last.write_bytes(data[:cut])
    expected = records(part)  # readers already stop at the valid prefix
    before = snapshot(part)
    dry = recover_partition(str(part), dry_run=True, interval=INTERVAL)
    assert snapshot(part) == before  # dry run writes nothing
    rep = recover_partition(str(part), interval=INTERVAL)
    seg = rep.segments[-1]
    assert seg.truncated_bytes == 30 and seg.valid_bytes == int(scan.position[-1])
    assert dry.segments[-1].truncated_bytes == 30 and dry.log_end_offset == rep.log_end_offset
    assert rep.log_end_offset == int(scan.last_offset[-2]) + 1
    assert last.stat().st_size == int(scan.position[-1])
    assert records(part) == expected
    assert_indexes_rebuilt(part)
    assert_lookups_match_scan(part)
    assert not recover_partition(str(part), interval=INTERVAL).changed  # idempotent


def test_bit_flip_truncates_and_deletes_later_segments(part: Path) -> None:
    segs = logs(part)
    victim = segs[1]
    data = bytearray(victim.read_bytes())
    scan = scan_batches(bytes(data))
    k = len(scan) // 2
    full = records(part)  # read before the damage: reads now refuse a corrupt batch
    data[int(scan.position[k]) + 70] ^= 0x10  # inside the records: CRC catches it
    victim.write_bytes(bytes(data))
    rep = recover_partition(str(part), interval=INTERVAL)
    assert rep.segments[1].error and "CRC" in rep.segments[1].error
    assert rep.segments[1].valid_bytes == int(scan.position[k])
    assert rep.deleted_segments == [int(p.stem) for p in segs[2:]]
    assert [p.name for p in logs(part)] == [p.name for p in segs[:2]]
    leo = int(scan.last_offset[k - 1]) + 1
    assert rep.log_end_offset == leo
    assert records(part) == [r for r in full if r[0] < leo]
    assert not list(part.glob("*.deleted"))
    assert_indexes_rebuilt(part)


@pytest.mark.parametrize("damage", ["garbage", "missing", "truncated", "wrong_position"])
def test_bad_index_rebuilt_log_untouched(part: Path, damage: str) -> None:
    seg = logs(part)[2]
    idx, tix = seg.with_suffix(".index"), seg.with_suffix(".timeindex")
    log_before = seg.read_bytes()
    if damage == "garbage":
        idx.write_bytes(bytes(range(256)) * 3)
        tix.write_bytes(b"\xff" * 120)
    elif damage == "missing":
        idx.unlink()
        tix.unlink()
    elif damage == "truncated":
        idx.write_bytes(idx.read_bytes()[:5])
        tix.write_bytes(tix.read_bytes()[:7])
    else:
        raw = bytearray(idx.read_bytes())
        raw[4:8] = (int.from_bytes(raw[4:8], "big") + 3).to_bytes(4, "big")
        idx.write_bytes(bytes(raw))
    rep = recover_partition(str(part), interval=INTERVAL)
    s = rep.segments[2]
    assert ".index" in s.rebuilt and s.truncated_bytes == 0
    if damage != "wrong_position":
        assert ".timeindex" in s.rebuilt
    assert seg.read_bytes() == log_before
    assert_indexes_rebuilt(part)
    assert_lookups_match_scan(part)


def test_broker_indexes_kept_byte_for_byte(tmp_path: Path) -> None:
    """__consumer_offsets-0's indexes depend on its restart history (a rebuild differs);
    they are valid, so recovery keeps them; --force rebuilds by Kafka's rules."""
    d = tmp_path / "__consumer_offsets-0"
    shutil.copytree(FIXTURES / "__consumer_offsets-0", d)
    before = snapshot(d)
    rep = recover_partition(str(d))
    assert not rep.changed and rep.segments[0].key_index == "missing"
    after = snapshot(d)  # the broker's files byte for byte, a .keyindex beside them
    assert {k: v for k, v in after.items() if not k.endswith(".keyindex")} == before
    assert check_partition_dir(d) == 1
    assert recover_partition(str(d)).segments[0].key_index is None  # kept, once right
    forced = recover_partition(str(d), force=True)
    assert forced.segments[0].rebuilt and forced.segments[0].truncated_bytes == 0
    assert (d / "00000000000000000000.log").read_bytes() == before["00000000000000000000.log"]


def test_offsets_going_backwards_are_an_invalid_batch(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    rec = raw_record(0, 0, b"k", b"v")
    good = raw_batch(rec, 1, base_offset=5) + raw_batch(rec, 1, base_offset=6)
    back = raw_batch(rec, 1, base_offset=3)  # CRC-valid, but offsets go backwards
    (d / "00000000000000000005.log").write_bytes(good + back)
    rep = recover_partition(str(d))
    assert rep.segments[0].valid_bytes == len(good) and "do not follow" in rep.segments[0].error
    assert rep.log_end_offset == 7


# ----------------------------------------------------------------------- pending files


def test_leftover_deleted_cleaned_and_swap(part: Path) -> None:
    segs = logs(part)
    # .deleted: a delete that crashed after the rename
    gone = segs[0]
    for suffix in (".log", ".index", ".timeindex"):
        p = gone.with_suffix(suffix)
        p.rename(p.with_name(p.name + ".deleted"))
    # .swap replacing segments 1 and 2 (a cleaner's output): their bytes concatenated
    s1, s2 = segs[1], segs[2]
    merged = s1.read_bytes() + s2.read_bytes()
    (part / (s1.name + ".swap")).write_bytes(merged)
    (part / (s1.with_suffix(".index").name + ".swap")).write_bytes(b"junk")
    # .cleaned at a later offset: an unfinished clean, discarded with any swap above it
    (part / (segs[3].name + ".cleaned")).write_bytes(b"half")
    expected = [r for r in records(part) if r[0] >= int(s1.stem)]
    rep = recover_partition(str(part), interval=INTERVAL)
    assert rep.completed_swaps and int(s2.stem) in rep.deleted_segments
    names = sorted(p.name for p in part.iterdir())
    assert not [n for n in names if n.endswith((".deleted", ".cleaned", ".swap"))]
    assert s1.read_bytes() == merged and not s2.exists()
    assert records(part) == expected
    assert_indexes_rebuilt(part)


# ----------------------------------------------------------------------- transactions


def test_txnindex_from_abort_markers(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    rec = raw_record(0, 0, b"k", b"v")
    TXN = 0x10
    buf = (
        raw_batch(rec, 1, base_offset=0, attributes=TXN, producer_id=7)
        + raw_batch(rec, 1, base_offset=1, attributes=TXN, producer_id=8)
        + raw_batch(rec, 1, base_offset=2, attributes=TXN, producer_id=7)
        + control_batch(ControlType.ABORT, base_offset=3, producer_id=7)
        + control_batch(ControlType.COMMIT, base_offset=4, producer_id=8)
        + raw_batch(rec, 1, base_offset=5, attributes=TXN, producer_id=9)
        + control_batch(ControlType.ABORT, base_offset=6, producer_id=9)
    )
    (d / "00000000000000000000.log").write_bytes(buf)
    rep = recover_partition(str(d))
    assert rep.segments[0].txn_index_entries == 2 and ".txnindex" in rep.segments[0].rebuilt
    txn = TransactionIndex.from_bytes((d / "00000000000000000000.txnindex").read_bytes(), 0)
    txn.sanity_check()
    # producer 7's txn began at 0, producer 8's (open when 7 aborted) at 1: LSO 1
    assert list(txn) == [AbortedTxn(7, 0, 3, 1), AbortedTxn(9, 5, 6, 7)]
    assert not recover_partition(str(d)).changed
    # a wrong .txnindex is replaced
    (d / "00000000000000000000.txnindex").write_bytes(
        TransactionIndex.from_bytes(txn.to_bytes()[:34], 0).to_bytes()
    )
    rep = recover_partition(str(d))
    assert "disagrees" in rep.segments[0].rebuilt[".txnindex"]
    assert (
        len(TransactionIndex.from_bytes((d / "00000000000000000000.txnindex").read_bytes(), 0)) == 2
    )


# ----------------------------------------------------------------------- lake


def make_lake(root: Path, pristine: Path, topic: str = "t", partition: int = 0) -> Catalog:
    d = root / f"{topic}-{partition}"
    shutil.copytree(pristine, d)
    fs, _ = lakefs.resolve(str(root))
    rows = []
    for p in logs(d):
        rec = recover_segment(fs, str(p), interval=INTERVAL, dry_run=True)
        rows.append(segment_row(topic, partition, rec, f"{topic}-{partition}/{p.name}"))
    cat = Catalog(str(root))
    cat.commit(rows_table(rows), f"setup-{topic}-{partition}")
    return cat


def test_recover_lake_fixes_catalog_in_one_commit(tmp_path: Path, pristine: Path) -> None:
    """Kafka's rule (``kafka_truncate``): the segments after a torn one are deleted."""
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    make_lake(root, pristine, "u", 3)
    d = root / "t-0"
    segs = logs(d)
    data = segs[1].read_bytes()
    scan = scan_batches(data)
    full = open_partition(LakeHandle.open(str(root)), "t", 0).read(0, 10 * N)
    segs[1].write_bytes(data[: int(scan.position[-1]) + 10])  # torn tail in segment 1
    v = cat.version()
    dry = recover_lake(
        LakeHandle.open(str(root)),
        RecoverOptions(dry_run=True, interval=INTERVAL, kafka_truncate=True),
    )
    assert cat.version() == v and dry.rows_replaced == 1 and dry.rows_removed == len(segs) - 2
    rep = recover_lake(
        LakeHandle.open(str(root)),
        RecoverOptions(interval=INTERVAL, delete_delay_ms=0, kafka_truncate=True),
    )
    assert cat.version() == v + 1  # one commit
    assert (rep.rows_replaced, rep.rows_removed) == (1, len(segs) - 2)
    rows = cat.segments("t", 0)
    assert rows.column("base_offset").to_pylist() == [int(p.stem) for p in segs[:2]]
    leo = int(scan.last_offset[-2]) + 1
    assert rows.column("next_offset").to_pylist()[-1] == leo
    assert rows.column("size_bytes").to_pylist()[-1] == int(scan.position[-1])
    assert [p.name for p in logs(d)] == [p.name for p in segs[:2]]  # files of removed rows gone
    after = open_partition(LakeHandle.open(str(root)), "t", 0).read(0, 10 * N)
    assert after.column("offset").to_pylist() == [
        o for o in full.column("offset").to_pylist() if o < leo
    ]
    assert cat.segments("u", 3).num_rows == len(segs)  # the other partition untouched
    again = recover_lake(
        LakeHandle.open(str(root)), RecoverOptions(interval=INTERVAL, kafka_truncate=True)
    )
    assert not again.changed and cat.version() == v + 1


def test_recover_lake_fills_in_and_corrects_tail_minima(tmp_path: Path, pristine: Path) -> None:
    """Rows of a catalog made before the tail minima get them from recovery; a wrong one
    (which would make a time filter skip records) is replaced; then nothing changes."""
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    good = cat.segments().column("tail_min_timestamps").to_pylist()
    assert all(good)
    rows = cat.segments()
    k = rows.schema.get_field_index("tail_min_timestamps")
    broken = [None] * rows.num_rows
    broken[-1] = [{**good[-1][0], "min_timestamp": good[-1][0]["min_timestamp"] + 1}]
    cat.replace_rows(
        rows.set_column(k, rows.schema.field(k), pa.array(broken, rows.schema.field(k).type)),
        "old-catalog",
    )
    v = cat.version()
    dry = recover_lake(LakeHandle.open(str(root)), RecoverOptions(dry_run=True, interval=INTERVAL))
    assert dry.rows_replaced == rows.num_rows and cat.version() == v
    rep = recover_lake(LakeHandle.open(str(root)), RecoverOptions(interval=INTERVAL))
    assert rep.rows_replaced == rows.num_rows and cat.version() == v + 1
    assert cat.segments().column("tail_min_timestamps").to_pylist() == good
    assert not recover_lake(LakeHandle.open(str(root)), RecoverOptions(interval=INTERVAL)).changed


def test_cli_recover(tmp_path: Path, pristine: Path, capsys) -> None:
    root = tmp_path / "lake"
    make_lake(root, pristine)
    last = logs(root / "t-0")[-1]
    last.write_bytes(last.read_bytes()[:-5])
    assert main(["recover", str(root), "--dry-run"]) == 0
    assert "would" in capsys.readouterr().out
    assert main(["recover", str(root), "--index-interval-bytes", str(INTERVAL)]) == 0
    assert main(["recover", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["log_end_offset"] is not None and not out["deleted_segments"]
    # a partition directory of the lake: Kafka's rule would bypass the catalog (issue 25)
    assert main(["recover", str(root / "t-0"), "--json"]) == 2
    assert f"seglake recover {root}" in capsys.readouterr().err
    assert main(["recover", str(tmp_path / "nope")]) == 2
