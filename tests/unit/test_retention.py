"""Retention: Kafka's rules on catalog rows (time, size, log start offset, never the
newest segment), then catalog-first deletion, and a crash between catalog and files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.lake import retention as retention_mod
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.retention import RetentionOptions, apply_retention
from seglake.lake.staging import open_partition
from seglake.storage.retention import (
    RetentionRules,
    parse_log_start_offsets,
    plan_retention,
    retention_rules,
)
from tests.unit.test_recovery import N, logs, make_lake, pristine  # noqa: F401

DAY = 86_400_000


def rows(specs: list[tuple[str, int, int, int, int, int]]) -> pa.Table:
    """(topic, partition, base, next, max_timestamp, size) -> catalog-like rows."""
    t, p, b, n, m, s = zip(*specs, strict=True)
    return pa.table(
        {
            "topic": list(t),
            "partition": pa.array(p, pa.int32()),
            "base_offset": list(b),
            "next_offset": list(n),
            "max_timestamp": list(m),
            "size_bytes": list(s),
            "committed_at": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.UTC)] * len(t), pa.timestamp("us", tz="UTC")
            ),
        }
    )


SEGS = rows(
    [
        ("a", 0, 0, 10, 1 * DAY, 100),
        ("a", 0, 10, 20, 2 * DAY, 100),
        ("a", 0, 20, 30, 3 * DAY, 100),
        ("a", 0, 30, 40, 4 * DAY, 100),
        ("b", 1, 0, 5, 1 * DAY, 50),
    ]
)


def bases(t: pa.Table) -> list[tuple[str, int, int]]:
    return list(
        zip(
            t.column("topic").to_pylist(),
            t.column("partition").to_pylist(),
            t.column("base_offset").to_pylist(),
            strict=True,
        )
    )


def test_time_rule_and_newest_kept() -> None:
    plan = plan_retention(SEGS, now_ms=10 * DAY, retention_ms=7 * DAY + 1)
    assert bases(plan) == [("a", 0, 0), ("a", 0, 10)]
    # everything expired: all but each partition's newest
    plan = plan_retention(SEGS, now_ms=100 * DAY, retention_ms=DAY)
    assert bases(plan) == [("a", 0, 0), ("a", 0, 10), ("a", 0, 20)]
    assert plan_retention(SEGS, now_ms=100 * DAY, retention_ms=-1).num_rows == 0


def test_time_rule_stops_at_first_young_segment() -> None:
    t = rows([("a", 0, 0, 1, 9 * DAY, 1), ("a", 0, 1, 2, 1 * DAY, 1), ("a", 0, 2, 3, 9 * DAY, 1)])
    assert plan_retention(t, now_ms=10 * DAY, retention_ms=5 * DAY).num_rows == 0


def test_size_rule() -> None:
    # 400 bytes, limit 250: delete while the rest stays >= 250 -> 2 segments (200 left)
    assert bases(plan_retention(SEGS, now_ms=0, retention_bytes=200)) == [("a", 0, 0), ("a", 0, 10)]
    assert bases(plan_retention(SEGS, now_ms=0, retention_bytes=250)) == [("a", 0, 0)]
    assert bases(plan_retention(SEGS, now_ms=0, retention_bytes=0)) == [
        ("a", 0, 0),
        ("a", 0, 10),
        ("a", 0, 20),
    ]


def test_log_start_offset_rule() -> None:
    plan = plan_retention(SEGS, now_ms=0, log_start_offsets={("a", 0): 20})
    assert bases(plan) == [("a", 0, 0), ("a", 0, 10)]
    plan = plan_retention(SEGS, now_ms=0, log_start_offsets={("a", 0): 19, ("b", 1): 99})
    assert bases(plan) == [("a", 0, 0)]
    assert "log start offset" in plan.column("reason")[0].as_py()


def test_missing_timestamps_use_commit_time() -> None:
    t = rows([("a", 0, 0, 1, -1, 1), ("a", 0, 1, 2, -1, 1)])
    now = int(dt.datetime(2024, 1, 3, tzinfo=dt.UTC).timestamp() * 1000)
    assert bases(plan_retention(t, now_ms=now, retention_ms=DAY)) == [("a", 0, 0)]
    assert plan_retention(t, now_ms=now, retention_ms=3 * DAY).num_rows == 0


def test_parse_log_start_offsets() -> None:
    assert parse_log_start_offsets(["a.b-c:3:100"]) == {("a.b-c", 3): 100}
    for bad in ["a:1", "../x:0:1", "a:x:1", "a:0:-5"]:
        with pytest.raises(ConfigError):
            parse_log_start_offsets([bad])


def test_apply_retention_catalog_first(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    segs = logs(root / "t-0")
    v = cat.version()
    by_size = RetentionRules(retention_bytes=0)
    dry = apply_retention(
        LakeHandle.open(str(root)), by_size, RetentionOptions(now_ms=0, dry_run=True)
    )
    assert dry.deleted.num_rows == len(segs) - 1 and cat.version() == v
    rep = apply_retention(LakeHandle.open(str(root)), by_size, RetentionOptions(delete_delay_ms=0))
    assert cat.version() == v + 1 and rep.deleted.num_rows == len(segs) - 1
    assert [p.name for p in logs(root / "t-0")] == [segs[-1].name]
    assert sorted(p.name for p in (root / "t-0").iterdir()) == sorted(
        segs[-1].with_suffix(s).name for s in (".log", ".index", ".timeindex", ".keyindex")
    )
    log = open_partition(LakeHandle.open(str(root)), "t", 0)
    assert log.log_start_offset == int(segs[-1].stem) and log.log_end_offset == N
    assert log.read(log.log_start_offset, 10 * N).num_rows == N - int(segs[-1].stem)
    # nothing more to delete: the newest stays
    everything = RetentionRules(retention_ms=0, retention_bytes=0)
    assert apply_retention(LakeHandle.open(str(root)), everything).deleted.num_rows == 0


def test_crash_between_catalog_and_files(
    tmp_path: Path,
    pristine: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    segs = logs(root / "t-0")

    def crash(*a, **k):
        raise KeyboardInterrupt("killed after the commit")

    monkeypatch.setattr(retention_mod, "retire", crash)
    with pytest.raises(KeyboardInterrupt):
        apply_retention(
            LakeHandle.open(str(root)),
            RetentionRules(log_start_offsets={("t", 0): int(segs[2].stem)}),
        )
    monkeypatch.undo()
    # committed: readers see the new log start at once; the files are still there
    assert cat.segments("t", 0).column("base_offset").to_pylist() == [int(p.stem) for p in segs[2:]]
    assert logs(root / "t-0") == segs
    expected = open_partition(LakeHandle.open(str(root)), "t", 0).read(0, 10 * N)
    assert expected.column("offset").to_pylist()[0] == int(segs[2].stem)
    # one stray .deleted too (a crash mid-rename)
    (root / "t-0" / (segs[0].name + ".deleted")).write_bytes(b"x")
    nothing_more = RetentionRules(log_start_offsets={("t", 0): 0})
    rep = apply_retention(
        LakeHandle.open(str(root)), nothing_more
    )  # retires the leftovers: kept a while
    assert rep.deleted.num_rows == 0 and len(rep.leftovers_finished) >= 7
    assert logs(root / "t-0") == segs and not list((root / "t-0").glob("*.deleted"))
    rep = apply_retention(
        LakeHandle.open(str(root)), nothing_more, RetentionOptions(delete_delay_ms=0)
    )
    assert rep.leftovers_finished == [] and len(rep.files_deleted) >= 6
    assert logs(root / "t-0") == segs[2:]
    assert not list((root / "t-0").glob("*.deleted"))
    after = open_partition(LakeHandle.open(str(root)), "t", 0).read(0, 10 * N)
    assert after.equals(expected)  # nothing visible was lost


def test_cli_retention(tmp_path: Path, pristine: Path, capsys) -> None:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    assert main(["retention", str(root), "--retention-bytes", "0", "--dry-run"]) == 0
    assert "would remove" in capsys.readouterr().out
    leo = Catalog(str(root)).log_end_offsets()[("t", 0)]
    past = ["--log-start-offset", f"t:0:{leo + 1}", "--retention-ms", "-1"]
    assert main(["retention", str(root), *past]) == 2  # Kafka: OFFSET_OUT_OF_RANGE
    at_end = ["--log-start-offset", f"t:0:{leo}", "--retention-ms", "-1"]
    assert main(["retention", str(root), *at_end]) == 0
    assert len(Catalog(str(root)).segments("t", 0)) == 1
    assert main(["retention", str(root), "--log-start-offset", "../x:0:1"]) == 2


def test_only_the_rules_asked_for_apply(tmp_path: Path, pristine: Path, capsys) -> None:  # noqa: F811
    """Issue 16.2: a retention run with only a log start offset removed every segment
    but the newest of an old lake (the 7-day default applied behind its back)."""
    root = tmp_path / "lake"
    make_lake(root, pristine)  # timestamps of 2023: far older than 7 days
    segs = logs(root / "t-0")
    start = int(segs[2].stem)
    assert main(["retention", str(root), "--log-start-offset", f"t:0:{start}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"retention rules: log start offset t-0:{start}" in out
    assert "would remove 2 segment(s)" in out and f"log start offset {start}" in out
    assert main(["retention", str(root), "--log-start-offset", f"t:0:{start}"]) == 0
    bases_left = Catalog(str(root)).segments("t", 0).column("base_offset").to_pylist()
    assert bases_left == [int(p.stem) for p in segs[2:]]
    # no rule at all: one line, exit 2, nothing removed
    assert main(["retention", str(root)]) == 2
    assert "no rule given" in capsys.readouterr().err
    # the broker defaults when asked for: 7 days, all but the newest
    assert main(["retention", str(root), "--broker-defaults"]) == 0
    assert "log.retention.ms=604800000" in capsys.readouterr().out
    assert len(Catalog(str(root)).segments("t", 0)) == 1


def test_retention_rules_resolution() -> None:
    assert retention_rules().empty
    assert str(retention_rules()) == "no rule"
    r = retention_rules(overrides={"log.retention.hours": "2", "log.segment.bytes": "99999"})
    assert (r.retention_ms, r.retention_bytes) == (7_200_000, -1)
    r = retention_rules(retention_bytes=5, defaults=LogConfig(retention_ms=9))
    assert (r.retention_ms, r.retention_bytes) == (9, 5)
    r = retention_rules(overrides={"log.retention.ms": "1"}, defaults=LogConfig())
    assert (r.retention_ms, r.retention_bytes) == (1, -1)
    with pytest.raises(ConfigError):
        retention_rules(retention_ms=-2)
