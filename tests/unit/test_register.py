"""Register a broker data directory (copied to tmp: the fixtures are read-only): catalog
rows match expected.json, broker indexes are kept, and lookups through the lake equal a
scan of the broker's .log."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seglake.cli.main import main
from seglake.errors import ConcurrentRunError, ConfigError, SegmentNotFoundError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from seglake.lake.staging import open_partition
from tests.compat.test_fixture_lookups import brute, first_at_or_after, row_tuples
from tests.conftest import FIXTURE_PARTITIONS, FIXTURES, load_expected
from tests.key_index_check import check_key_index


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    broker = tmp_path_factory.mktemp("broker") / "data"
    shutil.copytree(FIXTURES, broker)
    (broker / "meta.properties").write_text("version=1\n")
    (broker / "first-0.abc123-delete").mkdir()
    root = tmp_path_factory.mktemp("lake") / "lake"
    rep = register(LakeHandle.open(str(root)), str(broker), run_id="reg-1", include_internal=True)
    assert rep.rows == len(FIXTURE_PARTITIONS)
    assert "first-0.abc123-delete" in rep.skipped
    assert not any(p.changed for p in rep.partitions.values())  # broker indexes kept
    return root


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_rows_match_expected(lake: Path, partition: str) -> None:
    topic, part = partition.rsplit("-", 1)
    rows = Catalog(str(lake)).segments(topic, int(part)).to_pylist()
    exp = load_expected(partition)
    assert len(rows) == len(exp)
    for r, (name, seg) in zip(rows, sorted(exp.items()), strict=True):
        assert r["base_offset"] == seg["base_offset"] and r["size_bytes"] == seg["valid_bytes"]
        assert r["next_offset"] == seg["batches"][-1]["last_offset"] + 1
        assert r["record_count"] == sum(b["count"] for b in seg["batches"])
        assert r["max_timestamp"] == max(b["max_timestamp"] for b in seg["batches"])
        assert r["index_entries"] == len(seg["offset_index"])
        assert r["time_index_entries"] == len(seg["time_index"])
        assert r["index_interval_bytes"] == 4096  # register's (the broker's default)
        for suffix in (".log", ".index", ".timeindex"):  # copied byte for byte
            assert (lake / partition / f"{name}{suffix}").read_bytes() == (
                FIXTURES / partition / f"{name}{suffix}"
            ).read_bytes()
        check_key_index(lake / partition / f"{name}.log")  # built for the broker's segment


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_lookups_equal_scan(lake: Path, partition: str) -> None:
    topic, part = partition.rsplit("-", 1)
    log = open_partition(LakeHandle.open(str(lake)), topic, int(part))
    offs, ts, allrows, start, leo = brute(partition)
    assert (log.log_start_offset, log.log_end_offset) == (start, leo)
    assert row_tuples(log.read(start, len(allrows) + 10)) == allrows
    for o in [*list(offs[:: max(1, len(offs) // 40)]), int(offs[-1])]:
        got = log.read(int(o), 1)
        assert row_tuples(got) == [allrows[int((offs == o).argmax())]]
    for t in [*sorted(set(ts[:: max(1, len(ts) // 40)].tolist())), -1, -2, -3, int(ts.max()) + 1]:
        found = log.offsets_for_times(int(t))
        want = first_at_or_after(partition, int(t))
        assert (None if found is None else (found.timestamp, found.offset)) == want


def test_rerun_is_noop_and_overlap_refused(lake: Path, tmp_path: Path) -> None:
    v = Catalog(str(lake)).version()
    rep = register(LakeHandle.open(str(lake)), str(FIXTURES), run_id="reg-1")
    assert rep.rows == 0 and Catalog(str(lake)).version() == v
    with pytest.raises(ConcurrentRunError):
        register(LakeHandle.open(str(lake)), str(FIXTURES), topics=["first"], run_id="reg-2")
    assert Catalog(str(lake)).version() == v


def test_in_place_needs_the_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="in place"):
        register(LakeHandle.open(str(tmp_path / "lake")), str(FIXTURES), copy=False)
    broker = tmp_path / "broker"
    shutil.copytree(FIXTURES / "first-0", broker / "first-0")
    rep = register(LakeHandle.open(str(broker)), str(broker), copy=False)
    assert rep.rows == 1
    log = open_partition(LakeHandle.open(str(broker)), "first", 0)
    assert log.log_end_offset == brute("first-0")[4]


def test_cli_register(tmp_path: Path, capsys) -> None:
    assert (
        main(
            ["register", "--root", str(tmp_path / "lake"), str(FIXTURES), "--topics", "sensor-data"]
        )
        == 0
    )
    assert "registered 1 segment" in capsys.readouterr().out
    assert (
        main(["register", "--root", str(tmp_path / "lake"), str(FIXTURES), "--topics", "../etc"])
        == 2
    )


@pytest.mark.parametrize("kafka_truncate", [False, True])
def test_a_damaged_batch_keeps_the_later_ones(tmp_path: Path, kafka_truncate: bool) -> None:
    """A flipped bit in a broker segment's first batch: the lake's rule (the default) cuts
    out that batch only and keeps the later ones (a lake has no replica to refill them);
    Kafka's rule (``kafka_truncate``) drops everything from the damaged batch on."""
    broker = tmp_path / "broker"
    shutil.copytree(FIXTURES / "sensor-data-0", broker / "sensor-data-0")
    exp = load_expected("sensor-data-0")["00000000000000000000"]["batches"]
    log = broker / "sensor-data-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[exp[0]["size"] - 1] ^= 0x01  # the first batch's last record byte (under its CRC)
    log.write_bytes(bytes(data))
    root = tmp_path / "lake"
    if kafka_truncate:  # the damaged batch was the first: nothing before it, an empty topic
        rep = register(LakeHandle.open(str(root)), str(broker), kafka_truncate=kafka_truncate)
        assert rep.empty == ["sensor-data"] and rep.rows == 0
        assert "no records left after recovery" in rep.skipped["sensor-data-0"]
        return
    register(LakeHandle.open(str(root)), str(broker), kafka_truncate=kafka_truncate)
    rows = Catalog(str(root)).segments("sensor-data", 0).to_pylist()
    kept = exp[1:]
    assert [r["record_count"] for r in rows] == [sum(b["count"] for b in kept)]
    got = open_partition(LakeHandle.open(str(root)), "sensor-data", 0).read(kept[0]["base_offset"])
    assert got.column("offset").to_pylist() == [
        o for b in kept for o in range(b["base_offset"], b["last_offset"] + 1)
    ]


def test_skipped_directories_are_named_with_the_reason(tmp_path: Path) -> None:
    """Old code: ``skipped: ['empty-0', 'first-0.abc123-delete', 'notes']`` without why
    (and nothing about a partition whose segments are all empty)."""
    broker = tmp_path / "broker"
    shutil.copytree(FIXTURES / "first-0", broker / "first-0")
    (broker / "first-0.abc123-delete").mkdir()
    (broker / "notes").mkdir()
    (broker / "empty-0").mkdir()
    (broker / "empty-0" / "00000000000000000000.log").write_bytes(b"")
    (broker / "none-0").mkdir()
    (broker / "none-0" / "leader-epoch-checkpoint").write_text("0\n")
    rep = register(LakeHandle.open(str(tmp_path / "lake")), str(broker))
    assert rep.rows == 1 and rep.empty == ["empty", "none"]  # topics without records
    assert rep.skipped == {
        "empty-0": "no records (only empty segments)",
        "first-0.abc123-delete": "'first-0.abc123-delete' is not a partition directory name "
        "(<topic>-<n>)",
        "none-0": "no segment files (<20-digit base offset>.log)",
        "notes": "'notes' is not a partition directory name (<topic>-<n>)",
    }
    text = str(rep).splitlines()
    assert "  skipped empty-0: no records (only empty segments)" in text
    assert not (tmp_path / "lake" / "_staging").exists() or not any(
        (tmp_path / "lake" / "_staging").iterdir()
    )


def test_nothing_to_register_writes_no_lake(tmp_path: Path) -> None:
    """Old code: exit 0 and an empty lake (a _catalog with no rows) at the root."""
    broker = tmp_path / "broker"
    (broker / "first-0.abc123-delete").mkdir(parents=True)
    (broker / "meta.properties").write_text("version=1\n")
    root = tmp_path / "lake"
    with pytest.raises(SegmentNotFoundError) as err:
        register(LakeHandle.open(str(root)), str(broker))
    assert str(err.value) == (
        f"{broker}: no topic to register (first-0.abc123-delete: "
        "'first-0.abc123-delete' is not a partition directory name (<topic>-<n>)); "
        "no lake written"
    )
    assert not root.exists()
    with pytest.raises(SegmentNotFoundError, match="of topics \\['nope'\\]"):
        register(LakeHandle.open(str(root)), str(FIXTURES), topics=["nope"])
    assert not root.exists()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _text(s: str | None) -> bytes:
    """A flexible message's compact (nullable) string."""
    return b"\x00" if s is None else _uvarint(len(s.encode()) + 1) + s.encode()


def _meta(api_key: int, body: bytes) -> bytes:
    """A ``__cluster_metadata`` record value: frame 1, type, version 0, body, no tags."""
    return _uvarint(1) + _uvarint(api_key) + _uvarint(0) + body + b"\x00"


def topic_record(name: str, n: int) -> bytes:
    return _meta(2, _text(name) + bytes([n]) * 16)


def config_record(topic: str, name: str, value: str | None, resource: int = 2) -> bytes:
    return _meta(4, bytes([resource]) + _text(topic) + _text(name) + _text(value))


def remove_topic_record(n: int) -> bytes:
    return _meta(9, bytes([n]) * 16)


def write_metadata_log(path: Path, values: list[bytes], base: int = 0) -> None:
    """Metadata records as a broker writes them (RecordBatch v2, no keys)."""
    import pyarrow as pa

    from seglake.record.encode import encode_batches

    t = pa.table(
        {
            "offset": pa.array(range(base, base + len(values)), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000] * len(values), pa.int64()),
            "value": pa.array(values, pa.binary()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_batches(t).tobytes())


def test_topic_configs_empty_topics_and_internal_topics(tmp_path: Path, capsys) -> None:
    """The broker's topic overrides (snapshot, then the log after it; a null value deletes,
    RemoveTopicRecord forgets) become the lake's; an empty topic is registered; internal
    topics are not copied unless asked. Old code: no configs, ``empty`` skipped,
    ``__consumer_offsets`` copied."""
    broker = tmp_path / "broker"
    for name in ("first-0", "sensor-data-0", "__consumer_offsets-0"):
        shutil.copytree(FIXTURES / name, broker / name)
    (broker / "empty-0").mkdir()
    (broker / "empty-0" / "00000000000000000000.log").write_bytes(b"")
    meta = broker / "__cluster_metadata-0"
    snapshot = [topic_record("first", 1), topic_record("sensor-data", 2), topic_record("gone", 3)]
    write_metadata_log(meta / "00000000000000000003-0000000001.checkpoint", snapshot)
    write_metadata_log(meta / "00000000000000000000.log", [topic_record("stale", 9)] * 3)
    log = [
        topic_record("empty", 4),
        config_record("first", "message.timestamp.type", "LogAppendTime"),
        config_record("first", "retention.ms", "1000"),
        config_record("first", "retention.ms", None),  # kafka-configs --delete-config
        config_record("first", "message.downconversion.enable", "false"),
        config_record("gone", "cleanup.policy", "compact"),
        remove_topic_record(3),
        config_record("sensor-data", "cleanup.policy", "compact"),
        config_record("0", "log.retention.ms", "5", resource=4),  # a broker's, not a topic's
    ]
    write_metadata_log(meta / "00000000000000000003.log", log, base=3)
    root = tmp_path / "lake"
    rep = register(LakeHandle.open(str(root)), str(broker))
    assert rep.topics == {
        "empty": {},
        "first": {"message.timestamp.type": "LogAppendTime"},
        "sensor-data": {"cleanup.policy": "compact"},
    }
    assert rep.empty == ["empty"]
    assert list(rep.not_kept) == ["first"]
    assert "message.downconversion.enable" in rep.not_kept["first"]
    assert "__consumer_offsets-0" in rep.skipped and "__cluster_metadata-0" in rep.skipped
    assert not (root / "__consumer_offsets-0").exists()
    assert main(["config", str(root), "--topic", "first"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "message.timestamp.type=LogAppendTime  (override)" in out
    assert "retention.ms=604800000  (default)" in out
    assert main(["config", str(root), "--topic", "empty"]) == 0  # the lake has it
    # a rerun of the run id commits nothing more
    v = Catalog(str(root)).version()
    assert register(LakeHandle.open(str(root)), str(broker), run_id=rep.run_id).rows == 0
    assert Catalog(str(root)).version() == v
    # asked for: internal topics come too
    rep = register(LakeHandle.open(str(tmp_path / "all")), str(broker), include_internal=True)
    assert "__consumer_offsets-0" not in rep.skipped and "__consumer_offsets" in rep.topics
