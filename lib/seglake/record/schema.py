"""Arrow schemas of records inside seglake, and of the Spark Kafka source.

Internal record table (what the decoder returns and the encoder takes)::

    offset          int64   not null
    timestamp       int64   not null    epoch ms (LogAppendTime batches: the batch's maxTimestamp)
    timestamp_type  int32   not null    0 CreateTime, 1 LogAppendTime
    key             binary              null = null key
    value           binary              null = tombstone
    headers         list<struct<key: string not null, value: binary>>   never null, may be empty
    producer_id     int64   not null    -1 if none
    transactional   bool    not null

The Spark Kafka source schema (``KAFKA_SOURCE_SCHEMA``) is what jobs and the data
source return: ``key, value, topic, partition, offset, timestamp, timestampType, headers``.
Without ``headers`` (a decode asked not to build them; the Kafka source's
``includeHeaders=false``): :func:`without_headers` of either schema.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute

from seglake.errors import InputSchemaError
from seglake.format import LONG_MAX

# the last epoch ms a microsecond timestamp (Spark's, the Kafka source's column) holds:
# +294247-01-10T04:00:54.775Z. Kafka takes any timestamp >= 0; ingest refuses later ones.
MAX_TIMESTAMP_MS = LONG_MAX // 1000
_Micros = TypeVar("_Micros", int, np.ndarray)


def micros_to_millis(us: _Micros) -> _Micros:
    """Epoch ms of epoch microseconds (an int or an int64 array): **floor**, the
    millisecond the instant lies in, the one rule wherever microseconds (a Spark
    ``TIMESTAMP``, a ``datetime``, the catalog's ``committed_at``) become ms. It is
    Spark's (``unix_millis``, ``microsToMillis``) and Java's (``Instant.toEpochMilli``),
    so a Kafka record's timestamp, which the Kafka source hands over as ``ms * 1000`` µs,
    comes back exactly, and a time before 1970 stays negative (truncation toward zero
    would make -1500 µs -1 ms, Kafka's "latest"). The first ms at or after ``us`` (a
    bound) is ``-micros_to_millis(-us)``. In Spark SQL: ``seglake.times.SPARK_MILLIS``."""
    return us // 1000


_MICROS_PER = {"s": 1_000_000, "ms": 1000, "us": 1}


def timestamp_millis(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """An Arrow timestamp column of any unit as int64 epoch ms, nulls kept: the unit's
    microseconds through :func:`micros_to_millis` (floor; nanoseconds floored to
    microseconds first, which floors the same). Arrow's own cast truncates toward zero:
    a time just before 1970 would become 0, not the negative ms the caller refuses."""
    unit = col.type.unit
    raw = col.cast(pa.int64())
    vals = raw.fill_null(0).to_numpy()
    us = vals // 1000 if unit == "ns" else vals * _MICROS_PER[unit]
    mask = raw.is_null().to_numpy(zero_copy_only=False) if raw.null_count else None
    return pa.array(micros_to_millis(us), pa.int64(), mask=mask)


HEADER_TYPE = pa.struct(
    [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
)
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE, nullable=False))

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("transactional", pa.bool_(), nullable=False),
    ]
)

KAFKA_SOURCE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field(
            "headers",
            pa.list_(
                pa.field(
                    "element",
                    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
                )
            ),
        ),
    ]
)


def without_headers(schema: pa.Schema) -> pa.Schema:
    """``schema`` (the record or the Kafka source schema) without its ``headers`` field."""
    return schema.remove(schema.get_field_index("headers"))


def empty_records(*, headers: bool = True) -> pa.Table:
    """A record table with no rows (without the ``headers`` column unless ``headers``)."""
    return (RECORD_SCHEMA if headers else without_headers(RECORD_SCHEMA)).empty_table()


def to_kafka_source(records: pa.Table, topic: str, partition: int) -> pa.Table:
    """Internal record table -> Spark Kafka source columns for one topic-partition (no
    ``headers`` column if ``records`` has none)."""
    n = records.num_rows
    ts = records.column("timestamp").cast(pa.int64())
    try:  # checked: a timestamp past year 294247 must not wrap around silently
        ts_us = pa.compute.multiply_checked(ts, 1000).cast(pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid:
        i = int(pa.compute.index(pa.compute.greater(ts, MAX_TIMESTAMP_MS), True).as_py())
        raise InputSchemaError(
            f"{topic}-{partition} offset {records.column('offset')[i].as_py()}: timestamp "
            f"{ts[i].as_py()} ms is past {MAX_TIMESTAMP_MS} (year 294247), the last time a "
            "microsecond timestamp (the Kafka source's column) holds"
        ) from None
    columns = [
        records.column("key"),
        records.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        records.column("offset"),
        ts_us,
        records.column("timestamp_type"),
    ]
    if "headers" not in records.column_names:
        return pa.Table.from_arrays(columns, schema=without_headers(KAFKA_SOURCE_SCHEMA))
    headers = records.column("headers").cast(KAFKA_SOURCE_SCHEMA.field("headers").type)
    return pa.Table.from_arrays([*columns, _null_if_empty(headers)], schema=KAFKA_SOURCE_SCHEMA)


def _null_if_empty(headers: pa.ChunkedArray) -> pa.ChunkedArray:
    """A record without headers has ``null`` in the Kafka source's ``headers`` column, not
    an empty array (Spark's ``KafkaRecordToRowConverter``); the lists' buffers are kept,
    only a validity bitmap is added."""
    chunks = [
        pa.ListArray.from_arrays(
            c.offsets, c.values, type=c.type, mask=pyarrow.compute.equal(c.value_lengths(), 0)
        )
        for c in headers.chunks
    ]
    return pa.chunked_array(chunks, headers.type)
