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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa

from seglake.errors import CatalogError, OffsetOrderError
from seglake.lake.checks import (
    Key,
    Seg,
    check_commit,
    check_removal,
    check_replacement,
    check_tail_ends,
    check_unchanged,
    group_by_partition,
    order_problems,
    require_present,
)
from seglake.lake.rows import (
    MAX_LISTED,
    catalog_schema,
    key_set,
    keys_predicate,
    keys_table,
    listing,
    normalize_rows,
)
from seglake.lake.table import HistoryEntry, app_id
from seglake.lake.transact import CatalogWriter, CommitResult, overwrite

__all__ = [
    "Catalog",
    "CommitResult",
    "HistoryEntry",
    "app_id",
    "catalog_schema",
]


class Catalog(CatalogWriter):
    """The segment catalog of one lake at ``root`` (``<root>/_catalog``): reads
    (:class:`CatalogTable`), the one-commit protocol and the constructor's arguments
    (:class:`CatalogWriter`), and the changes below."""

    def commit(
        self,
        rows: pa.Table,
        run_id: str,
        *,
        expected_version: int | None = None,
        contiguous: bool = True,
        metadata: Mapping[str, str] | None = None,
        tails: Iterable[tuple[str, int, int]] = (),
        tail_ends: Mapping[tuple[str, int, int], int] | None = None,
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
            metadata: ``seglake.*`` keys for the commit's custom metadata (what the run
                covered, :mod:`seglake.lake.runs`); read back with :meth:`history`.
            tails: ``(topic, partition, base_offset)`` of partitions' newest segments that
                rows with the same key replace (a copy with records appended, as a stream
                batch grows the newest segment): the new rows then continue the log from
                the replaced segment's base offset, and it must still be the newest.
            tail_ends: the ``next_offset`` of each of ``tails`` the rows were made from:
                one that grew since (another batch appended to it) is a conflict.

        Returns:
            ``CommitResult(committed=True, ...)``, or ``already_committed=True`` for a rerun.

        Raises:
            ConcurrentRunError: another run committed offsets of the same partitions (or any
                change, with ``expected_version``) first. Nothing was published.
            OffsetOrderError: the new segments overlap, go backwards or leave a gap.
            CatalogError: rows with missing columns, nulls, or wrong paths.
        """
        app_id(run_id)
        new = normalize_rows(rows, run_id, dt.datetime.now(dt.UTC), restamp=bool(tails))
        grouped = _in_order(new, run_id, contiguous=contiguous)
        replaced = key_set(keys_table(list(tails)))

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            existing = group_by_partition(current)
            require_present(replaced, existing)
            check_tail_ends(existing, tail_ends or {}, run_id)
            kept = {
                key: [s for s in segs if (*key, s.base) not in replaced]
                for key, segs in existing.items()
            }
            check_commit(grouped, kept, run_id, contiguous=contiguous)
            # every new row, and of the existing ones only the replaced tails, match this
            predicate = " OR ".join(
                f"(topic = '{t}' AND \"partition\" = {p} AND base_offset >= {segs[0].base})"
                for (t, p), segs in sorted(grouped.items())
            )

            def write(table: Any, props: Any) -> None:
                from deltalake import write_deltalake

                if replaced:  # the grown segments' rows go, the new ones come, atomically
                    overwrite(table, new, predicate, props)
                    return
                write_deltalake(
                    table, new, mode="append", commit_properties=props, schema_mode="merge"
                )  # upgrades an older catalog

            return write, new.num_rows, len(replaced)

        return self._transact(
            "commit",
            run_id,
            topics=sorted({k[0] for k in grouped}),
            expected_version=expected_version,
            plan=plan,
            metadata=metadata,
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
        expected_runs: Mapping[tuple[str, int, int], str] | None = None,
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
            expected_runs: ``{(topic, partition, base_offset): run_id}`` the touched rows
                must still carry (the rows the change was planned on: a concurrent
                recovery or compaction that rewrote one of them makes this one lose).

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
            existing = group_by_partition(current)
            if expected_runs:
                check_unchanged(expected_runs, existing, run_id)
            check_replacement(touched, new_grouped, existing, run_id)
            predicate = keys_predicate(touched)

            def write(table: Any, props: Any) -> None:

                if new.num_rows:
                    overwrite(table, new, predicate, props)
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


def _in_order(new: pa.Table, run_id: str, *, contiguous: bool) -> dict[Key, list[Seg]]:
    """The new rows by partition, each partition's segments checked among themselves
    (no overlap; with ``contiguous`` no gap): :class:`OffsetOrderError` listing every
    problem."""
    grouped = group_by_partition(new)
    problems = [
        p for key, segs in grouped.items() for p in order_problems(key, segs, contiguous=contiguous)
    ]
    if problems:
        raise OffsetOrderError(f"run {run_id!r}: " + listing(problems))
    return grouped
