"""The file system's errors as seglake's: a missing file as
:class:`~seglake.errors.SegmentNotFoundError` naming the path (:func:`missing_as_not_found`);
a refused write (read-only, full, too large, no access) as one
:class:`~seglake.errors.FileSystemError` line naming the path and what to do
(:func:`refused`, :func:`writing` at write sites); what delta-rs prints to file descriptor
2 when a catalog write is refused, held back (:func:`native_stderr_held`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from seglake.errors import FileSystemError, NoSpaceError, SegmentNotFoundError


@contextlib.contextmanager
def missing_as_not_found(path: str, what: str = "file") -> Iterator[None]:
    """A ``FileNotFoundError`` in the block as :class:`SegmentNotFoundError` naming
    ``path`` ("no such file" / "no such directory")."""
    try:
        yield
    except FileNotFoundError as exc:
        raise SegmentNotFoundError(f"{path}: no such {what}") from exc


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
