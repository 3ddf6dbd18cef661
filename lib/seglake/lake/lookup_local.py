"""Point lookups in one process (``Lake.lookup``, ``seglake lookup``): the lookup job's
answers without Spark, by the same code its executors run: the queries made
:data:`~seglake.lake.lookup_answer.QUERY_SCHEMA` rows by
:func:`~seglake.lake.lookup_queries.query_table` (the job's rules,
:mod:`seglake.lake.lookup_queries`), a snapshot's
:func:`~seglake.lake.lookup_plan.partition_arrays` (what the job broadcasts) and
:func:`~seglake.lake.lookup_keys.answer_chunk` (offset/time queries by
:func:`~seglake.lake.lookup_answer.answer_queries`, key queries beside them),
``chunk_rows`` queries at a time.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from seglake.lake.lookup_answer import KEY_LOOKUP_SCHEMA, LOOKUP_SCHEMA
from seglake.lake.lookup_keys import answer_chunk
from seglake.lake.lookup_queries import query_table
from seglake.location import Root
from seglake.storage.index_cache import IndexCache

__all__ = ["CHUNK_ROWS", "lookup_local"]

CHUNK_ROWS = 200_000  # queries answered together (one decode): the job's default chunk


def lookup_local(
    root: Root,
    parts: dict[Any, dict[str, Any]],
    queries: Any,
    *,
    version: int,
    cache: IndexCache,
    on_corrupt: str = "raise",
    chunk_rows: int = CHUNK_ROWS,
    latest_per_key: bool = False,
    isolation_level: str = "read_uncommitted",
) -> pa.Table:
    """One :data:`LOOKUP_SCHEMA` row per query of ``queries`` (pandas or Arrow, the
    lookup job's query columns), in order, against ``parts`` (``partition_arrays`` of
    catalog ``version``'s snapshot); with a ``key`` column, :data:`KEY_LOOKUP_SCHEMA`
    rows, a key query's matching records (or the latest per key) in its place
    (``read_committed``: not those of aborted transactions)."""
    q = query_table(queries)
    out = [
        answer_chunk(
            root,
            parts,
            cache,
            q.slice(lo, chunk_rows),
            latest_per_key=latest_per_key,
            on_corrupt=on_corrupt,
            version=version,
            isolation_level=isolation_level,
        )
        for lo in range(0, q.num_rows, chunk_rows)
    ]
    schema = KEY_LOOKUP_SCHEMA if "query_key" in q.column_names else LOOKUP_SCHEMA
    return pa.concat_tables(out) if out else schema.empty_table()
