"""Issue 25 item 6: the file system says no (read-only lake, full disk, file-size limit)
during `seglake register`, `config --set` and `retention`: one line naming the path and
what to do, exit 2, nothing committed, no staging left; never a traceback or a delta-rs
panic. Real faults: a small tmpfs (remounted read-only, or filled) and RLIMIT_FSIZE in
the child process; the translation itself against injected errors."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from seglake import fs as lakefs
from seglake.lake.catalog import Catalog
from tests.conftest import FIXTURES
from tests.disk_faults import (
    file_size_limit,
    fill,
    one_error_line,
    refusing,
    remount,
    seglake,
    tmpfs,
)
from tests.unit.test_recovery import N, make_lake, pristine  # noqa: F401

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"no fixtures at {FIXTURES}")


@pytest.mark.parametrize(
    ("exc", "path", "words"),
    [
        (
            OSError(errno.EROFS, "Read-only file system", "/l/t-0/x.log"),
            "/l/t-0/x.log",
            "read-only",
        ),
        (OSError(errno.ENOSPC, "No space left on device"), "/given", "no space left"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "/given", "quota"),
        (OSError(errno.EFBIG, "File too large"), "/given", "ulimit -f"),
        (OSError(errno.EACCES, "Permission denied"), "/given", "permission denied"),
        (  # pyarrow: the errno in the text, the path quoted
            OSError("Failed to open local file '/l/_staging/r/x'. Detail: [errno 30] Read-only"),
            "/l/_staging/r/x",
            "read-only",
        ),
        (  # delta-rs / object_store: "(os error N)" after the file
            RuntimeError(
                "Failed to parse parquet: External: Generic LocalFileSystem error: Unable to "
                "open file /l/_catalog/part-0.parquet#1: Read-only file system (os error 30)"
            ),
            "/l/_catalog/part-0.parquet",
            "read-only",
        ),
        (  # no path in the text: the one given
            RuntimeError("Unable to copy data to file: No space left on device (os error 28)"),
            "/given",
            "no space left",
        ),
    ],
)
def test_refusals_are_one_line_naming_the_path(exc, path, words) -> None:
    from seglake.errors import FileSystemError, NoSpaceError

    err = lakefs.refused(exc, "/given")
    assert isinstance(err, FileSystemError)
    msg = str(err)
    assert msg.startswith(f"{path}: ") and words in msg and "\n" not in msg
    assert errno.errorcode[err.errno] in msg  # e.g. (EROFS)
    assert isinstance(err, NoSpaceError) == (err.errno in (errno.ENOSPC, errno.EDQUOT))


def test_other_errors_are_not_refusals() -> None:
    from seglake.errors import FileSystemError

    assert lakefs.refused(FileNotFoundError(errno.ENOENT, "No such file", "/x")) is None
    assert lakefs.refused(RuntimeError("schema mismatch")) is None
    with pytest.raises(FileNotFoundError), lakefs.writing("/x"):
        raise FileNotFoundError(errno.ENOENT, "No such file", "/x")
    read_only = r"^/x: the file system is read-only \(EROFS\)"
    with pytest.raises(FileSystemError, match=read_only), lakefs.writing("/x"):
        raise OSError(errno.EROFS, "Read-only file system", "/x/.tmp")


def _lake_with_a_segment(root: Path) -> int:
    proc = seglake("register", str(FIXTURES), "--root", str(root), "--topics", "first")
    assert proc.returncode == 0, proc.stderr
    return Catalog(str(root)).version()


def _no_staging(root: Path) -> None:
    staging = root / "_staging"
    assert not staging.exists() or not os.listdir(staging), os.listdir(staging)


def test_register_into_a_read_only_lake(tmp_path) -> None:
    """Old code: a pyarrow OSError traceback."""
    with tmpfs(tmp_path / "disk") as disk:
        remount(disk, "ro")
        line = one_error_line(seglake("register", "--root", str(disk / "lake"), str(FIXTURES)))
        assert str(disk / "lake") in line and "read-only (EROFS)" in line, line
        assert not (disk / "lake").exists()


def test_register_onto_a_full_disk_leaves_nothing(tmp_path) -> None:
    """The 277 kB __cluster_metadata segment does not fit: old code, a traceback and the
    partial copies left in _staging/."""
    with tmpfs(tmp_path / "disk", "192k") as disk:
        root = disk / "lake"
        line = one_error_line(
            seglake("register", "--root", str(root), str(FIXTURES), "--include-internal")
        )
        assert f"{root}/_staging/" in line and "no space left on the device (ENOSPC)" in line
        _no_staging(root)
        assert not Catalog(str(root)).exists()


def test_register_past_the_file_size_limit(tmp_path) -> None:
    """RLIMIT_FSIZE below the largest segment: EFBIG (old code: a traceback, staging left)."""
    root = tmp_path / "lake"
    version = _lake_with_a_segment(root)
    proc = seglake(
        "register",
        "--root",
        str(root),
        str(FIXTURES),
        "--include-internal",
        preexec_fn=file_size_limit(65536),
    )
    line = one_error_line(proc)
    assert f"{root}/_staging/" in line and "(EFBIG)" in line and "ulimit -f" in line, line
    _no_staging(root)
    assert Catalog(str(root)).version() == version


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_config_set_on_a_lake_that_cannot_be_written(tmp_path, fault) -> None:
    """Old code: a CatalogError of several lines (delta-rs's text) and, on a full disk,
    delta-rs's panic text (thread 'tokio-rt-worker' panicked ...)."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        root = disk / "lake"
        version = _lake_with_a_segment(root)
        with refusing(disk, fault):
            proc = seglake(
                "config", str(root), "--topic", "first", "--set", "cleanup.policy=compact"
            )
        line = one_error_line(proc)
        assert str(root / "_catalog") in line, line
        assert ("read-only (EROFS)" if fault == "read-only" else "(ENOSPC)") in line, line
        assert "panicked" not in proc.stderr
        assert Catalog(str(root)).version() == version


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_retention_on_a_lake_that_cannot_be_written(tmp_path, pristine, fault) -> None:  # noqa: F811
    """Old code: a pyarrow/deltalake traceback (read-only) or several lines and delta-rs's
    panic text (full)."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        root = disk / "lake"
        version = make_lake(root, pristine).version()
        files = sorted(os.listdir(root / "t-0"))
        with refusing(disk, fault):
            proc = seglake("retention", str(root), "--log-start-offset", f"t:0:{N}")
        line = one_error_line(proc)
        assert str(root) in line and ("EROFS" if fault == "read-only" else "ENOSPC") in line
        assert "panicked" not in proc.stderr
        assert Catalog(str(root)).version() == version
        assert sorted(os.listdir(root / "t-0")) == files


def test_register_copies_nothing_of_a_failed_run_into_place(tmp_path) -> None:
    """A full disk at the catalog commit (segments staged): nothing committed, no
    staging, no partition directory."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        root = disk / "lake"
        _lake_with_a_segment(root)
        shutil.copytree(FIXTURES / "sensor-data-0", tmp_path / "broker" / "sensor-data-0")
        version = Catalog(str(root)).version()
        # room for the copies (three non-empty files: the .log, its index and .keyindex, a
        # 4 KiB page each), not for the catalog commit's parquet file
        filler = fill(disk)
        os.truncate(filler, os.path.getsize(filler) - 3 * 4096)
        proc = seglake("register", "--root", str(root), str(tmp_path / "broker"))
        line = one_error_line(proc)
        assert f"{root}/_catalog" in line and "(ENOSPC)" in line, line
        (disk / "filler").unlink()
        _no_staging(root)
        assert Catalog(str(root)).version() == version
        assert not (root / "sensor-data-0").exists()


def test_native_stderr_is_held_back_and_dropped_on_failure(capfd) -> None:
    """What native code writes on fd 2 during a catalog write (delta-rs's panic text)
    is written out after a success and dropped after a failure."""
    with lakefs.native_stderr_held():
        os.write(2, b"kept\n")
    with pytest.raises(RuntimeError), lakefs.native_stderr_held():
        os.write(2, b"thread 'tokio-rt-worker' panicked at ...\n")
        raise RuntimeError("refused")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "kept\nafter\n"
