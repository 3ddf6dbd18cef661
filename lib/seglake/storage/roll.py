"""When to start a new segment: Kafka's ``LogSegment.shouldRoll``.

Before appending a batch to a non-empty segment, roll when any holds:

- size:    segment bytes + batch bytes > ``log.segment.bytes``
- time:    batch maxTimestamp - the segment's first batch maxTimestamp
           > ``log.roll.ms`` - jitter (Kafka's ``timeWaitedForRoll`` with record time)
- index:   the offset or time index is full (``log.index.size.max.bytes``)
- offset:  batch lastOffset - segment baseOffset > Int32.MAX (relative offsets are int32)

The jitter is Kafka's random ``log.roll.jitter.ms`` share, made deterministic per base
offset here so that a rerun writes the same segments.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seglake.config import LogConfig
from seglake.format import INT32_MAX


@dataclasses.dataclass
class ActiveSegment:
    """What the roll rules need to know about the segment being written."""

    base_offset: int
    size: int = 0
    rolling_timestamp: int | None = None  # maxTimestamp of the segment's first batch
    index_full: bool = False


def roll_jitter(base_offset: int, config: LogConfig) -> int:
    """A deterministic stand-in for Kafka's random jitter in ``[0, log.roll.jitter.ms]``."""
    if config.roll_jitter_ms <= 0:
        return 0
    return (base_offset * 2654435761) % (config.roll_jitter_ms + 1)


def roll_reason(
    segment: ActiveSegment,
    *,
    batch_size: int,
    batch_last_offset: int,
    batch_max_timestamp: int,
    config: LogConfig,
) -> str | None:
    """Why a batch must go to a new segment (``"size"``, ``"time"``, ``"index"``,
    ``"offset"``), or ``None`` to append it to ``segment``."""
    if segment.size == 0:
        return None
    if segment.size + batch_size > config.segment_bytes:
        return "size"
    if (
        segment.rolling_timestamp is not None
        and batch_max_timestamp - segment.rolling_timestamp
        > roll_time_limit(segment.base_offset, config)
    ):
        return "time"
    if segment.index_full:
        return "index"
    if batch_last_offset - segment.base_offset > INT32_MAX:
        return "offset"
    return None


def size_full(size: int, config: LogConfig) -> bool:
    """Whether the size rule rolls a segment of ``size`` bytes before any batch (every
    batch has bytes): it cannot grow."""
    return size >= config.segment_bytes


def batches_before_roll(
    segment: ActiveSegment,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    config: LogConfig,
) -> int:
    """How many of these batches, in order, go into ``segment`` before the size, time or
    offset rule rolls it (at least 1: :func:`roll_reason` was asked for the first); the
    index rule is the index builder's (``IndexBuilder.add_batches`` stops where full)."""
    rolling = segment.rolling_timestamp if segment.size else int(max_timestamps[0])
    roll = (
        (segment.size + np.cumsum(sizes) > config.segment_bytes)
        | (max_timestamps - rolling > roll_time_limit(segment.base_offset, config))
        | (last_offsets - segment.base_offset > INT32_MAX)
    )
    roll[0] = False
    first = np.flatnonzero(roll)
    return int(first[0]) if len(first) else len(sizes)


def roll_time_limit(base_offset: int, config: LogConfig) -> int:
    """The time rule's bound for the segment at ``base_offset``: ``segment.ms`` (on a
    compacted topic at most ``max.compaction.lag.ms``: Kafka's ``maxSegmentMs``) less its
    jitter."""
    return config.max_segment_ms - roll_jitter(base_offset, config)
