"""Records of many segment windows at once (no Spark): the windows' batches handed to the
one record reader (:mod:`seglake.record.reader`) as its parts (a window's bytes, its
scan, the batches chosen). :func:`decode_windows` decodes them in one call,
:func:`walk_windows` finds every record's place, offset and timestamp without decoding
keys, values or headers (:class:`~seglake.record.reader.RecordWalk`), and
:func:`min_timestamps` each batch's smallest timestamp from it. Extraction and lookup
read with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from seglake.format import LONG_MAX, LONG_MIN
from seglake.record.reader import Part, RecordWalk, decode_parts, walk_parts
from seglake.storage.segment_window import Window
from seglake.storage.tail_minima import batch_minima

__all__ = [
    "NO_TS_HI",
    "NO_TS_LO",
    "decode_windows",
    "min_timestamps",
    "reader_parts",
    "walk_windows",
]

NO_TS_LO, NO_TS_HI = LONG_MIN, LONG_MAX  # no timestamp bound


def reader_parts(
    parts: Sequence[tuple[Window, np.ndarray] | tuple[Window, np.ndarray, str | None]],
) -> list[Part]:
    """The reader's parts of ``(window, sel)`` or ``(window, sel, path)`` parts."""
    return [Part(p[0].data, p[0].scan, p[1], p[2] if len(p) > 2 else None) for p in parts]


def decode_windows(
    parts: list[tuple[Window, np.ndarray, str | None]],
    *,
    headers: bool = True,
) -> tuple[pa.Table, np.ndarray]:
    """The batches ``sel`` of each ``(window, sel, path)``, decoded in one call
    (:func:`~seglake.record.reader.decode_parts`): the records (internal schema, part
    after part, control batches left out; without the headers column unless
    ``headers``) and each part's number of rows. Bytes that do not decode raise the
    error of their own window (naming its file)."""
    return decode_parts(reader_parts(parts), headers=headers)


def walk_windows(parts: list[tuple[Window, np.ndarray]]) -> RecordWalk:
    """:class:`RecordWalk` of the batches ``sel`` of each ``(window, sel)``, parts one
    after the other (:func:`~seglake.record.reader.walk_parts`)."""
    return walk_parts(reader_parts(parts))


def min_timestamps(parts: list[tuple[Window, np.ndarray]]) -> np.ndarray:
    """Smallest record timestamp of the batches ``sel`` of each ``(window, sel)``, parts
    one after the other (:func:`walk_windows`: no keys, values or headers decoded).

    Kafka keeps no minimum timestamp (CreateTime is not monotonic): finding the batches
    that hold records older than a bound takes every record's timestamp. A batch whose
    records do not walk gets the smallest int64 (so it is decoded, which names the
    problem).
    """
    walk = walk_windows(parts)
    return np.where(walk.ok, batch_minima(walk.timestamp, np.diff(walk.first)), NO_TS_LO)
