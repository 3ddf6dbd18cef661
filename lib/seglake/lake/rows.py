"""The catalog's rows: the schema (``schemas/catalog.json``), rows normalized to it and
checked one by one (names, paths, counts), segment keys, and the
:class:`~seglake.storage.segment_ref.SegmentRef` of a row (what storage opens).

Row (one per committed segment; ``schemas/catalog.json`` has the types)::

    topic, partition, base_offset      the key (KEY_COLUMNS); the table is sorted by it
    next_offset, record_count          offsets [base_offset, next_offset), records in them
    min/max_timestamp, size_bytes, index_entries, time_index_entries, codec
    path                               <topic>-<partition>/<base offset, 20 digits>.log
    run_id, committed_at               filled in by the catalog on commit
    tail_min_timestamps                nullable: (offset, min timestamp from there on)
                                       checkpoints (seglake.storage.tail_minima)
    index_interval_bytes               nullable: log.index.interval.bytes of its indexes
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.resources
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import CatalogError, InvalidTopicError, OffsetOrderError
from seglake.format import LONG_MAX, LONG_MIN
from seglake.lake_paths import validate_relative
from seglake.record.encode_input import offset_too_high
from seglake.storage.naming import (
    LOG_SUFFIX,
    partition_dir_name,
    segment_file_name,
    validate_topic,
)
from seglake.storage.segment_ref import SegmentRef
from seglake.storage.stats import STAT_COLUMNS, segment_row
from seglake.storage.tail_minima import TAIL_TYPE

__all__ = [
    "KEY_COLUMNS",
    "MAX_LISTED",
    "SORT_KEYS",
    "STAT_COLUMNS",
    "catalog_schema",
    "check_rows",
    "key_set",
    "keys_predicate",
    "keys_table",
    "listing",
    "normalize_rows",
    "rows_table",
    "schema_spec",
    "segment_ref",
    "segment_refs",
    "segment_row",
]

KEY_COLUMNS = ("topic", "partition", "base_offset")


SORT_KEYS = [(c, "ascending") for c in KEY_COLUMNS]


_FILLED_COLUMNS = ("run_id", "committed_at")

MAX_LISTED = 10

_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "binary": pa.binary(),
    "bool": pa.bool_(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "timestamp[us, UTC]": pa.timestamp("us", tz="UTC"),
    "list<struct<offset: int64, min_timestamp: int64>>": TAIL_TYPE,
}


def _schema_candidates() -> list[Path]:
    dirs = []
    if env := os.environ.get("SEGLAKE_SCHEMAS_DIR"):
        dirs.append(Path(env))
    dirs.append(Path(__file__).resolve().parents[3] / "schemas")
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
def schema_spec() -> tuple[pa.Schema, tuple[str, ...]]:
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
    return schema_spec()[0]


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Catalog rows (without ``run_id``/``committed_at``) as a table of the catalog schema."""
    fields = [f for f in catalog_schema() if f.name not in _FILLED_COLUMNS]
    try:
        return pa.Table.from_pylist(rows, schema=pa.schema(fields))
    except (OverflowError, pa.ArrowInvalid):  # a forged batch's offsets: a long overflows
        for r in rows:
            for f in fields:
                v = r.get(f.name)
                if isinstance(v, int) and not LONG_MIN <= v <= LONG_MAX:
                    where = r.get("path") or f"{r.get('topic')}-{r.get('partition')}"
                    if f.name == "next_offset":  # the segment's last offset + 1
                        text = offset_too_high(f"{where}: last offset", v - 1)
                        raise OffsetOrderError(text) from None
                    raise CatalogError(f"{where}: {f.name} {v} does not fit a long") from None
        raise


def segment_ref(row: Mapping[str, Any]) -> SegmentRef:
    """The committed segment a catalog row describes, as storage takes it (``path``,
    ``size_bytes``; ``next_offset``, ``max_timestamp``, ``run_id``,
    ``index_interval_bytes`` if the row has them)."""
    return SegmentRef(
        path=row["path"],
        size_bytes=int(row["size_bytes"]),
        next_offset=row.get("next_offset"),
        max_timestamp=row.get("max_timestamp"),
        run_id=row.get("run_id") or None,
        index_interval_bytes=row.get("index_interval_bytes"),
    )


def segment_refs(rows: pa.Table | Iterable[Mapping[str, Any]]) -> list[SegmentRef]:
    """:func:`segment_ref` of each row, in their order."""
    return [segment_ref(r) for r in (rows.to_pylist() if isinstance(rows, pa.Table) else rows)]


def listing(items: list[str]) -> str:
    more = len(items) - MAX_LISTED
    return "; ".join(items[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")


def normalize_rows(
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
    missing = [
        f.name
        for f in schema
        if f.name not in names and f.name not in _FILLED_COLUMNS and not f.nullable
    ]
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
        if f.name not in names:  # an optional column: unknown
            columns.append(pa.nulls(n, f.type))
            continue
        col = rows.column(f.name)
        if col.null_count and not f.nullable:
            raise CatalogError(f"catalog rows: column {f.name!r} has {col.null_count} nulls")
        try:
            columns.append(col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise CatalogError(f"catalog rows: column {f.name!r}: {exc}") from exc
    t = pa.Table.from_arrays(columns, schema=schema)
    others = sorted(set(t.column("run_id").to_pylist()) - {run_id})
    if others:
        raise CatalogError(f"catalog rows of run {run_id!r} carry other run ids {others}")
    check_rows(t)
    return t.sort_by(SORT_KEYS)


def check_rows(t: pa.Table, *, reading: str | None = None) -> None:
    """Row-level sanity: names, paths and counts that no catalog state can make right.

    Vectorised (a catalog may hold 100k rows); only failing rows are formatted. The same
    checks run on write (:func:`normalize_rows`) and on every read of the catalog: with
    ``reading`` (what is being read, e.g. ``"catalog ... version 7"``) any bad row is a
    :class:`CatalogError` naming it (topic, partition, base offset, path), so a row that
    points into another partition's directory is never read as this partition's.
    """
    try:
        _check_rows(t)
    except (CatalogError, InvalidTopicError, OffsetOrderError) as exc:
        if reading is None:
            raise
        raise CatalogError(f"{reading}: {exc}") from exc


def _check_rows(t: pa.Table) -> None:
    for topic in pc.unique(t.column("topic")).to_pylist():
        validate_topic(topic)
    if not t.num_rows:
        return
    part, base, nxt = (t.column(c) for c in ("partition", "base_offset", "next_offset"))
    count = t.column("record_count")
    expected = pc.binary_join_element_wise(
        t.column("topic"),
        "-",
        pc.cast(part, pa.string()),
        "/",
        pc.utf8_lpad(pc.cast(base, pa.string()), 20, "0"),
        LOG_SUFFIX,
        "",
    )
    bad = pc.or_(pc.less(part, 0), pc.less(base, 0))
    bad = pc.or_(bad, pc.less(nxt, base))
    bad = pc.or_(bad, pc.less(count, 0))
    bad = pc.or_(bad, pc.greater(count, pc.subtract(nxt, base)))
    for c in ("size_bytes", "index_entries", "time_index_entries"):
        bad = pc.or_(bad, pc.less(t.column(c), 0))
    bad = pc.or_(bad, pc.not_equal(t.column("path"), expected))
    rows = pc.indices_nonzero(pc.fill_null(bad, True)).to_pylist()
    if not rows:
        return
    problems = []
    for r in t.take(pa.array(rows[: MAX_LISTED + 1], pa.int64())).to_pylist():
        topic, p, b, n = r["topic"], r["partition"], r["base_offset"], r["next_offset"]
        where = f"{topic}-{p} segment {b} (path {r['path']!r})"
        try:
            want = f"{partition_dir_name(topic, p)}/{segment_file_name(b)}"
        except (InvalidTopicError, ValueError) as exc:
            raise CatalogError(f"{where}: {exc}") from exc
        if n < b:
            raise OffsetOrderError(f"{where}: next_offset {n} < base_offset {b}")
        if not 0 <= r["record_count"] <= n - b:
            problems.append(
                f"{where}: record_count {r['record_count']} does not fit offsets {b}..{n - 1}"
            )
        for c in ("size_bytes", "index_entries", "time_index_entries"):
            if r[c] < 0:
                problems.append(f"{where}: {c} {r[c]} < 0")
        if validate_relative(r["path"]) != want:
            problems.append(f"{where}: path {r['path']!r} is not {want!r}")
    raise CatalogError(
        "invalid catalog rows: "
        + listing(problems)
        + (f" ({len(rows)} bad rows in all)" if len(rows) > MAX_LISTED else "")
    )


def keys_table(segments: pa.Table | Iterable[tuple[str, int, int]]) -> pa.Table:
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
        raise CatalogError(f"segment keys repeat: {dupes[:MAX_LISTED]}")
    return t.sort_by(SORT_KEYS)


def key_set(keys: pa.Table) -> set[tuple[str, int, int]]:
    return set(zip(*(keys.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))


def keys_predicate(keys: Iterable[tuple[str, int, int]]) -> str:
    """SQL predicate matching exactly these segment keys (topics are validated names)."""
    grouped: dict[tuple[str, int], list[int]] = {}
    for topic, partition, base in keys:
        grouped.setdefault((validate_topic(topic), int(partition)), []).append(int(base))
    clauses = [
        f"(topic = '{t}' AND \"partition\" = {p} AND base_offset IN "
        f"({', '.join(str(b) for b in sorted(bases))}))"
        for (t, p), bases in sorted(grouped.items())
    ]
    return " OR ".join(clauses) if clauses else "false"
