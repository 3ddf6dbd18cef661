"""Topic configs kept in the lake (``seglake config``): one catalog commit per change,
versioned with the rows, checked names and values against the one settings table, read by
every job (Kafka's precedence: a topic config over the broker-level setting; a job's
setting by its topic-level name over both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seglake.cli.main import main
from seglake.config import BY_BROKER_NAME, BY_TOPIC_NAME, SETTINGS, LogConfig
from seglake.errors import ConfigError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.recovery import fallback_intervals
from seglake.lake.retention import RetentionOptions, apply_retention
from seglake.lake.topic_config import parse_value, resolve, with_topics
from seglake.lake.topic_store import alter_config, overrides_for, stored_configs, topic_configs
from seglake.storage.retention import RetentionRules
from tests.unit.test_recovery import make_lake, pristine  # noqa: F401


def test_resolution_order() -> None:
    """Kafka's LogConfig.fromProps(broker defaults, topic overrides): the stored topic config
    beats the broker-level name, whether from --conf-file or --conf; the job's own
    topic-level name beats the stored one."""
    base = LogConfig(segment_bytes=5000)
    assert resolve(None, base).segment_bytes == 5000
    assert resolve({"segment.bytes": "6000"}, base).segment_bytes == 6000
    broker = base.with_overrides({"log.segment.bytes": "7000"})  # --conf log.segment.bytes
    assert resolve({"segment.bytes": "6000"}, broker).segment_bytes == 6000
    assert resolve({}, broker).segment_bytes == 7000
    run = base.with_overrides({"segment.bytes": "9000"})  # --conf segment.bytes
    assert resolve({"segment.bytes": "6000"}, run).segment_bytes == 9000
    both = {"log.segment.bytes": "7000", "segment.bytes": "8000"}
    assert base.with_overrides(both).segment_bytes == 8000  # topic name beats broker name
    hours = {"log.roll.hours": "1", "log.roll.ms": "5"}  # Kafka: log.roll.ms first
    assert LogConfig().with_overrides(hours).roll_ms == 5
    assert LogConfig().with_overrides({"log.roll.hours": "2"}).roll_ms == 7_200_000
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
        ("no.such.thing", "1", "unknown setting"),
        ("segment.index.bytes", "8", "below its minimum 12"),
        ("log.index.size.max.bytes", "8", "below its minimum 12"),
        ("segment.bytes", str(2**31), "above its maximum 2147483647"),
        ("segment.byte", "1", "did you mean 'segment.bytes'"),
        ("compression.gzip.level", "10", "above its maximum 9"),
        ("preallocate", "yes", "expected true or false"),
    ],
)
def test_bad_values_name_key_and_value(name: str, value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_value(name, value)


def test_one_table_same_bounds() -> None:
    """Each topic config and its broker-level name are one row: the same type, default and
    bounds whichever name is given (LogConfig and the topic store check with it)."""
    for s in SETTINGS:
        if s.topic and s.broker:
            assert BY_TOPIC_NAME[s.topic] is BY_BROKER_NAME[s.broker]
    for bad in ("8", "-1", str(2**31)):
        errors = []
        for name in ("segment.index.bytes", "log.index.size.max.bytes"):
            with pytest.raises(ConfigError) as e:
                LogConfig().with_overrides({name: bad})
            errors.append(str(e.value).split("=", 1)[1])
        assert errors[0] == errors[1]
    assert LogConfig().to_properties()["log.index.size.max.bytes"] == str(10 * 1024 * 1024)


KAFKA_4_TOPIC_CONFIGS = [
    "cleanup.policy",
    "compression.type",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
]


def test_every_kafka_topic_config_is_accepted(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    """Kafka 4.x's LogConfig names (``message.downconversion.enable`` and
    ``message.format.version`` were removed in 4.0); those without a lake meaning are kept."""
    assert set(KAFKA_4_TOPIC_CONFIGS) <= set(BY_TOPIC_NAME)
    cat = make_lake(tmp_path / "lake", pristine)
    values = {"preallocate": "true", "min.insync.replicas": "2", "segment.ms": "60000"}
    alter_config(cat, "t", set_=values)
    shown = resolve(overrides_for(stored_configs(cat), "t")).topic_values(values)
    assert {k: shown[k] for k in values} == values
    assert set(shown) == set(BY_TOPIC_NAME)
    with pytest.raises(ConfigError, match=r"unknown setting 'message\.downconversion\.enable'"):
        alter_config(cat, "t", set_={"message.downconversion.enable": "true"})


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
    run = LogConfig().with_overrides({"segment.bytes": "7000", "log.index.interval.bytes": "9"})
    cfg = topic_configs(cat, run).for_topic("t")
    assert cfg.segment_bytes == 7000 and cfg.compact  # --conf by topic-level name wins
    assert cfg.min_compaction_lag_ms == 5 and cfg.index_interval_bytes == 9
    assert topic_configs(cat, LogConfig()).for_topic("t").segment_bytes == 6000
    assert topic_configs(cat, LogConfig()).for_topic("other").segment_bytes == 1 << 30
    with pytest.raises(ConfigError, match=r"not a topic setting \(use segment.bytes\)"):
        alter_config(cat, "t", set_={"log.segment.bytes": "1"})
    with pytest.raises(ConfigError, match="a job setting"):
        alter_config(cat, "t", set_={"batch.size": "1"})
    with pytest.raises(ConfigError, match="both set and deleted"):
        alter_config(cat, "t", set_={"segment.bytes": "1000"}, delete=["segment.bytes"])


def test_retention_follows_cleanup_policy(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    root = tmp_path / "lake"
    cat = make_lake(root, pristine)
    n = cat.segments().num_rows
    later = 2_000_000_000_000
    with pytest.raises(ConfigError, match="no rule given"):
        apply_retention(
            LakeHandle.open(str(root)),
            RetentionRules(),
            RetentionOptions(now_ms=later, dry_run=True),
        )
    alter_config(cat, "t", set_={"cleanup.policy": "compact", "retention.ms": "1"})
    report = apply_retention(
        LakeHandle.open(str(root)), RetentionRules(), RetentionOptions(now_ms=later, dry_run=True)
    )
    assert report.deleted.num_rows == 0  # compact only: no time or size retention
    alter_config(cat, "t", set_={"cleanup.policy": "compact,delete"})
    report = apply_retention(
        LakeHandle.open(str(root)), RetentionRules(), RetentionOptions(now_ms=later, dry_run=True)
    )
    assert report.deleted.num_rows == n - 1  # the topic's retention.ms: all but the newest
    big = RetentionRules(retention_ms=10 * later)  # a rule the run gives wins
    assert (
        apply_retention(
            LakeHandle.open(str(root)), big, RetentionOptions(now_ms=later, dry_run=True)
        ).deleted.num_rows
        == 0
    )


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


def test_cli_refuses_a_topic_not_in_the_lake(tmp_path: Path, pristine: Path, capsys) -> None:  # noqa: F811
    """A typo'd topic commits nothing (exit 2, one line, a close name offered) unless
    --create asks for a topic the lake does not have yet."""
    root = tmp_path / "lake"
    cat = make_lake(root, pristine, "orders")
    v = cat.version()
    argv = ["config", str(root), "--topic", "odrers", "--set", "segment.bytes=65536"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "topic 'odrers' is not in the lake (did you mean 'orders'?)" in err
    assert "--create" in err
    assert cat.version() == v and stored_configs(cat) == {}
    assert main(["config", str(root), "--topic", "zzz"]) == 2  # describe: refused too
    assert "did you mean" not in capsys.readouterr().err
    assert main([*argv, "--create"]) == 0
    assert cat.version() == v + 1 and stored_configs(cat) == {"odrers": {"segment.bytes": "65536"}}
    assert main(["config", str(root), "--topic", "odrers", "--set", "segment.ms=1"]) == 0
    with pytest.raises(ConfigError, match=r"did you mean 'segment\.ms'"):
        alter_config(cat, "orders", set_={"segmnt.ms": "1"})


def test_with_topics_per_topic_and_lake_wide(tmp_path: Path) -> None:
    stored = {None: {"compression.type": "zstd"}, "a": {"segment.bytes": "65536"}}
    cfg = with_topics(LogConfig().with_overrides({"batch.size": "100"}), stored)
    assert cfg.for_topic("a").segment_bytes == 65536 and cfg.for_topic("a").codec == 4
    assert cfg.for_topic("b").segment_bytes == 1 << 30 and cfg.for_topic("b").codec == 4
    assert cfg.for_topic("a").batch_size == 100  # job settings stay the job's
    run = LogConfig().with_overrides({"compression.type": "lz4"})
    assert with_topics(run, stored).for_topic("a").codec == 3


def test_recovery_rebuilds_with_the_topics_index_interval(tmp_path: Path, pristine: Path) -> None:  # noqa: F811
    """A row without a recorded index.interval.bytes (an older catalog) is rebuilt with the
    topic's stored one, over the job's (broker-level) value."""
    cat = make_lake(tmp_path / "lake", pristine)
    alter_config(cat, "t", set_={"index.interval.bytes": "512"})
    base = LogConfig(index_interval_bytes=2048)
    assert fallback_intervals(cat, ["t", "u", "t"], base) == {"t": 512, "u": 2048}
