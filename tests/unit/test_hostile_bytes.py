"""Issue 29, item 2: memory and time from hostile bytes are bounded.

A read's memory is what it returns plus a fixed, named budget: compressed batches are
inflated a group of at most ``READ_INFLATE_BUDGET`` at a time; indexes are read up to
the entries their log can have; a preallocated ``.log``'s zeros end it (Kafka's
recovery); a read never allocates past the file's size; non-regular files are refused
unopened; plots bound their bucket count; ``.properties`` parse in linear time.

Each case runs in a child process (the CLI, or a few lines of Python) whose peak RSS is
measured (``os.wait4``) under ``RLIMIT_DATA`` (the shared machine is never asked for
more than 2 GiB): it ends in a bounded RSS, in bounded time, with an answer or one line
(exit 2, no traceback). The hostile files are small on disk (sparse files, zstd frames
of zeros: :mod:`tests.hostile_files`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pytest

from seglake.config import LogConfig
from seglake.storage.log import PartitionLog
from tests.hostile_files import sparse, write_bombs

ROOT = Path(__file__).resolve().parents[2]
DATA_LIMIT = 2 << 30  # no child may take more of the shared machine
BOUND_MB = 700  # each case's peak RSS (old main: 1.3 GB to MemoryError)
BATCHES, FRAMES = 6, 160  # six zstd batches of 160 MiB inflated each, 5 MB on disk


class Child(NamedTuple):
    rc: int
    out: str
    err: str
    rss_mb: int
    seconds: float


# The child sets its own limit and reports its own peak (VmHWM: per address space, so it
# starts at exec): ``wait4``'s ru_maxrss would count the pages of the pytest process it
# was forked from (430 MB late in a run), not what seglake used.
_PREAMBLE = """\
import atexit, os, resource, runpy, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
def _peak():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    with open(os.environ["SEGLAKE_TEST_PEAK"], "w") as f:
        f.write(str(kb))
atexit.register(_peak)
"""


def child(args: list[str], *, timeout: float = 60, code: bool = False) -> Child:
    """``seglake ARGS`` (or ``python -c ARGS[0]`` with ``code``) in a child process under
    ``RLIMIT_DATA``; its own peak RSS (VmHWM at exit; ``wait4``'s if it died before
    reporting), killed after ``timeout`` seconds."""
    run = args[0] if code else 'runpy.run_module("seglake.cli.main", run_name="__main__")'
    argv = [sys.executable, "-c", _PREAMBLE.format(limit=DATA_LIMIT) + run]
    if not code:
        argv += args
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:  # fmt: skip
        peak = Path(tmp) / "peak"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            "SEGLAKE_TEST_PEAK": str(peak),
        }
        start = time.monotonic()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                p.kill()
                os.wait4(p.pid, 0)
                raise AssertionError(f"{args}: still running after {timeout} s")
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Child(
            p.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            int(peak.read_text()) // 1024 if peak.exists() else usage.ru_maxrss // 1024,
            seconds,
        )


def one_line(r: Child, *, rss_mb: int = BOUND_MB, needle: str = "") -> str:
    """The child ended with exit 2 and one ``seglake: error:`` line (last, after any
    warnings; no traceback), within ``rss_mb``."""
    assert r.rss_mb < rss_mb, f"peak RSS {r.rss_mb} MB; {r.err[-500:]}"
    assert r.rc == 2, f"exit {r.rc}: {r.err[-1500:]}"
    lines = r.err.strip().splitlines()
    assert "Traceback" not in r.err and lines[-1].startswith("seglake: error: "), r.err[-1500:]
    assert [x for x in lines if "error" in x] == lines[-1:], r.err[-1500:]
    assert needle in lines[-1], lines[-1]
    return lines[-1]


def answered(r: Child, *, rss_mb: int = BOUND_MB) -> str:
    assert r.rss_mb < rss_mb, f"peak RSS {r.rss_mb} MB; {r.err[-500:]}"
    assert r.rc == 0, f"exit {r.rc}: {r.err[-1500:]}"
    assert "Traceback" not in r.err, r.err
    return r.out


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A broker data directory whose partition ``t-0`` holds zstd batches that inflate
    to 160 MiB each (inside the 256x budget of each), of zeros that are not records."""
    broker = tmp_path_factory.mktemp("bombs")
    write_bombs(broker / "t-0", BATCHES, FRAMES)
    return broker


@pytest.fixture(scope="module")
def bomb_lake(bombs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bombs registered into a lake (register scans, never decodes the records)."""
    root = tmp_path_factory.mktemp("bomb_lake") / "lake"
    r = child(["register", "--root", str(root), str(bombs)])
    answered(r)
    return root


def test_read_of_many_large_batches_inflates_a_group_at_a_time(bombs: Path) -> None:
    """Old main: every batch inflated before the first is walked (1.9 GB, MemoryError)."""
    n = BATCHES * 1000
    r = child(["read", str(bombs / "t-0"), "--offset", "0", "--max-records", str(n)])
    one_line(r, needle="position 0: batch with base offset 0")


def test_dump_deep_iteration_of_large_batches_is_bounded(bombs: Path) -> None:
    r = child(["dump", "--deep-iteration", str(bombs / "t-0" / f"{0:020d}.log")])
    one_line(r, needle="position 0: batch with base offset 0")


def test_register_and_consume_of_large_batches_are_bounded(bomb_lake: Path) -> None:
    """Register (the fixture: bounded too) and consume of the lake it made."""
    r = child(["consume", "--topic", "t", "--from-beginning", str(bomb_lake)])
    one_line(r, needle="batch with base offset 0")


def test_notebook_read_of_large_batches_is_bounded(bomb_lake: Path) -> None:
    code = (
        "import sys, seglake\n"
        f"p = seglake.open({str(bomb_lake)!r}).partition('t', 0)\n"
        "try:\n"
        f"    p.read(0, {BATCHES * 1000})\n"
        "except seglake.errors.CorruptRecordError as e:\n"
        "    print('seglake: error:', e, file=sys.stderr); sys.exit(2)\n"
    )
    one_line(child([code], code=True), needle="batch with base offset 0")


@pytest.fixture
def broker_dir(tmp_path: Path) -> Path:
    """A small valid broker partition directory (100 records, index entries)."""
    d = tmp_path / "t-0"
    d.mkdir()
    log = PartitionLog.open(str(d))
    n = 100
    records = pa.table(
        {
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array(np.arange(n) + 1000, pa.int64()),
            "value": pa.array([b"x" * 100] * n),
        }
    )
    log.append(records, config=LogConfig(index_interval_bytes=1000, batch_size=1000))
    assert (d / f"{0:020d}.index").stat().st_size > 16
    return d


def _expect_records(out: str, first: int, count: int) -> None:
    lines = out.strip().splitlines()
    assert len(lines) == count, out[-500:]
    assert lines[0].startswith(f"offset: {first} timestamp: {1000 + first} "), lines[0]


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_sparse_multi_gib_index_is_not_read_whole(broker_dir: Path, suffix: str) -> None:
    """A 3 GiB sparse index (its data the real entries, then zeros): read, consume,
    recover --dry-run and dump read only the entries in use (old main: MemoryError)."""
    sparse(broker_dir / f"{0:020d}{suffix}", 3 << 30)
    _expect_records(answered(child(["read", str(broker_dir), "--offset", "40"])), 40, 10)
    if suffix == ".index":  # the same reads as `read`'s for a .timeindex: spare the time
        out = answered(child(["consume", "--topic", "t", "--max-messages", "3", str(broker_dir)]))
        assert out.count("x" * 100) == 3, out[-300:]
        answered(child(["recover", "--dry-run", str(broker_dir)]))
    out = answered(child(["dump", str(broker_dir / f"{0:020d}{suffix}")]), rss_mb=400)
    assert out.startswith("Dumping "), out[:300]


def test_preallocated_log_ends_at_its_zeros(broker_dir: Path) -> None:
    """A broker with preallocate=true leaves its active segment zero-filled to 2 GiB
    (sparse): the log ends after its last batch, as Kafka's recovery reads it, and the
    zeros are never read whole (old main: 2.2 GB, MemoryError); recovery cuts them
    as Kafka's does, reading only the data (old main: 2 GB, MemoryError)."""
    log = broker_dir / f"{0:020d}.log"
    size = log.stat().st_size
    sparse(log, 2 << 30)
    r = child(["read", str(broker_dir), "--offset", "95", "--max-records", "10"])
    _expect_records(answered(r, rss_mb=400), 95, 5)
    assert r.seconds < 20, r.seconds
    code = (
        "from seglake.storage.log import PartitionLog\n"
        f"log = PartitionLog.open({str(broker_dir)!r})\n"
        "print(log.log_end_offset, log.segments[-1].size)\n"
    )
    assert answered(child([code], code=True), rss_mb=400).split() == ["100", str(size)]
    out = answered(child(["recover", "--dry-run", str(broker_dir)]), rss_mb=400)
    assert f"truncated {(2 << 30) - size} of {2 << 30} bytes at position {size}" in out, out


@pytest.mark.parametrize("next_offset", [100, 200], ids=["all_there", "tail_lost"])
def test_a_row_claiming_a_huge_size_allocates_nothing_for_it(
    broker_dir: Path, next_offset: int
) -> None:
    """A catalog row's ``size_bytes`` of 64 GiB for a small file: the reads are cut to
    the file (old main: ``os.pread`` of 64 GiB, MemoryError); the records the file holds
    are the answer, or the offsets of the row it lacks are named as lost."""
    log = broker_dir / f"{0:020d}.log"
    code = (
        "import sys\n"
        "import pyarrow.fs as pafs\n"
        "from seglake.errors import SeglakeError\n"
        "from seglake.storage.segment import LogSegment\n"
        f"seg = LogSegment(pafs.LocalFileSystem(), {str(log)!r}, size=64 << 30,\n"
        f"                 next_offset={next_offset}, committed=True)\n"
        "try:\n"
        "    print(seg.read_records(0, 100).num_rows)\n"
        "except SeglakeError as e:\n"
        "    print('seglake: error:', e, file=sys.stderr); sys.exit(2)\n"
    )
    r = child([code], code=True)
    if next_offset == 100:
        assert answered(r, rss_mb=400).split() == ["100"]
    else:
        one_line(r, rss_mb=400, needle="offsets 100..199 are gone")


def test_register_refuses_a_named_pipe(broker_dir: Path, tmp_path: Path) -> None:
    """Old main: register blocks forever opening the fifo (killed after the timeout)."""
    fifo_dir = tmp_path / "broker" / "t-1"
    fifo_dir.mkdir(parents=True)
    os.mkfifo(fifo_dir / f"{0:020d}.log")
    r = child(["register", "--root", str(tmp_path / "lake"), str(tmp_path / "broker")], timeout=30)
    one_line(r, needle="is a named pipe (fifo), not a regular file")
    r = child(["read", str(fifo_dir), "--offset", "0"], timeout=30)
    one_line(r, needle="is a named pipe (fifo), not a regular file")


def test_plot_rate_bounds_its_buckets() -> None:
    """Two records 130 years apart, per minute: old main built 68 million buckets (2.8
    GB; this test stops before calling it there: no MAX_BUCKETS)."""
    from seglake import plot

    assert getattr(plot, "MAX_BUCKETS", None) == 2000, "plot_rate has no bucket bound"
    ts = np.array([0, int(130 * 365.25 * 86400e3)], np.int64)
    fig = plot.plot_rate("t", {0: ts, 1: ts[:1]}, "1min")
    ax = fig.axes[0]
    assert max(len(line.get_xdata()) for line in ax.get_lines()) <= plot.MAX_BUCKETS + 2
    assert "per 30D bucket (1min would make over 2000 buckets)" in ax.get_title()
    fig = plot.plot_rate("t", {0: ts[:1] + np.arange(5) * 60_000}, "1min")
    assert "per 1min bucket (catalog" in fig.axes[0].get_title()


def test_properties_with_continued_lines_parse_in_linear_time() -> None:
    """2 MB of continued lines (old main: quadratic, 14-30 s; here well under 1 s)."""
    from seglake.properties import parse_properties

    text = "a=" + "x\\\n  " * 400_000 + "end\nb = 1\n"
    start = time.monotonic()
    got = parse_properties(text)
    took = time.monotonic() - start
    assert got == {"a": "x" * 400_000 + "end", "b": "1"}
    assert took < 4, f"{took:.1f} s for {len(text)} bytes"


def test_zero_tail_search_on_a_file_shorter_than_its_listing(broker_dir: Path) -> None:
    """A broker file that ends in zeros and shrank since it was listed: the search for
    its data's end stops at the file's end (it once looped forever there)."""
    import pyarrow.fs as pafs

    from seglake.storage.segment import LogSegment

    log = broker_dir / f"{0:020d}.log"
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(bytes(100))
    seg = LogSegment(pafs.LocalFileSystem(), str(log), size=size + 100_000)
    assert seg.size == size
    seg = LogSegment(pafs.LocalFileSystem(), str(log), size=size + 100_000)
    os.truncate(log, size + 50)  # zeros still end it, the listing's size is past the end
    assert seg.size in (size, size + 100_000)
    os.truncate(log, size)  # its batches end where the file does: the walk stops there
    seg = LogSegment(pafs.LocalFileSystem(), str(log), size=size + 100_000)
    assert seg.size == size + 100_000  # not zeros: left to the reads, which name it
