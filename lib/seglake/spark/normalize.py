"""Input validation and normalisation for ingest: any DataFrame in the Spark Kafka
source's shape -> seglake's internal columns.

    in:  value (required), key, topic, partition, offset, timestamp, timestampType, headers
    out: topic string, partition int (if known), offset long (if given), key binary,
         value binary, timestamp long (epoch ms), timestamp_type int,
         headers array<struct<key string, value binary>>

Unknown columns and wrong types are an :class:`InputSchemaError` that lists the
expected and the given columns, so nothing is dropped silently.
"""

from __future__ import annotations

import pyspark.sql.functions as F
from pyspark.sql import Column, DataFrame
from pyspark.sql import types as T

from seglake.errors import InputSchemaError
from seglake.times import SPARK_MILLIS

_BINARYISH = (T.BinaryType, T.StringType)
_INTS = (T.IntegerType, T.LongType, T.ShortType, T.ByteType)
EXPECTED = {
    "value": "binary | string (required)",
    "key": "binary | string",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp | bigint (epoch ms)",
    "timestampType": "int (0 CreateTime, 1 LogAppendTime)",
    "headers": "array<struct<key:string,value:binary|string>>",
}
# nullable as files usually declare it; a null header key is rejected by the encoder
HEADERS_TYPE = T.ArrayType(
    T.StructType(
        [T.StructField("key", T.StringType(), True), T.StructField("value", T.BinaryType(), True)]
    ),
    True,
)


def _schema_error(df: DataFrame, problem: str) -> InputSchemaError:
    given = ", ".join(f"{f.name}: {f.dataType.simpleString()}" for f in df.schema.fields)
    expected = ", ".join(f"{k}: {v}" for k, v in EXPECTED.items())
    return InputSchemaError(f"{problem}; expected columns: {expected}; given columns: {given}")


def check_types(df: DataFrame) -> dict[str, T.DataType]:
    types = {f.name: f.dataType for f in df.schema.fields}
    unknown = [c for c in types if c not in EXPECTED]
    if unknown:
        raise _schema_error(df, f"unknown column(s) {unknown}: select or rename them first")
    if "value" not in types:
        raise _schema_error(df, "the input has no 'value' column")
    ok = {
        "value": isinstance(types.get("value"), _BINARYISH),
        "key": isinstance(types.get("key", T.BinaryType()), _BINARYISH),
        "topic": isinstance(types.get("topic", T.StringType()), T.StringType),
        "partition": isinstance(types.get("partition", T.IntegerType()), _INTS),
        "offset": isinstance(types.get("offset", T.LongType()), (T.LongType, T.IntegerType)),
        "timestamp": isinstance(
            types.get("timestamp", T.LongType()),
            (T.TimestampType, T.TimestampNTZType, T.LongType, T.IntegerType),
        ),
        "timestampType": isinstance(types.get("timestampType", T.IntegerType()), _INTS),
        "headers": _headers_ok(types.get("headers")),
    }
    wrong = [c for c, good in ok.items() if not good]
    if wrong:
        got = ", ".join(f"{c}: {types[c].simpleString()}" for c in wrong)
        raise _schema_error(df, f"wrong type for {got}")
    return types


def _headers_ok(dt: T.DataType | None) -> bool:
    if dt is None:
        return True
    if not isinstance(dt, T.ArrayType) or not isinstance(dt.elementType, T.StructType):
        return False
    fields = {f.name: f.dataType for f in dt.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], T.StringType)
        and isinstance(fields["value"], _BINARYISH)
    )


def _binary(c: Column, dt: T.DataType) -> Column:
    return c.cast("binary") if isinstance(dt, T.StringType) else c


def normalize(
    df: DataFrame,
    *,
    topic: str | None = None,
    log_append_time_ms: int,
    append_time: tuple[bool, frozenset[str]] = (False, frozenset()),
) -> DataFrame:
    """Validate ``df`` and return seglake's internal columns (see module docstring).

    ``log_append_time_ms`` is the run's append time, used when the input has no
    timestamp or where ``message.timestamp.type`` is LogAppendTime (``append_time``: for
    every topic, except those listed: :meth:`LogConfig.append_time`).
    """
    types = check_types(df)
    if topic is None and "topic" not in types:
        raise _schema_error(df, "no topic: pass --topic NAME or give a 'topic' column")
    cols: list[Column] = []
    if topic is not None:
        cols.append(F.lit(topic).alias("topic"))
    else:
        cols.append(F.col("topic"))
    if "partition" in types:
        cols.append(F.col("partition").cast("int").alias("partition"))
    if "offset" in types:
        cols.append(F.col("offset").cast("long").alias("offset"))
    cols.append(
        (
            _binary(F.col("key"), types["key"]) if "key" in types else F.lit(None).cast("binary")
        ).alias("key")
    )
    cols.append(_binary(F.col("value"), types["value"]).alias("value"))
    default, flip = append_time
    if "timestamp" not in types or (default and not flip):
        cols.append(F.lit(log_append_time_ms).cast("long").alias("timestamp"))
        cols.append(F.lit(1).alias("timestamp_type"))
    else:
        ts = types["timestamp"]
        ms = (
            F.expr(SPARK_MILLIS.format("`timestamp`"))  # the one ms rule: floor
            if isinstance(ts, (T.TimestampType, T.TimestampNTZType))
            else F.col("timestamp").cast("long")
        )
        kind = F.col("timestampType").cast("int") if "timestampType" in types else F.lit(0)
        if flip:  # topics whose message.timestamp.type differs: per row
            appended = F.col("topic").isin(sorted(flip))
            appended = ~appended if default else appended
            ms = F.when(appended, F.lit(log_append_time_ms).cast("long")).otherwise(ms)
            kind = F.when(appended, F.lit(1)).otherwise(kind)
        cols.append(ms.alias("timestamp"))
        cols.append(kind.alias("timestamp_type"))
    if "headers" in types:
        h = F.col("headers")
        if isinstance(types["headers"].elementType["value"].dataType, T.StringType):  # type: ignore[attr-defined]
            h = F.transform(
                h,
                lambda x: F.struct(x["key"].alias("key"), x["value"].cast("binary").alias("value")),
            )
        cols.append(F.coalesce(h, F.array().cast(HEADERS_TYPE)).cast(HEADERS_TYPE).alias("headers"))
    else:
        cols.append(F.array().cast(HEADERS_TYPE).alias("headers"))
    return df.select(*cols)
