"""Reading the Delta catalog at ``<root>/_catalog``: opening it, its rows, its history.

A segment is visible only once its row is here. The table is written and read from the
driver with the ``deltalake`` package (no JVM); its schema is ``schemas/catalog.json`` and
it is partitioned by ``topic``. Only parquet files written by deltalake are ever data
files of the table: segment files are referenced by the ``path`` column, never registered.
Changes are :class:`seglake.lake.catalog.Catalog`'s.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake import fs as lakefs
from seglake.errors import CatalogError, SegmentNotFoundError
from seglake.lake.checks import Key
from seglake.lake.commit_store import require_put_if_absent
from seglake.lake.rows import SORT_KEYS, catalog_schema, check_rows, schema_spec
from seglake.lake_paths import CATALOG_DIR
from seglake.location import LakeLocation, Root
from seglake.storage.naming import validate_partition, validate_run_id, validate_topic

APP_ID_PREFIX = "seglake:"


def app_id(run_id: str) -> str:
    """Delta application-transaction id recording that ``run_id`` committed (the run id
    names ``_staging/<run>``: :func:`~seglake.storage.naming.validate_run_id`)."""
    return APP_ID_PREFIX + validate_run_id(run_id)


DELTA_LOG = "_delta_log"
_COMMIT = re.compile(r"[0-9]{20}\.json")
_LOG_PATH = re.compile(r"ParsedLogPath \{.*?filename: \"([^\"]*)\".*?file_type: \w+ \}")


def delta_text(exc: BaseException) -> str:
    """A deltalake error as one line: its first (a Rust backtrace follows when
    ``RUST_BACKTRACE`` is set), each log file it describes (``ParsedLogPath {...}``) by
    its name."""
    lines = str(exc).strip().splitlines()
    return _LOG_PATH.sub(r"\1", lines[0]) if lines else type(exc).__name__


def log_commits(fs: Any, table: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The JSON commits of the Delta log of the table at ``table`` (a path on ``fs``):
    ``(path, actions)`` in version order. An empty commit file, a line that is not a JSON
    object, or a version missing between two commits, is a :class:`CatalogError` naming
    the file and line
    (versions before a checkpoint may have been cleaned away: not a gap)."""
    log_dir = lakefs.join(table, DELTA_LOG)
    names = [n for n in lakefs.listdir(fs, log_dir, missing_ok=True) if _COMMIT.fullmatch(n)]
    for before, name in zip([None, *names], names, strict=False):
        if before is not None and int(name[:20]) != int(before[:20]) + 1:
            raise CatalogError(
                f"{log_dir}: no commit between {before} and {name}: the log has a gap "
                "(a commit file was lost)"
            )
        path = lakefs.join(log_dir, name)
        data = lakefs.read_all(fs, path)
        if not data.strip():  # Delta never writes one: a torn write or a damaged disk
            raise CatalogError(f"{path}: the commit file is empty (its actions were lost)")
        actions = []
        for i, line in enumerate(data.splitlines(), 1):
            try:
                action = json.loads(line) if line.strip() else {}
            except json.JSONDecodeError as exc:
                why = f"{exc.msg} at character {exc.pos}"
                raise CatalogError(f"{path}: line {i} is not JSON ({why})") from None
            except (ValueError, RecursionError) as exc:  # not UTF-8; nested too deep
                raise CatalogError(f"{path}: line {i} is not JSON ({exc})") from None
            if not isinstance(action, dict):
                raise CatalogError(f"{path}: line {i} is not a JSON object")
            actions.append(action)
        yield path, actions


def _text_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{value!r:.80} is not a string")


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
        metadata: the commit's ``seglake.*`` custom metadata (e.g. ``seglake.input``).
    """

    version: int
    timestamp: dt.datetime
    operation: str
    seglake_operation: str | None
    run_id: str | None
    metrics: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def _as_list(value: str | int | Iterable[Any] | None) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return [value]
    return list(value)


class CatalogTable:
    """The segment catalog of one lake, read side.

    Args:
        root: the lake (:class:`~seglake.location.LakeLocation`, or a root it parses);
            the table lives at ``<root>/_catalog``.
        storage_options: extra deltalake storage options (``AWS_ENDPOINT_URL``, ...),
            added to the location's (for ``s3://`` roots, ``?endpoint_override=&scheme=
            &region=`` in the URI are translated, and an ``http://`` endpoint turns on
            ``AWS_ALLOW_HTTP``).
    """

    def __init__(self, root: Root, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.location = LakeLocation.of(root, storage_options)
        self.root = self.location.root
        self.uri = f"{self.location.uri}/{CATALOG_DIR}"
        self.storage_options = self.location.storage_options
        self._newest: Any = None  # the table :meth:`version` opened (a version's rows never change)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    # ------------------------------------------------------------------ table access

    def _open(self, version: int | None = None) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        newest = self._newest
        if version is not None and newest is not None and newest.version() == version:
            return newest  # version() then segments(version=...): one open, not two
        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except TableNotFoundError as exc:
            why = delta_text(exc) or "not found"
            raise CatalogError(f"no catalog at {self.uri} (not a lake?): {why}") from exc
        except DeltaError as exc:
            at = f" version {version}" if version is not None else ""
            why = delta_text(exc)
            if "Json error" in why:  # which commit: Delta does not say
                fs, base = self.location.filesystem, self.location.base
                for _ in log_commits(fs, lakefs.join(base, CATALOG_DIR)):
                    pass
            raise CatalogError(f"cannot open catalog {self.uri}{at}: {why}") from exc

    def exists(self) -> bool:
        """Whether the catalog table exists."""
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(self.uri, storage_options=self.storage_options))

    def require(self) -> None:
        """The catalog must exist: :class:`SegmentNotFoundError` ``ROOT: not a lake``."""
        if not self.exists():
            raise SegmentNotFoundError(f"{self.root}: not a lake (no {CATALOG_DIR}/ in it)")

    def require_topic(self, topic: str, *, version: int | None = None) -> None:
        """``topic`` must have a segment in the lake (at ``version``): a name that has none
        would otherwise read as an empty result. The error lists the lake's topics."""
        topics = sorted({t for t, _ in self.log_end_offsets(version=version)})
        if topic not in topics:
            at = f"catalog version {self.version() if version is None else version}"
            raise SegmentNotFoundError(
                f"topic {topic!r} is not in the lake {self.root} ({at}; "
                f"topics: {topics[:10]}{' ...' if len(topics) > 10 else ''})"
            )

    def create_if_missing(self) -> int:
        """Create the empty catalog table unless it exists; return the table version.
        Refused (:class:`~seglake.errors.UnsafeCommitError`) on a store that, as
        configured, gives commits no put-if-absent (``lake/commit_store.py``)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        require_put_if_absent(self.location)  # every commit comes here first (_transact)
        if not self.exists():
            schema, partition_by = schema_spec()
            try:
                with lakefs.native_stderr_held():
                    DeltaTable.create(
                        self.uri,
                        schema=schema,
                        partition_by=list(partition_by),
                        mode="ignore",
                        name="seglake_catalog",
                        description="seglake: one row per committed segment",
                        storage_options=self.storage_options,
                    )
            except (DeltaError, OSError) as exc:  # or another process created it meanwhile
                if not self.exists():
                    raise lakefs.refused(exc, self.uri) or CatalogError(
                        f"cannot create catalog {self.uri}: {exc}"
                    ) from exc
        return self.version()

    def version(self) -> int:
        """Current table version."""
        self._newest = table = self._open()
        return int(table.version())

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
        t = t.select(schema.names).cast(schema)
        check_rows(t, reading=f"catalog {table.table_uri} version {table.version()}")
        return t.sort_by(SORT_KEYS)

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

    def committed_or_segments(self, run_id: str) -> tuple[bool, pa.Table]:
        """From ONE read of the current version: ``(True, no rows)`` if ``run_id`` has
        committed, else ``(False, every segment row)`` (:meth:`segments`); ``(False, no
        rows)`` if there is no catalog. A stream batch's commit asks both."""
        empty = catalog_schema().empty_table()
        if not self.exists():
            return False, empty
        table = self._open()
        if table.transaction_version(app_id(run_id)) is not None:
            return True, empty
        return False, self._read(table)

    def history(self, *, limit: int | None = None) -> list[HistoryEntry]:
        """Table versions, newest first, with the run id that made each change; a
        commit's info that Delta or seglake would not write is a :class:`CatalogError`
        naming the version."""
        from deltalake.exceptions import DeltaError

        try:
            infos = self._open().history(limit)
        except DeltaError as exc:
            raise CatalogError(f"catalog {self.uri}: history: {delta_text(exc)}") from exc
        entries = []
        for h in infos:
            try:
                entry = HistoryEntry(
                    version=int(h["version"]),
                    timestamp=dt.datetime.fromtimestamp(h["timestamp"] / 1000, dt.UTC),
                    operation=str(h.get("operation", "")),
                    seglake_operation=_text_or_none(h.get("seglake.operation")),
                    run_id=_text_or_none(h.get("seglake.run_id")),
                    metrics=dict(h.get("operationMetrics") or {}),
                    metadata={k: v for k, v in h.items() if k.startswith("seglake.")},
                )
            except (KeyError, TypeError, ValueError, OverflowError, OSError) as exc:
                at = f"version {h.get('version')}" if isinstance(h, dict) else "a version"
                why = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
                raise CatalogError(
                    f"catalog {self.uri} {at}: commit info not as Delta writes it: {why}"
                ) from None
            entries.append(entry)
        return entries
