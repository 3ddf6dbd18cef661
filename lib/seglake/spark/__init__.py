"""Spark integration: the only package of seglake that imports pyspark.

``seglake.spark.register(spark)`` adds the ``seglake`` data source
(:mod:`seglake.spark.datasource`); pyspark is imported when it is called, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seglake.location import Root

__all__ = ["compact", "ingest_batch", "register", "seglake_errors"]


def register(spark: Any, *, bytes_accumulator: Any = None) -> None:
    """Register ``spark.read.format("seglake")`` on ``spark`` (see
    :func:`seglake.spark.datasource.register`)."""
    from seglake.spark.datasource import register as _register

    _register(spark, bytes_accumulator=bytes_accumulator)


def compact(spark: Any, root: Root, **kwargs: Any) -> Any:
    """Merge or compact a lake's segments (see :func:`seglake.spark.compact_job.compact`;
    not ``spark/compact.py``: importing a submodule of that name would replace this
    function by the module on the package)."""
    from seglake.spark.compact_job import compact as _compact

    return _compact(spark, root, **kwargs)


def ingest_batch(df: Any, batch_id: int, **kwargs: Any) -> Any:
    """``foreachBatch``'s micro-batch ingested once per (query id, batch id); see
    :func:`seglake.spark.stream_sink.ingest_batch`."""
    from seglake.spark.stream_sink import ingest_batch as _ingest_batch

    return _ingest_batch(df, batch_id, **kwargs)


def seglake_errors() -> Any:
    """Spark's exceptions carrying a seglake error raised as that error, one line (see
    :func:`seglake.spark.session.seglake_errors`)."""
    from seglake.spark.session import seglake_errors as _seglake_errors

    return _seglake_errors()
