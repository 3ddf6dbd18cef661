"""Times as users give them (epoch ms, ``datetime``, ISO-8601 strings) -> epoch ms.

:func:`to_millis` is the one rule for "epoch ms or ISO-8601": the notebook API, the
extract job and data source (``parse_time``), the lookup job's string timestamps and
``seglake offset-for-time`` all use it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from seglake.errors import ConfigError
from seglake.format import LONG_MAX
from seglake.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

TimeLike = int | str | dt.datetime | dt.date | np.datetime64 | Any


def to_millis(ts: TimeLike, *, allow_special: bool = False) -> int:
    """Epoch milliseconds of ``ts``.

    Accepts an int (ms; with ``allow_special`` also -1 latest, -2 earliest, -3 max), a
    ``datetime``/``pandas.Timestamp``/``numpy.datetime64`` or an ISO-8601 string. Naive
    times are UTC.

    Raises:
        ConfigError (a ValueError): negative ms (other than -1/-2/-3 when allowed), or
            an unparsable value.
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
        return int(ts.astype("datetime64[ms]").astype(np.int64))
    if isinstance(ts, str):
        text = ts.strip()
        if text.lstrip("-").isdigit():
            return to_millis(int(text), allow_special=allow_special)
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ConfigError(f"time {ts!r}: not epoch ms or an ISO-8601 time") from exc
        return to_millis(parsed)
    if isinstance(ts, dt.datetime):  # pandas.Timestamp too
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.UTC)
        # integer arithmetic: float timestamps lose the last millisecond
        delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
    if isinstance(ts, dt.date):
        return to_millis(dt.datetime(ts.year, ts.month, ts.day))
    raise ConfigError(f"time {ts!r}: expected ms, datetime or ISO string")
