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
import functools
import importlib.resources
import itertools
import json
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import (
    CatalogError,
    ConcurrentRunError,
    InvalidTopicError,
    OffsetOrderError,
    SeglakeError,
    SegmentNotFoundError,
)
from seglake.fs import validate_relative
from seglake.storage.naming import (
    partition_dir_name,
    segment_file_name,
    validate_partition,
    validate_topic,
)
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
KEY_COLUMNS = ("topic", "partition", "base_offset")
SORT_KEYS = [(c, "ascending") for c in KEY_COLUMNS]
DEFAULT_MAX_ATTEMPTS = 20
_FILLED_COLUMNS = ("run_id", "committed_at")
_MAX_LISTED = 10

_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "binary": pa.binary(),
    "bool": pa.bool_(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "timestamp[us, UTC]": pa.timestamp("us", tz="UTC"),
}


def _schema_candidates() -> list[Path]:
    dirs = []
    if env := os.environ.get("SEGLAKE_SCHEMAS_DIR"):
        dirs.append(Path(env))
    dirs.append(Path(__file__).resolve().parents[2] / "schemas")
    return [d / "catalog.json" for d in dirs]


def _packaged_schema() -> Path | None:
    """``seglake/schemas/catalog.json`` inside the spark-submit zip (spark-submit.sh puts
    ``schemas/`` there), read through importlib.resources."""
    try:
        res = importlib.resources.files("seglake").joinpath("schemas/catalog.json")
        if res.is_file():
            tmp = Path(tempfile.gettempdir()) / f"seglake-catalog-schema-{os.getpid()}.json"
            tmp.write_bytes(res.read_bytes())
            return tmp
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        pass
    return None


@functools.cache
def _schema_spec() -> tuple[pa.Schema, tuple[str, ...]]:
    for path in [*_schema_candidates(), _packaged_schema()]:
        if path is not None and path.is_file():
            break
    else:
        raise CatalogError(
            "catalog schema not found; looked for "
            + ", ".join(str(p) for p in _schema_candidates())
            + " (set SEGLAKE_SCHEMAS_DIR)"
        )
    spec = json.loads(path.read_text())
    fields = []
    for f in spec["fields"]:
        if f["type"] not in _TYPES:
            raise CatalogError(f"{path}: field {f['name']!r} has unknown type {f['type']!r}")
        fields.append(pa.field(f["name"], _TYPES[f["type"]], nullable=f.get("nullable", True)))
    return pa.schema(fields), tuple(spec.get("partition_by", ()))


def catalog_schema() -> pa.Schema:
    """The catalog's Arrow schema, loaded from ``schemas/catalog.json``."""
    return _schema_spec()[0]


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


class _Seg(NamedTuple):
    base: int
    next: int
    run_id: str


Key = tuple[str, int]
_Plan = Callable[[pa.Table], tuple[Callable[[Any, Any], None], int, int]]


def _label(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def _listing(items: list[str]) -> str:
    more = len(items) - _MAX_LISTED
    return "; ".join(items[:_MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")


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


def _keys_table(segments: pa.Table | Iterable[tuple[str, int, int]]) -> pa.Table:
    """(topic, partition, base_offset) keys from a table or from triples."""
    if isinstance(segments, (pa.Table, pa.RecordBatch)):
        missing = [c for c in KEY_COLUMNS if c not in segments.schema.names]
        if missing:
            raise CatalogError(f"segment keys need columns {list(KEY_COLUMNS)}; missing {missing}")
        t = pa.table({c: segments.column(c) for c in KEY_COLUMNS})
    else:
        triples = [tuple(k) for k in segments]
        if any(len(k) != 3 for k in triples):
            raise CatalogError("segment keys must be (topic, partition, base_offset) triples")
        t = pa.table(
            {
                "topic": [k[0] for k in triples],
                "partition": [k[1] for k in triples],
                "base_offset": [k[2] for k in triples],
            }
        )
    schema = catalog_schema()
    try:
        t = t.cast(pa.schema([schema.field(c) for c in KEY_COLUMNS]))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CatalogError(f"segment keys: {exc}") from exc
    for topic in pc.unique(t.column("topic")).to_pylist():
        validate_topic(topic)
    counts = Counter(zip(*(t.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))
    dupes = sorted(k for k, n in counts.items() if n > 1)
    if dupes:
        raise CatalogError(f"segment keys repeat: {dupes[:_MAX_LISTED]}")
    return t.sort_by(SORT_KEYS)


def _key_set(keys: pa.Table) -> set[tuple[str, int, int]]:
    return set(zip(*(keys.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))


def _predicate(keys: Iterable[tuple[str, int, int]]) -> str:
    """SQL predicate matching exactly these segment keys (topics are validated names)."""
    grouped: dict[Key, list[int]] = {}
    for topic, partition, base in keys:
        grouped.setdefault((validate_topic(topic), int(partition)), []).append(int(base))
    clauses = [
        f"(topic = '{t}' AND \"partition\" = {p} AND base_offset IN "
        f"({', '.join(str(b) for b in sorted(bases))}))"
        for (t, p), bases in sorted(grouped.items())
    ]
    return " OR ".join(clauses) if clauses else "false"


def _group(t: pa.Table) -> dict[Key, list[_Seg]]:
    """Rows of a catalog-shaped table by (topic, partition), each sorted by base offset."""
    out: dict[Key, list[_Seg]] = {}
    cols = [
        t.column(c).to_pylist()
        for c in ("topic", "partition", "base_offset", "next_offset", "run_id")
    ]
    for topic, partition, base, nxt, run in zip(*cols, strict=True):
        out.setdefault((topic, partition), []).append(_Seg(base, nxt, run))
    for segs in out.values():
        segs.sort()
    return out


def _order_problems(key: Key, segs: list[_Seg], *, contiguous: bool) -> list[str]:
    """Overlaps (and gaps, if ``contiguous``) between consecutive segments of one partition."""
    problems = []
    for a, b in itertools.pairwise(segs):
        if b.base == a.base:
            problems.append(f"{_label(key)}: two segments with base offset {a.base}")
        elif b.base < a.next:
            problems.append(
                f"{_label(key)}: segment {b.base} overlaps segment {a.base} "
                f"(which ends at next offset {a.next})"
            )
        elif contiguous and b.base != a.next:
            problems.append(
                f"{_label(key)}: gap between segment {a.base} (next offset "
                f"{a.next}) and segment {b.base}"
            )
    return problems


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
            schema, partition_by = _schema_spec()
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
        t = self.segments(topic, version=version)
        agg = t.group_by(["topic", "partition"]).aggregate([("next_offset", "max")])
        return dict(
            zip(
                zip(
                    agg.column("topic").to_pylist(),
                    agg.column("partition").to_pylist(),
                    strict=True,
                ),
                agg.column("next_offset_max").to_pylist(),
                strict=True,
            )
        )

    def log_start_offsets(
        self, topic: str | Iterable[str] | None = None, *, version: int | None = None
    ) -> dict[Key, int]:
        """``{(topic, partition): log start offset}`` (smallest ``base_offset``)."""
        t = self.segments(topic, version=version)
        agg = t.group_by(["topic", "partition"]).aggregate([("base_offset", "min")])
        return dict(
            zip(
                zip(
                    agg.column("topic").to_pylist(),
                    agg.column("partition").to_pylist(),
                    strict=True,
                ),
                agg.column("base_offset_min").to_pylist(),
                strict=True,
            )
        )

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

    def _normalize(
        self,
        rows: pa.Table | pa.RecordBatch,
        run_id: str,
        committed_at: dt.datetime,
        *,
        restamp: bool = False,
    ) -> pa.Table:
        """``rows`` cast to the catalog schema, with ``run_id`` and ``committed_at`` filled.

        A ``run_id`` column must match ``run_id`` unless ``restamp`` (rows read back from
        the catalog for a fix), which overwrites it.
        """
        schema = catalog_schema()
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if not isinstance(rows, pa.Table):
            raise CatalogError(f"catalog rows must be a pyarrow Table, got {type(rows).__name__}")
        names = rows.schema.names
        missing = [n for n in schema.names if n not in names and n not in _FILLED_COLUMNS]
        extra = [n for n in names if n not in schema.names]
        if missing or extra:
            raise CatalogError(f"catalog rows: missing columns {missing}, unknown columns {extra}")
        n = rows.num_rows
        columns = []
        for f in schema:
            if f.name == "committed_at":
                columns.append(pa.array([committed_at] * n, f.type))
                continue
            if f.name == "run_id" and (restamp or f.name not in names):
                columns.append(pa.array([run_id] * n, f.type))
                continue
            col = rows.column(f.name)
            if col.null_count:
                raise CatalogError(f"catalog rows: column {f.name!r} has {col.null_count} nulls")
            try:
                columns.append(col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise CatalogError(f"catalog rows: column {f.name!r}: {exc}") from exc
        t = pa.Table.from_arrays(columns, schema=schema)
        others = sorted(set(t.column("run_id").to_pylist()) - {run_id})
        if others:
            raise CatalogError(f"catalog rows of run {run_id!r} carry other run ids {others}")
        self._check_rows(t)
        return t.sort_by(SORT_KEYS)

    @staticmethod
    def _check_rows(t: pa.Table) -> None:
        """Row-level sanity: names, paths and counts that no catalog state can make right."""
        for topic in pc.unique(t.column("topic")).to_pylist():
            validate_topic(topic)
        problems = []
        cols = {
            c: t.column(c).to_pylist()
            for c in (
                "topic",
                "partition",
                "base_offset",
                "next_offset",
                "record_count",
                "size_bytes",
                "index_entries",
                "time_index_entries",
                "path",
            )
        }
        for i in range(t.num_rows):
            topic, part, base, nxt = (
                cols[c][i] for c in ("topic", "partition", "base_offset", "next_offset")
            )
            where = f"{topic}-{part} segment {base}"
            try:
                expected = f"{partition_dir_name(topic, part)}/{segment_file_name(base)}"
            except (InvalidTopicError, ValueError) as exc:
                raise CatalogError(f"{where}: {exc}") from exc
            if nxt < base:
                raise OffsetOrderError(f"{where}: next_offset {nxt} < base_offset {base}")
            if not 0 <= cols["record_count"][i] <= nxt - base:
                problems.append(
                    f"{where}: record_count {cols['record_count'][i]} does not fit "
                    f"offsets {base}..{nxt - 1}"
                )
            for c in ("size_bytes", "index_entries", "time_index_entries"):
                if cols[c][i] < 0:
                    problems.append(f"{where}: {c} {cols[c][i]} < 0")
            path = validate_relative(cols["path"][i])
            if path != expected:
                problems.append(f"{where}: path {path!r} is not {expected!r}")
            if len(problems) > _MAX_LISTED:
                break
        if problems:
            raise CatalogError("invalid catalog rows: " + _listing(problems))

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
        new = self._normalize(rows, run_id, dt.datetime.now(dt.UTC))
        grouped = _group(new)
        problems = [
            p
            for key, segs in grouped.items()
            for p in _order_problems(key, segs, contiguous=contiguous)
        ]
        if problems:
            raise OffsetOrderError(f"run {run_id!r}: " + _listing(problems))

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            existing = _group(current)
            conflicts, gaps = [], []
            for key, segs in grouped.items():
                have = existing.get(key)
                if not have:
                    continue
                leo = max(s.next for s in have)
                last = have[-1]
                first = segs[0]
                if first.base < leo or first.base <= last.base:  # (<=: empty last segment)
                    owners = sorted({s.run_id for s in have if s.next > first.base}) or [
                        last.run_id
                    ]
                    conflicts.append(
                        f"{_label(key)}: new segments start at offset {first.base} but the "
                        f"catalog's log end offset is {leo} (last segment {last.base}; offsets "
                        f"from {first.base} on committed by run(s) {owners})"
                    )
                elif contiguous and first.base != leo:
                    gaps.append(
                        f"{_label(key)}: new segments start at offset {first.base}, "
                        f"after the log end offset {leo} (a gap)"
                    )
            if conflicts:
                raise ConcurrentRunError(
                    f"run {run_id!r} was not committed, another run committed these offsets "
                    f"first: {_listing(conflicts)}"
                )
            if gaps:
                raise OffsetOrderError(f"run {run_id!r}: {_listing(gaps)}")

            def write(table: Any, props: Any) -> None:
                from deltalake import write_deltalake

                write_deltalake(table, new, mode="append", commit_properties=props)

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
        keys = _keys_table(segments)
        wanted = _key_set(keys)

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            existing = _group(current)
            self._require_present(wanted, existing)
            if not allow_truncate:
                tails = [
                    f"{_label(key)} segment {segs[-1].base} (log end offset {segs[-1].next})"
                    for key, segs in existing.items()
                    if (*key, segs[-1].base) in wanted
                ]
                if tails:
                    raise CatalogError(
                        f"run {run_id!r} would remove the last segment of a partition, moving "
                        f"its log end offset back: {_listing(tails)}; pass allow_truncate=True "
                        "if that is intended"
                    )
            predicate = _predicate(wanted)

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
        new = self._normalize(rows, run_id, dt.datetime.now(dt.UTC), restamp=True)
        replaced = _key_set(_keys_table(new))
        dropped = _key_set(_keys_table(remove))
        both = sorted(replaced & dropped)
        if both:
            raise CatalogError(f"segments both replaced and removed: {both[:_MAX_LISTED]}")
        touched = replaced | dropped
        new_grouped = _group(new)

        def plan(current: pa.Table) -> tuple[Callable[[Any, Any], None], int, int]:
            existing = _group(current)
            self._require_present(touched, existing)
            problems = []
            for key in sorted({(t, p) for t, p, _ in touched}):
                after = [s for s in existing.get(key, []) if (*key, s.base) not in touched]
                after = sorted(after + new_grouped.get(key, []))
                problems += _order_problems(key, after, contiguous=False)
            if problems:
                raise OffsetOrderError(f"run {run_id!r}: " + _listing(problems))
            predicate = _predicate(touched)

            def write(table: Any, props: Any) -> None:
                from deltalake import write_deltalake

                if new.num_rows:
                    write_deltalake(
                        table, new, mode="overwrite", predicate=predicate, commit_properties=props
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

    @staticmethod
    def _require_present(keys: set[tuple[str, int, int]], existing: dict[Key, list[_Seg]]) -> None:
        have = {(*key, s.base) for key, segs in existing.items() for s in segs}
        missing = sorted(keys - have)
        if missing:
            raise SegmentNotFoundError(
                "segments not in the catalog: "
                + _listing([f"{t}-{p} segment {b}" for t, p, b in missing])
            )
