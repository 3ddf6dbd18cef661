"""A real S3-compatible server on loopback: SeaweedFS (``weed``, Apache-2.0), built from
the Go module version pinned in the Makefile into ``.bin/weed`` (``make weed``), as the
one code path that ``make s3``, the tests and the benches use to put object storage in
the loop.

``WeedServer(data_dir)`` starts ``weed server`` (master, volume, filer and S3 gateway in
one process) as a child in a process group of its own, on free ports of 127.0.0.1, with
its data under ``data_dir`` (kept across restarts) and its output in
``data_dir/weed.log``; it is ready when the S3 port answers. No ``-s3.config``: no
authentication, any access key works. It stops by its PID: SIGTERM, a wait until its S3,
filer and volume ports are closed (they flush and close first), then SIGKILL of its group
(weed 4.53's master keeps retrying the filer after a SIGTERM and never exits alone).

With ``log_path`` a request-counting proxy (:func:`serve_proxy`, a child Python process)
sits in front of the S3 port: clients talk to the proxy, which forwards each request to
weed (bodies streamed, connections kept alive) and appends one JSON line per request to
``log_path`` (method, path, query, Range header, status, Content-Length of the answer)
before the answer's body is sent, whatever process sent the request. weed's only request
log (``-s3.auditLogConfig``) ships to a fluentd server.

``python -m seglake.s3_server [DIR [PORT]]`` runs one in the foreground until SIGTERM or Ctrl-C
(``make s3``), printing the endpoint and the ``AWS_...`` lines a client needs.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from seglake.loopback import free_port, log_tail, run_in_foreground

__all__ = [
    "REQUEST_KINDS",
    "S3ServerError",
    "WeedServer",
    "client_environment",
    "count_requests",
    "missing_requirements",
    "request_kind",
]

REPO = Path(__file__).resolve().parents[2]
WEED = Path(os.environ.get("SEGLAKE_WEED", REPO / ".bin" / "weed"))
REGION = "us-east-1"
START_TIMEOUT_S = 180.0  # a loaded 2-core machine starts it slowly
STOP_TIMEOUT_S = 20.0
# the ports of one weed server: master, volume, filer, s3, each with a gRPC twin
SERVICES = ("master", "volume", "filer", "s3")
BUCKET = "lake"  # the bucket ``make s3`` creates
PROBE = "/seglake-ready-probe"  # a bucket start() writes to, then deletes


class S3ServerError(RuntimeError):
    """weed could not be started (the message names why and ends with its log's tail)."""


def missing_requirements() -> str | None:
    """Why a weed server cannot run here (no binary), or None."""
    if not (WEED.is_file() and os.access(WEED, os.X_OK)):
        return f"no SeaweedFS binary at {WEED} (run `make weed`: needs go)"
    return None


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def client_environment(endpoint: str) -> dict[str, str]:
    """The ``AWS_...`` variables a client (pyarrow, deltalake, boto3, seglake) needs to
    talk to a server without authentication at ``endpoint`` (``http://host:port``)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "seglake",
        "AWS_SECRET_ACCESS_KEY": "seglake",
        "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true",
    }


class WeedServer:
    """One ``weed server`` on 127.0.0.1 over ``data_dir`` (created if missing), with an
    optional request-counting proxy in front of its S3 port (``log_path``)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        log_path: str | os.PathLike[str] | None = None,
        port: int = 0,
    ) -> None:
        self.dir = Path(data_dir).resolve()
        self.client_port = port  # the port clients connect to; 0: a free one
        self.log_path = None if log_path is None else Path(log_path).resolve()
        self.proc: subprocess.Popen[bytes] | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.port = 0  # what clients connect to: the proxy's port, or weed's S3 port

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT`` (while running)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def server_log(self) -> Path:
        return self.dir / "weed.log"

    def _choose_ports(self) -> None:
        """weed's ports: those of the last start on this directory (``ports.json``; weed
        keys its master state by address: other ports would start a new cluster that
        refuses the old volumes), else free ones; the S3 port as asked."""
        saved = self.dir / "ports.json"
        self.ports = json.loads(saved.read_text()) if saved.exists() else {}
        if self.client_port and self.log_path is None:
            self.ports["s3"] = self.client_port
        taken = set(self.ports.values())
        for name in SERVICES:
            for key in (name, f"{name}.grpc"):
                while not self.ports.get(key):
                    port = free_port()
                    if port not in taken:
                        taken.add(port)
                        self.ports[key] = port
        saved.write_text(json.dumps(self.ports))

    def _command(self) -> list[str]:
        self._choose_ports()
        return [
            str(WEED),
            "server",
            f"-dir={self.dir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-filer",
            "-s3",
            *(
                f"-{key.replace('.grpc', '.port.grpc') if '.' in key else key + '.port'}={port}"
                for key, port in self.ports.items()
            ),
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=100",  # volumes are sparse files; a bucket is a collection of its own
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",
        ]

    def start(self, timeout: float = START_TIMEOUT_S) -> WeedServer:
        """Start weed (and the proxy) and wait until the S3 port answers."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        why = missing_requirements()
        if why:
            raise S3ServerError(f"cannot start a SeaweedFS server: {why}")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        with open(self.server_log, "ab") as out:
            self.proc = subprocess.Popen(
                self._command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.dir,
                env=_weed_environment(),
            )
        self.port = self.ports["s3"]
        if self.log_path is not None:
            self.port = self.client_port or free_port()
            self.proxy = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "seglake.s3_server",
                    "--proxy",
                    str(self.port),
                    str(self.ports["s3"]),
                    str(self.log_path),
                ],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            for proc in (self.proc, self.proxy):
                if proc is not None and proc.poll() is not None:
                    code = proc.returncode
                    self.stop()
                    raise S3ServerError(f"weed server exited with status {code}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise S3ServerError(
                    f"weed S3 on {self.endpoint} did not answer within {timeout:.0f} s\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        """A ListBuckets through the client port answers 200 and a first object write
        succeeds: weed's S3, filer, lock ring and volume server are up (a write in the
        first seconds waits for them: ~9 s, spent here rather than in the first test)."""
        try:
            if _request(self.port, "GET", "/") != 200:
                return False
            # the bucket may exist from an earlier probe whose PUT weed answered with an
            # error before its master led (409 then: the probe never passed, at load 12)
            steps = [("PUT", PROBE), ("PUT", f"{PROBE}/probe"), ("DELETE", f"{PROBE}/probe")]
            for method, path in [*steps, ("DELETE", PROBE)]:  # straight to weed: not logged
                status = _request(self.ports["s3"], method, path, timeout=60)
                if status >= 300 and not (status == 409 and path == PROBE and method == "PUT"):
                    return False
            return True
        except OSError:
            return False

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (an existing one is kept): weed refuses a write to a
        missing bucket from a client without an admin identity."""
        status = _request(self.ports["s3"], "PUT", f"/{name}", timeout=60)
        if status not in (200, 409):
            raise S3ServerError(f"creating bucket {name!r} on {self.endpoint}: HTTP {status}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM weed by PID; once its S3, filer and volume ports are closed (or after
        ``timeout``) SIGKILL its process group. True when those ports closed in time."""
        proxy, self.proxy = self.proxy, None
        if proxy is not None:
            _terminate(proxy, 5.0)
        proc, self.proc = self.proc, None
        if proc is None:
            return True
        flushed = False
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                if not any(_listening(self.ports[k]) for k in ("s3", "filer", "volume")):
                    flushed = True
                    time.sleep(0.3)  # the last log lines
                    break
                time.sleep(0.1)
        _terminate(proc, 0.0)
        for key, port in self.ports.items():  # weed's unix sockets, named by port
            service = key.split(".")[0] + ("-grpc" if key.endswith(".grpc") else "")
            with contextlib.suppress(OSError):
                os.unlink(f"/tmp/seaweedfs-{service}-{port}.sock")
        return flushed or proc.returncode == 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of ``weed.log``."""
        return log_tail(self.server_log, lines)

    def __enter__(self) -> WeedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _weed_environment() -> dict[str, str]:
    """weed's environment: no ``AWS_*`` variables (weed turns credentials found there into
    an identity and then refuses anonymous requests), one volume per new collection (a
    bucket is one; weed's default of 7 makes a first write to a bucket wait for them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1"}


def _request(port: int, method: str, path: str, timeout: float = 2.0) -> int:
    """The status of one anonymous request to ``127.0.0.1:port`` (the body is read)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=b"x" if method == "PUT" and path.count("/") > 1 else None)
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def _terminate(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM ``proc`` and wait ``grace`` seconds, then SIGKILL its process group."""
    if proc.poll() is None and grace > 0:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


# ------------------------------------------------------------------ request-counting proxy

_HOP = frozenset({"connection", "keep-alive", "expect", "transfer-encoding", "te", "upgrade"})
_CHUNK = 1 << 16
IDLE_S = 30.0  # an upstream connection idle longer is not reused (weed closes at 120 s)


class _NoDelayConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve_proxy(
    port: int, upstream: int, log_path: str, drop: frozenset[str] = frozenset()
) -> None:
    """Serve ``127.0.0.1:port`` forever, forwarding each request to ``127.0.0.1:upstream``
    and appending one JSON line per request to ``log_path`` before the answer's body.
    Request headers named in ``drop`` (lower case) are not forwarded: a store that ignores
    them, e.g. ``if-none-match`` for one without put-if-absent (a fault for the tests)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    skip = _HOP | drop

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive; answers ``Expect: 100-continue``
        disable_nagle_algorithm = True  # else each small write waits for a delayed ACK (40 ms)
        upstream_conn: http.client.HTTPConnection | None = None
        upstream_used = 0.0  # monotonic time the kept-alive connection last answered

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            length = int(self.headers.get("Content-Length") or 0)
            if self.upstream_conn and time.monotonic() - self.upstream_used > IDLE_S:
                self.upstream_conn.close()  # weed may be closing it: do not send a body on it
                self.upstream_conn = None
            for attempt in (0, 1):  # a kept-alive upstream connection may have closed
                conn = self.upstream_conn or _NoDelayConnection("127.0.0.1", upstream)
                self.upstream_conn = conn
                try:
                    conn.putrequest(
                        self.command, self.path, skip_host=True, skip_accept_encoding=True
                    )
                    for k, v in headers.items():
                        conn.putheader(k, v)
                    if chunked:
                        conn.putheader("Transfer-Encoding", "chunked")
                    conn.endheaders()
                    self._send_body(conn, chunked, length)
                    answer = conn.getresponse()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    conn.close()
                    self.upstream_conn = None
                    if attempt or chunked or length:
                        raise
            split = urlsplit(self.path)
            out_length = answer.getheader("Content-Length")
            entry = {
                "method": self.command,
                "path": unquote(split.path),
                "query": split.query or None,
                "range": self.headers.get("Range"),
                "status": answer.status,
                "length": None if out_length is None else int(out_length),
            }
            os.write(fd, (json.dumps(entry) + "\n").encode())
            self.send_response_only(answer.status, answer.reason)
            for k, v in answer.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            relay_chunked = out_length is None and self.command != "HEAD" and answer.status >= 200
            if relay_chunked and answer.status not in (204, 304):
                self.send_header("Transfer-Encoding", "chunked")
            else:
                relay_chunked = False
            self.end_headers()
            while chunk := answer.read(_CHUNK):
                if relay_chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    self.wfile.write(chunk)
            if relay_chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.upstream_used = time.monotonic()
            if answer.will_close:
                conn.close()
                self.upstream_conn = None

        def _send_body(self, conn: http.client.HTTPConnection, chunked: bool, length: int) -> None:
            if chunked:
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    data = self.rfile.read(size) if size else b""
                    self.rfile.readline()  # the CRLF after the chunk (or the trailer's end)
                    conn.send(b"%x\r\n%s\r\n" % (size, data))
                    if not size:
                        return
            while length > 0:
                data = self.rfile.read(min(length, _CHUNK))
                if not data:
                    raise ConnectionResetError("client closed mid-body")
                conn.send(data)
                length -= len(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client or weed gone mid-request: the client sees its connection close

    Server(("127.0.0.1", port), Handler).serve_forever()


REQUEST_KINDS = ("GET", "ranged GET", "PUT", "LIST", "HEAD", "DELETE", "POST")


def request_kind(method: str, path: str, query: str | None, range_: str | None) -> str:
    """What one request of the proxy's log is, for counting: a ``LIST`` is a GET of a
    bucket (``/bucket``, with or without a ``list-type``/``prefix``/``delimiter`` query),
    a ``ranged GET`` one with a ``Range`` header; otherwise the method."""
    if method != "GET":
        return method
    q = query or ""
    if "list-type" in q or "prefix=" in q or "delimiter" in q or path.strip("/").count("/") == 0:
        return "LIST"
    return "ranged GET" if range_ else "GET"


def count_requests(entries: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Requests per :func:`request_kind` of the proxy log's ``entries`` (its JSON lines,
    parsed): every kind of :data:`REQUEST_KINDS`, zero when absent."""
    out = dict.fromkeys(REQUEST_KINDS, 0)
    for e in entries:
        k = request_kind(e["method"], e["path"], e.get("query"), e.get("range"))
        out[k] = out.get(k, 0) + 1
    return out


# ------------------------------------------------------------------ make s3


def main(argv: list[str] | None = None) -> int:
    """``python -m seglake.s3_server [DIR [PORT]]``: a weed server until SIGTERM or Ctrl-C."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--proxy"] and len(args) in (4, 5):  # PORT UPSTREAM LOG [DROP,HEADERS]
        drop = frozenset(h.lower() for h in args[4].split(",")) if len(args) == 5 else frozenset()
        serve_proxy(int(args[1]), int(args[2]), args[3], drop)
        return 0
    if len(args) > 2 or any(a.startswith("-") for a in args):
        print(
            "usage: python -m seglake.s3_server [DATA_DIR [PORT]]  (default ./s3-data, a free port)"
        )
        return 2
    port = args[1] if len(args) > 1 else "0"
    if not port.isdigit() or int(port) > 65535:
        print(f"seglake s3: error: PORT must be a TCP port number, not {port!r}", file=sys.stderr)
        return 2
    server = WeedServer(args[0] if args else "s3-data", port=int(port))

    def banner() -> list[str]:
        server.create_bucket(BUCKET)
        pid = server.proc.pid if server.proc else 0
        return [
            f"SeaweedFS S3 up: endpoint 127.0.0.1:{server.port}, weed pid {pid}",
            f"data in {server.dir}; bucket {BUCKET!r} made: a lake root is s3://{BUCKET}/NAME",
            f"log: {server.server_log}; Ctrl-C or SIGTERM stops it. A client needs:",
            *(f"{key}={value}" for key, value in client_environment(server.endpoint).items()),
        ]

    return run_in_foreground(
        "s3", server, S3ServerError, banner, ("clean shutdown", "killed after a timeout")
    )


if __name__ == "__main__":
    sys.exit(main())
