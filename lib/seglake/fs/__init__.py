"""Lake file I/O, all through :mod:`pyarrow.fs`, so executors read and write object storage.

A lake root is any URI pyarrow understands: a local path (made absolute), ``file://``,
``s3://bucket/prefix`` (``?endpoint_override=host:port&scheme=http`` or the
``AWS_ENDPOINT_URL`` environment variable point it at MinIO or SeaweedFS (``make s3``)),
``gs://``, ``hdfs://``, parsed once into a :class:`~seglake.location.LakeLocation`;
:func:`resolve` turns it into ``(filesystem, base path)``;
every other function takes that filesystem and a path made with :func:`join` or
:func:`seglake.lake_paths.safe_join`.

This module holds the paths (:func:`resolve`, :func:`join`) and the writes, moves,
listings and deletes; the bounded reads and their byte counts are
:mod:`seglake.fs.read`'s, the file system's errors as seglake's (:func:`refused`,
:func:`writing`) :mod:`seglake.fs.errors`'s. Both are re-exported here: callers use
``fs.X`` for all of them.

Which paths may be touched is :mod:`seglake.lake_paths`'s: paths read from the catalog
go through its ``safe_join``, and every delete here (:func:`delete_file`,
:func:`delete_dir`, which take the lake root) through its ``check_delete``. A missing
file is reported as :class:`~seglake.errors.SegmentNotFoundError` naming the path.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

import pyarrow.fs as pafs

from seglake.errors import NotRegularFileError, SegmentNotFoundError
from seglake.fs.errors import missing_as_not_found, native_stderr_held, refused, writing
from seglake.fs.read import (
    COALESCE_GAP_BYTES,
    WINDOW_BYTES,
    all_zeros,
    check_regular,
    coalesce,
    is_local,
    open_ranged,
    read_all,
    read_all_buffer,
    read_at,
    read_head,
    read_range,
    read_ranges_into,
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
    "is_local",
    "join",
    "listdir",
    "make_dirs",
    "move",
    "native_stderr_held",
    "open_ranged",
    "read_all",
    "read_all_buffer",
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


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def renames_atomically(fs: pafs.FileSystem) -> bool:
    """Whether ``fs.move`` is an atomic rename (local, HDFS) rather than copy + delete."""
    while isinstance(fs, pafs.SubTreeFileSystem):
        fs = fs.base_fs
    return fs.type_name in _ATOMIC_RENAME


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
    with missing_as_not_found(src):
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
        with missing_as_not_found(path, "directory"):
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
