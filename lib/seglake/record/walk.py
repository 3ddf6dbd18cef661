"""Find the records of decompressed records blocks, and their fields, checking each.

Record, inside a batch's records block (after decompression); varints are zig-zag::

    length          varint   bytes of the record after this field (>= 6)
    attributes      int8     unused
    timestampDelta  varlong  timestamp = baseTimestamp + delta (LogAppendTime: maxTimestamp)
    offsetDelta     varint   offset = baseOffset + delta, 0 <= delta <= lastOffsetDelta
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value (tombstone)
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint >= 0, key UTF-8,
                                   valueLength varint (-1 = null), value)

Vectorised: the only per-record step that cannot be is finding where each record starts
(``p += length``). That chain is walked for all batches at once, one record per batch per
numpy step; the few long batches left at the end are walked in Python (headers: the same,
one header per record per step). Every field is then read with numpy over all records.

A length, count or varint that does not fit raises :class:`CorruptRecordError` naming
the batch (:class:`BatchContext`), the record and the numbers; nothing is allocated from
a length that is not checked against the bytes first.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from seglake.errors import CorruptRecordError
from seglake.record.varint import MAX_VARINT_BYTES, MAX_VARLONG_BYTES, decode_varint, fast_varints

MIN_RECORD_BODY = 6  # attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY  # plus the length varint
MIN_HEADER_SIZE = 2  # keyLength, valueLength
# below this many chains still running, one numpy step costs more than walking them in Python
PYTHON_WALK_BELOW = 48

__all__ = [
    "MIN_HEADER_SIZE",
    "MIN_RECORD_BODY",
    "MIN_RECORD_SIZE",
    "BatchContext",
    "HeaderFields",
    "read_fields",
    "walk_headers",
    "walk_records",
]


@dataclasses.dataclass
class BatchContext:
    """Where the selected batches are, to name them in errors."""

    path: str | None
    position: np.ndarray  # file position of each selected batch
    base_offset: np.ndarray
    counts: np.ndarray
    # set once the counts are checked: batch of each record, first record of each batch
    rec_batch: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    rec_base: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    def index_records(self, start: np.ndarray, end: np.ndarray) -> None:
        """Check every batch's records count fits its records block ``[start, end)``,
        then set ``rec_batch``/``rec_base``: nothing is allocated from an unchecked count."""
        counts = self.counts
        too_many = counts > (end - start) // MIN_RECORD_SIZE
        if too_many.any():
            b = int(np.argmax(too_many))
            raise self.error(
                b,
                f"records count {int(counts[b])} cannot fit in a records block of "
                f"{int(end[b] - start[b])} bytes (a record takes at least {MIN_RECORD_SIZE})",
            )
        self.rec_batch = np.repeat(np.arange(len(counts)), counts)
        self.rec_base = np.cumsum(counts) - counts

    def error(self, b: int, message: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"batch with base offset {int(self.base_offset[b])}: {message}",
            path=self.path,
            position=int(self.position[b]),
        )

    def record_error(self, i: int, message: str) -> CorruptRecordError:
        b = int(self.rec_batch[i])
        k = i - int(self.rec_base[b])
        return self.error(b, f"record {k} of {int(self.counts[b])}: {message}")

    def check(self, bad: np.ndarray, message: Callable[[int], str]) -> None:
        """Raise for the first record ``i`` where ``bad[i]``, saying ``message(i)``."""
        if bad.any():
            i = int(np.argmax(bad))
            raise self.record_error(i, message(i))


def _varints(
    data: np.ndarray,
    pos: np.ndarray,
    max_bytes: int,
    what: str,
    fail: Callable[[int, str], CorruptRecordError],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fast_varints`, with errors re-raised naming the batch and record."""
    try:
        return fast_varints(data, pos, max_bytes)
    except CorruptRecordError as exc:
        j = int(np.argmax(pos == exc.position)) if exc.position is not None else 0
        reason = str(exc).split(": ", 1)[-1]
        raise fail(j, f"{what}: {reason}") from None


def walk_records(
    data: np.ndarray, start: np.ndarray, end: np.ndarray, ctx: BatchContext
) -> tuple[np.ndarray, np.ndarray]:
    """Follow each batch's record length chain: ``(body, end)`` of every record.

    ``body`` is where a record's attributes byte is, ``end`` one past its last byte.
    Records come out batch by batch, in order.
    """
    counts, rec_base = ctx.counts, ctx.rec_base
    total = int(counts.sum())
    body = np.empty(total, dtype=np.int64)
    rec_end = np.empty(total, dtype=np.int64)
    active = np.flatnonzero(counts > 0)
    empty = (counts == 0) & (end > start)
    if empty.any():
        b = int(np.argmax(empty))
        raise ctx.error(
            b, f"records count is 0 but the records block has {int(end[b] - start[b])} bytes"
        )
    pos = start[active]
    limit = end[active]
    k = 0
    while len(active) >= max(PYTHON_WALK_BELOW, 1):
        short = pos >= limit
        if short.any():
            b = int(active[np.argmax(short)])
            raise ctx.error(
                b, f"records block holds only {k} records, the header says {int(counts[b])}"
            )
        lens, sizes = _varints(
            data,
            pos,
            MAX_VARINT_BYTES,
            "record length",
            lambda j, m, a=active, k=k: ctx.error(int(a[j]), f"record {k}: {m}"),  # type: ignore[misc]  # lambda defaults
        )
        first = pos + sizes
        last = first + lens
        bad = (lens < MIN_RECORD_BODY) | (last > limit)
        if bad.any():
            j = int(np.argmax(bad))
            raise ctx.error(
                int(active[j]), _length_message(k, int(lens[j]), int(limit[j] - first[j]))
            )
        idx = rec_base[active] + k
        body[idx] = first
        rec_end[idx] = last
        pos = last
        k += 1
        done = counts[active] <= k
        if done.any():
            trailing = done & (pos != limit)
            if trailing.any():
                j = int(np.argmax(trailing))
                raise ctx.error(
                    int(active[j]), f"{int(limit[j] - pos[j])} bytes follow the last of {k} records"
                )
            keep = ~done
            active, pos, limit = active[keep], pos[keep], limit[keep]
    _walk_records_rest(data, active, pos, limit, k, ctx, body, rec_end)
    return body, rec_end


def _walk_records_rest(
    data: np.ndarray,
    active: np.ndarray,
    pos: np.ndarray,
    limit: np.ndarray,
    k: int,
    ctx: BatchContext,
    body: np.ndarray,
    rec_end: np.ndarray,
) -> None:
    """:func:`walk_records`' last phase: the few batches (``active``) with records left
    after the vectorised steps, each walked in Python from record ``k`` (at ``pos``, the
    records block ending at ``limit``), into ``body`` and ``rec_end``."""
    counts, rec_base = ctx.counts, ctx.rec_base
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray
    for b, p, lim in zip(active.tolist(), pos.tolist(), limit.tolist(), strict=True):
        n = int(counts[b])
        firsts, lasts = _walk_one(view, p, lim, k, n, functools.partial(ctx.error, b))
        base = int(rec_base[b])
        body[base + k : base + n] = firsts
        rec_end[base + k : base + n] = lasts


def _walk_one(
    view: memoryview, p: int, limit: int, k: int, n: int, fail: Callable[[str], CorruptRecordError]
) -> tuple[list[int], list[int]]:
    """Records ``k..n-1`` of one batch in Python: ``(bodies, ends)``."""
    firsts: list[int] = []
    lasts: list[int] = []
    size = len(view)
    for r in range(k, n):
        if p >= limit:
            raise fail(f"records block holds only {r} records, the header says {n}")
        c = view[p]
        if c < 0x80:
            length, p = (c >> 1) ^ -(c & 1), p + 1
        elif p + 1 < size and view[p + 1] < 0x80:  # two bytes: records of 64..8191 bytes
            z = (c & 0x7F) | (view[p + 1] << 7)
            length, p = (z >> 1) ^ -(z & 1), p + 2
        else:
            try:
                length, p = decode_varint(view, p, MAX_VARINT_BYTES)
            except CorruptRecordError as exc:
                raise fail(f"record {r}: record length: {str(exc).split(': ', 1)[-1]}") from None
        if length < MIN_RECORD_BODY or p + length > limit:
            raise fail(_length_message(r, length, limit - p))
        firsts.append(p)
        p += length
        lasts.append(p)
    if p != limit:
        raise fail(f"{limit - p} bytes follow the last of {n} records")
    return firsts, lasts


def _length_message(k: int, length: int, remaining: int) -> str:
    return (
        f"record {k}: length {length} is invalid ({remaining} bytes remain in the "
        f"records block, a record body takes at least {MIN_RECORD_BODY})"
    )


def read_fields(
    data: np.ndarray,
    body: np.ndarray,
    end: np.ndarray,
    ctx: BatchContext,
    *,
    deltas_only: bool = False,
) -> dict[str, np.ndarray]:
    """Timestamp/offset deltas, key/value positions and lengths, header counts (only
    the two deltas with ``deltas_only``)."""
    out: dict[str, np.ndarray] = {}
    p = body + 1  # attributes: unused

    def varint(name: str, max_bytes: int, follows: str) -> np.ndarray:
        """Read field ``name``; the record must still hold ``follows`` after it."""
        nonlocal p
        values, sizes = _varints(data, p, max_bytes, name, ctx.record_error)
        p = p + sizes
        ctx.check(
            p >= end,
            lambda i: f"the record ({int(end[i] - body[i])} bytes) ends before its {follows}",
        )
        return values

    out["timestamp_delta"] = varint("timestamp delta", MAX_VARLONG_BYTES, "offset delta")
    out["offset_delta"] = varint("offset delta", MAX_VARINT_BYTES, "key length")
    if deltas_only:
        return out
    for name, follows in (("key", "value length"), ("value", "header count")):
        length = varint(f"{name} length", MAX_VARINT_BYTES, follows)
        start = p
        p = p + np.maximum(length, 0)
        ctx.check(length < -1, lambda i, n=name, v=length: f"{n} length {int(v[i])} is negative")  # type: ignore[misc]  # lambda defaults
        ctx.check(
            p >= end,
            lambda i, n=name, v=length, f=follows, s=start: (  # type: ignore[misc]  # lambda defaults
                f"{n} length {int(v[i])} leaves no room for the {f} ({int(end[i] - s[i])} bytes "
                f"remain in the record)"
            ),
        )
        out[f"{name}_pos"] = start
        out[f"{name}_len"] = length
    count, sizes = _varints(data, p, MAX_VARINT_BYTES, "header count", ctx.record_error)
    p = p + sizes
    ctx.check(
        (count < 0) | (count * MIN_HEADER_SIZE > end - p),
        lambda i: (
            f"header count {int(count[i])} is invalid ({int(end[i] - p[i])} bytes remain in the "
            f"record)"
        ),
    )
    out["header_pos"] = p
    out["header_count"] = count
    return out


class HeaderFields(NamedTuple):
    """Where the headers of the records are: one element per header, all records'
    headers in order; ``first[k]`` is the first header of record ``owner[k]``."""

    owner: np.ndarray  # the records that have headers
    first: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray  # -1: null


def walk_headers(
    data: np.ndarray, pos: np.ndarray, count: np.ndarray, end: np.ndarray, ctx: BatchContext
) -> HeaderFields:
    """Walk each record's ``count`` headers from ``pos``; the record must end there."""
    none = count == 0
    ctx.check(none & (pos != end), lambda i: f"{int(end[i] - pos[i])} bytes follow the headers")
    recs = np.flatnonzero(~none)
    cnt = count[recs]
    base = np.concatenate(([0], np.cumsum(cnt)[:-1]))
    total = int(cnt.sum())
    key_pos, key_len, val_pos, val_len = (np.empty(total, dtype=np.int64) for _ in range(4))
    active = np.arange(len(recs))
    hp = pos[recs]
    lim = end[recs]
    j = 0
    while len(active) >= max(PYTHON_WALK_BELOW, 1):
        q = hp[active]
        e = lim[active]
        owner = recs[active]

        def fail(i: int, m: str, owner: np.ndarray = owner, j: int = j) -> CorruptRecordError:
            return ctx.record_error(int(owner[i]), f"header {j}: {m}")

        kp, kl, vp, vl, q = _one_header(data, q, e, fail)
        idx = base[active] + j
        key_pos[idx], key_len[idx], val_pos[idx], val_len[idx] = kp, kl, vp, vl
        hp[active] = q
        j += 1
        done = cnt[active] <= j
        bad = np.where(done, q != e, q >= e)
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(
                i,
                f"{int(e[i] - q[i])} bytes follow the last header"
                if done[i]
                else "the record ends before its next header",
            )
        active = active[~done]
    fields = HeaderFields(recs, base, key_pos, key_len, val_pos, val_len)
    _walk_rest(data, fields, active, hp, lim, cnt, j, ctx)
    return fields


def _one_header(
    data: np.ndarray, q: np.ndarray, e: np.ndarray, fail: Callable[[int, str], CorruptRecordError]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One header of each record (at ``q``, the record ending at ``e``): key length, key,
    value length, value. Returns ``(key_pos, key_len, value_pos, value_len, next)``."""
    kl, s = _varints(data, q, MAX_VARINT_BYTES, "key length", fail)
    q = q + s
    kp = q
    q = q + kl
    bad = (kl < 0) | (q >= e)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(
            i,
            f"key length {int(kl[i])} is invalid ({int(e[i] - kp[i])} bytes remain in the record)",
        )
    vl, s = _varints(data, q, MAX_VARINT_BYTES, "value length", fail)
    q = q + s
    vp = q
    q = q + np.maximum(vl, 0)
    bad = (vl < -1) | (q > e)
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(
            i,
            f"value length {int(vl[i])} is invalid ({int(e[i] - vp[i])} bytes "
            f"remain in the record)",
        )
    return kp, kl, vp, vl, q


def _walk_rest(
    data: np.ndarray,
    fields: HeaderFields,
    active: np.ndarray,
    hp: np.ndarray,
    lim: np.ndarray,
    cnt: np.ndarray,
    j: int,
    ctx: BatchContext,
) -> None:
    """:func:`walk_headers`' last phase: the few records (``active``, of ``fields``' owners)
    with headers left after the vectorised steps, each walked in Python from header ``j``
    (at ``hp``, the record ending at ``lim``, ``cnt`` headers), into ``fields``."""
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray
    recs, base = fields.owner, fields.first
    key_pos, key_len = fields.key_pos, fields.key_len
    val_pos, val_len = fields.value_pos, fields.value_len
    for a in active.tolist():
        r = int(recs[a])
        b0 = int(base[a])
        at, stop = int(hp[a]), int(lim[a])
        for h in range(j, int(cnt[a])):

            def fail_one(m: str, r: int = r, h: int = h) -> CorruptRecordError:
                return ctx.record_error(r, f"header {h}: {m}")

            n_key, at = _scalar_varint(view, at, stop, "key length", fail_one)
            if n_key < 0 or at + n_key >= stop:
                raise fail_one(
                    f"key length {n_key} is invalid ({stop - at} bytes remain in the record)"
                )
            key_pos[b0 + h], key_len[b0 + h] = at, n_key
            at += n_key
            n_val, at = _scalar_varint(view, at, stop, "value length", fail_one)
            if n_val < -1 or at + max(n_val, 0) > stop:
                raise fail_one(
                    f"value length {n_val} is invalid ({stop - at} bytes remain in the record)"
                )
            val_pos[b0 + h], val_len[b0 + h] = at, n_val
            at += max(n_val, 0)
        if at != stop:
            raise ctx.record_error(r, f"{stop - at} bytes follow the last header")


def _scalar_varint(
    view: memoryview, p: int, end: int, what: str, fail: Callable[[str], CorruptRecordError]
) -> tuple[int, int]:
    if p >= end:
        raise fail(f"{what} runs past the record end")
    try:
        return decode_varint(view, p, MAX_VARINT_BYTES)
    except CorruptRecordError as exc:
        raise fail(f"{what}: {str(exc).split(': ', 1)[-1]}") from None
