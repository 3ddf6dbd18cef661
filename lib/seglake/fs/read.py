"""The bounded reads of lake files: ranged reads (:func:`read_range`, :func:`read_at`
through :func:`open_ranged`, :func:`read_head`), many ranges into one buffer
(:func:`read_ranges_into`: ``preadv`` on a local disk, on an object store ranged GETs
joined by :func:`coalesce`), whole files (:func:`read_all`, :func:`read_all_buffer`), zero tails
(:func:`all_zeros`), and the byte accounting (:data:`~seglake.io_stats.IO_STATS`).

A missing file is reported as :class:`~seglake.errors.SegmentNotFoundError` naming the
path; a fifo, device or socket is refused before it is opened
(:class:`~seglake.errors.NotRegularFileError`: :func:`check_regular`, which every opener
here runs). A read never allocates more than the file holds from where it starts: a
length from a catalog row or a header is cut to the file's size first.
:data:`~seglake.io_stats.IO_STATS` counts the bytes this process read, so tests can
assert that a lookup reads an index interval or two (the batch after it whole), not a
whole segment.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake.errors import NotRegularFileError, SegmentNotFoundError
from seglake.fs.errors import missing_as_not_found
from seglake.io_stats import IO_STATS

WINDOW_BYTES = 8 << 20  # a file read in windows (zeros checked, a log's end found): each
# ranged reads of one object an object store makes one GET across holes up to this size:
# a request's round trip (tens of ms) costs more than reading 1 MiB on
COALESCE_GAP_BYTES = 1 << 20


def read_range(fs: pafs.FileSystem, path: str, start: int, length: int) -> bytes:
    """``length`` bytes at ``start`` (fewer if the file ends first), one ranged read.
    Raises :class:`SegmentNotFoundError` (no such file), ``ValueError`` (negative),
    :class:`NotRegularFileError` (a fifo, device or socket)."""
    _check_range(path, start, length)
    if is_local(fs):  # straight into the bytes returned: no buffer of Arrow's copied
        with _local_fd(path) as (fd, size):
            data = _pread(fd, start, min(length, max(0, size - start)))
        IO_STATS.record(len(data))
        return data
    with open_ranged(fs, path) as f:
        return read_at(f, path, start, length)


_KINDS = {
    stat.S_IFIFO: "a named pipe (fifo)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _refuse_irregular(path: str, mode: int) -> None:
    """:class:`NotRegularFileError` (or :class:`SegmentNotFoundError` for a directory)
    unless ``mode`` is a regular file's."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise SegmentNotFoundError(f"{path}: is a directory, not a file")
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise NotRegularFileError(
        f"{path}: is {kind}, not a regular file: refused unopened (seglake reads only "
        "regular files; replace it with the segment file it stands for)"
    )


def check_regular(fs: pafs.FileSystem, path: str) -> None:
    """Refuse a local ``path`` that is a fifo, device or socket before it is opened
    (opening a named pipe waits for a writer forever): :class:`NotRegularFileError`. A
    missing path passes (the open that follows names it); object stores hold files only."""
    if not is_local(fs):
        return
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    _refuse_irregular(path, mode)


@contextlib.contextmanager
def _local_fd(path: str) -> Iterator[tuple[int, int]]:
    """A local regular file opened for reading (``pread``) and its size;
    :class:`SegmentNotFoundError` if there is no such file, :class:`NotRegularFileError`
    for a fifo, device or socket (opened without waiting for a writer, then refused)."""
    with missing_as_not_found(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        _refuse_irregular(path, st.st_mode)
        yield fd, st.st_size
    finally:
        os.close(fd)


def _pread(fd: int, start: int, length: int) -> bytes:
    """``length`` bytes at ``start`` of ``fd`` (fewer where the file ends; ``length`` is
    at most what the file holds from ``start``: the caller cuts it to the size)."""
    data = os.pread(fd, length, start)
    if 0 < len(data) < length:  # a short read before the end of the file: read on
        buf = bytearray(length)
        data = bytes(buf[: _pread_into(fd, memoryview(buf), start)])
    return data


def read_head(fs: pafs.FileSystem, path: str, limit: int) -> tuple[bytes, int]:
    """At most ``limit`` bytes from the start of a file, and its length (one open, one
    read): a file larger than its reader can use (a preallocated or sparse index) is not
    read whole. Raises as :func:`read_range`."""
    if is_local(fs):
        with _local_fd(path) as (fd, size):
            data = _pread(fd, 0, min(limit, size))
        IO_STATS.record(len(data))
        return data, size
    with open_ranged(fs, path) as f:
        return read_at(f, path, 0, limit), int(f.size())


def all_zeros(fs: pafs.FileSystem, path: str, start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of a file are all zero, read in windows of
    :data:`WINDOW_BYTES` (never whole); on a local disk the holes of a sparse file (as a
    preallocating broker leaves it) are skipped unread (``SEEK_DATA``)."""
    pos = start
    while pos < end:
        if is_local(fs) and hasattr(os, "SEEK_DATA"):
            with _local_fd(path) as (fd, _):
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as exc:  # ENXIO: only a hole follows
                    if exc.errno == errno.ENXIO:
                        return True
                    raise
            if pos >= end:
                return True
        n = min(WINDOW_BYTES, end - pos)
        data = read_range(fs, path, pos, n)
        if np.frombuffer(data, np.uint8).any():
            return False
        if len(data) < n:
            return True  # the file ends first
        pos += n
    return True


def open_ranged(fs: pafs.FileSystem, path: str) -> pa.NativeFile:
    """``path`` opened for :func:`read_at`: on an object store the one metadata request
    (S3: a HEAD for the size), then one ranged GET per read. Raises
    :class:`SegmentNotFoundError` if there is no such file, :class:`NotRegularFileError`
    for a fifo, device or socket."""
    check_regular(fs, path)
    with missing_as_not_found(path):
        return fs.open_input_file(path)


def read_at(f: pa.NativeFile, path: str, start: int, length: int, *, opened: int = 1) -> bytes:
    """``length`` bytes at ``start`` of ``f`` (:func:`open_ranged` of ``path``), one ranged
    read; ``opened``: file opens to count with it (0 for a kept handle). ``length`` is
    cut to what the file holds from ``start`` first (its size is known once opened)."""
    _check_range(path, start, length)
    with missing_as_not_found(path):
        length = min(length, max(0, f.size() - start))
        data = f.read_at(length, start) if length else b""
    IO_STATS.record(len(data), opened=opened)
    return bytes(data)


def _check_range(path: str, start: int, length: int) -> None:
    if start < 0 or length < 0:
        raise ValueError(f"{path}: negative read range start={start} length={length}")


def read_ranges_into(
    fs: pafs.FileSystem,
    path: str,
    ranges: list[tuple[int, int]],
    out: memoryview,
    *,
    handle: pa.NativeFile | None = None,
    opened: int | None = None,
    pread_many: PreadMany | None = None,
) -> list[int]:
    """Read each ``(start, length)`` of ``ranges`` into ``out`` (back to back, in order),
    the file opened once (or read through ``handle``, :func:`open_ranged` of ``path``,
    kept open by the caller; ``opened``: file opens to count, default 1, 0 with it); returns
    the bytes each read got (fewer if the file ends).
    Raises SegmentNotFoundError (no file), ValueError (a negative range, ``out`` short).
    A local file is read with ``preadv`` (one system call a range, no seek), or many
    ranges by ``pread_many`` at once (the kernel's,
    :func:`seglake.record.native.pread_ranges`, passed by the storage layer); on an
    object store ranges near each other are one ranged GET (:func:`coalesce`)."""
    pairs = np.array(ranges, np.int64).reshape(-1, 2)  # checked at numpy speed
    if (pairs < 0).any() or int(pairs[:, 1].sum()) > len(out):
        raise ValueError(f"{path}: read ranges {ranges[:4]}... do not fit {len(out)} bytes")
    got: list[int] = []
    if is_local(fs):
        with _local_fd(path) as (fd, _):
            got = _pread_ranges(fd, path, ranges, pairs, out, pread_many)
        reads = len(ranges)
    else:
        spans = coalesce(ranges)
        reads = len(spans)
        got = [0] * len(ranges)
        places = [0, *itertools.accumulate(n for _, n in ranges)]
        with missing_as_not_found(path), contextlib.ExitStack() as stack:
            f = handle or stack.enter_context(fs.open_input_file(path))
            for begin, end, members in spans:
                f.seek(begin)
                if len(members) == 1:  # straight into ``out``
                    i = members[0]
                    got[i] = f.readinto(out[places[i] : places[i] + ranges[i][1]])
                    continue
                span = bytearray(end - begin)  # at most WINDOW_BYTES
                n = f.readinto(span)
                for i in members:
                    start, length = ranges[i]
                    have = max(0, min(length, n - (start - begin)))
                    out[places[i] : places[i] + have] = span[start - begin : start - begin + have]
                    got[i] = have
    if opened is None:
        opened = 0 if handle else 1
    IO_STATS.record(sum(got), reads=reads, opened=opened)
    return got


def coalesce(
    ranges: list[tuple[int, int]], gap: int | None = None, limit: int = WINDOW_BYTES
) -> list[tuple[int, int, list[int]]]:
    """``ranges`` (``(start, length)``) grouped into spans an object store reads with one
    ranged GET each: ``(begin, end, [indexes into ranges])``, in file order. Ranges join
    a span while the hole before them is at most ``gap`` (:data:`COALESCE_GAP_BYTES`:
    reading a hole that size costs less than a request's round trip) and the span stays
    within ``limit`` bytes (a read's memory bound); a range longer than ``limit`` is a
    span of its own. Empty ranges are left out."""
    gap = COALESCE_GAP_BYTES if gap is None else gap
    spans: list[tuple[int, int, list[int]]] = []
    for i in sorted(range(len(ranges)), key=lambda k: ranges[k][0]):
        start, length = ranges[i]
        if not length:
            continue
        end = start + length
        if spans:
            begin, last_end, members = spans[-1]
            if start - last_end <= gap and max(end, last_end) - begin <= limit:
                spans[-1] = (begin, max(end, last_end), [*members, i])
                continue
        spans.append((start, end, [i]))
    return spans


MANY_READS = 8  # ranges from which ``pread_many`` reads them all (fewer: a Python loop)
# (fd, path, ranges as an (n, 2) int64 array, out) -> the bytes each got (None: not here)
PreadMany = Callable[[int, str, np.ndarray, memoryview], "list[int] | None"]


def _pread_ranges(
    fd: int,
    path: str,
    ranges: list[tuple[int, int]],
    pairs: np.ndarray,
    out: memoryview,
    many: PreadMany | None,
) -> list[int]:
    """Each ``(start, length)`` of ``ranges`` (``pairs``: the same as an ``(n, 2)`` array)
    of ``fd`` into ``out``, back to back (it holds them all); the bytes each read got:
    by ``many`` in one call where given, else one ``preadv`` each."""
    if many is not None and len(ranges) >= MANY_READS:
        done = many(fd, path, pairs, out)
        if done is not None:
            return done
    got, at = [], 0
    for start, length in ranges:
        got.append(_pread_into(fd, out[at : at + length], start) if length else 0)
        at += length
    return got


def _pread_into(fd: int, out: memoryview, start: int) -> int:
    """``len(out)`` bytes at ``start`` of ``fd`` into ``out`` (fewer where the file ends)."""
    n = os.preadv(fd, [out], start)
    while 0 < n < len(out):  # a short read before the end of the file: read on
        more = os.preadv(fd, [out[n:]], start + n)
        if not more:
            break
        n += more
    return n


def read_all(fs: pafs.FileSystem, path: str) -> bytes:
    """The whole file.

    Raises:
        SegmentNotFoundError: the file does not exist.
        NotRegularFileError: it is a fifo, device or socket.
    """
    check_regular(fs, path)
    with missing_as_not_found(path), fs.open_input_stream(path) as f:
        data = f.readall()
    IO_STATS.record(len(data))
    return bytes(data)


def read_all_buffer(fs: pafs.FileSystem, path: str) -> pa.Buffer:
    """:func:`read_all` as an Arrow buffer, for large files parsed in place: a local file
    memory-mapped (no copy: the page cache's pages; seglake replaces a file by a rename,
    :func:`write_bytes`, never rewrites it in place, so the map stays whole), another
    read as :func:`read_all` reads it."""
    if not is_local(fs):
        return pa.py_buffer(read_all(fs, path))
    check_regular(fs, path)
    with missing_as_not_found(path), pa.memory_map(path) as m:
        data = m.read_buffer()
    IO_STATS.record(len(data))
    return data


def is_local(fs: pafs.FileSystem) -> bool:
    """Whether paths on ``fs`` are this machine's paths (``open()``, ``os`` calls work)."""
    return isinstance(fs, pafs.LocalFileSystem)
