"""Real file system faults for tests: a small tmpfs (full disk, read-only remount) and a
file-size limit (EFBIG) for a child process. The tests run as root, where ``chmod`` does
not stop a write; mounting needs CAP_SYS_ADMIN (tests skip, saying why, without it)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "512k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (created) for the block; unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs at {path}: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, mode: str) -> None:
    """Remount the tmpfs at ``path`` ``ro`` or ``rw``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, capture_output=True)


def fill(path: Path) -> Path:
    """Fill the file system of ``path`` with one file until the disk says ENOSPC."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


@contextlib.contextmanager
def refusing(disk: Path, fault: str) -> Iterator[None]:
    """The tmpfs at ``disk`` remounted read-only (``fault="read-only"``) or filled
    (``"full"``) for the block; writable with its space back after."""
    filler = None
    if fault == "read-only":
        remount(disk, "ro")
    else:
        filler = fill(disk)
    try:
        yield
    finally:
        if filler is None:
            remount(disk, "rw")
        else:
            filler.unlink()


def file_size_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that caps the files the child writes at ``limit`` bytes
    (RLIMIT_FSIZE) with SIGXFSZ ignored, so a write past it fails with EFBIG."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def run(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """A child process with no stdin, its output captured as text."""
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        preexec_fn=preexec_fn,
        timeout=timeout,
    )


def seglake(
    *args: str, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``seglake`` command in a child process (no stdin, no bytecode writes)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return run([sys.executable, "-m", "seglake.cli.main", *args], env=env, preexec_fn=preexec_fn)


def one_error_line(proc: subprocess.CompletedProcess[str], prog: str = "seglake") -> str:
    """The process failed with exit 2 and exactly one line on stderr (no traceback, no
    panic text): that line."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{prog}: error: "), proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]
