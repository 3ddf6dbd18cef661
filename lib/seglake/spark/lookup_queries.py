"""The lookup job's queries: any DataFrame with ``topic``, ``partition`` and ``offset``,
``timestamp`` and/or ``key`` -> ``topic, partition, query_offset, query_timestamp`` (ms)
(and ``query_key``), by the
rules of :mod:`seglake.lake.lookup_queries` (the columns, the string times), which the
in-process lookup (``Lake.lookup``) applies to Arrow rows.

``timestamp`` may be epoch ms (-1/-2/-3: Kafka's sentinels), a Spark timestamp (floored
to ms, :data:`seglake.times.SPARK_MILLIS`), or strings (epoch ms or ISO-8601, through
:func:`seglake.times.to_millis`, the rule extract and the notebook API use); a Spark
timestamp or string before 1970 is no time (null: ``invalid_query``), never a sentinel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd  # at run time: Spark reads the pandas UDF's type hints

from seglake.lake.lookup_queries import check_query_columns, int_key_sql, key_type_error
from seglake.times import SPARK_MILLIS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType


def _string_millis(texts: pd.Series) -> pd.Series:
    """pandas Series of strings -> nullable int64 ms (:func:`string_millis`); a string
    that is no time -> null, so its query is ``invalid_query``. A pandas UDF: Spark takes
    its kind (Series -> Series) from these hints, so they must be pandas'."""
    from seglake.lake.lookup_queries import string_millis

    return pd.Series([string_millis(t) for t in texts], dtype="Int64")


def _key_sql(dt: DataType) -> str:
    """The key column as binary by :mod:`seglake.lake.lookup_queries`' rule: strings'
    UTF-8 bytes, binary as is, integers big-endian at their width (:func:`int_key_sql`);
    another type refused (:func:`key_type_error`)."""
    from pyspark.sql.types import BinaryType, IntegralType, NullType, StringType

    if isinstance(dt, IntegralType):
        return int_key_sql("`key`", _WIDTHS[dt.typeName()])
    if not isinstance(dt, (StringType, BinaryType, NullType)):
        raise key_type_error(dt.simpleString())
    return "CAST(`key` AS BINARY)"


_WIDTHS = {"byte": 1, "short": 2, "integer": 4, "long": 8}  # Spark's integral types' bytes


def normalize_queries(df: DataFrame) -> DataFrame:
    """topic, partition, query_offset, query_timestamp (ms) from the query DataFrame, and
    query_key (binary; a string's UTF-8 bytes) when it has a ``key`` column (then
    ``partition`` may be absent: null, every partition)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

    cols = set(df.columns)
    check_query_columns(cols)
    # one select of SQL expressions: one call into the JVM (the columns' casts one by
    # one cost a call each)
    off = "CAST(`offset` AS BIGINT)" if "offset" in cols else "CAST(NULL AS BIGINT)"
    ts, udf = "CAST(NULL AS BIGINT)", None
    if "timestamp" in cols:
        dt = df.schema["timestamp"].dataType
        if isinstance(dt, (TimestampType, TimestampNTZType)):
            # the one ms rule (floor); before 1970 no time, never a sentinel: invalid_query
            ms = SPARK_MILLIS.format("`timestamp`")
            ts = f"CASE WHEN {ms} >= 0 THEN {ms} END"
        elif isinstance(dt, StringType):  # epoch ms or ISO-8601, as extract takes them
            udf = F.pandas_udf(_string_millis, "bigint")(F.col("timestamp"))  # type: ignore[call-overload]
        else:
            ts = "CAST(`timestamp` AS BIGINT)"
    part = "`partition`" if "partition" in cols else "NULL"
    exprs = [
        "CAST(`topic` AS STRING) AS topic",
        f"CAST({part} AS INT) AS partition",
        f"{off} AS query_offset",
    ]
    key = [f"{_key_sql(df.schema['key'].dataType)} AS query_key"] if "key" in cols else []
    if udf is None:
        return df.selectExpr(*exprs, f"{ts} AS query_timestamp", *key)
    return df.select(
        *[F.expr(e) for e in exprs], udf.alias("query_timestamp"), *[F.expr(e) for e in key]
    )
