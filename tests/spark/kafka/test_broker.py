"""The loopback broker itself (``seglake.kafka_broker``, what ``make kafka`` runs): it
answers a Metadata request, keeps its data over a clean stop and restart, and a stop by
PID leaves Kafka's clean-shutdown marker."""

from __future__ import annotations

import subprocess
import sys

import pytest

from seglake.kafka_broker import KafkaBroker, metadata_brokers, missing_requirements
from tests.conftest import ROOT
from tests.kafka_client import ISOLATION, consume_all, create_topic, producer, send


def test_restart_keeps_the_data_and_closes_cleanly(kafka_broker: KafkaBroker) -> None:
    assert metadata_brokers("127.0.0.1", kafka_broker.port) == 1
    create_topic(kafka_broker, "restart", 1, {})
    p = producer(kafka_broker)
    for i in range(10):
        send(p, "restart", {"partition": 0, "key": b"k%d" % i, "value": b"v%d" % i})
    assert p.flush(60) == 0
    before = consume_all(kafka_broker, "restart", 1, "read_uncommitted")
    starts = kafka_broker.starts
    with kafka_broker.stopped():
        assert kafka_broker.proc is None
        assert kafka_broker.cleanly_closed()
        with pytest.raises(OSError):
            metadata_brokers("127.0.0.1", kafka_broker.port, timeout=2)
    assert kafka_broker.starts == starts + 1
    for iso in ISOLATION:
        assert consume_all(kafka_broker, "restart", 1, iso) == before
    assert [r.value for r in before] == [b"v%d" % i for i in range(10)]


def test_make_kafka_prints_the_bootstrap_and_stops_on_ctrl_c(tmp_path) -> None:
    """``python -m seglake.kafka_broker DIR`` (``make kafka``): the bootstrap line, then
    SIGINT (Ctrl-C) stops it with a clean shutdown and exit 0."""
    if missing_requirements():
        pytest.skip(f"no Kafka broker here: {missing_requirements()}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglake.kafka_broker", str(tmp_path / "data")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Kafka broker up: bootstrap 127.0.0.1:"), line
        port = int(line.split("127.0.0.1:")[1].split(",")[0])
        assert metadata_brokers("127.0.0.1", port) == 1
        proc.send_signal(subprocess.signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped (clean shutdown)" in out
    assert KafkaBroker(tmp_path / "data").cleanly_closed()
