"""The loopback broker itself (``seglake.kafka_broker``, what ``make kafka`` runs): it
answers a Metadata request, keeps its data over a clean stop and restart, and a stop by
PID leaves Kafka's clean-shutdown marker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def _java_pids(data_dir: Path) -> list[int]:
    """The broker JVMs running over ``data_dir`` (their command line names its config)."""
    pids = []
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (proc_dir / "cmdline").read_bytes().split(b"\0")
                if b"kafka.Kafka" in cmd and str(data_dir).encode() in b" ".join(cmd):
                    pids.append(int(proc_dir.name))
    return pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_make_kafka_prints_the_bootstrap_and_stops_on_ctrl_c_or_sigterm(tmp_path, sig) -> None:
    """``python -m seglake.kafka_broker DIR`` (``make kafka``): the bootstrap line, then
    SIGINT (Ctrl-C) or SIGTERM (a service manager, ``kill``) stops it with a clean
    shutdown and exit 0, its JVM gone. Old code: SIGTERM ended Python alone, the broker
    JVM (a session of its own) kept running."""
    if missing_requirements():
        pytest.skip(f"no Kafka broker here: {missing_requirements()}")
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglake.kafka_broker", str(data)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    java: list[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Kafka broker up: bootstrap 127.0.0.1:"), line
        port = int(line.split("127.0.0.1:")[1].split(",")[0])
        assert metadata_brokers("127.0.0.1", port) == 1
        java = _java_pids(data)
        assert len(java) == 1
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 30
        while _java_pids(data) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _java_pids(data) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _java_pids(data):  # the one this test started, if the signal left it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "stopped (clean shutdown)" in out
    assert KafkaBroker(data).cleanly_closed()
