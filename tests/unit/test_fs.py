"""seglake.fs: pyarrow.fs wrappers, the path-escape guard and the byte counter."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake import fs, lake_paths
from seglake.errors import ConfigError, InvalidTopicError, SeglakeError, SegmentNotFoundError
from seglake.record import native
from tests.s3_server import S3Server


@pytest.fixture
def lake(tmp_path: Path) -> tuple[pafs.FileSystem, str]:
    return fs.resolve(str(tmp_path / "lake"))


@pytest.fixture(autouse=True)
def _fresh_stats() -> None:
    fs.IO_STATS.reset()


# ------------------------------------------------------------------ resolve / join


def test_resolve_local_relative_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    filesystem, path = fs.resolve("lake/")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == str(tmp_path / "lake")


def test_resolve_file_uri_and_pathlike(tmp_path: Path) -> None:
    filesystem, path = fs.resolve(f"file://{tmp_path}/lake/")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == f"{tmp_path}/lake"
    assert fs.resolve(tmp_path / "lake")[1] == f"{tmp_path}/lake"


def test_resolve_s3_endpoint_override() -> None:
    filesystem, path = fs.resolve(
        "s3://bucket/some/prefix/?region=us-east-1", endpoint_override="http://127.0.0.1:9"
    )
    assert filesystem.type_name == "s3"
    assert not fs.renames_atomically(filesystem)
    assert fs.renames_atomically(pafs.LocalFileSystem())
    assert fs.renames_atomically(pafs.SubTreeFileSystem("/tmp", pafs.LocalFileSystem()))
    assert path == "bucket/some/prefix"
    with pytest.raises(ConfigError, match="s3://"):
        fs.resolve("file:///tmp/x", endpoint_override="http://127.0.0.1:9")


@pytest.mark.parametrize("root", ["", "   "])
def test_resolve_rejects_empty_root(root: str) -> None:
    with pytest.raises(ConfigError, match="non-empty"):
        fs.resolve(root)


def test_join() -> None:
    assert fs.join("/a/", "b", "/c/", "", "d.log") == "/a/b/c/d.log"
    assert fs.join("bucket/p", "orders-3") == "bucket/p/orders-3"
    assert fs.join("", "x") == "x"


# ------------------------------------------------------------------ safe_join


@pytest.mark.parametrize(
    "relative",
    [
        "orders-3/00000000000000000000.log",
        "_staging/run-1/orders-3/00000000000000000042.index",
        "a..b/c.log",
    ],
)
def test_safe_join_accepts_plain_relative_paths(relative: str) -> None:
    assert lake_paths.safe_join("/lake", relative) == f"/lake/{relative}"
    assert lake_paths.safe_join("bucket/prefix/", relative) == f"bucket/prefix/{relative}"


@pytest.mark.parametrize(
    "relative",
    [
        "../x",
        "/etc/passwd",
        "a/../../b",
        "orders-3/..",
        "./orders-3/x.log",
        "a//b",
        "",
        "file:///etc/passwd",
        "s3://other-bucket/x",
        "c:/windows/x",
        "C:\\x",
        "..\\x",
        "%2e%2e/x",
        "..%2fx",
        "a/b?x=../..",
        "a#../../b",
        "~/x",
        "a\x00b",
    ],
)
def test_safe_join_refuses_escapes(relative: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        lake_paths.safe_join("/lake", relative)
    assert isinstance(info.value, SeglakeError)
    assert repr(relative) in str(info.value)


def test_safe_join_refuses_non_strings() -> None:
    with pytest.raises(InvalidTopicError, match="string"):
        lake_paths.safe_join("/lake", None)  # type: ignore[arg-type]


# ------------------------------------------------------------------ reads and the counter


def test_read_range_is_one_counted_read(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    path = fs.join(root, "orders-0", "00000000000000000000.log")
    fs.write_bytes(filesystem, path, bytes(range(256)) * 4)
    fs.IO_STATS.reset()

    assert fs.read_range(filesystem, path, 100, 16) == bytes(range(100, 116))
    assert fs.IO_STATS.snapshot() == {"bytes_read": 16, "reads": 1, "files_opened": 1}

    assert fs.read_range(filesystem, path, 1020, 100) == bytes(range(252, 256))  # short at EOF
    assert fs.read_range(filesystem, path, 0, 0) == b""
    assert fs.IO_STATS.bytes_read == 20
    assert fs.IO_STATS.reads == 3

    assert len(fs.read_all(filesystem, path)) == 1024
    assert fs.IO_STATS.bytes_read == 1044
    fs.IO_STATS.reset()
    assert fs.IO_STATS.snapshot() == {"bytes_read": 0, "reads": 0, "files_opened": 0}


def test_read_range_rejects_negative_ranges(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    with pytest.raises(ValueError, match="negative"):
        fs.read_range(filesystem, fs.join(root, "x"), -1, 4)


def test_missing_files_raise_segment_not_found(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    missing = fs.join(root, "orders-0", "00000000000000000000.index")
    for call in (
        lambda: fs.read_range(filesystem, missing, 0, 8),
        lambda: fs.read_all(filesystem, missing),
        lambda: fs.file_size(filesystem, missing),
        lambda: fs.move(filesystem, missing, missing + ".x"),
        lambda: fs.delete_file(filesystem, missing, root=root, missing_ok=False),
    ):
        with pytest.raises(SegmentNotFoundError, match=missing):
            call()
    assert fs.IO_STATS.reads == 0


def test_io_stats_are_thread_safe(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    path = fs.join(root, "f")
    fs.write_bytes(filesystem, path, b"x" * 64)
    fs.IO_STATS.reset()

    def work() -> None:
        for _ in range(50):
            fs.read_range(filesystem, path, 0, 8)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fs.IO_STATS.snapshot() == {"bytes_read": 8 * 50 * 8, "reads": 400, "files_opened": 400}


# ------------------------------------------------------------------ writes and directories


def test_write_bytes_replaces_atomically_and_leaves_no_temp(
    lake: tuple[pafs.FileSystem, str],
) -> None:
    filesystem, root = lake
    path = fs.join(root, "orders-0", "00000000000000000000.log")
    fs.write_bytes(filesystem, path, b"first")
    fs.write_bytes(filesystem, path, memoryview(b"second"))
    assert fs.read_all(filesystem, path) == b"second"
    assert fs.listdir(filesystem, fs.join(root, "orders-0")) == ["00000000000000000000.log"]


def test_write_bytes_failure_leaves_nothing(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    path = fs.join(root, "orders-0", "00000000000000000000.log")
    with pytest.raises(TypeError):
        fs.write_bytes(filesystem, path, 12345)  # type: ignore[arg-type]
    assert fs.listdir(filesystem, fs.join(root, "orders-0")) == []


def test_move_exists_listdir_size_delete(lake: tuple[pafs.FileSystem, str]) -> None:
    filesystem, root = lake
    staged = fs.join(root, "_staging", "run-1", "orders-0", "00000000000000000000.log")
    final = lake_paths.safe_join(root, "orders-0/00000000000000000000.log")
    fs.write_bytes(filesystem, staged, b"12345")
    fs.move(filesystem, staged, final)  # creates orders-0/
    assert not fs.exists(filesystem, staged)
    assert fs.exists(filesystem, final)
    assert fs.file_size(filesystem, final) == 5
    assert fs.listdir(filesystem, root) == ["_staging", "orders-0"]
    with pytest.raises(SegmentNotFoundError, match="directory"):
        fs.file_size(filesystem, fs.join(root, "orders-0"))
    with pytest.raises(SegmentNotFoundError, match="nope"):
        fs.listdir(filesystem, fs.join(root, "nope"))
    assert fs.listdir(filesystem, fs.join(root, "nope"), missing_ok=True) == []

    fs.delete_dir(filesystem, fs.join(root, "_staging"), root=root)
    fs.delete_dir(filesystem, fs.join(root, "_staging"), root=root)  # missing_ok by default
    with pytest.raises(SegmentNotFoundError):
        fs.delete_dir(filesystem, fs.join(root, "_staging"), root=root, missing_ok=False)
    fs.delete_file(filesystem, final, root=root)
    fs.delete_file(filesystem, final, root=root)
    assert fs.listdir(filesystem, root) == ["orders-0"]


# ------------------------------------------------------------------ object storage (SeaweedFS)


@pytest.fixture(scope="module")
def s3_root(s3_credentials: S3Server) -> str:
    """An empty bucket on the session's SeaweedFS S3 server (tests/s3_server.py); an ``s3://``
    root in it."""
    s3_credentials.create_bucket("lake")
    return s3_credentials.root("lake", "root")


def test_s3_round_trip(s3_root: str) -> None:
    filesystem, root = fs.resolve(s3_root)
    assert filesystem.type_name == "s3" and root == "lake/root"
    staged = fs.join(root, "_staging", "r1", "orders-0", "00000000000000000000.log")
    final = lake_paths.safe_join(root, "orders-0/00000000000000000000.log")
    fs.write_bytes(filesystem, staged, b"0123456789")
    fs.move(filesystem, staged, final)
    assert fs.read_range(filesystem, final, 3, 4) == b"3456"
    assert fs.file_size(filesystem, final) == 10
    assert "orders-0" in fs.listdir(filesystem, root)
    with pytest.raises(SegmentNotFoundError):
        fs.read_all(filesystem, staged)
    fs.delete_dir(filesystem, fs.join(root, "orders-0"), root=root)
    assert not fs.exists(filesystem, final)


def test_s3_endpoint_from_environment(s3_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    query = dict(kv.split("=") for kv in s3_root.split("?", 1)[1].split("&"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{query['endpoint_override']}")
    filesystem, root = fs.resolve("s3://lake/env")
    fs.write_bytes(filesystem, fs.join(root, "x"), b"abc")
    assert fs.read_all(filesystem, fs.join(root, "x")) == b"abc"
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


# ------------------------------------------------------------------ coalesced ranged reads


def test_coalesce_joins_ranges_across_small_holes_within_the_window() -> None:
    ranges = [(5000, 10), (0, 100), (150, 50), (0, 0), (3_000_000, 8), (3_000_100, 4)]
    assert fs.coalesce(ranges, gap=1000) == [
        (0, 200, [1, 2]),
        (5000, 5010, [0]),
        (3_000_000, 3_000_104, [4, 5]),
    ]
    # the default gap (1 MiB) joins the first three; a span never passes the limit
    assert fs.coalesce(ranges)[0] == (0, 5010, [1, 2, 0])
    assert fs.coalesce([(0, 10), (20, 10), (40, 10)], gap=100, limit=30) == [
        (0, 30, [0, 1]),
        (40, 50, [2]),
    ]
    assert fs.coalesce([(0, 50), (60, 10)], gap=100, limit=30) == [(0, 50, [0]), (60, 70, [1])]


def test_read_ranges_into_on_an_object_store_is_one_read_a_span() -> None:
    """On a filesystem that is not the local one (pyarrow's mock: an object store's
    code path) ranges near each other are one ranged read, each still landing in its
    own place of ``out`` (in the order given), short where the file ends."""
    store = pafs._MockFileSystem()
    data = bytes(range(256)) * 64  # 16 KiB
    with store.open_output_stream("f") as out:
        out.write(data)
    ranges = [(9000, 16), (10, 20), (16380, 100), (0, 0), (40, 5)]
    buf = bytearray(sum(n for _, n in ranges))
    fs.IO_STATS.reset()
    got = fs.read_ranges_into(store, "f", ranges, memoryview(buf))
    assert got == [16, 20, 4, 0, 5]
    assert fs.IO_STATS.reads == 1  # 0 .. 16384: holes under 1 MiB
    at = 0
    for (start, length), n in zip(ranges, got, strict=True):
        assert bytes(buf[at : at + n]) == data[start : start + n]
        at += length


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    size=st.integers(0, 5000),
    ranges=st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 900)), max_size=40),
)
def test_read_ranges_into_a_local_file_kernel_and_loop_agree(tmp_path: Path, size, ranges) -> None:
    """Many ranges of a local file are read in one kernel call (``sl_pread_ranges``, as
    the storage layer passes it), few (or without it) by a Python loop; both land each
    range in its place, short or empty where the file ends, and count one read a
    range."""
    path = tmp_path / "f"
    data = bytes(i * 7 % 251 for i in range(size))
    path.write_bytes(data)
    want = [data[a : a + n] for a, n in ranges]
    for many in (native.pread_ranges, None):
        buf = bytearray(sum(n for _, n in ranges))
        fs.IO_STATS.reset()
        got = fs.read_ranges_into(
            pafs.LocalFileSystem(), str(path), ranges, memoryview(buf), pread_many=many
        )
        assert got == [len(w) for w in want]
        at = 0
        for (_, n), w in zip(ranges, want, strict=True):
            assert bytes(buf[at : at + len(w)]) == w
            at += n
        assert fs.IO_STATS.reads == len(ranges)


def test_make_dirs_only_where_there_are_directories(tmp_path: Path) -> None:
    """Local paths get their directories; an object store (pyarrow's mock here) gets no
    marker objects (S3: a HEAD of the bucket and a PUT per level, for nothing)."""
    fs.make_dirs(pafs.LocalFileSystem(), str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()
    store = pafs._MockFileSystem()
    fs.make_dirs(store, "bucket/lake/t-0")
    assert store.get_file_info(pafs.FileSelector("", recursive=True)) == []


def test_s3_files_are_opened_for_writing_lazily() -> None:
    """A small file written to S3 is one PUT, not a multipart upload begun at its open."""
    s3, _ = fs.resolve("s3://bkt/lake?endpoint_override=127.0.0.1:9&scheme=http&region=x")
    assert s3.__reduce__()[1][0]["allow_delayed_open"] is True
