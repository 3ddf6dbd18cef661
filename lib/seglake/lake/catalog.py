"""The Delta catalog: one row per committed segment, at ``<root>/_catalog``.

A segment is visible only once its row is here. The table is written and read from the
driver with the ``deltalake`` package (no JVM); its schema is ``schemas/catalog.json`` and
it is partitioned by ``topic``. Only parquet files written by deltalake are ever data
files of the table: segment files are referenced by the ``path`` column, never registered.

Every change (:meth:`Catalog.commit`, :meth:`Catalog.remove`, :meth:`Catalog.replace_rows`)
is one Delta commit that:

* is idempotent per run id: it carries a Delta application transaction
  (``txn`` action, app id ``seglake:<run_id>``), so a rerun finds the run already
  committed and writes nothing;
* is validated against exactly the snapshot it replaces: the change is planned and
  checked (offset order, log end offsets) against table version ``V`` and committed with
  ``max_commit_retries=0``, so it can only become version ``V + 1``. If another writer got
  there first, Delta's put-if-absent on the log file refuses the commit, the catalog is
  re-read and the checks run again; a run whose offsets another run has meanwhile
  committed gets :class:`~seglake.errors.ConcurrentRunError` and publishes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import (
    CatalogError,
    ConcurrentRunError,
    OffsetOrderError,
    SeglakeError,
)
from seglake.lake.checks import (
    Key,
    check_commit,
    check_removal,
    check_replacement,
    group_by_partition,
    order_problems,
)
from seglake.lake.rows import (
    MAX_LISTED,
    SORT_KEYS,
    catalog_schema,
    key_set,
    keys_predicate,
    keys_table,
    listing,
    normalize_rows,
    schema_spec,
)
from seglake.storage.naming import validate_partition, validate_topic
from seglake.testing_hooks import crash_point

__all__ = [
    "CATALOG_DIR",
    "Catalog",
    "CommitResult",
    "HistoryEntry",
    "app_id",
    "catalog_schema",
]

CATALOG_DIR = "_catalog"
APP_ID_PREFIX = "seglake:"
DEFAULT_MAX_ATTEMPTS = 20


def app_id(run_id: str) -> str:
    """Delta application-transaction id recording that ``run_id`` committed."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise CatalogError(f"run id must be a non-empty string, got {run_id!r}")
    return APP_ID_PREFIX + run_id


@dataclass(frozen=True)
class CommitResult:
    """Outcome of a catalog change.

    Attributes:
        committed: this call wrote a new table version.
        already_committed: the run id had committed before; nothing was written.
        version: table version after the call.
        run_id: the run.
        rows_added: catalog rows added (replacements included).
        rows_removed: catalog rows removed (replaced rows included).
        attempts: commit attempts (more than 1 when another writer committed meanwhile).
    """

    committed: bool
    already_committed: bool
    version: int
    run_id: str
    rows_added: int = 0
    rows_removed: int = 0
    attempts: int = 1


@dataclass(frozen=True)
class HistoryEntry:
    """One version of the catalog table.

    Attributes:
        version: Delta table version.
        timestamp: commit time (UTC).
        operation: Delta operation (``CREATE TABLE``, ``WRITE``, ``DELETE``, ...).
        seglake_operation: ``commit``, ``remove`` or ``replace`` (``None`` if not seglake's).
        run_id: run that made the change, if any.
        metrics: Delta's operation metrics (rows and files added/removed, ...).
    """

    version: int
    timestamp: dt.datetime
    operation: str
    seglake_operation: str | None
    run_id: str | None
    metrics: dict[str, Any] = field(default_factory=dict)


_Plan = Callable[[pa.Table], tuple[Callable[[Any, Any], None], int, int]]


def _table_location(
    root: str,
    storage_options: Mapping[str, str] | None,
) -> tuple[str, dict[str, str]]:
    """Delta table URI of ``<root>/_catalog`` and the storage options to open it with."""
    root = os.fspath(root)
    if not isinstance(root, str) or not root.strip():
        raise CatalogError(f"lake root must be a non-empty path or URI, got {root!r}")
    options: dict[str, str] = {}
    if "://" not in root:
        uri = os.path.join(os.path.abspath(root), CATALOG_DIR)
    else:
        parts = urlsplit(root)
        query = dict(parse_qsl(parts.query))
        if parts.scheme.lower() == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL")
            if "endpoint_override" in query:
                endpoint = f"{query.get('scheme', 'https')}://{query['endpoint_override']}"
                options["AWS_ENDPOINT_URL"] = endpoint
            if endpoint and endpoint.startswith("http://"):
                options["AWS_ALLOW_HTTP"] = "true"
            if "region" in query:
                options["AWS_REGION"] = query["region"]
        base = urlunsplit(parts._replace(query="", fragment="")).rstrip("/")
        uri = f"{base}/{CATALOG_DIR}"
    options.update(storage_options or {})
    return uri, options


def _as_list(value: str | int | Iterable[Any] | None) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


class Catalog:
    """The segment catalog of one lake.

    Args:
        root: lake root (local path or URI); the table lives at ``<root>/_catalog``.
        storage_options: extra deltalake storage options (``AWS_ENDPOINT_URL``, ...).
            For ``s3://`` roots, ``?endpoint_override=&scheme=&region=`` in the URI are
            translated, and an ``http://`` endpoint turns on ``AWS_ALLOW_HTTP``.
        max_attempts: how often a change is re-planned after losing the race for the next
            table version before giving up with :class:`ConcurrentRunError`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.root = os.fspath(root)
        self.uri, self.storage_options = _table_location(self.root, storage_options)
        if max_attempts < 1:
            raise CatalogError(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts

    def __repr__(self) -> str:
        return f"Catalog({self.uri!r})"

    # ------------------------------------------------------------------ table access

    def _open(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except TableNotFoundError as exc:
            raise CatalogError(f"no catalog at {self.uri}: {exc}") from exc
        except DeltaError as exc:
            at = f" version {version}" if version is not None else ""
            raise CatalogError(f"cannot open catalog {self.uri}{at}: {exc}") from exc

    def exists(self) -> bool:
        """Whether the catalog table exists."""
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options))

    def create_if_missing(self) -> int:
        """Create the empty catalog table unless it exists; return the table version."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        if not self.exists():
            schema, partition_by = schema_spec()
            try:
                DeltaTable.create(
                    self.uri,
                    schema=schema,
                    partition_by=list(partition_by),
                    mode="ignore",
                    name="seglake_catalog",
                    description="seglake: one row per committed segment",
                    storage_options=self.storage_options,
                )
            except DeltaError as exc:  # another process created it at the same moment
                if not self.exists():
                    raise CatalogError(f"cannot create catalog {self.uri}: {exc}") from exc
        return self.version()

    def version(self) -> int:
        """Current table version."""
        return int(self._open().version())

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _read(
        table: Any, topics: list[str] | None = None, partitions: list[int] | None = None
    ) -> pa.Table:
        schema = catalog_schema()
        if topics is not None and not topics:
            return schema.empty_table()
        expr = None
        if topics is not None:
            expr = pc.field("topic").isin([validate_topic(t) for t in topics])
        if partitions is not None:
            part_expr = pc.field("partition").isin(
                pa.array([validate_partition(p) for p in partitions], pa.int32())
            )
            expr = part_expr if expr is None else expr & part_expr
        # use_threads=False: threaded scans crashed at interpreter exit in tests
        t = table.to_pyarrow_dataset().to_table(filter=expr, use_threads=False)
        for f in schema:  # a column added since the table was made: unknown in old rows
            if f.name not in t.schema.names and f.nullable:
                t = t.append_column(f.name, pa.nulls(t.num_rows, f.type))
        return t.select(schema.names).cast(schema).sort_by(SORT_KEYS)

    def segments(
        self,
        topics: str | Iterable[str] | None = None,
        partitions: int | Iterable[int] | None = None,
        *,
        version: int | None = None,
    ) -> pa.Table:
        """Catalog rows sorted by topic, partition, base offset.

        Args:
            topics: only these topics (``None``: all).
            partitions: only these partition numbers (``None``: all).
            version: read this table version (pin it for consistent reads across calls).

        Raises:
            CatalogError: no catalog, or no such version.
        """
        return self._read(self._open(version), _as_list(topics), _as_list(partitions))

    def log_end_offsets(
        self, topic: str | Iterable[str] | None = None, *, version: int | None = None
    ) -> dict[Key, int]:
        """``{(topic, partition): log end offset}`` (largest ``next_offset``)."""
        return self._per_partition("next_offset", "max", topic, version)

    def log_start_offsets(
        self, topic: str | Iterable[str] | None = None, *, version: int | None = None
    ) -> dict[Key, int]:
        """``{(topic, partition): log start offset}`` (smallest ``base_offset``)."""
        return self._per_partition("base_offset", "min", topic, version)

    def _per_partition(
        self, column: str, how: str, topic: str | Iterable[str] | None, version: int | None
    ) -> dict[Key, int]:
        agg = (
            self.segments(topic, version=version)
            .group_by(["topic", "partition"])
            .aggregate([(column, how)])
        )
        keys = zip(
            agg.column("topic").to_pylist(), agg.column("partition").to_pylist(), strict=True
        )
        return dict(zip(keys, agg.column(f"{column}_{how}").to_pylist(), strict=True))

    def run_committed(self, run_id: str) -> bool:
        """Whether ``run_id`` has committed a change (``False`` if there is no catalog)."""
        aid = app_id(run_id)
        if not self.exists():
            return False
        return self._open().transaction_version(aid) is not None

    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """Table versions, newest first, with the run id that made each change."""
        entries = []
        for h in self._open().history(limit):
            entries.append(
                HistoryEntry(
                    version=int(h["version"]),
                    timestamp=dt.datetime.fromtimestamp(h["timestamp"] / 1000, dt.UTC),
                    operation=str(h.get("operation", "")),
                    seglake_operation=h.get("seglake.operation"),
                    run_id=h.get("seglake.run_id"),
                    metrics=dict(h.get("operationMetrics") or {}),
                )
            )
        return entries

    # ------------------------------------------------------------------ writes

    def _transact(
        self, op: str, run_id: str, *, topics: list[str], expected_version: int | None, plan: _Plan
    ) -> CommitResult:
        """Plan against version V, commit as V + 1 or re-plan; see the module docstring."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError, DeltaError

        aid = app_id(run_id)
        crash_point(f"catalog.{op}")
        self.create_if_missing()
        lost: tuple[int, int] | None = None  # (read version, version that beat us)
        for attempt in range(1, self.max_attempts + 1):
            table = self._open()
            version = int(table.version())
            if table.transaction_version(aid) is not None:
                return CommitResult(
                    committed=False,
                    already_committed=True,
                    version=version,
                    run_id=run_id,
                    attempts=attempt,
                )
            if expected_version is not None and version != expected_version:
                raise ConcurrentRunError(
                    f"{op} of run {run_id!r}: catalog is at version {version}, not the expected "
                    f"{expected_version}; another run committed first, nothing was published"
                )
            try:
                write, added, removed = plan(self._read(table, topics))
            except SeglakeError as exc:
                if lost is None:
                    raise
                raise ConcurrentRunError(  # the state it was planned on is gone
                    f"{op} of run {run_id!r} lost the race for catalog version {lost[0] + 1} "
                    f"and no longer applies at version {version}: {exc}"
                ) from exc
            props = CommitProperties(
                max_commit_retries=0,
                app_transactions=[Transaction(app_id=aid, version=1)],
                custom_metadata={
                    "seglake.run_id": run_id,
                    "seglake.operation": op,
                    "seglake.rows_added": added,
                    "seglake.rows_removed": removed,
                },
            )
            try:
                crash_point(f"catalog.{op}.write")
                write(table, props)
            except CommitFailedError as exc:
                now = self.version()
                if now <= version:
                    raise CatalogError(
                        f"{op} of run {run_id!r} failed at catalog version {version}: {exc}"
                    ) from exc
                lost = (version, now)
                time.sleep(random.uniform(0, 0.01 * attempt))
                continue
            except DeltaError as exc:
                raise CatalogError(f"{op} of run {run_id!r} failed: {exc}") from exc
            crash_point(f"catalog.{op}.done")
            return CommitResult(
                committed=True,
                already_committed=False,
                version=int(table.version()),
                run_id=run_id,
                rows_added=added,
                rows_removed=removed,
                attempts=attempt,
            )
        raise ConcurrentRunError(
            f"{op} of run {run_id!r} lost the race for the next catalog version "
            f"{self.max_attempts} times in a row; nothing was published"
        )

    def commit(
        self,
        rows: pa.Table,
        run_id: str,
        *,
        expected_version: int | None = None,
        contiguous: bool = True,
    ) -> CommitResult:
        """Publish the segments in ``rows`` in one Delta commit, once per run id.

        For every partition in ``rows`` the new segments must not overlap each other and
        must start at the partition's log end offset in the catalog (with
        ``contiguous=False``: at or after it, and gaps between new segments are allowed,
        as when input offsets come from a compacted topic).

        Args:
            rows: catalog rows; ``run_id`` and ``committed_at`` columns may be omitted.
            run_id: the run; rerunning a committed run id writes nothing.
            expected_version: fail unless the catalog is still at this version.
            contiguous: require new segments to continue the log without offset gaps.

        Returns:
            ``CommitResult(committed=True, ...)``, or ``already_committed=True`` for a rerun.

        Raises:
            ConcurrentRunError: another run committed offsets of the same partitions (or any
                change, with ``expected_version``) first. Nothing was published.
            OffsetOrderError: the new segments overlap, go backwards or leave a gap.
            CatalogError: rows with missing columns, nulls, or wrong paths.
        """
        app_id(run_id)
        new = normalize_rows(rows, run_id, dt.datetime.now(dt.UTC))
        grouped = group_by_partition(new)
        problems = [
            p
            for key, segs in grouped.items()
            for p in order_problems(key, segs, contiguous=contiguous)
        ]
        if problems:
            raise OffsetOrderError(f"run {run_id!r}: " + listing(problems))

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            check_commit(grouped, group_by_partition(current), run_id, contiguous=contiguous)

            def write(table: Any, props: Any) -> None:
                from deltalake import write_deltalake

                write_deltalake(
                    table, new, mode="append", commit_properties=props, schema_mode="merge"
                )  # upgrades an older catalog

            return write, new.num_rows, 0

        return self._transact(
            "commit",
            run_id,
            topics=sorted({k[0] for k in grouped}),
            expected_version=expected_version,
            plan=plan,
        )

    def remove(
        self,
        segments: pa.Table | Iterable[tuple[str, int, int]],
        run_id: str,
        *,
        expected_version: int | None = None,
        allow_truncate: bool = False,
    ) -> CommitResult:
        """Remove catalog rows (retention) in one commit, once per run id.

        Only the rows go; deleting the files afterwards is the caller's job.

        Args:
            segments: ``(topic, partition, base_offset)`` triples, or a table with those
                columns (e.g. a filtered :meth:`segments` result).
            run_id: the run; rerunning a committed run id writes nothing.
            expected_version: fail unless the catalog is still at this version.
            allow_truncate: allow removing a partition's last segment, which moves its log
                end offset back (recovery only: a later ingest would reuse those offsets).

        Raises:
            SegmentNotFoundError: a segment is not in the catalog.
            CatalogError: removing a last segment without ``allow_truncate``.
            ConcurrentRunError: the catalog changed under the removal (see :meth:`commit`).
        """
        app_id(run_id)
        keys = keys_table(segments)
        wanted = key_set(keys)

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            check_removal(
                wanted, group_by_partition(current), run_id, allow_truncate=allow_truncate
            )
            predicate = keys_predicate(wanted)

            def write(table: Any, props: Any) -> None:
                table.delete(predicate, commit_properties=props)

            return write, 0, len(wanted)

        return self._transact(
            "remove",
            run_id,
            topics=sorted({k[0] for k in wanted}),
            expected_version=expected_version,
            plan=plan,
        )

    def replace_rows(
        self,
        rows: pa.Table,
        run_id: str,
        *,
        remove: pa.Table | Iterable[tuple[str, int, int]] = (),
        expected_version: int | None = None,
    ) -> CommitResult:
        """Replace existing rows (recovery fixes) in one commit, once per run id.

        Each row of ``rows`` replaces the catalog row with the same (topic, partition,
        base_offset), e.g. after a truncated tail or rebuilt indexes; the ``remove`` keys
        are dropped in the same commit. Replacement rows get this ``run_id`` and a new
        ``committed_at``, so rows read back with :meth:`segments` can be edited and passed
        in. Afterwards no two segments of a partition may overlap. The log end offset may
        move back: that is what truncation does.

        Args:
            rows: replacement rows (``run_id``/``committed_at`` may be omitted).
            run_id: the run; rerunning a committed run id writes nothing.
            remove: segment keys to drop in the same commit.
            expected_version: fail unless the catalog is still at this version.

        Raises:
            SegmentNotFoundError: a replaced or removed segment is not in the catalog.
            OffsetOrderError: the result would have overlapping segments.
            ConcurrentRunError: the catalog changed under the fix (see :meth:`commit`).
        """
        app_id(run_id)
        new = normalize_rows(rows, run_id, dt.datetime.now(dt.UTC), restamp=True)
        replaced = key_set(keys_table(new))
        dropped = key_set(keys_table(remove))
        both = sorted(replaced & dropped)
        if both:
            raise CatalogError(f"segments both replaced and removed: {both[:MAX_LISTED]}")
        touched = replaced | dropped
        new_grouped = group_by_partition(new)

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            check_replacement(touched, new_grouped, group_by_partition(current), run_id)
            predicate = keys_predicate(touched)

            def write(table: Any, props: Any) -> None:
                from deltalake import write_deltalake

                if new.num_rows:
                    write_deltalake(
                        table,
                        new,
                        mode="overwrite",
                        predicate=predicate,
                        commit_properties=props,
                        schema_mode="merge",  # upgrades an older catalog
                    )
                else:
                    table.delete(predicate, commit_properties=props)

            return write, new.num_rows, len(touched)

        return self._transact(
            "replace",
            run_id,
            topics=sorted({k[0] for k in touched}),
            expected_version=expected_version,
            plan=plan,
        )
