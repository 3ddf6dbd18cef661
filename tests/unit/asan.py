"""The compiled kernel built with AddressSanitizer, for tests that feed it forged input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_under_asan(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` (Python source) run with the kernel built with ``-fsanitize=address`` as
    its first argument (then ``args``), ASan preloaded and aborting on the first access
    outside a buffer; skips the test where there is no C compiler or no ASan."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    so = tmp_path / "asan.so"
    flags = ["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-shared", "-fPIC"]
    src = str(ROOT / "native" / "seglake_native.c")
    build = subprocess.run([cc, *flags, "-o", str(so), src], capture_output=True, text=True)
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True)
    if build.returncode or not os.path.isabs(libasan.stdout.strip()):
        pytest.skip(f"no AddressSanitizer: {build.stderr[-300:]}")
    path = tmp_path / "run.py"
    path.write_text(script)
    env = {
        **os.environ,
        "LD_PRELOAD": libasan.stdout.strip(),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
    }
    return subprocess.run(
        [sys.executable, str(path), str(so), *args], capture_output=True, text=True, env=env
    )
