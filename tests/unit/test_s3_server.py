"""``make s3`` (``python -m seglake.s3_server DIR``): SeaweedFS in the foreground, its
endpoint and ``AWS_...`` lines printed, a client reading and writing with them, SIGTERM
stopping weed (its PID gone, its port closed) and the wrapper exiting 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seglake import fs
from seglake.s3_server import PROBE, count_requests, main, missing_requirements

ROOT = Path(__file__).resolve().parents[2]


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dir", "port"]) == 2
    assert "PORT must be a TCP port number, not 'port'" in capsys.readouterr().err
    assert main(["--help"]) == 2 and "usage:" in capsys.readouterr().out


def test_request_log_entries_are_counted_by_kind() -> None:
    """The proxy log's lines as the request-count test and bench count them."""
    entries = [
        {"method": "GET", "path": "/b/k", "query": None, "range": None},
        {"method": "GET", "path": "/b/k", "query": None, "range": "bytes=0-9"},
        {"method": "GET", "path": "/b", "query": "list-type=2&prefix=a%2F", "range": None},
        {"method": "GET", "path": "/b", "query": None, "range": None},
        {"method": "HEAD", "path": "/b/k", "query": None, "range": None},
        {"method": "POST", "path": "/b", "query": "delete", "range": None},
    ]
    assert count_requests(entries) == {
        "GET": 1, "ranged GET": 1, "PUT": 0, "LIST": 2, "HEAD": 1, "DELETE": 0, "POST": 1,
    }  # fmt: skip


def test_make_s3_serves_and_stops_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = missing_requirements()
    if why:
        pytest.skip(f"needs SeaweedFS: {why}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "seglake.s3_server", str(tmp_path / "s3")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        while not lines or not lines[-1].startswith("AWS_ALLOW_HTTP="):
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line.rstrip("\n"))
        up = re.fullmatch(r"SeaweedFS S3 up: endpoint 127\.0\.0\.1:(\d+), weed pid (\d+)", lines[0])
        assert up, lines
        port, pid = int(up[1]), int(up[2])
        client = dict(line.split("=", 1) for line in lines if line.startswith("AWS_"))
        assert set(client) == {
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
            "AWS_ALLOW_HTTP",
        }
        assert client["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        for key, value in client.items():
            monkeypatch.setenv(key, value)
        assert "a lake root is s3://lake/NAME" in lines[1]
        filesystem, root = fs.resolve("s3://lake/mine")
        fs.write_bytes(filesystem, fs.join(root, "x"), b"abc")
        assert fs.read_all(filesystem, fs.join(root, "x")) == b"abc"

        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "stopped (clean shutdown)" in out
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # weed is gone (and reaped)
        deadline = time.monotonic() + 5
        with pytest.raises(OSError):
            while time.monotonic() < deadline:
                fs.read_all(filesystem, fs.join(root, "x"))
    finally:
        if proc.poll() is None:  # a failed test: SIGTERM (stops weed), SIGKILL after 30 s
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def test_ready_probe_passes_with_its_bucket_left_over(s3_server) -> None:
    """A probe bucket left by an earlier probe (weed answered its PUT with an error before
    its master led, but kept the bucket: seen at load 12) does not fail every later probe:
    the start waited out its whole timeout and every S3 test of the session errored."""
    weed = s3_server.weed
    weed.create_bucket(PROBE.lstrip("/"))
    assert weed._answers()
