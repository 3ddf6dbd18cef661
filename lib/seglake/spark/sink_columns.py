"""The Spark Kafka sink's columns (its ``KafkaWriter``: ``validateQuery`` and the write
task's projection), as ``df.write.format("seglake")`` takes them:

    topic      string; the ``topic`` option overrides it (the column is then not read);
               one of the two is required, and a row's topic must not be null
    key        string | binary, optional (none: null keys)
    value      string | binary, required (a null value is a tombstone)
    headers    array<struct<key: string, value: binary>>, optional; written whenever
               present, whatever ``includeHeaders`` says (Spark's sink does not read that
               option: its ``KafkaWriteTask`` writes the column it is given)
    partition  int, optional (none, or null in a row: Kafka's default partitioner)
    timestamp  timestamp | double (seconds since the epoch), optional (none, or null in a
               row: the time of the write, as Kafka's producer stamps a record; CreateTime
               unless ``message.timestamp.type=LogAppendTime``)

Every other column is ignored, as Kafka's writer ignores it (a Kafka source's ``offset``
and ``timestampType``: the lake assigns offsets from its log end offsets). The messages
are Kafka's (``key attribute unsupported type int. key must be a(n) string or binary``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from seglake.errors import InputSchemaError, SeglakeError

__all__ = ["SINK_COLUMNS", "check_sink_schema", "sink_batch"]

HEADERS = T.ArrayType(
    T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
)
SINK_COLUMNS: dict[str, tuple[T.DataType, ...]] = {
    "topic": (T.StringType(),),
    "key": (T.StringType(), T.BinaryType()),
    "value": (T.StringType(), T.BinaryType()),
    "headers": (HEADERS,),
    "partition": (T.IntegerType(),),
    "timestamp": (T.DoubleType(), T.TimestampType()),
}


def _same_type(a: T.DataType, b: T.DataType) -> bool:
    """Spark's ``DataTypeUtils.sameType``: equal but for nullability."""
    return a.simpleString() == b.simpleString()


def check_sink_schema(schema: T.StructType, topic: str | None) -> tuple[str, ...]:
    """The columns of ``schema`` the sink takes (``topic`` dropped when the option gives
    it); a missing or mistyped one is one :class:`InputSchemaError` line in Kafka's words."""
    types = {f.name: f.dataType for f in schema.fields}
    if topic is None and "topic" not in types:
        raise InputSchemaError(
            "seglake: topic option required when no 'topic' attribute is present. "
            "Use the topic option for setting a topic."
        )
    if "value" not in types:
        raise InputSchemaError(
            "seglake: Required attribute 'value' not found (given columns: "
            + ", ".join(f"{n}: {t.simpleString()}" for n, t in types.items())
            + ")"
        )
    kept = []
    for name, desired in SINK_COLUMNS.items():
        if name not in types or (name == "topic" and topic is not None):
            continue
        if not any(_same_type(types[name], d) for d in desired):
            raise InputSchemaError(
                f"seglake: {name} attribute unsupported type {types[name].simpleString()}. "
                f"{name} must be a(n) {' or '.join(d.simpleString() for d in desired)}"
            )
        kept.append(name)
    return tuple(kept)


def sink_batch(b: pa.RecordBatch, columns: tuple[str, ...], write_ms: int) -> pa.RecordBatch:
    """An input batch as the ingest's input columns (what the stream sink's
    ``internal_columns`` takes): the sink's columns only, a timestamp in epoch ms for
    every row (double seconds as Spark casts them, null or none: ``write_ms``)."""
    cols = {c: b.column(c) for c in columns}
    if "topic" in cols and cols["topic"].null_count:
        raise SeglakeError(
            f"{cols['topic'].null_count} row(s) with a null topic present in the data. "
            "Use the topic option for setting a default topic."
        )
    ts = cols.get("timestamp")
    if ts is None:
        ms = pa.array(np.full(b.num_rows, write_ms, dtype=np.int64))
    elif pa.types.is_timestamp(ts.type):  # Kafka: micros / 1000
        us = ts.cast(pa.timestamp("us", ts.type.tz)).cast(pa.int64())
        ms = pc.fill_null(pc.divide(us, 1000), write_ms)
    else:  # Spark's cast of a double to a timestamp: whole microseconds, then / 1000
        sec = ts.to_numpy(zero_copy_only=False)
        bad = ~np.isfinite(sec)
        us = np.trunc(np.where(bad, 0.0, sec) * 1e6).astype(np.int64)
        ms = pa.array(np.where(bad, write_ms, us // 1000), mask=None)
        ms = pc.if_else(pc.is_null(ts), write_ms, ms)
    cols["timestamp"] = ms.cast(pa.int64())
    return pa.RecordBatch.from_pydict(cols)
