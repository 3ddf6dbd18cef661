"""Times as users give them (epoch ms, ``datetime``, ISO-8601 strings) -> epoch ms.

:func:`to_millis` is the one rule for "epoch ms or ISO-8601": the notebook API, the
extract job and data source (``parse_time``), the lookup job's string timestamps,
``seglake offset-for-time`` and ``seglake consume`` all use it. A user's time is never
one of Kafka's sentinels: those come only from their names (``latest``, ``earliest``,
``max``) or the numbers -1/-2/-3 where Kafka takes them (``allow_special``); a time
before 1970 (negative ms: no Kafka log holds one) is a :class:`ConfigError`.

:func:`micros_to_millis` (``seglake.record.schema``, re-exported here) is the one rule
for microseconds (a Spark ``TIMESTAMP``, a ``datetime``) -> ms: floor.
:data:`SPARK_MILLIS` is the same rule in Spark SQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from seglake.errors import ConfigError
from seglake.format import LONG_MAX
from seglake.record.schema import micros_to_millis
from seglake.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

__all__ = [
    "NAMED_TIMES",
    "SPARK_MILLIS",
    "TimeLike",
    "datetime_micros",
    "micros_to_millis",
    "to_millis",
]

TimeLike = int | str | dt.datetime | dt.date | np.datetime64 | Any

# Kafka's ListOffsets sentinels, by name (``allow_special``; ``max-timestamp``: GetOffsetShell's)
NAMED_TIMES = {
    "latest": LATEST_TIMESTAMP,
    "earliest": EARLIEST_TIMESTAMP,
    "max": MAX_TIMESTAMP,
    "max-timestamp": MAX_TIMESTAMP,
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# micros_to_millis in Spark SQL (``{}``: a column): Spark's unix_millis floors
# (DateTimeUtils.microsToMillis: Math.floorDiv)
SPARK_MILLIS = "unix_millis(CAST({} AS TIMESTAMP))"


def _instant_millis(us: int, given: object) -> int:
    """:func:`micros_to_millis` of a user's time, refused before 1970 or past the
    largest epoch ms."""
    ms = micros_to_millis(us)
    if ms < 0:
        raise ConfigError(
            f"time {given!r} ({ms} ms): before 1970-01-01T00:00:00Z; a Kafka log holds no "
            "negative timestamp (those are Kafka's sentinels: say latest, earliest or max)"
        )
    if ms > LONG_MAX:
        raise ConfigError(f"time {given!r}: past the largest epoch ms, {LONG_MAX}")
    return ms


def to_millis(ts: TimeLike, *, allow_special: bool = False) -> int:
    """Epoch milliseconds of ``ts``.

    Accepts an int (ms; with ``allow_special`` also -1 latest, -2 earliest, -3 max, and
    the strings ``latest``, ``earliest``, ``max``), a ``datetime``/``pandas.Timestamp``/
    ``numpy.datetime64`` or an ISO-8601 string. Naive times are UTC; sub-millisecond
    parts are floored (:func:`micros_to_millis`).

    Raises:
        ConfigError (a ValueError): a time before 1970 (negative ms other than -1/-2/-3
            given as such when allowed), past 2^63-1 ms, or an unparsable value.
    """
    if isinstance(ts, (bool, np.bool_)):
        raise ConfigError(f"time {ts!r}: expected ms, datetime or ISO string")
    if isinstance(ts, (int, np.integer)):
        ms = int(ts)
        if ms < 0 and not (
            allow_special and ms in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP)
        ):
            raise ConfigError(
                f"time {ms}: expected epoch ms >= 0"
                + (" or -1 (latest), -2 (earliest), -3 (max)" if allow_special else "")
            )
        if ms > LONG_MAX:
            raise ConfigError(f"time {ms}: past the largest epoch ms, {LONG_MAX}")
        return ms
    if isinstance(ts, np.datetime64):
        if np.isnat(ts):
            raise ConfigError(f"time {ts!r}: not a time (NaT)")
        return _instant_millis(int(ts.astype("datetime64[us]").astype(np.int64)), ts)
    if isinstance(ts, str):
        text = ts.strip()
        if allow_special and text.lower() in NAMED_TIMES:
            return NAMED_TIMES[text.lower()]
        if text.lstrip("-").isdigit():
            return to_millis(int(text), allow_special=allow_special)
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ConfigError(f"time {ts!r}: not epoch ms or an ISO-8601 time") from exc
        return _instant_millis(datetime_micros(parsed), ts)
    if isinstance(ts, dt.datetime):  # pandas.Timestamp too
        return _instant_millis(datetime_micros(ts), ts)
    if isinstance(ts, dt.date):
        return to_millis(dt.datetime(ts.year, ts.month, ts.day))
    raise ConfigError(f"time {ts!r}: expected ms, datetime or ISO string")


def datetime_micros(ts: dt.datetime) -> int:
    """Epoch microseconds of ``ts`` (naive: UTC), exactly, in integers (floats lose the last
    millisecond); a ``pandas.Timestamp``'s nanoseconds are dropped (floor)."""
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    delta = ts - _EPOCH
    return delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
