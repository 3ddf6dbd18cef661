"""A moto S3 server on loopback for the object-storage tests, with a request log.

Run as a script (``python tests/s3_server.py PORT LOG``) it serves moto's S3 on
``127.0.0.1:PORT`` and appends one JSON line per request to ``LOG``: method, path and
``Range`` header, so a test can tell a ranged GET from a whole-object GET whatever
process (driver, Spark executor) sent it. :class:`S3Server` starts it in a child process
(deltalake holds the GIL in some calls, which would starve a server thread in the test
process) and stops it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
    # no instance-metadata probing when something looks for credentials elsewhere
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str  # /bucket/key, URL-decoded
    range: str | None  # the Range header (``bytes=a-b``), None for a whole object
    status: int  # HTTP status of the answer
    length: int | None  # Content-Length of the answer


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """moto's S3 in a child process on ``127.0.0.1``, logging requests to a file.

    Args:
        log_path: where the child appends its request log.
    """

    def __init__(self, log_path: str | os.PathLike[str]) -> None:
        self.log_path = Path(log_path)
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the child and wait until it accepts connections.

        Raises:
            RuntimeError: it exited or did not listen within ``timeout_s``.
        """
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(self.port), str(self.log_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError as exc:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto S3 server did not start on port {self.port}") from exc
                time.sleep(0.05)

    def stop(self) -> None:
        """Terminate the child (killed if it does not exit within 10 s)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
        self._proc = None

    def create_bucket(self, name: str) -> None:
        """Create a bucket (boto3, talking to this server); an existing one is emptied."""
        import boto3

        s3 = boto3.resource(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        bucket = s3.Bucket(name)
        if bucket.creation_date is None:
            bucket.create()
        else:
            bucket.objects.all().delete()

    def root(self, bucket: str, prefix: str) -> str:
        """An ``s3://`` lake root on this server (endpoint carried in the URI)."""
        return (
            f"s3://{bucket}/{prefix.strip('/')}?endpoint_override=127.0.0.1:{self.port}"
            f"&scheme=http&region={REGION}"
        )

    def requests(self) -> list[Request]:
        """Every request logged so far."""
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text().splitlines()
        return [Request(**json.loads(line)) for line in lines if line.strip()]

    def mark(self) -> int:
        """How many requests are logged now (pass to :meth:`requests_since`)."""
        return len(self.requests())

    def requests_since(self, mark: int) -> list[Request]:
        """Requests logged after :meth:`mark` returned ``mark``."""
        return self.requests()[mark:]


def gets(requests: Iterable[Request], suffix: str) -> Iterator[Request]:
    """The GETs of objects whose key ends with ``suffix``."""
    return (r for r in requests if r.method == "GET" and r.path.endswith(suffix))


def _logging_app(app: Callable[..., Any], log_path: str) -> Callable[..., Any]:
    """WSGI middleware: one JSON line per request, then the moto app."""
    lock = threading.Lock()
    out = open(log_path, "a", buffering=1)  # noqa: SIM115 (lives as long as the server)

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        entry: dict[str, Any] = {
            "method": environ["REQUEST_METHOD"],
            "path": unquote(environ.get("PATH_INFO", "")),
            "range": environ.get("HTTP_RANGE"),
        }

        def logged_start(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            length = next((v for k, v in headers if k.lower() == "content-length"), None)
            entry.update(status=int(status.split()[0]), length=length and int(length))
            with lock:
                out.write(json.dumps(entry) + "\n")
            return start_response(status, headers, *args)

        return app(environ, logged_start)

    return wrapped


def _serve(port: int, log_path: str) -> None:
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    app = _logging_app(DomainDispatcherApplication(create_backend_app), log_path)
    make_server(
        "127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler
    ).serve_forever()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
