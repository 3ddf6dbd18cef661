"""Spark's time strings (``JavaUtils.timeStringAs``): ``500ms``, ``30s``, ``15m``, ``1h``,
``1d``, ``10us``; a plain number is in the unit the option names (ms for
``maxTriggerDelay``, as Spark's ``Utils.timeStringAsMs``). The one parser of a duration
option (:func:`time_string_as`, :func:`duration_ms`).

Spark's rules, kept exactly: the text is trimmed (Java's ``trim``: characters up to
U+0020) and lower-cased, then must be ``-?[0-9]+`` with an optional ``[a-z]+`` suffix,
one of ``us ms s m min h d``; the number is a Java long; the conversion is
``TimeUnit.convert``: a finer unit truncates toward zero, a coarser one saturates at the
long range.
"""

from __future__ import annotations

import re
from typing import Any

from seglake.errors import ConfigError

__all__ = ["TIME_SUFFIXES", "duration_ms", "time_string_as"]

# each suffix's length in microseconds (the finest unit)
TIME_SUFFIXES: dict[str, int] = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
}
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_PATTERN = re.compile(r"(-?[0-9]+)([a-z]+)?")
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


def time_string_as(text: str, unit: str) -> int:
    """``text`` as a count of ``unit`` (a key of :data:`TIME_SUFFIXES`, also the unit of a
    number without a suffix); ValueError, worded as Spark's, when Spark refuses it."""
    m = _PATTERN.fullmatch(text.strip(_JAVA_TRIM).lower())
    if m is None:
        raise ValueError(f"Failed to parse time string: {text}")
    value = int(m.group(1))
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"Failed to parse time string: {text} (not a long)")
    suffix = m.group(2)
    if suffix is not None and suffix not in TIME_SUFFIXES:
        raise ValueError(f'Invalid suffix: "{suffix}"')
    have, want = TIME_SUFFIXES[suffix or unit], TIME_SUFFIXES[unit]
    if have <= want:  # finer (or the same): truncate toward zero, as Java's division
        q = abs(value) * have // want
        return q if value >= 0 else -q
    return max(_LONG_MIN, min(_LONG_MAX, value * (have // want)))


def duration_ms(name: str, value: Any) -> int:
    """Option ``name``'s duration in ms (a number without a suffix: ms), a
    :class:`ConfigError` naming the option and the value when Spark would refuse it."""
    try:
        return time_string_as(str(value), "ms")
    except ValueError as exc:
        raise ConfigError(
            f"{name}: {value!r} is not a duration like 500ms, 30s, 15m, 1h or 1d ({exc})"
        ) from None
