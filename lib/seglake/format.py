"""The numbers of Kafka's log format and of its index defaults, in one place.

No imports: every layer (record, storage, config ...) takes them from here, so importing
one of them loads nothing else. Byte layouts: ``/work/shared/docs/kafka-log-format.md``.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE: batchLength, offset deltas, index positions
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: Kafka's offsets and timestamps are int64
LONG_MIN = -(2**63)  # Java's Long.MIN_VALUE
MAX_OFFSET = LONG_MAX - 1  # a record's highest offset: the log end offset after it fits int64
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP: a batch or index entry without a timestamp
LOG_OVERHEAD = 12  # Records.LOG_OVERHEAD: baseOffset (8) + batchLength (4) before the length
RECORD_BATCH_OVERHEAD = 61  # DefaultRecordBatch.RECORD_BATCH_OVERHEAD: a v2 batch header
OFFSET_INDEX_ENTRY_SIZE = 8  # OffsetIndex entry: relativeOffset int32 | position int32
TIME_INDEX_ENTRY_SIZE = 12  # TimeIndex entry: timestamp int64 | relativeOffset int32
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # log.index.interval.bytes: bytes between index entries
DEFAULT_INDEX_SIZE_MAX_BYTES = 10 * 1024 * 1024  # log.index.size.max.bytes: an index's size
# a consumer's isolation.level: read_committed leaves out aborted transactions' records
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_INDEX_SIZE_MAX_BYTES",
    "INT32_MAX",
    "ISOLATION_LEVELS",
    "LOG_OVERHEAD",
    "LONG_MAX",
    "LONG_MIN",
    "MAX_OFFSET",
    "NO_TIMESTAMP",
    "OFFSET_INDEX_ENTRY_SIZE",
    "RECORD_BATCH_OVERHEAD",
    "TIME_INDEX_ENTRY_SIZE",
]
