"""The lookup's queries, without Spark: the rules both the lookup job
(:func:`seglake.spark.lookup_queries.normalize_queries`) and the in-process lookup
(:func:`query_table`, ``Lake.lookup``) apply before :func:`~seglake.lake.lookup_answer.
answer_queries` answers them.

A query is ``topic``, ``partition`` and one of the *query kinds* (:data:`QUERY_KINDS`:
its column -> the :data:`~seglake.lake.lookup_answer.QUERY_SCHEMA` column it fills):

- ``offset``: an offset (int64);
- ``timestamp``: epoch ms (-1 latest, -2 earliest, -3 max timestamp: Kafka's
  sentinels), a timestamp (floored to ms; before 1970 no time, never a sentinel) or a
  string (epoch ms, ISO-8601 or a sentinel's name, :func:`string_millis`); a value that
  is no time is null, so its query is ``invalid_query``;
- ``key``: a string (UTF-8 bytes), binary, or an integer (its big-endian bytes at its
  column's width, 1, 2, 4 or 8: what Kafka's Short/Integer/LongSerializer write,
  :func:`int_key_sql` in Spark); ``partition`` may be null or absent then
  (every partition of the topic). Its answer is every record with those key bytes
  (:mod:`seglake.lake.lookup_keys`); the rows carry a ``query_key`` column then
  (:data:`~seglake.lake.lookup_keys.KEY_QUERY_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import InputSchemaError
from seglake.lake.lookup_answer import KEY_QUERY_SCHEMA, QUERY_SCHEMA

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "QUERY_KINDS",
    "check_query_columns",
    "int_key_sql",
    "key_type_error",
    "query_table",
    "string_millis",
]

QUERY_KINDS = {"offset": "query_offset", "timestamp": "query_timestamp", "key": "query_key"}
_PLACE = ("topic", "partition")  # where a query asks


def check_query_columns(cols: Iterable[str]) -> None:
    """Raise :class:`InputSchemaError` (one line naming the columns given) unless
    ``cols`` hold ``topic``, ``partition`` (optional with ``key``) and at least one query
    kind's column."""
    cols = set(cols)
    missing = [c for c in _PLACE if c not in cols and not (c == "partition" and "key" in cols)]
    if missing or not cols & set(QUERY_KINDS):
        *first, last = QUERY_KINDS
        kinds = f"{', '.join(first)} or {last}"
        raise InputSchemaError(
            f"queries: no {' or '.join(repr(c) for c in missing) or kinds} "
            f"column (given: {sorted(cols)}{'; an empty file?' if not cols else ''}); "
            f"expected topic, partition and {', '.join(QUERY_KINDS)} (one a row)"
        )


def string_millis(text: str | None) -> int | None:
    """A timestamp given as a string -> epoch ms (:func:`seglake.times.to_millis`,
    -1/-2/-3 and their names kept); ``None`` (``invalid_query``) for no time."""
    from seglake.times import to_millis

    try:
        return None if text is None else to_millis(text, allow_special=True)
    except ValueError:
        return None


def _offsets(col: pa.ChunkedArray) -> pa.Array:
    """Offsets as int64 (floats truncated, as Spark's CAST AS BIGINT)."""
    return pc.cast(col.combine_chunks(), pa.int64(), safe=False)


def _millis(col: pa.ChunkedArray) -> pa.Array:
    """Timestamps as epoch ms: numbers as given, timestamps floored to ms (null before
    1970), strings by :func:`string_millis`."""
    arr = col.combine_chunks()
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array([string_millis(s) for s in arr.to_pylist()], pa.int64())
    if pa.types.is_timestamp(t):  # the one ms rule (floor), Spark's SPARK_MILLIS
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        raw = pc.cast(arr, pa.int64()).fill_null(0).to_numpy()
        mul, div = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}[t.unit]
        ms = raw * mul // div
        return pa.array(ms, pa.int64(), mask=~valid | (ms < 0))
    return pc.cast(arr, pa.int64(), safe=False)


def _key_bytes(col: pa.ChunkedArray) -> pa.Array:
    """Keys as binary: strings as their UTF-8 bytes (Spark's CAST AS BINARY), integers as
    their big-endian bytes at the column's width (:func:`int_key_sql`'s rule)."""
    arr = col.combine_chunks()
    t = arr.type
    if pa.types.is_integer(t):
        width = t.bit_width // 8
        kind = "i" if pa.types.is_signed_integer(t) else "u"
        data = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(f">{kind}{width}")
        ends = np.arange(len(arr) + 1, dtype=np.int32) * width
        raw = pa.Array.from_buffers(
            pa.binary(), len(arr), [None, pa.py_buffer(ends), pa.py_buffer(data.tobytes())]
        )
        return pc.if_else(arr.is_valid(), raw, pa.scalar(None, pa.binary()))
    try:  # strings, binary of any kind, nulls
        return pc.cast(arr, pa.binary())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        raise key_type_error(str(t)) from None


def key_type_error(type_name: str) -> InputSchemaError:
    """The one line for a ``key`` column of a type no key is made of."""
    return InputSchemaError(
        f"queries: key column of type {type_name}; expected a string (its UTF-8 bytes), "
        "binary or an integer (big-endian)"
    )


def int_key_sql(column: str, width: int) -> str:
    """The Spark SQL expression of an integer key ``column`` of ``width`` bytes (1, 2, 4,
    8: tinyint .. bigint) as its big-endian bytes, two's complement, as
    :func:`_key_bytes` makes them (Spark's ``CAST(int AS BINARY)``, which ANSI mode
    refuses): the last ``2 * width`` digits of the 16 hex digits of the value as a
    bigint, unhexed."""
    digits = f"lpad(hex(CAST({column} AS BIGINT)), 16, '0')"
    return f"unhex(substring({digits}, {17 - 2 * width}, {2 * width}))"


_CONVERT: dict[str, Callable[[pa.ChunkedArray], pa.Array]] = {
    "offset": _offsets,
    "timestamp": _millis,
    "key": _key_bytes,
}


def query_table(queries: pd.DataFrame | pa.Table | Any) -> pa.Table:
    """The queries (a pandas DataFrame or Arrow table with ``topic``, ``partition`` and
    query kind columns) as :data:`QUERY_SCHEMA` rows (:data:`KEY_QUERY_SCHEMA` with a
    ``key`` column), in order: what the lookup job's
    :func:`~seglake.spark.lookup_queries.normalize_queries` makes of the same rows.

    Raises:
        InputSchemaError: a column missing (:func:`check_query_columns`).
    """
    t = (
        queries
        if isinstance(queries, pa.Table)
        else pa.Table.from_pandas(queries, preserve_index=False)
    )
    check_query_columns(t.column_names)
    n = t.num_rows
    schema = KEY_QUERY_SCHEMA if "key" in t.column_names else QUERY_SCHEMA
    cols = {
        "topic": pc.cast(t.column("topic").combine_chunks(), pa.string()),
        "partition": (
            pc.cast(t.column("partition").combine_chunks(), pa.int32(), safe=False)
            if "partition" in t.column_names
            else pa.nulls(n, pa.int32())
        ),
    }
    for kind, name in QUERY_KINDS.items():
        cols[name] = (
            _CONVERT[kind](t.column(kind))
            if kind in t.column_names
            else pa.nulls(n, schema.field(name).type if name in schema.names else pa.int64())
        )
    return pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)
