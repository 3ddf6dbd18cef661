"""Topic configs kept in the lake (``seglake config``): one catalog commit per change,
versioned with the rows, checked names and values, read by retention and compact
(a job's --conf wins)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake.cli.main import main
from seglake.config import LogConfig
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.compaction import topic_configs
from seglake.lake.retention import apply_retention
from seglake.lake.topic_config import parse_value, resolve, split_conf
from seglake.lake.topic_store import alter_config, overrides_for, stored_configs
from seglake.storage.retention import RetentionRules
from tests.unit.test_recovery import make_lake, pristine  # noqa: F401


def test_resolution_order() -> None:
    base = LogConfig(segment_bytes=5000)
    assert resolve(None, None, base).segment_bytes == 5000
    assert resolve({"segment.bytes": "6000"}, None, base).segment_bytes == 6000
    assert (
        resolve({"segment.bytes": "6000"}, {"log.segment.bytes": "7000"}, base).segment_bytes
        == 7000
    )
    both = {"log.segment.bytes": "7000", "segment.bytes": "8000"}
    assert resolve(None, both, base).segment_bytes == 8000  # topic name beats broker name
    assert resolve({"cleanup.policy": "delete,compact"}).cleanup_policy == "compact,delete"
    cfg = resolve({"cleanup.policy": "compact"})
    assert cfg.compact and not cfg.delete


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("cleanup.policy", "bogus", "expected one of"),
        ("min.cleanable.dirty.ratio", "1.5", "above its maximum"),
        ("delete.retention.ms", "-5", "below its minimum"),
        ("segment.bytes", "x", "not an integer"),
        ("no.such.thing", "1", "unknown topic setting"),
    ],
)
def test_bad_values_name_key_and_value(name: str, value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_value(name, value)


def test_split_conf() -> None:
    topic, rest = split_conf(
        {"cleanup.policy": "compact", "log.segment.bytes": "9", "batch.size": "1"}
    )
    assert topic == {"cleanup.policy": "compact", "log.segment.bytes": "9"}
    assert rest == {"log.segment.bytes": "9", "batch.size": "1"}


def test_store_is_versioned_with_the_catalog(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    v0 = cat.version()
    r1 = alter_config(cat, "t", set_={"cleanup.policy": "compact", "delete.retention.ms": "0"})
    r2 = alter_config(cat, "t", delete=["delete.retention.ms"], set_={"segment.bytes": "6000"})
    alter_config(cat, None, set_={"min.compaction.lag.ms": "5"})
    assert (r1.version, r2.version) == (v0 + 1, v0 + 2)
    assert stored_configs(cat, version=v0) == {}
    assert stored_configs(cat, version=r1.version) == {
        "t": {"cleanup.policy": "compact", "delete.retention.ms": "0"}
    }
    now = stored_configs(cat)
    assert overrides_for(now, "t") == {
        "cleanup.policy": "compact",
        "segment.bytes": "6000",
        "min.compaction.lag.ms": "5",
    }
    assert cat.segments().num_rows  # rows untouched by config commits
    cfgs = topic_configs(cat, ["t"], {"segment.bytes": "7000"}, LogConfig())
    assert cfgs["t"].segment_bytes == 7000 and cfgs["t"].compact  # --conf wins
    with pytest.raises(ConfigError, match="not a topic setting"):
        alter_config(cat, "t", set_={"log.segment.bytes": "1"})
    with pytest.raises(ConfigError, match="both set and deleted"):
        alter_config(cat, "t", set_={"segment.bytes": "1000"}, delete=["segment.bytes"])


def test_retention_follows_cleanup_policy(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    n = cat.segments().num_rows
    later = 2_000_000_000_000
    with pytest.raises(ConfigError, match="no rule given"):
        apply_retention(str(root), RetentionRules(), now_ms=later, dry_run=True)
    alter_config(cat, "t", set_={"cleanup.policy": "compact", "retention.ms": "1"})
    report = apply_retention(str(root), RetentionRules(), now_ms=later, dry_run=True)
    assert report.deleted.num_rows == 0  # compact only: no time or size retention
    alter_config(cat, "t", set_={"cleanup.policy": "compact,delete"})
    report = apply_retention(str(root), RetentionRules(), now_ms=later, dry_run=True)
    assert report.deleted.num_rows == n - 1  # the topic's retention.ms: all but the newest
    big = RetentionRules(retention_ms=10 * later)  # a rule the run gives wins
    assert apply_retention(str(root), big, now_ms=later, dry_run=True).deleted.num_rows == 0


def test_cli(tmp_path: Path, pristine: Path, capsys) -> None:  # noqa: F811
    root = tmp_path / "lake"
    make_lake(root, pristine)
    assert main(["config", str(root), "--topic", "t", "--set", "cleanup.policy=compact"]) == 0
    out = capsys.readouterr().out
    assert (
        "cleanup.policy=compact  (override)" in out and "segment.bytes=1073741824  (default)" in out
    )
    assert main(["config", str(root), "--topic", "t", "--set", "cleanup.policy=x"]) == 2
    assert "cleanup.policy='x'" in capsys.readouterr().err
    assert Catalog(str(root)).exists()
