"""Issue 25 ("Trust, round two"): a lake reader never answers with fewer records than the
catalog committed without saying so.

1. A ``.log`` shorter than its current catalog row (cut at a batch boundary or inside a
   batch) is data loss: every reader raises one TruncatedSegmentError naming the file,
   both sizes and the lost offsets (skip mode: the rest, and the loss reported once);
   ``recover --dry-run`` names the offsets a truncation would drop.
3. A partition directory of a lake is read through the catalog: after retention, the
   retired segments (their files wait for ``file.delete.delay.ms``) are not records.
8. A reader pinned to a good version reads on when a later version has a bad row;
   ``--skip-corrupt`` prints one line per skipped batch.

Oracles: the catalog rows (what was committed) and a brute-force scan of each file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import seglake
from seglake.cli.main import main as cli_main
from seglake.errors import CorruptBatchWarning, CorruptRecordError, TruncatedSegmentError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.pinned import PinnedVersion
from seglake.lake.recovery import RecoverOptions, recover_lake
from seglake.lake.retention import apply_retention
from seglake.lake.staging import open_partition
from seglake.record.batch import scan_batches
from seglake.storage.point_reads import read_offsets, resolve_timestamps
from seglake.storage.retention import RetentionRules
from tests.unit.test_corrupt_reads import T0, N, damage, lake, logs, offsets, pristine  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def cut(root: Path, *, inside: bool, seg: int = 1) -> tuple[Path, int, int, int]:
    """Cut segment ``seg``'s ``.log`` (a middle one) at its 6th batch's start, or 30
    bytes into that batch. Returns ``(file, position, first lost offset, last lost
    offset)``: the lost ones from the catalog row, the kept ones from a scan."""
    path = logs(root)[seg]
    data = path.read_bytes()
    scan = scan_batches(data)
    assert len(scan) > 7
    pos = int(scan.position[5])
    path.write_bytes(data[: pos + (30 if inside else 0)])
    row = next(
        r for r in Catalog(str(root)).segments("t", 0).to_pylist() if r["path"].endswith(path.name)
    )
    assert row["size_bytes"] == len(data)
    return path, pos, int(scan.base_offset[5]), int(row["next_offset"]) - 1


def expect_loss(exc: pytest.ExceptionInfo, path: Path, pos: int, lo: int, hi: int) -> None:
    msg = str(exc.value)
    assert isinstance(exc.value, TruncatedSegmentError), msg
    assert str(path) in msg and f"position {pos}" in msg and "\n" not in msg, msg
    assert f"offsets {lo}..{hi} are gone" in msg, msg


@pytest.mark.parametrize("inside", [False, True], ids=["at_a_batch", "inside_a_batch"])
def test_a_log_cut_short_is_data_loss_for_every_reader(lake: Path, inside: bool) -> None:  # noqa: F811
    path, pos, lo, hi = cut(lake, inside=inside)
    p = seglake.open(str(lake)).partition("t", 0)
    for read in (
        lambda: p.read(0, N),
        lambda: p.read(lo, 3),
        lambda: p.range(T0, T0 + 10 * N),
        lambda: p.offsets_for_times(T0 + 10 * lo),
    ):
        with pytest.raises(TruncatedSegmentError) as exc:
            read()
        expect_loss(exc, path, pos, lo, hi)
    log = open_partition(LakeHandle.open(str(lake)), "t", 0)
    seg = log.segments[1]
    for read in (
        lambda: log.read_range(0, N),
        lambda: seg.read_records(),
        lambda: read_offsets(seg, np.array([lo, hi])),
        lambda: resolve_timestamps(seg, np.array([T0 + 10 * lo])),
    ):
        with pytest.raises(TruncatedSegmentError) as exc:
            read()
        expect_loss(exc, path, pos, lo, hi)
    # reads before the cut still answer
    assert offsets(p.read(0, 5)) == [0, 1, 2, 3, 4]
    # skip: every record but the lost ones, and the loss reported once
    s = seglake.open(str(lake), on_corrupt="skip").partition("t", 0)
    with pytest.warns(CorruptBatchWarning, match=f"offsets {lo}..{hi} are gone"):
        got = s.read(0, N)
    assert offsets(got) == [o for o in range(N) if not lo <= o <= hi]
    assert [(f, b.position, b.base_offset, b.last_offset) for f, b in s.skipped] == [
        (str(path), pos, lo, hi)
    ]


def test_cli_consume_and_read_of_a_log_cut_short(lake: Path, capsys) -> None:  # noqa: F811
    path, _, lo, hi = cut(lake, inside=False)
    for argv in (
        ["consume", str(lake), "--topic", "t"],
        ["consume", str(lake / "t-0"), "--topic", "t"],
        ["read", str(lake / "t-0"), "--offset", "0", "--max-records", str(N)],
        ["offset-for-time", str(lake / "t-0"), str(T0 + 10 * lo)],
    ):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err, err
        assert f"offsets {lo}..{hi} are gone" in err, err
    assert cli_main(["consume", str(lake), "--topic", "t", "--skip-corrupt"]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == N - (hi - lo + 1)
    assert err.count(f"offsets {lo}..{hi} are gone") == 1, err


def test_recover_dry_run_names_the_offsets_a_cut_drops(lake: Path) -> None:  # noqa: F811
    path, pos, lo, hi = cut(lake, inside=False)
    rep = recover_lake(LakeHandle.open(str(lake)), RecoverOptions(dry_run=True))
    lost = [x for p in rep.partitions for x in p.lost]
    assert [(x["file"], x["position"], x["first_offset"], x["last_offset"]) for x in lost] == [
        (str(path), pos, lo, hi)
    ], lost
    assert f"would lose offsets {lo}..{hi}" in str(rep), str(rep)
    # recovery commits what is left; then the segment reads whole again, as committed
    recover_lake(LakeHandle.open(str(lake)))
    got = seglake.open(str(lake)).partition("t", 0).read(0, N)
    assert offsets(got) == [o for o in range(N) if not lo <= o <= hi]


def test_a_pinned_reader_reports_a_cut_of_a_row_still_current(lake: Path) -> None:  # noqa: F811
    """A later commit that does not touch the segment: its row is current, the cut is
    data loss, not a superseded version."""
    pinned = Catalog(str(lake)).version()
    apply_retention(LakeHandle.open(str(lake)), RetentionRules(log_start_offsets={("t", 0): 0}))
    path, pos, lo, hi = cut(lake, inside=True)
    seg = open_partition(LakeHandle.open(str(lake)), "t", 0).segments[1]
    seg.pin = PinnedVersion(str(lake), pinned)
    with pytest.raises(TruncatedSegmentError) as exc:
        seg.read_records()
    expect_loss(exc, path, pos, lo, hi)


def test_partition_dir_of_a_lake_follows_the_catalog(lake: Path, capsys, monkeypatch) -> None:  # noqa: F811
    d = lake / "t-0"
    first = sorted(Catalog(str(lake)).segments("t", 0).column("base_offset").to_pylist())
    start = first[2]
    apply_retention(LakeHandle.open(str(lake)), RetentionRules(log_start_offsets={("t", 0): start}))
    assert (d / f"{first[0]:020d}.log").exists()  # retired, waiting for the delay
    # below the log start: read from it, saying so (auto.offset.reset=earliest)
    assert cli_main(["read", str(d), "--offset", "0", "--max-records", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["offset"] == start and f"log start offset {start}" in err
    assert cli_main(["offset-for-time", str(d), str(T0)]) == 0
    assert json.loads(capsys.readouterr().out)["offset"] == start
    assert cli_main(["consume", str(d), "--topic", "t", "--property", "print.offset=true"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"Offset:{start}\t") and err.endswith(f"total of {N - start} messages\n")
    # a relative path, from inside the lake
    monkeypatch.chdir(lake)
    assert cli_main(["offset-for-time", "t-0", str(T0)]) == 0
    assert json.loads(capsys.readouterr().out)["offset"] == start
    # recover of it would apply Kafka's rule behind the catalog's back: refused
    before = sorted(p.name for p in d.iterdir())
    assert cli_main(["recover", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"seglake recover {lake}" in err, err
    assert sorted(p.name for p in d.iterdir()) == before
    # a partition directory the catalog does not have holds nothing
    (lake / "t-7").mkdir()
    (lake / "t-7" / f"{0:020d}.log").write_bytes((d / f"{start:020d}.log").read_bytes())
    assert cli_main(["read", str(lake / "t-7"), "--offset", "0"]) == 2
    assert "no committed segment of t-7" in capsys.readouterr().err


def test_a_pinned_reader_reads_on_past_a_later_bad_row(lake: Path) -> None:  # noqa: F811
    """A later version whose row of t-0 is bad (its path in another partition's
    directory, written past seglake's checks): the reader pinned before it reads every
    record of its version."""
    from deltalake import write_deltalake

    lk = seglake.open(str(lake))
    pinned = Catalog(str(lake)).version()
    rows = Catalog(str(lake)).segments("t", 0)
    bad = rows.slice(rows.num_rows - 1)
    bad = bad.set_column(bad.schema.get_field_index("path"), "path", pa.array(["t-9/x.log"]))
    write_deltalake(Catalog(str(lake)).uri, bad, mode="append")
    assert Catalog(str(lake)).version() == pinned + 1
    assert offsets(lk.partition("t", 0).read(0, N)) == list(range(N))
    assert offsets(lk.partition("t", 0).range(T0, T0 + 10 * N)) == list(range(N))


def test_skip_corrupt_prints_one_line_per_batch(lake: Path) -> None:  # noqa: F811
    path, pos, lo, hi = damage(lake)
    argv = ["read", str(lake / "t-0"), "--offset", "0", "--max-records", str(N), "--skip-corrupt"]
    r = subprocess.run(
        [sys.executable, "-m", "seglake.cli.main", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if "skipped" in x]
    assert lines == [
        f"seglake: warning: skipped a damaged batch: {path}: position {pos}: batch with "
        f"offsets {lo}..{hi}" + lines[0].split(f"{lo}..{hi}", 1)[1]
    ], r.stderr


def test_damaged_batch_still_named_through_a_partition_dir(lake: Path) -> None:  # noqa: F811
    _, pos, _, _ = damage(lake)
    with pytest.raises(CorruptRecordError) as exc:
        seglake.open(str(lake)).partition("t", 0).read(0, N)
    assert f"position {pos}" in str(exc.value) and not isinstance(exc.value, TruncatedSegmentError)
