"""How a catalog change becomes exactly one Delta commit (:class:`CatalogWriter`).

    for attempt 1..max_attempts:
        V = table version; run id's txn action present -> already committed, nothing written
        plan(rows of V's topics) -> write(table, props)   (checks raise SeglakeError)
        commit as V + 1 (max_commit_retries=0, txn app id seglake:<run_id>, custom metadata
        seglake.run_id/operation/rows_added/rows_removed)
        lost the race (another writer made V + 1) -> re-read and re-plan; a plan that no
        longer applies -> ConcurrentRunError naming both versions

:class:`~seglake.lake.catalog.Catalog` plans its changes (commit, remove, replace_rows)
on top of it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from seglake import fs as lakefs
from seglake.errors import CatalogError, ConcurrentRunError, SeglakeError
from seglake.lake.table import CatalogTable, app_id
from seglake.location import Root
from seglake.testing_hooks import crash_point

__all__ = ["DEFAULT_MAX_ATTEMPTS", "CatalogWriter", "CommitResult", "overwrite"]

DEFAULT_MAX_ATTEMPTS = 20


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


_Plan = Callable[[pa.Table], tuple[Callable[[Any, Any], None], int, int]]


class CatalogWriter(CatalogTable):
    """A catalog's one-commit protocol (:meth:`_transact`), under :class:`Catalog`'s changes.

    Args:
        root: the lake (:class:`~seglake.location.LakeLocation`, or a root it parses);
            the table lives at ``<root>/_catalog``.
        storage_options: extra deltalake storage options (see :class:`CatalogTable`).
        max_attempts: how often a change is re-planned after losing the race for the next
            table version before giving up with :class:`ConcurrentRunError`.
    """

    def __init__(
        self,
        root: Root,
        *,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        super().__init__(root, storage_options=storage_options)
        if max_attempts < 1:
            raise CatalogError(f"max_attempts must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts

    def _transact(
        self,
        op: str,
        run_id: str,
        *,
        topics: list[str],
        expected_version: int | None,
        plan: _Plan,
        metadata: Mapping[str, str] | None = None,
    ) -> CommitResult:
        """Plan against version V, commit as V + 1 or re-plan; see the module docstring."""
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
            write, added, removed = self._plan_on(table, version, topics, plan, op, run_id, lost)
            props = _commit_properties(op, run_id, added, removed, metadata)
            beaten_by = self._write_commit(table, version, write, props, op, run_id)
            if beaten_by is not None:
                lost = (version, beaten_by)
                time.sleep(random.uniform(0, 0.01 * attempt))
                continue
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

    def _plan_on(
        self,
        table: Any,
        version: int,
        topics: list[str],
        plan: _Plan,
        op: str,
        run_id: str,
        lost: tuple[int, int] | None,
    ) -> tuple[Callable[[Any, Any], None], int, int]:
        """The plan on ``table``'s version; after a lost race, a plan that no longer
        applies (its checks raise) is a :class:`ConcurrentRunError` naming both versions."""
        try:
            return plan(self._read(table, topics))
        except SeglakeError as exc:
            if lost is None:
                raise
            raise ConcurrentRunError(  # the state it was planned on is gone
                f"{op} of run {run_id!r} lost the race for catalog version {lost[0] + 1} "
                f"and no longer applies at version {version}: {exc}"
            ) from exc

    def _write_commit(
        self,
        table: Any,
        version: int,
        write: Callable[[Any, Any], None],
        props: Any,
        op: str,
        run_id: str,
    ) -> int | None:
        """Commit ``table``'s version V as V + 1: None once committed, else the version
        another writer made first (the race is lost: re-read and re-plan)."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        try:
            crash_point(f"catalog.{op}.write")
            with lakefs.native_stderr_held():  # delta-rs panics there on a refused write
                write(table, props)
        except CommitFailedError as exc:
            now = self.version()
            if now <= version:
                raise CatalogError(
                    f"{op} of run {run_id!r} failed at catalog version {version}: {exc}"
                ) from exc
            return now
        except (DeltaError, OSError) as exc:
            raise lakefs.refused(exc, self.uri) or CatalogError(
                f"{op} of run {run_id!r} failed: {exc}"
            ) from exc
        return None


def _commit_properties(
    op: str, run_id: str, added: int, removed: int, metadata: Mapping[str, str] | None
) -> Any:
    """The Delta commit's properties: no retry by delta-rs (a lost race is re-planned),
    the run id as the app transaction that makes a rerun a no-op, and what the commit
    did as its ``seglake.*`` custom metadata."""
    from deltalake import CommitProperties, Transaction

    return CommitProperties(
        max_commit_retries=0,
        app_transactions=[Transaction(app_id=app_id(run_id), version=1)],
        custom_metadata={
            "seglake.run_id": run_id,
            "seglake.operation": op,
            "seglake.rows_added": added,
            "seglake.rows_removed": removed,
            **(metadata or {}),
        },
    )


def overwrite(table: Any, new: pa.Table, predicate: str, props: Any) -> None:
    """Replace the rows matching ``predicate`` with ``new`` in one Delta commit."""
    from deltalake import write_deltalake

    write_deltalake(
        table,
        new,
        mode="overwrite",
        predicate=predicate,
        commit_properties=props,
        schema_mode="merge",  # upgrades an older catalog
    )
