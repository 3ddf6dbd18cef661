"""A new ``.log`` made of old segments' ``.log`` bytes, copied as they are.

    local filesystem   the kernel copies (``os.copy_file_range``: no byte passes through
                       Python; chunked ``pread``/``write`` where the call is refused,
                       e.g. across filesystems); the batch headers are read from an
                       ``mmap`` of the old file (one page per batch, not the whole file)
    other filesystems  each old ``.log`` read with one ranged read, written to the
                       filesystem's output stream

Either way :meth:`LogOutput.append` returns the old segment's batch headers
(:func:`~seglake.record.header_scan.scan_headers`) for the caller's checks and indexes.
"""

from __future__ import annotations

import errno
import mmap
import os

import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import CorruptRecordError
from seglake.record.batch import BatchScan
from seglake.record.header_scan import scan_headers
from seglake.storage.segment import LogSegment

__all__ = ["LogOutput", "copy_range"]

CHUNK = 8 << 20  # bytes per pread/write where copy_file_range is refused
_REFUSED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}


def copy_range(src: int, dst: int, count: int) -> int:
    """Append bytes ``[0, count)`` of file descriptor ``src`` at ``dst``'s position;
    returns the bytes copied (fewer only if ``src`` ends first)."""
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < count:
        if kernel:
            try:
                n = os.copy_file_range(src, dst, count - done, done)
            except OSError as exc:
                if exc.errno not in _REFUSED:
                    raise
                kernel = False
                continue
        else:
            chunk = os.pread(src, min(CHUNK, count - done), done)
            n = len(chunk)
            _write_all(dst, chunk)
        if n == 0:
            break
        done += n
    return done


class LogOutput:
    """The ``.log`` at ``path`` on ``fs``, written by appending old segments whole."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.path = path
        self.size = 0
        self._fd: int | None = None
        self._stream = None
        with lakefs.writing(path):
            if lakefs.is_local(fs):
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            else:
                self._stream = fs.open_output_stream(path)

    def append(self, seg: LogSegment) -> BatchScan:
        """Copy the ``seg.size`` bytes of ``seg``'s ``.log``; its batch headers."""
        f = seg.files.open_local_log() if self._fd is not None else None
        if f is None:
            data = seg.log_bytes()
            _check_size(seg, len(data))
            scan = scan_headers(data)
            with lakefs.writing(self.path):
                if self._stream is not None:
                    self._stream.write(data)
                else:
                    _write_all(self._fd, data)  # type: ignore[arg-type]
            self.size += len(data)
            return scan
        with f:
            _check_size(seg, os.fstat(f.fileno()).st_size)
            if seg.size:
                with mmap.mmap(f.fileno(), seg.size, access=mmap.ACCESS_READ) as mm:
                    scan = scan_headers(mm)
            else:
                scan = scan_headers(b"")
            with lakefs.writing(self.path):
                copied = copy_range(f.fileno(), self._fd, seg.size)  # type: ignore[arg-type]
        _check_size(seg, copied)
        lakefs.IO_STATS.record(copied)
        self.size += copied
        return scan

    def close(self) -> None:
        with lakefs.writing(self.path):
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)
            if self._stream is not None:
                stream, self._stream = self._stream, None
                stream.close()

    def __enter__(self) -> LogOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_size(seg: LogSegment, have: int) -> None:
    if have < seg.size:
        raise CorruptRecordError(
            f"has {have} bytes, its catalog row says {seg.size}; run `recover`",
            path=seg.log_path,
        )


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
