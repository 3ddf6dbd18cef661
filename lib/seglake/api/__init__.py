"""The notebook / driver-side API: ``seglake.open(root)``, no Spark needed.

    lake = seglake.open("/data/lake")       # catalog version pinned here
    lake.topics(); lake.partitions("orders"); lake.segments("orders"); lake.describe()
    p = lake.partition("orders", 3)
    p.read(1234, max_records=10)            # pandas (as_="arrow" for a pyarrow Table)
    p.offsets_for_times("2026-01-01T00:05:00Z")   # also ms, datetime, -1/-2/-3
    p.range("2026-01-01T00:05", "2026-01-01T00:06")  # start <= timestamp < end, exact
    lake.refresh()                          # move to the catalog's newest version

Reads are consistent: every call on a :class:`Lake` sees the catalog version it was
opened (or last refreshed) at, even if ingest runs commit meanwhile. Opened partitions are
cached with their segments, whose indexes are read once, so a warm point lookup costs a
ranged read of one index interval and the decode of the batches in it.

Records come back in the Spark Kafka source's shape (``key, value, topic, partition,
offset, timestamp, timestampType, headers``), the same columns the jobs return.

Pictures (matplotlib, imported only when asked for): :meth:`Lake.plot_segments`,
:meth:`Lake.plot_rate`, :meth:`Partition.plot_index`; see :mod:`seglake.plot`.
"""

from __future__ import annotations

from seglake.api.lake import DEFAULT_CACHE_BYTES, Lake, open
from seglake.api.partition import Partition
from seglake.storage.segment import TimestampOffset
from seglake.times import TimeLike, to_millis

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "Lake",
    "Partition",
    "TimeLike",
    "TimestampOffset",
    "open",
    "to_millis",
]
