"""A reader pinned to one catalog version whose segment files a later version removed or
replaced (retention, compaction, merging) and ``cleanup`` deleted after
``file.delete.delay.ms``: one :class:`~seglake.errors.VersionSupersededError`, never a
plain missing file nor a replaced file read as a torn tail.

:class:`PinnedVersion` is the :class:`~seglake.storage.segment_files.Pin` of every
segment such a reader opens (the notebook's ``Partition``, a Spark read's tasks, a
lookup's answers): the segment asks it where its file is opened or read, on two error
paths only, so the catalog is read only there.

    .log missing              missing(seg, exc): superseded if the pinned rows of the
                              segment's partition are not all in the newest version
    .log shorter than its     short(seg): superseded if a later version replaced the
    row's size_bytes          row, else None (the newest version still has it, or cannot
                              be read: the segment reports the records lost)

A row's identity is (base_offset, next_offset, size_bytes): a segment a later run
replaced under its own name is another segment.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyarrow as pa

from seglake.errors import (
    CatalogError,
    SeglakeError,
    SegmentNotFoundError,
    VersionSupersededError,
)
from seglake.lake.handle import LakeHandle
from seglake.location import Root
from seglake.storage.naming import parse_partition_dir

if TYPE_CHECKING:
    from seglake.lake.catalog import Catalog
    from seglake.storage.segment_files import SegmentFiles

__all__ = ["PinnedVersion", "row_identities", "superseded_error", "superseded_from_text"]


def row_identities(rows: pa.Table) -> set[tuple[int, int, int]]:
    """(base_offset, next_offset, size_bytes) of each row: a segment replaced under its
    own name (compaction, recovery) is another segment."""
    cols = [rows.column(c).to_pylist() for c in ("base_offset", "next_offset", "size_bytes")]
    return set(zip(*cols, strict=True))


class PinnedVersion:
    """The pin of the readers of catalog ``version`` of the lake at ``root`` (module
    docstring). ``root``: the lake's handle (its catalog kept), or on executors its
    location or root (the catalog opened on the first error only); ``rows``: the
    pinned rows already read, by (topic, partition) (else read when needed); ``by_user``
    False: the read did not ask for ``version``, it was the current one when the read was
    planned (:func:`superseded_error`)."""

    def __init__(
        self,
        root: Root | LakeHandle,
        version: int,
        *,
        rows: dict[tuple[str, int], pa.Table] | None = None,
        by_user: bool = True,
    ) -> None:
        self.root, self.version, self.by_user = root, int(version), by_user
        self._lake = root if isinstance(root, LakeHandle) else None
        self._rows = dict(rows or {})

    def __repr__(self) -> str:
        return f"PinnedVersion({self.root!r}, {self.version})"

    def _opened(self) -> LakeHandle:
        if self._lake is None:  # an executor's: the catalog is read on error paths only
            self._lake = LakeHandle.open(self.root)
        return self._lake

    @property
    def catalog(self) -> Catalog:
        return self._opened().catalog

    def rows(self, topic: str, partition: int) -> pa.Table:
        """The pinned version's rows of ``topic``-``partition``."""
        from seglake.lake.snapshot import Snapshot

        key = (topic, partition)
        if key not in self._rows:
            at = Snapshot.read(self._opened(), topic, [partition], version=self.version)
            self._rows[key] = at.table
        return self._rows[key]

    def missing(self, seg: SegmentFiles, exc: SegmentNotFoundError) -> Exception:
        """``seg``'s ``.log`` is gone: the :class:`VersionSupersededError` if a later
        version removed or replaced a pinned segment of its partition, else ``exc`` (a
        file missing for another reason, or a catalog that cannot tell)."""
        if isinstance(exc, VersionSupersededError):
            return exc
        try:
            topic, partition = _partition_of(seg)
            rows = self.rows(topic, partition)
            return superseded_error(
                self.catalog, self.version, topic, partition, rows, exc, by_user=self.by_user
            )
        except SeglakeError:
            return exc

    def short(self, seg: SegmentFiles) -> Exception | None:
        """``seg``'s ``.log`` read shorter than its row's ``size_bytes``: the
        :class:`VersionSupersededError` of a row a later version replaced in place (one
        catalog version check; the rows only when it moved on), else ``None``: the
        newest version still has the row (or its rows cannot be read, a bad row of a
        later version), so the records are lost and the segment says so."""
        catalog = self.catalog
        if catalog.version() == self.version:
            return None
        topic, partition = _partition_of(seg)
        rows = self.rows(topic, partition)
        try:
            now = row_identities(catalog.segments(topic, partition))
        except CatalogError:
            return None
        mine = [i for i in row_identities(rows) if i[0] == seg.base_offset]
        if not mine or mine[0] in now:
            return None
        exc = seg.not_row_file("the file there is shorter than size_bytes")
        err = superseded_error(
            catalog, self.version, topic, partition, rows, exc, by_user=self.by_user
        )
        return None if err is exc else err


def _partition_of(seg: SegmentFiles) -> tuple[str, int]:
    """The topic-partition of a segment: its directory's name (``<topic>-<partition>``,
    also under ``_retired/<run>/`` or ``_staging/<run>/``)."""
    return parse_partition_dir(seg.log_path.rsplit("/", 2)[-2])


def superseded_error(
    catalog: Catalog,
    version: int,
    topic: str,
    partition: int,
    pinned: pa.Table,
    exc: Exception,
    *,
    by_user: bool = True,
) -> Exception:
    """The error for a reader pinned to catalog ``version`` (its rows ``pinned``) that met
    ``exc`` (a missing file, or a file that is not its row's) in ``topic``-``partition``:
    a :class:`VersionSupersededError` naming the version that removed or replaced the
    segment, or ``exc`` itself when the catalog still has every segment the reader
    pinned (a file missing for another reason). ``by_user`` False: the read did not ask
    for ``version``, it was the current one when the read was planned (a Spark read
    without ``versionAsOf``, a stream's micro-batch): the message says the lake changed
    under the read, and to rerun it or pin a version."""
    if not isinstance(exc, SegmentNotFoundError) or isinstance(exc, VersionSupersededError):
        return exc
    current = catalog.version()
    if current == version:
        return exc
    now = row_identities(catalog.segments(topic, partition))
    gone_ids = sorted(row_identities(pinned) - now)
    gone = [b for b, _, _ in gone_ids]
    if not gone:
        return exc
    by, op = None, None
    candidates = sorted(
        (h for h in catalog.history(limit=max(1, current - version)) if h.version > version),
        key=lambda h: h.version,
    )
    for h in [h for h in candidates if h.seglake_operation != "commit"][:20]:
        if gone_ids[0] not in row_identities(catalog.segments(topic, partition, version=h.version)):
            by = h.version
            op = " ".join(x for x in (h.seglake_operation or h.operation, h.run_id) if x)
            break
    since = f"since version {by} ({op})" if by is not None else f"after version {version}"
    if by_user:
        what = f"catalog version {version} was superseded"
        todo = "call lake.refresh() (or rerun the job) to read the current version"
    else:
        what = (
            f"the lake changed under this read: catalog version {version} was superseded "
            f"while it ran (it was planned on version {version}, the catalog is now at "
            f"version {current})"
        )
        todo = (
            "rerun the read (it plans on the current version), or pin a version with "
            "versionAsOf and keep file.delete.delay.ms longer than the read"
        )
    return VersionSupersededError(
        f"{catalog.root}: {what}: segment(s) of "
        f"{topic}-{partition} at base offset(s) {gone[:5]} are no longer in the catalog "
        f"(removed or replaced) {since} and their files were deleted after "
        f"file.delete.delay.ms ({exc}); {todo}",
        version=version,
        superseded_by=by,
        operation=op,
    )


_SUPERSEDED = re.compile(r"catalog version (\d+) was superseded")
_SINCE = re.compile(r"since version (\d+) \(([^)]*)\)")


def superseded_from_text(message: str) -> VersionSupersededError:
    """The :class:`VersionSupersededError` whose message :func:`superseded_error` wrote
    (a Spark task's error, rebuilt on the driver from its text)."""
    v, by = _SUPERSEDED.search(message), _SINCE.search(message)
    return VersionSupersededError(
        message,
        version=int(v[1]) if v else -1,
        superseded_by=int(by[1]) if by else None,
        operation=by[2] if by else None,
    )
