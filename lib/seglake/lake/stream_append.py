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

from seglake import fs as lakefs
from seglake.errors import SegmentNotFoundError
from seglake.lake.stream_segments import Source, joined_row, read_rebased
from seglake.location import Root
from seglake.record.batch import scan_batches
from seglake.storage.index_builder import IndexBuilder
from seglake.storage.naming import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.recovery_checks import codec_name
from seglake.storage.time_index import TimeIndex
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
        path = lakefs.safe_join(base, r["path"])
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
    file open as ``fd``, locked); returns the grown segment's row (module docstring)."""
    path = group[0].path
    stem = path[: -len(LOG_SUFFIX)]
    size = int(tail["size_bytes"])
    os.ftruncate(fd, size)
    builder = _resume(fs, stem, tail, interval)
    records, max_ts, codecs = int(tail["record_count"]), int(tail["max_timestamp"]), set()
    codecs.add(tail["codec"])
    at = size
    for s in group[1:]:
        data, scan = read_rebased(fs, s)
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], at + done)
        builder.add_batches(
            scan.position + at, scan.size, scan.last_offset + s.delta, scan.max_timestamp
        )
        records += int(scan.records_count.sum())
        max_ts = max(max_ts, int(scan.max_timestamp.max()))
        codecs.add(codec_name(scan))
        at += len(data)
    crash_point("stream.append")
    oi, ti = builder.finish()
    lakefs.write_bytes(fs, stem + INDEX_SUFFIX, oi.to_bytes())
    lakefs.write_bytes(fs, stem + TIME_INDEX_SUFFIX, ti.to_bytes())
    return joined_row(
        key,
        group,
        records=records,
        max_timestamp=max_ts,
        size=at,
        indexes=(oi, ti),
        codec=codecs.pop() if len(codecs) == 1 else "mixed",
        interval=interval,
    )


def _resume(fs: pafs.FileSystem, stem: str, tail: dict[str, Any], interval: int) -> IndexBuilder:
    """The index builder after the segment's last batch: continued from its index files
    (their first ``index_entries``/``time_index_entries``: an attempt that never committed
    may have written longer ones), or from a scan of the ``.log`` when they are missing or
    were made with another interval."""
    base, size = int(tail["base_offset"]), int(tail["size_bytes"])
    n_oi, n_ti = tail.get("index_entries"), tail.get("time_index_entries")
    if tail.get("index_interval_bytes") == interval and n_oi is not None and n_ti is not None:
        try:
            oi = OffsetIndex.from_bytes(lakefs.read_all(fs, stem + INDEX_SUFFIX)[: n_oi * 8], base)
            ti = TimeIndex.from_bytes(
                lakefs.read_all(fs, stem + TIME_INDEX_SUFFIX)[: n_ti * 12], base
            )
        except SegmentNotFoundError:
            pass
        else:
            if len(oi) == n_oi and len(ti) == n_ti:
                return IndexBuilder.resume(
                    oi,
                    ti,
                    size_bytes=size,
                    last_offset=int(tail["next_offset"]) - 1,
                    index_interval_bytes=interval,
                )
    scan = scan_batches(lakefs.read_range(fs, stem + LOG_SUFFIX, 0, size))
    builder = IndexBuilder(base, index_interval_bytes=interval)
    builder.add_batches(scan.position, scan.size, scan.last_offset, scan.max_timestamp)
    return builder


def cut_uncommitted(fs: pafs.FileSystem, root: Root, rows: list[dict[str, Any]]) -> list[str]:
    """Cut each catalogued ``.log`` of one partition (its catalog ``rows``) back to its
    row's ``size_bytes`` where an in-place append never committed (``recover`` does this
    first: it would otherwise find those batches whole and commit them, and the restarted
    stream batch append them again). Under each file's lock, against the row as it is
    then (an appender may have committed meanwhile). Returns the paths cut."""
    if not rows or not appends_in_place(fs):
        return []
    _, base = lakefs.resolve(root)
    longer = {}
    for r in rows:
        path = lakefs.safe_join(base, r["path"])
        try:
            if os.path.getsize(path) > r["size_bytes"]:
                longer[path] = r["base_offset"]
        except OSError:
            continue
    if not longer:
        return []
    from seglake.lake.catalog import Catalog

    with locked(list(longer)) as fds:
        now = Catalog(root).segments(rows[0]["topic"], rows[0]["partition"]).to_pylist()
        size = {lakefs.safe_join(base, r["path"]): r["size_bytes"] for r in now}
        cut = [p for p, fd in fds.items() if p in size and os.fstat(fd).st_size > size[p]]
        for p in cut:
            os.ftruncate(fds[p], size[p])
    return cut
