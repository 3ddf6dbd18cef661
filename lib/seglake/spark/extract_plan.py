"""Extract's arguments as a :class:`~seglake.lake.scan.Scan` (planned on the driver, no
Spark): a topic, partitions, a time range (``offsets`` mode: Kafka's offsetsForTimes
bounds; ``filter`` mode: every record in it) and offset bounds. See
:mod:`seglake.spark.extract` for the whole path.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

import numpy as np

from seglake import fs as lakefs
from seglake.errors import ConfigError, SegmentNotFoundError
from seglake.lake.handle import LakeHandle
from seglake.lake.packing import DEFAULT_SPLIT_BYTES
from seglake.lake.scan import Scan, ScanPlan, check_isolation_level
from seglake.lake.snapshot import Snapshot
from seglake.location import Root
from seglake.render import iso
from seglake.storage.index_cache import IndexCache
from seglake.storage.window_records import NO_TS_HI, NO_TS_LO
from seglake.times import to_millis

__all__ = [
    "BROADCAST_SPLITS",
    "DEFAULT_SPLIT_BYTES",
    "ExtractOptions",
    "parse_time",
    "plan_extract",
]

BROADCAST_SPLITS = 512  # more splits than this go to the tasks as a broadcast


def parse_time(value: str | int | None) -> int | None:
    """Epoch ms from epoch-ms digits or ISO-8601 (no zone = UTC), or -1/-2/-3 (latest,
    earliest, max timestamp): :func:`seglake.times.to_millis`. ``None`` and ints
    (already ms, also the data source's open-range sentinels) pass unchanged."""
    if value is None or isinstance(value, (int, np.integer)):
        return None if value is None else int(value)
    return to_millis(value, allow_special=True)


def _check_bounds(start: int | None, end: int | None, lo: int | None, hi: int | None) -> None:
    """A range that ends before it starts is a mistake (Kafka's source refuses it), not
    an empty answer. ``start == end`` is an empty range, as in Kafka."""
    if start is not None and end is not None and 0 <= end < start:
        raise ConfigError(f"start time {start} ({iso(start)}) is after end time {end} ({iso(end)})")
    if lo is not None and hi is not None and hi < lo:
        raise ConfigError(f"start offset {lo} is after end offset {hi}")


def _check_partitions(
    lake: LakeHandle, snapshot: Snapshot, topic: str, partitions: Iterable[int] | None
) -> None:
    """The topic, and each partition asked for, must be in the lake: a name that is not
    would otherwise read as an empty result."""
    found = {p for _, p in snapshot.partitions}
    wanted = set(found if partitions is None else partitions)
    if found and wanted <= found:
        return
    catalog, version = lake.catalog, snapshot.version
    catalog.require_topic(topic, version=version)
    have = sorted(p for t, p in catalog.log_end_offsets(topic, version=version))
    raise SegmentNotFoundError(
        f"topic {topic!r} has no partition {sorted(wanted - found)} in the lake "
        f"(partitions: {have[:20]}{' ...' if len(have) > 20 else ''})"
    )


def _partitions(partitions: Iterable[int] | str | None) -> list[int] | None:
    if not isinstance(partitions, str):
        return None if partitions is None else list(partitions)
    try:
        return [int(p) for p in partitions.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"partitions {partitions!r}: expected numbers like 0,3") from None


@dataclasses.dataclass(frozen=True)
class ExtractOptions:
    """What an extraction reads (built once where it is asked for: ``extract``'s
    keywords, the job's flags; passed down whole to the planner and the tasks).

    partitions: partition numbers (list or ``"0,3"``); default all.
    start, end: ``[start, end)`` as epoch ms or ISO-8601 strings.
    start_offset, end_offset: ``[start_offset, end_offset)`` (intersected with the time
        range).
    mode: ``offsets`` (Kafka source startingOffsetsByTimestamp /
        endingOffsetsByTimestamp semantics) or ``filter`` (every record with
        start <= timestamp < end, exact under non-monotonic timestamps).
    isolation_level: ``read_committed`` drops records of aborted transactions.
    split_bytes: large segments are cut at offset-index positions this far apart; a task
        takes splits of up to 4x this (128 MiB by default).
    on_corrupt: a damaged batch raises :class:`~seglake.errors.CorruptRecordError`
        (``"raise"``), or is skipped (``"skip"``: every other record is returned; the
        offsetsForTimes lookups of a time range too, see
        :class:`~seglake.storage.segment.LogSegment`).
    """

    partitions: Iterable[int] | str | None = None
    start: int | str | None = None
    end: int | str | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    mode: str = "offsets"
    isolation_level: str = "read_uncommitted"
    split_bytes: int = DEFAULT_SPLIT_BYTES
    on_corrupt: str = "raise"


def plan_extract(
    root: Root | LakeHandle,
    topic: str,
    options: ExtractOptions = ExtractOptions(),
    *,
    version: int | None = None,
    cache: IndexCache | None = None,
) -> ScanPlan:
    """The tasks of an extraction (its :class:`~seglake.lake.scan.Scan` planned, with the
    driver's bytes and seconds); runs on the driver."""
    o = options
    mode, isolation_level = o.mode, o.isolation_level
    if mode not in ("offsets", "filter"):
        raise ConfigError(f"mode {mode!r}: expected 'offsets' or 'filter'")
    check_isolation_level(isolation_level)
    start_offset, end_offset = o.start_offset, o.end_offset
    start, end = parse_time(o.start), parse_time(o.end)
    _check_bounds(start, end, start_offset, end_offset)
    started = time.time()
    before = lakefs.IO_STATS.snapshot()["bytes_read"]
    parts = _partitions(o.partitions)
    lake = LakeHandle.open(root)  # parsed once (a handle: the job's)
    snap = Snapshot.read(lake, topic, parts, version=version, cache=cache, on_corrupt=o.on_corrupt)
    _check_partitions(lake, snap, topic, parts)
    scan = Scan(
        snap,
        (
            NO_TS_LO if start_offset is None else start_offset,
            NO_TS_HI if end_offset is None else end_offset,
        ),
        (NO_TS_LO if start is None else start, NO_TS_HI if end is None else end),
        seek_times=mode == "offsets",
        isolation_level=isolation_level,
        split_bytes=o.split_bytes,
    )
    plan = scan.planned()
    return dataclasses.replace(
        plan,
        driver_bytes=lakefs.IO_STATS.snapshot()["bytes_read"] - before,
        seconds=time.time() - started,
    )
