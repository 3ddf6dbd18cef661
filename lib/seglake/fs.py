"""Lake file I/O, all through :mod:`pyarrow.fs`, so executors read and write object storage.

A lake root is any URI pyarrow understands: a local path (made absolute), ``file://``,
``s3://bucket/prefix`` (``?endpoint_override=host:port&scheme=http`` or the
``AWS_ENDPOINT_URL`` environment variable point it at MinIO or SeaweedFS (``make s3``)),
``gs://``, ``hdfs://``, parsed once into a :class:`~seglake.location.LakeLocation`;
:func:`resolve` turns it into ``(filesystem, base path)``;
every other function takes that filesystem and a path made with :func:`join` or
:func:`seglake.lake_paths.safe_join`.

Which paths may be touched is :mod:`seglake.lake_paths`'s: paths read from the catalog
go through its ``safe_join``, and every delete here (:func:`delete_file`,
:func:`delete_dir`, which take the lake root) through its ``check_delete``. A missing
file is reported as :class:`~seglake.errors.SegmentNotFoundError` naming the path; a
fifo, device or socket is refused before it is opened
(:class:`~seglake.errors.NotRegularFileError`: :func:`check_regular`, which every
opener here runs). A read never allocates more than the file holds from where it
starts: a length from a catalog row or a header is cut to the file's size first.
:data:`IO_STATS` counts the bytes this process read, so tests can assert
that a lookup reads an index interval or two (the batch after it whole), not a whole segment.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake.errors import (
    FileSystemError,
    NoSpaceError,
    NotRegularFileError,
    SegmentNotFoundError,
)
from seglake.io_stats import IO_STATS, IOStats
from seglake.lake_paths import check_delete
from seglake.location import LakeLocation, Root

__all__ = [
    "COALESCE_GAP_BYTES",
    "IO_STATS",
    "WINDOW_BYTES",
    "IOStats",
    "all_zeros",
    "check_regular",
    "coalesce",
    "delete_dir",
    "delete_file",
    "exists",
    "file_size",
    "join",
    "listdir",
    "make_dirs",
    "move",
    "native_stderr_held",
    "open_ranged",
    "read_all",
    "read_at",
    "read_head",
    "read_range",
    "read_ranges_into",
    "refused",
    "renames_atomically",
    "resolve",
    "write_bytes",
    "writing",
]

# filesystems whose move() is an atomic rename (object stores copy, then delete)
_ATOMIC_RENAME = frozenset({"local", "hdfs"})
WINDOW_BYTES = 8 << 20  # a file read in windows (zeros checked, a log's end found): each
# ranged reads of one object an object store makes one GET across holes up to this size:
# a request's round trip (tens of ms) costs more than reading 1 MiB on
COALESCE_GAP_BYTES = 1 << 20


def resolve(root: Root, *, endpoint_override: str | None = None) -> tuple[pafs.FileSystem, str]:
    """Filesystem and base path of a lake root (:class:`~seglake.location.LakeLocation`).

    Args:
        root: a location, a local path (made absolute) or a URI pyarrow understands.
        endpoint_override: for ``s3://`` roots, ``http://host:port`` or ``host:port`` of an
            S3-compatible server. Without it, a ``?endpoint_override=`` in the URI or the
            ``AWS_ENDPOINT_URL`` environment variable (read by pyarrow) is used.

    Returns:
        ``(filesystem, path)`` with no trailing slash on ``path``.

    Raises:
        ConfigError: ``root`` is empty or pyarrow does not understand it.
    """
    return LakeLocation.of(root, endpoint_override=endpoint_override).resolve()


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` (pyarrow paths always use ``/``); no safety checks."""
    out = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}" if out else part
    return out


@contextlib.contextmanager
def _missing_as_not_found(path: str, what: str = "file") -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as exc:
        raise SegmentNotFoundError(f"{path}: no such {what}") from exc


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
    with _missing_as_not_found(path):
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
    with _missing_as_not_found(path):
        return fs.open_input_file(path)


def read_at(f: pa.NativeFile, path: str, start: int, length: int, *, opened: int = 1) -> bytes:
    """``length`` bytes at ``start`` of ``f`` (:func:`open_ranged` of ``path``), one ranged
    read; ``opened``: file opens to count with it (0 for a kept handle). ``length`` is
    cut to what the file holds from ``start`` first (its size is known once opened)."""
    _check_range(path, start, length)
    with _missing_as_not_found(path):
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
) -> list[int]:
    """Read each ``(start, length)`` of ``ranges`` into ``out`` (back to back, in order),
    the file opened once (or read through ``handle``, :func:`open_ranged` of ``path``,
    kept open by the caller; ``opened``: file opens to count, default 1, 0 with it); returns
    the bytes each read got (fewer if the file ends).
    Raises SegmentNotFoundError (no file), ValueError (a negative range, ``out`` short).
    A local file is read with ``preadv`` (one system call a range, no seek); on an
    object store ranges near each other are one ranged GET (:func:`coalesce`)."""
    if any(a < 0 or n < 0 for a, n in ranges) or sum(n for _, n in ranges) > len(out):
        raise ValueError(f"{path}: read ranges {ranges[:4]}... do not fit {len(out)} bytes")
    got, at = [], 0
    if is_local(fs):
        with _local_fd(path) as (fd, _):
            for start, length in ranges:
                got.append(_pread_into(fd, out[at : at + length], start) if length else 0)
                at += length
        reads = len(ranges)
    else:
        spans = coalesce(ranges)
        reads = len(spans)
        got = [0] * len(ranges)
        places = [0, *itertools.accumulate(n for _, n in ranges)]
        with _missing_as_not_found(path), contextlib.ExitStack() as stack:
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
    with _missing_as_not_found(path), fs.open_input_stream(path) as f:
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
    with _missing_as_not_found(path), pa.memory_map(path) as m:
        data = m.read_buffer()
    IO_STATS.record(len(data))
    return data


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def is_local(fs: pafs.FileSystem) -> bool:
    """Whether paths on ``fs`` are this machine's paths (``open()``, ``os`` calls work)."""
    return isinstance(fs, pafs.LocalFileSystem)


def renames_atomically(fs: pafs.FileSystem) -> bool:
    """Whether ``fs.move`` is an atomic rename (local, HDFS) rather than copy + delete."""
    while isinstance(fs, pafs.SubTreeFileSystem):
        fs = fs.base_fs
    return fs.type_name in _ATOMIC_RENAME


# errno -> (what the file system said, what to do): the refusals of a lake write
_REFUSALS: dict[int, tuple[str, str]] = {
    errno.EROFS: (
        "the file system is read-only",
        "remount it read-write or give a writable lake root",
    ),
    errno.ENOSPC: (
        "no space left on the device",
        "free space (`seglake cleanup`, retention) or move the lake, then rerun",
    ),
    errno.EDQUOT: (
        "no space left on the device: disk quota exceeded",
        "free space or raise the quota, then rerun",
    ),
    errno.EFBIG: (
        "file too large for the file system or the process's file-size limit (ulimit -f)",
        "raise the limit, or lower log.segment.bytes, then rerun",
    ),
    errno.EACCES: (
        "permission denied",
        "give this user access to the lake or use another root",
    ),
    errno.EPERM: (
        "operation not permitted",
        "give this user access to the lake or use another root",
    ),
}
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# how pyarrow ("[errno 30]"), delta-rs/object_store ("(os error 30)") and Python
# ("[Errno 30]") carry the errno in a message
_ERRNO_TEXT = re.compile(r"\[errno (\d+)\]|\(os error (\d+)\)", re.IGNORECASE)
# the path in such a message: pyarrow quotes it, object_store names it after "file "
_PATH_TEXT = re.compile(r"'(/[^']+)'|(?:file|directory):? (/\S+?)(?:#\d+)?:? ")


def refused(exc: BaseException, path: str | None = None) -> FileSystemError | None:
    """``exc`` as one line naming the path and what to do, if it is the file system
    refusing a write (EROFS, ENOSPC, EDQUOT, EFBIG, EACCES, EPERM: an ``OSError``, or a
    pyarrow / deltalake error whose text carries the errno); else ``None``.

    The path is the one the error names (``filename``, or the path in its text), else
    ``path``. :class:`NoSpaceError` for ENOSPC and EDQUOT. Every command and job turns
    such errors into their one line with this (:func:`writing` at write sites, the CLI's
    and the jobs' ``main`` for the rest).
    """
    if isinstance(exc, FileSystemError):
        return exc
    code = _refusal_errno(exc)
    if code is None:
        return None
    named = getattr(exc, "filename", None)
    if not named:
        m = _PATH_TEXT.search(str(exc))
        named = (m.group(1) or m.group(2)) if m else path
    return _refusal(code, named)


def _refusal_errno(exc: BaseException) -> int | None:
    """The errno of a refused write that ``exc`` carries (attribute or text), or ``None``."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code in _REFUSALS:
        return code
    text = str(exc)
    found = [int(a or b) for a, b in _ERRNO_TEXT.findall(text)]
    code = next((c for c in reversed(found) if c in _REFUSALS), None)
    if code is None:
        code = next((c for c in _REFUSALS if os.strerror(c) in text), None)
    return code


def _refusal(code: int, path: str | None) -> FileSystemError:
    what, todo = _REFUSALS[code]
    cls = NoSpaceError if code in _NO_SPACE else FileSystemError
    where = path or "the lake"
    return cls(f"{where}: {what} ({errno.errorcode[code]}): {todo}", errno=code, path=path)


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Turn the file system's refusal of a write to ``path`` (read-only, full, too
    large, no access: :func:`refused`) into a :class:`FileSystemError` naming ``path``;
    other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        code = _refusal_errno(exc)
        if code is None:
            raise
        raise _refusal(code, path) from exc


@contextlib.contextmanager
def native_stderr_held() -> Iterator[None]:
    """Hold back what is written to file descriptor 2 meanwhile: out after a success,
    dropped after a failure. delta-rs prints a Rust panic there (``thread ... panicked
    ... Already shut down``) when the file system refuses a catalog write; the error
    itself becomes one line (:func:`refused`)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2, or no stderr to flush: nothing to hold
        yield
        return
    try:
        hold = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after fd 2 is back)
    except OSError:
        os.close(saved)
        yield
        return
    os.dup2(hold.fileno(), 2)
    ok = False
    try:
        yield
        ok = True
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if ok:
            hold.seek(0)
            held = hold.read()
            if held:
                os.write(2, held)
        hold.close()


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes | bytearray | memoryview) -> None:
    """Write a whole file so that readers see either nothing or all of ``data``.

    Where ``move`` is a rename (local, HDFS) the bytes go to a hidden temporary name in
    the same directory first; on object stores a single PUT is already atomic.
    """
    if not renames_atomically(fs):
        with writing(path), fs.open_output_stream(path) as out:
            out.write(data)
        return
    parent = _parent(path)
    if parent:
        fs.create_dir(parent, recursive=True)
    tmp = join(parent, f".{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp")
    try:
        with writing(path), fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise


def make_dirs(fs: pafs.FileSystem, path: str) -> None:
    """Directory ``path`` and its parents, where the filesystem has directories (local,
    HDFS). Nothing on an object store: a key needs no parent, and pyarrow's S3 would make
    an empty marker object for each level, after a HEAD of the bucket (3 requests a call)."""
    if renames_atomically(fs):
        fs.create_dir(path, recursive=True)


def move(fs: pafs.FileSystem, src: str, dst: str) -> None:
    """Move a file (a rename where the filesystem has one; copy + delete on object stores).

    Raises:
        SegmentNotFoundError: ``src`` does not exist.
    """
    if _parent(dst):
        make_dirs(fs, _parent(dst))
    with _missing_as_not_found(src):
        fs.move(src, dst)


def exists(fs: pafs.FileSystem, path: str) -> bool:
    """Whether a file or directory exists at ``path``."""
    found: bool = fs.get_file_info(path).type != pafs.FileType.NotFound
    return found


def file_size(fs: pafs.FileSystem, path: str) -> int:
    """Size of a file in bytes.

    Raises:
        SegmentNotFoundError: no file at ``path`` (missing, or a directory).
    """
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise SegmentNotFoundError(f"{path}: no such file")
    if info.type == pafs.FileType.Directory:
        raise SegmentNotFoundError(f"{path}: is a directory, not a file")
    if info.type != pafs.FileType.File:
        check_regular(fs, path)  # a fifo, device or socket: named as such
        raise NotRegularFileError(f"{path}: not a regular file ({info.type.name})")
    return int(info.size)


def listdir(fs: pafs.FileSystem, path: str, *, missing_ok: bool = False) -> list[str]:
    """Sorted base names of the entries directly under ``path``.

    Raises:
        SegmentNotFoundError: ``path`` does not exist (unless ``missing_ok``).
    """
    try:
        with _missing_as_not_found(path, "directory"):
            infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=missing_ok))
    except NotADirectoryError:
        raise SegmentNotFoundError(f"{path}: is a file, not a directory") from None
    return sorted(info.base_name for info in infos)


def delete_file(
    fs: pafs.FileSystem, path: str, *, root: str, missing_ok: bool = True, catalog: bool = False
) -> None:
    """Delete one file of the lake at ``root`` (:func:`check_delete` first).

    Raises:
        OutsideLakeError: ``path`` is not strictly inside ``root`` (nothing deleted).
        SegmentNotFoundError: it does not exist and ``missing_ok`` is false.
    """
    check_delete(fs, root, path, catalog=catalog)
    _delete(fs.delete_file, path, "file", missing_ok)


def delete_dir(
    fs: pafs.FileSystem,
    path: str,
    *,
    root: str,
    missing_ok: bool = True,
    root_itself: bool = False,
) -> None:
    """Delete a directory of the lake at ``root`` and everything under it
    (:func:`check_delete` first; symlinks inside are removed, not followed).

    Raises:
        OutsideLakeError: ``path`` is not strictly inside ``root`` (nothing deleted).
        SegmentNotFoundError: it does not exist and ``missing_ok`` is false.
    """
    check_delete(fs, root, path, root_itself=root_itself)
    _delete(fs.delete_dir, path, "directory", missing_ok)


def _delete(delete: Callable[[str], None], path: str, what: str, missing_ok: bool) -> None:
    try:
        delete(path)
    except FileNotFoundError as exc:
        if not missing_ok:
            raise SegmentNotFoundError(f"{path}: no such {what}") from exc
