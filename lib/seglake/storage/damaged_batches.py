"""Skipping damaged batches inside a segment (the lake's recovery; Kafka truncates instead).

A lake has no replica to refill what Kafka's ``LogSegment.recover`` truncates, so the
lake's ``recover`` keeps the valid batches after a damaged one. From the first invalid
batch at position P it looks for the next position Q where a whole, CRC-valid batch
starts whose offsets follow the last kept one and fit the segment::

    .log  [ valid ... | damaged (P..Q) | valid ... | damaged (tail, no batch after) ]
    kept  [ valid ...                  | valid ... ]            offsets of P..Q: a gap

Candidates for Q, in order: ``P + 12 + batchLength`` as the damaged header claims (a flip
in the payload leaves it right), then every position after P whose magic byte is 2 and
whose base offset lies in (last kept offset, segment base + 2^31) (a flip in the length
field). A candidate must also pass the CRC-32C check of :func:`scan_batches`: random
bytes pass all three with odds far below 2^-32. Nothing found: the tail from P is cut,
as Kafka does. The lost offsets are those between the kept batches (a gap the catalog
and every reader allow, as after compaction).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import numpy as np

from seglake.format import INT32_MAX, LOG_OVERHEAD
from seglake.record.batch import (
    HEADER_SIZE,
    MAGIC,
    MAGIC_OFFSET,
    BatchScan,
    claimed_size,
    scan_batches,
)

__all__ = ["DroppedBytes", "drop_damaged"]


@dataclasses.dataclass(frozen=True)
class DroppedBytes:
    """Bytes ``[position, position + length)`` of the original ``.log`` left out.

    ``first_offset..last_offset`` are the offsets lost with them (between the kept batches
    around them; ``last_offset`` is ``None`` for a cut tail: up to the segment's end).
    """

    position: int
    length: int
    first_offset: int
    last_offset: int | None
    error: str

    def __str__(self) -> str:
        last = "end" if self.last_offset is None else self.last_offset
        return (
            f"dropped {self.length} byte(s) at position {self.position}, offsets "
            f"{self.first_offset}..{last} lost ({self.error})"
        )


def _candidates(
    arr: np.ndarray, pos: int, after: int, base_offset: int, chunk: int = 1 << 20
) -> Iterator[int]:
    """Positions > ``pos`` with magic 2 and a base offset that could follow ``after``."""
    n = len(arr)
    for lo in range(pos + 1, max(n - HEADER_SIZE + 1, pos + 1), chunk):
        hi = min(lo + chunk, n - HEADER_SIZE + 1)
        c = np.flatnonzero(arr[lo + MAGIC_OFFSET : hi + MAGIC_OFFSET] == MAGIC) + lo
        if not len(c):
            continue
        shifts = 8 * np.arange(7, -1, -1, dtype=np.uint64)
        base = (arr[c[:, None] + np.arange(8)].astype(np.uint64) << shifts).sum(1).view(np.int64)
        yield from c[(base > after) & (base - base_offset <= INT32_MAX)].tolist()


def _next_batch(buf: bytes, pos: int, after: int, base_offset: int) -> int | None:
    """The first position > ``pos`` where a valid batch with offsets > ``after`` starts."""
    n = len(buf)
    claimed = claimed_size(buf, pos) if pos + LOG_OVERHEAD <= n else 0
    first = pos + claimed if claimed > LOG_OVERHEAD else None
    order = [first] if first is not None and pos < first <= n - HEADER_SIZE else []
    for q in itertools.chain(
        order, _candidates(np.frombuffer(buf, np.uint8), pos, after, base_offset)
    ):
        one = scan_batches(buf, start=q, max_batches=1)
        if (
            len(one)
            and int(one.base_offset[0]) > after
            and int(one.last_offset[0]) - base_offset <= INT32_MAX
        ):
            return int(q)
    return None


def drop_damaged(
    buf: bytes, scan: BatchScan, error: str, base_offset: int
) -> tuple[bytes, list[DroppedBytes]]:
    """``buf`` without its damaged stretches, and what was dropped.

    ``scan`` holds the valid batches before the first invalid one (at
    ``scan.valid_bytes``, why: ``error``); later invalid stretches are found the same way.
    Offsets must keep going forward across a drop (checked by the candidate search).
    """
    kept: list[bytes] = []
    dropped: list[DroppedBytes] = []
    start, pos = 0, scan.valid_bytes
    last = int(scan.last_offset[-1]) if len(scan) else base_offset - 1
    while True:
        kept.append(buf[start:pos])
        q = _next_batch(buf, pos, last, base_offset)
        if q is None:
            dropped.append(DroppedBytes(pos, len(buf) - pos, last + 1, None, error))
            break
        nxt = scan_batches(buf, start=q)
        stop = len(nxt)
        for i in range(1, len(nxt)):  # offsets must keep going forward (valid_prefix's rule)
            if nxt.base_offset[i] <= nxt.last_offset[i - 1]:
                stop = i
                break
        dropped.append(DroppedBytes(pos, q - pos, last + 1, int(nxt.base_offset[0]) - 1, error))
        last = int(nxt.last_offset[stop - 1])
        start = q
        if stop == len(nxt) and nxt.error is None:
            kept.append(buf[q:])
            break
        if stop < len(nxt):
            pos = int(nxt.position[stop])
            error = f"position {pos}: batch offsets go backwards"
        else:  # nxt.error is set: the scan stopped before the end
            pos, error = nxt.valid_bytes, nxt.error or f"position {nxt.valid_bytes}: invalid"
    return b"".join(kept), dropped
