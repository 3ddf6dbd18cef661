"""One exception hierarchy. Every message names the file, the position and the numbers.

SeglakeError
├── ConfigError            a setting has a wrong name or value
├── InvalidNameError       a name that becomes a path (run id, query id, ...) outside the rule
│   └── InvalidTopicError  a topic name Kafka would refuse (also the path-traversal guard)
├── OutsideLakeError       a delete whose target is not strictly inside the lake: refused
├── InputSchemaError       input columns missing or of the wrong type
├── OffsetOrderError       offsets not strictly increasing, or below the log end offset
├── CorruptRecordError     bytes of a .log that do not decode
│   ├── TruncatedBatchError  a batch (or header) runs past the end of the bytes read
│   └── TruncatedSegmentError  a lake .log shorter than its catalog row: records lost
├── CorruptIndexError      an .index/.timeindex/.txnindex that fails its sanity check
├── CorruptManifestError   a ``_retired/`` manifest of the wrong shape (nothing deleted)
├── SegmentNotFoundError   a path or segment that does not exist
│   ├── VersionSupersededError  a pinned catalog version whose files were deleted since
│   └── SegmentReplacedError    the file at a row's path is another (later) segment's
├── NotRegularFileError    a fifo, device or socket where a file is read: refused unopened
├── FileSystemError        the file system refused a write (read-only, full, too large, access)
│   └── NoSpaceError         no space left on the device (or quota)
└── CatalogError           the Delta catalog refused or lost a race
    ├── ConcurrentRunError another run committed to the same partitions first
    ├── RunReuseError      a committed run id reused for different input
    └── UnsafeCommitError  the store, as configured, gives no put-if-absent: no commit
"""

from __future__ import annotations


def escaped(text: str) -> str:
    """``text`` with each character that is not printable (newlines, other controls,
    line separators) written as Python escapes it (``\\n``, ``\\x1b``): an error line, or
    a name or value from a file printed in a line, stays one line and forges no other."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SeglakeError(Exception):
    """Base class of every error seglake raises on purpose."""


class ConfigError(SeglakeError, ValueError):
    """A setting has an unknown name or an invalid value."""


class InvalidNameError(SeglakeError, ValueError):
    """A name that becomes a path (run id, streaming query id, stage, topic) outside
    ``[a-zA-Z0-9._-]{1,249}`` or ``.``/``..`` (:func:`seglake.storage.naming.validate_name`)."""


class InvalidTopicError(InvalidNameError):
    """A topic name outside ``[a-zA-Z0-9._-]{1,249}`` (or ``.``/``..``)."""


class OutsideLakeError(SeglakeError):
    """A delete refused: its target (symlinked directories followed) is not strictly
    under the lake root, or is the catalog (:func:`seglake.lake_paths.check_delete`)."""


class InputSchemaError(SeglakeError, ValueError):
    """Input columns are missing or have the wrong type."""


class OffsetOrderError(SeglakeError, ValueError):
    """Offsets go backwards, repeat, or start below the partition's log end offset."""


class CorruptRecordError(SeglakeError):
    """Bytes in a ``.log`` that are not a valid RecordBatch v2.

    Attributes:
        path: the file (or ``None`` for an in-memory buffer).
        position: byte position of the batch in the file.
    """

    def __init__(self, message: str, *, path: str | None = None, position: int | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if position is not None:
            where.append(f"position {position}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)
        self.path = path
        self.position = position


class TruncatedBatchError(CorruptRecordError):
    """A batch, or its header, runs past the end of the bytes given: a torn tail when
    those bytes end where the file ends (a broker's crash), else a read cut short."""


class TruncatedSegmentError(CorruptRecordError):
    """A lake segment's ``.log`` is shorter than its current catalog row's
    ``size_bytes``: committed records are gone (the message names the file, both sizes
    and the offsets lost). Data loss, reported as a damaged batch is."""


class CorruptBatchWarning(UserWarning):
    """A damaged batch was skipped (``on_corrupt="skip"``); the message names the file,
    its position, its offsets and what is wrong."""


class CorruptIndexError(CorruptRecordError):
    """An index file that fails Kafka's sanity checks."""


class CorruptManifestError(SeglakeError, ValueError):
    """A ``_retired/`` manifest that is JSON of the wrong shape (not an object, a field
    of the wrong type, a path that could leave the lake): the message names the file and
    the field; ``cleanup`` and ``retention`` stop before changing anything."""


class SegmentNotFoundError(SeglakeError, FileNotFoundError):
    """A lake, partition directory or segment file that does not exist."""


class VersionSupersededError(SegmentNotFoundError):
    """A reader pinned to catalog version ``version`` needs a segment file that a later
    version (``superseded_by``, by ``operation``) removed and whose file was deleted after
    ``file.delete.delay.ms``: refresh to the current version (``lake.refresh()``) or rerun.
    """

    def __init__(
        self,
        message: str,
        *,
        version: int,
        superseded_by: int | None = None,
        operation: str | None = None,
    ):
        super().__init__(message)
        self.version = version
        self.superseded_by = superseded_by
        self.operation = operation


class SegmentReplacedError(SegmentNotFoundError):
    """The file at a catalog row's path is not that row's: a later catalog version
    published another segment under the same name (compaction keeps a group's first
    name) and the row's own copy is gone. A notebook reader turns it into
    :class:`VersionSupersededError`."""


class NotRegularFileError(SeglakeError):
    """A path to read that is a fifo, a device or a socket, not a regular file: refused
    before it is opened (a named pipe would block the read forever, a device never end)."""


class FileSystemError(SeglakeError):
    """The file system refused a lake write: read-only (EROFS), full (ENOSPC), over a
    quota (EDQUOT), a file past a size limit (EFBIG), no access (EACCES, EPERM). The
    message names the path and what to do; :func:`seglake.fs.refused` makes them.

    Attributes:
        errno: the refusal's ``errno`` (``None`` when rebuilt from a task's text).
        path: the path refused.
    """

    def __init__(self, message: str, *, errno: int | None = None, path: str | None = None):
        super().__init__(message)
        self.errno = errno
        self.path = path


class NoSpaceError(FileSystemError):
    """Writing a file failed with ENOSPC/EDQUOT; the message names the file."""


class CatalogError(SeglakeError):
    """The catalog could not be read or written."""


class ConcurrentRunError(CatalogError):
    """Another run committed segments for the same partitions first; nothing was published."""


class RunReuseError(CatalogError):
    """A run id that committed before is reused with different input (nothing written)."""


class UnsafeCommitError(CatalogError):
    """The lake's store, as configured, gives the catalog's commit no put-if-absent (a
    concurrent commit could be overwritten, i.e. lost): refused before anything is written
    (``lake/commit_store.py``)."""


class DataLossError(SeglakeError):
    """Offsets a stream has not read yet are gone from the lake (Kafka's data loss)."""
