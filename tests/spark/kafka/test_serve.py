"""``seglake serve LAKE``: a real broker serves a copy of a lake (Kafka's consumer reads
every record the lake holds; the lake's files are not touched), stops cleanly on
SIGTERM; and ``register`` of that broker's directory gives back, per topic, the configs
the broker describes (its metadata log's ConfigRecords: set at creation, altered,
deleted), as ``kafka-configs --describe`` shows them."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

import seglake
from seglake.cli.main import main
from seglake.kafka_broker import missing_requirements
from seglake.lake.handle import LakeHandle
from seglake.lake.register import register
from tests.conftest import FIXTURES, ROOT
from tests.kafka_client import _admin, consume_all, recs_from_arrow
from tests.key_index_check import check_partition_dir

pytestmark = pytest.mark.spark
TOPICS = {"first": 1, "sensor-data": 1}


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _dynamic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's overrides as ``kafka-configs --describe`` lists them."""
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = _admin(bootstrap).describe_configs([res])[res].result(timeout=60)
    return {
        name: e.value
        for name, e in entries.items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def _alter(bootstrap: str, topic: str, name: str, value: str | None) -> None:
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value or "", incremental_operation=op)],
    )
    _admin(bootstrap).incremental_alter_configs([res])[res].result(timeout=60)


def test_serve_a_copy_then_register_its_configs(tmp_path: Path, capfd) -> None:
    if missing_requirements():
        pytest.skip(f"no Kafka broker here: {missing_requirements()}")
    broker_dir = tmp_path / "broker"
    for t in TOPICS:
        shutil.copytree(FIXTURES / f"{t}-0", broker_dir / f"{t}-0")
    lake = tmp_path / "lake"
    register(LakeHandle.open(str(lake)), str(broker_dir))
    assert main(["config", str(lake), "--topic", "first", "--set", "segment.bytes=2000000"]) == 0
    before = _tree_digest(lake)
    data = tmp_path / "served"
    # refused: a broker directory inside the lake
    assert main(["serve", str(lake), "--data", str(lake / "kafka")]) == 2
    assert "apart from the lake" in capfd.readouterr().err
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglake.cli.main", "serve", str(lake), "--data", str(data)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if not first:
            proc.wait(timeout=60)
            raise AssertionError(f"serve exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
        assert first.startswith(f"serving a copy of {lake} at catalog version"), first
        line = proc.stdout.readline()
        assert line.startswith("Kafka broker up: bootstrap 127.0.0.1:"), line
        bootstrap = line.split("bootstrap ")[1].split(",")[0]
        served = types.SimpleNamespace(bootstrap=bootstrap)
        nb = seglake.open(str(lake))
        for t, n in TOPICS.items():
            want = recs_from_arrow(nb.partition(t, 0).read(0, max_records=10**6, as_="arrow"))
            assert len(want) > 0
            assert consume_all(served, t, n, "read_uncommitted") == want  # type: ignore[arg-type]
        # the broker's configs: serve's (the lake's + keep-all retention), then altered
        assert _dynamic_configs(bootstrap, "first") == {
            "retention.bytes": "-1",
            "retention.ms": "-1",
            "segment.bytes": "2000000",
        }
        _alter(bootstrap, "first", "message.timestamp.type", "LogAppendTime")
        _alter(bootstrap, "first", "segment.bytes", None)  # a null ConfigRecord
        _alter(bootstrap, "sensor-data", "cleanup.policy", "compact")
        described = {t: _dynamic_configs(bootstrap, t) for t in TOPICS}
        assert described["first"]["message.timestamp.type"] == "LogAppendTime"
        assert "segment.bytes" not in described["first"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "stopped (clean shutdown)" in out
    assert _tree_digest(lake) == before  # the lake was only read
    # the broker loaded, served and closed partition dirs holding the lake's .keyindex
    # files (Kafka's LogLoader ignores a suffix it does not know) and left them as they were
    for t in TOPICS:
        served_keys = sorted((data / "logs" / f"{t}-0").glob("*.keyindex"))
        assert served_keys, f"serve copied no .keyindex of {t}-0"
        for f in served_keys:
            assert f.read_bytes() == (lake / f"{t}-0" / f.name).read_bytes()
    # register of the broker's directory: the same configs per topic as it described
    copy = tmp_path / "copy"
    rep = register(
        LakeHandle.open(str(copy)), str(data / "logs"), metadata_dir=str(data / "metadata")
    )
    assert {t: rep.topics[t] for t in TOPICS} == described
    assert "__consumer_offsets" not in rep.topics
    for t in TOPICS:  # register kept the broker directory's .keyindex files: they are right
        check_partition_dir(copy / f"{t}-0")
    capfd.readouterr()
    for t, own in described.items():
        assert main(["config", str(copy), "--topic", t]) == 0
        lines = capfd.readouterr().out.splitlines()
        assert {ln.split("=")[0] for ln in lines if ln.endswith("(override)")} == set(own)
        for name, value in own.items():
            assert f"{name}={value}  (override)" in lines
