"""Run a driver script in a process group of its own, SIGKILLing the group afterwards (its
JVM and Python workers too, if the driver died alone): the crash tests' drivers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path


def run_group(
    script: Path, spec: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python script spec`` with ``env`` added, in a new session; the group is killed when
    done with."""
    proc = subprocess.Popen(
        [sys.executable, str(script), spec],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
