"""A real Kafka broker on loopback (KRaft, one node that is broker and controller), started
from the pinned jars in ``.jars/kafka`` (``make jars``): the one code path that ``make
kafka``, the tests and the benches use to put Kafka itself in the loop.

``KafkaBroker(data_dir)`` formats KRaft storage in ``data_dir`` once (Kafka's
``StorageTool format``), writes ``server.properties`` on each start (free ports on
127.0.0.1, ``log.dirs`` = ``data_dir/logs``), starts ``kafka.Kafka`` as a child process in
a process group of its own (output in ``data_dir/server.log``), waits until a Metadata
request lists the broker, and stops it by its PID: SIGTERM, a wait for the clean shutdown
(Kafka's ``.kafka_cleanshutdown`` marker), SIGKILL of its group after a bound. Restarting
on the same directory keeps the data (a static controller quorum: the ports may change).

No pyspark and no Kafka client here: readiness is one hand-made Metadata v4 request.
``python -m seglake.kafka_broker DIR`` runs one until Ctrl-C or SIGTERM (either stops
the broker cleanly first: it runs in a session of its own, so a signal to the Python
process alone would leave the JVM running).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from seglake.loopback import free_port, log_tail, run_in_foreground

__all__ = [
    "BrokerError",
    "KafkaBroker",
    "kafka_classpath",
    "missing_requirements",
]

REPO = Path(__file__).resolve().parents[2]
JARS = Path(os.environ.get("SEGLAKE_KAFKA_JARS", REPO / ".jars" / "kafka"))
HEAP = "-Xmx512m"
START_TIMEOUT_S = 180.0  # 2 shared cores: a JVM start can take a while
STOP_TIMEOUT_S = 60.0
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
"""
# the broker's own defaults are for a cluster; these are for one small test node
BASE_PROPERTIES: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "16777216",
    "log.retention.check.interval.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "2",
    "auto.create.topics.enable": "false",
}


class BrokerError(RuntimeError):
    """The broker could not be formatted, started or stopped (the message names why and
    ends with the tail of its log)."""


def missing_requirements() -> str | None:
    """Why a broker cannot run here (no ``java``, no jars), or None."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not JARS.is_dir() or not any(JARS.glob("kafka_2.13-*.jar")):
        return f"no Kafka jars in {JARS} (run `make jars`: needs mvn and java)"
    return None


def kafka_classpath() -> str:
    """``.jars/kafka/*``: Kafka's broker, tools and log4j2."""
    return str(JARS / "*")


def new_cluster_id() -> str:
    """A Kafka ``Uuid`` as ``kafka-storage random-uuid`` prints it (base64url, no padding,
    never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def metadata_brokers(host: str, port: int, timeout: float = 5.0) -> int:
    """Number of brokers a Metadata v4 request (no topics) lists; raises OSError when the
    broker does not answer."""
    client_id = b"seglake"
    body = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">i?", 0, False)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = _recv_exactly(s, 16)
    brokers: int
    _size, correlation, _throttle, brokers = struct.unpack(">iiii", head)
    if correlation != 1:
        raise OSError(f"unexpected correlation id {correlation}")
    return brokers


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("connection closed")
        out += chunk
    return out


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


class KafkaBroker:
    """One KRaft broker+controller on 127.0.0.1 over ``data_dir`` (created if missing)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        overrides: Mapping[str, str] | None = None,
        heap: str = HEAP,
    ) -> None:
        self.dir = Path(data_dir).resolve()
        self.log_dir = self.dir / "logs"
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.controller_port = 0
        self.starts = 0  # how many times start() ran the broker (restarts included)

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the PLAINTEXT listener (while running)."""
        return f"127.0.0.1:{self.port}"

    @property
    def server_log(self) -> Path:
        return self.dir / "server.log"

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            self.heap,
            "-Xss1m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            "-cp",
            kafka_classpath(),
            main,
            *args,
        ]

    def _write_config(self) -> Path:
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        values = {
            **BASE_PROPERTIES,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.log_dir),
            "metadata.log.dir": str(self.dir / "metadata"),
            **self.overrides,
        }
        path = self.dir / "server.properties"
        path.write_text(_properties(values))
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        return path

    def _format(self, config: Path) -> None:
        """``kafka-storage format`` once (``meta.properties`` marks a formatted directory)."""
        if (self.log_dir / "meta.properties").exists():
            return
        cmd = self._java(
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(config),
            "--cluster-id",
            new_cluster_id(),
            "--ignore-formatted",
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise BrokerError(
                f"kafka-storage format of {self.dir} failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaBroker:
        """Format if needed, start ``kafka.Kafka`` and wait until it lists itself."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        why = missing_requirements()
        if why:
            raise BrokerError(f"cannot start a Kafka broker: {why}")
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self._format(config)
        with open(self.server_log, "ab") as out:
            self.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise BrokerError(f"Kafka broker exited with status {code}\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if metadata_brokers("127.0.0.1", self.port) > 0:
                    return self
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerError(
                    f"Kafka broker on {self.bootstrap} did not answer a Metadata request "
                    f"within {timeout:.0f} s\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM by PID and wait for the clean shutdown; SIGKILL its process group after
        ``timeout``. True when the broker closed its log directory cleanly."""
        proc, self.proc = self.proc, None
        if proc is None:
            return self.cleanly_closed()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return self.cleanly_closed()

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str]) -> None:
        """Create a topic on the running broker with Kafka's own ``kafka-topics --create``
        (``TopicCommand``, one JVM; no Kafka client here)."""
        args = ["--bootstrap-server", self.bootstrap, "--create", "--topic", name]
        args += ["--partitions", str(partitions), "--replication-factor", "1"]
        for key, value in sorted(config.items()):
            args += ["--config", f"{key}={value}"]
        done = subprocess.run(
            self._java("org.apache.kafka.tools.TopicCommand", *args),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
        )
        if done.returncode != 0:
            lines = (done.stderr + done.stdout).strip().splitlines()
            why = [ln for ln in lines if "Error" in ln or "Exception" in ln] or lines or ["?"]
            raise BrokerError(f"kafka-topics --create {name} failed: {why[0]}")

    def cleanly_closed(self) -> bool:
        """Whether the log directory holds Kafka's clean-shutdown marker (it is removed at
        start and written as the last step of a clean shutdown)."""
        return (self.log_dir / CLEAN_SHUTDOWN_FILE).exists()

    @contextlib.contextmanager
    def stopped(self) -> Iterator[KafkaBroker]:
        """The broker stopped (cleanly, or BrokerError) for the block, started again after."""
        if not self.stop():
            raise BrokerError(f"Kafka broker did not shut down cleanly\n{self.log_tail()}")
        try:
            yield self
        finally:
            self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of ``server.log``."""
        return log_tail(self.server_log, lines)

    def cleaner_checkpoint(self) -> dict[tuple[str, int], int]:
        """``cleaner-offset-checkpoint`` of the log directory: (topic, partition) -> offset
        the cleaner has cleaned up to (empty before its first round)."""
        path = self.log_dir / "cleaner-offset-checkpoint"
        if not path.exists():
            return {}
        lines = path.read_text().split("\n")
        out: dict[tuple[str, int], int] = {}
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3:
                out[(parts[0], int(parts[1]))] = int(parts[2])
        return out

    def banner(self) -> list[str]:
        """What a foreground run (``make kafka``, ``seglake serve``) prints once it is up."""
        return [
            f"Kafka broker up: bootstrap {self.bootstrap}, data in {self.log_dir}",
            f"log: {self.server_log}; Ctrl-C or SIGTERM stops it",
        ]

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m seglake.kafka_broker [DIR]``: a broker until Ctrl-C, SIGTERM or SIGHUP
    (``make kafka``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m seglake.kafka_broker [DATA_DIR]  (default ./kafka-data)")
        return 2
    broker = KafkaBroker(args[0] if args else "kafka-data")
    return run_in_foreground("kafka", broker, BrokerError, broker.banner)


if __name__ == "__main__":
    sys.exit(main())
