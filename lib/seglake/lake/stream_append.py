"""A stream batch appended to a partition's newest segment in place (no Spark), where the
lake's files are local (appendable, renames atomic); object stores keep the staged copy
(lake/stream_commit.py).

The catalog row defines a segment's valid length (``size_bytes``): readers never read
past it (storage/segment_window.py), so bytes appended to the ``.log`` are not there for
anyone until the one catalog commit that records the new size. Per grown segment:

    lock     flock(LOCK_EX) on the .log (held until the commit is done: every in-place
             appender of this host waits; the caller re-reads the catalog after locking)
    cut      .log truncated to the row's ``size_bytes`` (an earlier attempt of this or
             another batch that appended and never committed: exactly once)
    append   each source's batches, rebased, at the end; indexes continued from the
             row's entries by the index interval rule (IndexBuilder.resume: equal to a
             rebuild of the whole segment) and replaced by an atomic rename
    row      the grown segment's catalog row (same path, new size)

A reader pinned to an older version reads up to its own ``size_bytes`` (a batch boundary)
and clips the longer indexes to it; Lake.replaced does not take a grown row for a
replaced one. A ``.txnindex`` is left as it is (the sink writes no transactions).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from seglake import lake_paths
from seglake.lake.handle import LakeHandle
from seglake.lake.stream_segments import Source, joined_row
from seglake.storage.naming import LOG_SUFFIX
from seglake.storage.segment_join import append_parts
from seglake.testing_hooks import crash_point

__all__ = ["appends_in_place", "cut_uncommitted", "grow", "locked", "unchanged"]


def appends_in_place(fs: pafs.FileSystem) -> bool:
    """Whether the lake's files can grow in place (a local filesystem)."""
    while isinstance(fs, pafs.SubTreeFileSystem):
        fs = fs.base_fs
    return isinstance(fs, pafs.LocalFileSystem)


@contextlib.contextmanager
def locked(paths: list[str]) -> Iterator[dict[str, int]]:
    """Open each ``.log`` for writing and hold an exclusive flock on it (in sorted order,
    so two appenders never deadlock); yields ``{path: fd}`` of those that exist."""
    fds: dict[str, int] = {}
    try:
        for path in sorted(set(paths)):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            fds[path] = fd
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)  # releases the lock


def unchanged(fds: dict[str, int], rows: dict[tuple[str, int], dict[str, Any]], base: str) -> bool:
    """Whether each locked ``.log`` (``fds``) is still the file of its catalog row
    (``rows``, read before locking) at exactly its size: then no appender grew it since
    (an appender's bytes land before its commit) and nothing replaced it, so the rows
    read before locking are current."""
    for r in rows.values():
        path = lake_paths.safe_join(base, r["path"])
        fd = fds.get(path)
        if fd is None:
            return False
        try:
            st, now = os.fstat(fd), os.stat(path)
        except OSError:
            return False
        if st.st_ino != now.st_ino or st.st_size != r["size_bytes"]:
            return False
    return True


def grow(
    fs: pafs.FileSystem,
    fd: int,
    key: tuple[str, int],
    tail: dict[str, Any],
    group: list[Source],
    interval: int,
) -> dict[str, Any]:
    """Append ``group[1:]`` to the newest segment ``group[0]`` (its catalog row ``tail``,
    file open as ``fd``, locked); returns the grown segment's row (module docstring). The
    bytes are storage/segment_join.py's :func:`append_parts`."""
    same = tail.get("index_interval_bytes") == interval
    n_oi, n_ti = tail.get("index_entries"), tail.get("time_index_entries")
    joined = append_parts(
        fs,
        fd,
        group[0].path[: -len(LOG_SUFFIX)],
        group[1:],
        base_offset=int(tail["base_offset"]),
        size=int(tail["size_bytes"]),
        next_offset=int(tail["next_offset"]),
        entries=(n_oi, n_ti) if same and n_oi is not None and n_ti is not None else None,
        interval=interval,
        before_indexes=lambda: crash_point("stream.append"),
    )
    return joined_row(
        key,
        group,
        records=int(tail["record_count"]) + joined.records,
        max_timestamp=max(int(tail["max_timestamp"]), joined.max_timestamp),
        size=joined.size,
        indexes=joined.indexes,
        codec=tail["codec"] if tail["codec"] == joined.codec else "mixed",
        interval=interval,
    )


def cut_uncommitted(fs: pafs.FileSystem, lake: LakeHandle, rows: list[dict[str, Any]]) -> list[str]:
    """Cut each catalogued ``.log`` of one partition (its catalog ``rows``) back to its
    row's ``size_bytes`` where an in-place append never committed (``recover`` does this
    first: it would otherwise find those batches whole and commit them, and the restarted
    stream batch append them again). Under each file's lock, against the row as it is
    then (an appender may have committed meanwhile). Returns the paths cut."""
    if not rows or not appends_in_place(fs):
        return []
    base = lake.base
    longer = {}
    for r in rows:
        path = lake_paths.safe_join(base, r["path"])
        try:
            if os.path.getsize(path) > r["size_bytes"]:
                longer[path] = r["base_offset"]
        except OSError:
            continue
    if not longer:
        return []

    with locked(list(longer)) as fds:
        now = lake.catalog.segments(rows[0]["topic"], rows[0]["partition"]).to_pylist()
        size = {lake_paths.safe_join(base, r["path"]): r["size_bytes"] for r in now}
        cut = [p for p, fd in fds.items() if p in size and os.fstat(fd).st_size > size[p]]
        for p in cut:
            os.ftruncate(fds[p], size[p])
    return cut
