"""Kafka's own command-line tools (the jars ``make jars`` fetches) run as test oracles.

``dump_log_segments`` runs ``kafka.tools.DumpLogSegments`` (kafka-dump-log.sh) in one JVM
over many files (``--files a,b,c``: a JVM start costs seconds on a shared machine) with a
bounded timeout. Tests that need it call ``require_kafka_tools()``, which skips them, with
the reason printed, only when java or the jars are absent.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KAFKA_JARS = ROOT / ".jars" / "kafka"
DUMP_CLASS = "kafka.tools.DumpLogSegments"
TIMEOUT_S = 300  # a JVM start on 2 cores shared by many: seconds; this bounds a hang


@dataclass(frozen=True)
class ToolRun:
    """What a Kafka tool printed and its exit status."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def missing_reason() -> str | None:
    """Why Kafka's tools cannot run here, or None when they can."""
    if shutil.which("java") is None:
        return "no java on PATH: Kafka's DumpLogSegments cannot run"
    if not any(KAFKA_JARS.glob("kafka_*.jar")):
        return f"no Kafka jars in {KAFKA_JARS} (run `make jars`; needs mvn and java)"
    return None


def require_kafka_tools() -> None:
    """Skip the calling test (saying why, also on stdout) when java or the jars are absent."""
    reason = missing_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        pytest.skip(reason)


def dump_log_segments(files: Sequence[str | Path], *options: str) -> ToolRun:
    """``kafka-dump-log.sh --files a,b,c OPTIONS`` in one JVM (no broker needed)."""
    require_kafka_tools()
    args = [
        "java",
        "-Xmx512m",
        "-XX:TieredStopAtLevel=1",  # a short run: C1 only starts faster
        "-Dfile.encoding=UTF-8",  # keys and values print as UTF-8 whatever the locale
        "-Dstdout.encoding=UTF-8",
        "-Dstderr.encoding=UTF-8",
        "-Dlog4j2.configurationFile=" + str(ROOT / "conf" / "log4j2.properties"),
        "-cp",
        f"{KAFKA_JARS}/*",
        DUMP_CLASS,
        "--files",
        ",".join(str(f) for f in files),
        *options,
    ]
    done = subprocess.run(
        args,
        capture_output=True,
        encoding="utf-8",
        errors="surrogateescape",
        timeout=TIMEOUT_S,
        check=False,
        cwd=ROOT,
    )
    return ToolRun(args, done.returncode, done.stdout, done.stderr)
